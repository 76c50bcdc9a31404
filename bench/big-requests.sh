#!/bin/bash
# Worst stall other clients see while one client sends one huge request
# (issue 12, item 16): EXISTS / MGET of N keys, MULTI + N SET + EXEC,
# BEGIN SI + N SET + COMMIT, against a running server on PORT.
#   bench/big-requests.sh PORT [N] [redis]
# Needs redis-cli and python3 with the redis package (the PING client).
# Example (what docs/transactions.md reports):
#   target/release/elsa server --port 7404 --workers 2 --data-dir /tmp/big --appendfsync no &
#   bench/big-requests.sh 7404 1000000
#   redis-server --port 7405 --save "" --appendonly no &
#   bench/big-requests.sh 7405 1000000 redis
set -eu
P=$1; N=${2:-1000000}; HERE=$(cd "$(dirname "$0")" && pwd); T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# Load the keys EXISTS and MGET read, in batches MSET accepts.
python3 - "$N" > "$T/load.resp" <<'PY'
import sys
n = int(sys.argv[1]); out = sys.stdout.buffer
for base in range(0, n, 1000):
    args = [b"MSET"]
    for i in range(base, min(n, base + 1000)):
        args += [b"ms%d:%d" % (n, i), b"v"]
    out.write(b"*%d\r\n" % len(args))
    for a in args:
        out.write(b"$%d\r\n%s\r\n" % (len(a), a))
PY
redis-cli -p "$P" --pipe < "$T/load.resp" > /dev/null
for k in exists mget multi begin; do
  if [ "$k" = begin ] && [ "${3:-}" = redis ]; then continue; fi
  python3 "$HERE/big-requests-gen.py" "$k" "$N" "$T/$k.resp"
  python3 "$HERE/big-requests-pinger.py" "$P" > "$T/ping.out" & PP=$!
  sleep 0.3
  s=$(date +%s.%N); redis-cli -p "$P" --pipe < "$T/$k.resp" > "$T/pipe.out" 2>&1; e=$(date +%s.%N)
  kill -TERM $PP; wait $PP 2>/dev/null || true
  printf "%-7s n=%-8s %6.2fs  worst PING %s ms\n" "$k" "$N" "$(echo "$e - $s" | bc)" "$(cat "$T/ping.out")"
done
