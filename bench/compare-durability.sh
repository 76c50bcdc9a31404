#!/usr/bin/env bash
# Durable commit throughput, Elsa vs Redis (appendonly yes) at the same
# appendfsync, and restart time after loading 1M keys x 100 B.
#   1. For appendfsync in always, everysec: autocommit single-key SETs on
#      random keys (redis-benchmark -t set -r 10000000 -c 50, no pipelining:
#      every request is its own commit), RUNS alternating runs each, medians,
#      ratio.
#   2. Restart time of Elsa with 1M x 100 B: replaying the log only, and
#      loading a snapshot; Redis reloading its AOF for comparison.
# Servers run on free loopback ports in a temp dir and are stopped by PID.
# Usage: bench/compare-durability.sh [RUNS] [REQUESTS]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
N=${2:-200000}
cargo build --release --bin elsa >/dev/null 2>&1
tmp=$(mktemp -d)
pids=()
trap 'kill -9 "${pids[@]}" 2>/dev/null || true; rm -rf "$tmp"' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# Up = answering and done loading (Redis answers PING while it loads).
wait_up() { for _ in $(seq 1200); do redis-cli -p "$1" info persistence 2>/dev/null | grep -q '^loading:0' && return 0; sleep 0.05; done; return 1; }
start_elsa() { # port dir fsync
  target/release/elsa server --port "$1" --data-dir "$2" --appendfsync "$3" >>"$tmp/elsa.log" 2>&1 &
  pids+=($!); echo $!
}
start_redis() { # port dir fsync
  mkdir -p "$2"
  redis-server --port "$1" --dir "$2" --save "" --appendonly yes --appendfsync "$3" >>"$tmp/redis.log" 2>&1 &
  pids+=($!); echo $!
}
rps() { redis-benchmark -p "$1" -q -c 50 -n "$N" -r 10000000 -t set 2>/dev/null | tr '\r' '\n' | awk '/requests per second/ {print $2}'; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2)? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

echo "machine: $(nproc) cores, $(free -g | awk '/Mem/ {print $2}') GiB, data on $(df -h "$tmp" | awk 'NR==2 {print $1" ("$2")"}')"
for fs in always everysec; do
  EP=$(port); RP=$(port)
  E=$(start_elsa "$EP" "$tmp/e-$fs" "$fs"); R=$(start_redis "$RP" "$tmp/r-$fs" "$fs")
  wait_up "$EP"; wait_up "$RP"
  es=(); rs=()
  for i in $(seq "$RUNS"); do
    es+=("$(rps "$EP")"); rs+=("$(rps "$RP")")
    echo "appendfsync $fs run $i: elsa ${es[-1]} redis ${rs[-1]}"
  done
  ME=$(median "${es[@]}"); MR=$(median "${rs[@]}")
  echo "appendfsync $fs median SET commits/s: elsa $ME redis $MR ratio $(python3 -c "print(round($ME/$MR,2))")"
  kill -9 "$E" "$R"
done

python3 - "$tmp/load.resp" <<'PY'
import sys
v = b"x" * 100
with open(sys.argv[1], "wb") as f:
    for i in range(1_000_000):
        k = b"key:%012d" % i
        f.write(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$100\r\n%s\r\n" % (len(k), k, v))
PY
restart_ms() { # start-command... ; prints ms until PING answers
  local t0; t0=$(date +%s%N)
  "$@" >/dev/null
  wait_up "$P"
  echo $(( ($(date +%s%N) - t0) / 1000000 ))
}
P=$(port); D="$tmp/e-restart"
E=$(start_elsa "$P" "$D" everysec); wait_up "$P"
redis-cli -p "$P" --pipe <"$tmp/load.resp" >/dev/null
sleep 1.5; kill -9 "$E"; sleep 0.3
echo "elsa WAL size: $(du -sh "$D/wal" | cut -f1)"
ms=$(restart_ms start_elsa "$P" "$D" everysec)
echo "elsa restart, log replay only (1M x 100 B): $ms ms, keys $(redis-cli -p "$P" dbsize)"
redis-cli -p "$P" save >/dev/null
E=$(pgrep -f "elsa server --port $P" | head -1); kill -9 "$E"; sleep 0.3
echo "elsa snapshot size: $(du -sh "$D/snap" | cut -f1)"
ms=$(restart_ms start_elsa "$P" "$D" everysec)
echo "elsa restart, from snapshot (1M x 100 B): $ms ms, keys $(redis-cli -p "$P" dbsize)"
kill -9 "$(pgrep -f "elsa server --port $P" | head -1)"
RP=$(port); RD="$tmp/r-restart"
R=$(start_redis "$RP" "$RD" everysec); wait_up "$RP"
redis-cli -p "$RP" --pipe <"$tmp/load.resp" >/dev/null
sleep 1.5; kill -9 "$R"; sleep 0.3
P=$RP
ms=$(restart_ms start_redis "$RP" "$RD" everysec)
echo "redis restart, AOF (1M x 100 B): $ms ms, keys $(redis-cli -p "$RP" dbsize)"
