#!/usr/bin/env bash
# What acknowledgement level `region` costs against `local` (and `all`
# against `region`), measured in one run on this machine.
#
#   1. For appendfsync in always, everysec: two 3-node regions (replication
#      factor 3, so every key is on every node) started with `elsa cluster
#      up`, side by side on loopback ports, one whose nodes default to
#      `ack = local`, one to `ack = region` (ELSA_ACK, read by every
#      `elsa server` the CLI starts; `elsa bench` cannot send `ACK` first).
#      Runs alternate between them (local, region, local, region, ...), the
#      idle cluster costing both the same; medians over ROUNDS rounds.
#      Workloads, all clients on the region's first node:
#        - SET: `elsa bench commit` (autocommit SETs of new keys, THREADS
#          connections, no pipelining: every request is its own commit);
#        - MULTI: `elsa bench batch --op-type tx --batch-size 6
#          --get-ratio 0` (MULTI of 6 SETs on uniform keys, which spread
#          over the three nodes: a cross-node two-phase commit each).
#   2. Unless ALL=0, `all`: two clusters of 2 regions x 3 nodes (rf 3, RTT
#      0 ms, appendfsync always), one `replication = 2pc` (which makes
#      `all` the level of every connection), one crdt at `region`; the same
#      workloads, alternating. `ACK all` on a crdt cluster is accepted but
#      waits for no other region (only 2pc mode replicates synchronously
#      across regions), so the 2pc cluster is the way to measure `all`.
#
# Every server is started by `elsa cluster up` and stopped by the PID it
# recorded in cluster.toml. Results: OUT/results.json (every run, `elsa
# bench` records), OUT/other-load.tsv (per run, the cores other processes
# on the machine used meanwhile) and OUT/ack-levels.md (the medians).
# Takes about 4.5 minutes with the defaults.
#
# Usage: bench/ack-levels.sh [OUT]
# Knobs: ROUNDS (5), DURATION (3 s per run), WARMUP (1 s), THREADS (16),
#        WORKERS (1 shard worker per node), FSYNCS ("always everysec"),
#        ALL (1), ALL_ROUNDS (3).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${1:-target/bench-results/ack-levels-$(date +%Y%m%d-%H%M%S)}
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-3}
WARMUP=${WARMUP:-1}
THREADS=${THREADS:-16}
WORKERS=${WORKERS:-1}
FSYNCS=${FSYNCS:-always everysec}
ALL=${ALL:-1}
ALL_ROUNDS=${ALL_ROUNDS:-3}
ELSA=$ROOT/target/release/elsa

if [ ! -x "$ELSA" ] || ! "$ELSA" server --help | grep -q -- '--ack'; then
  echo "building target/release/elsa ..." >&2
  cargo build --release -p elsa >&2
fi
command -v python3 >/dev/null || { echo "needs python3" >&2; exit 1; }

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
TMP=$(mktemp -d /tmp/elsa-ack-levels.XXXXXX)
RESULTS=$OUT/results.json
rm -f "$RESULTS" "$OUT/other-load.tsv"
PIDS=()

stop_pids() { # pid...
  local pid
  for pid in "$@"; do kill "$pid" 2>/dev/null || true; done
  for pid in "$@"; do
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
}
cleanup() {
  [ ${#PIDS[@]} -eq 0 ] || stop_pids "${PIDS[@]}"
  rm -rf "$TMP"
}
trap cleanup EXIT

# A base port B such that B..B+n-1 (clients) and B+1000..B+1000+n-1 (peers,
# TCP and UDP) are free now, below the ephemeral range.
base_port() { # n
  python3 - "$1" <<'PY'
import random, socket, sys
n = int(sys.argv[1])
def free(p, kind):
    s = socket.socket(socket.AF_INET, kind)
    try:
        s.bind(("127.0.0.1", p)); return True
    except OSError:
        return False
    finally:
        s.close()
for _ in range(1000):
    b = random.randrange(20000, 30000 - n)
    ports = list(range(b, b + n)) + list(range(b + 1000, b + 1000 + n))
    if all(free(p, socket.SOCK_STREAM) and free(p, socket.SOCK_DGRAM) for p in ports):
        print(b); break
else:
    sys.exit("no free base port")
PY
}

# The PIDs `elsa cluster up` recorded.
cluster_pids() { # dir
  [ -f "$1/cluster.toml" ] && awk -F' *= *' '$1 == "pid" {print $2}' "$1/cluster.toml"
}

# up NAME REGIONS ACK FSYNC [extra cluster-up flags...] -> sets PORT (the
# first node's client port). The nodes' PIDs join PIDS at once.
up() {
  local name=$1 regions=$2 ack=$3 fsync=$4 dir base n got
  shift 4
  dir=$TMP/$name
  n=$((regions * 3))
  base=$(base_port "$n")
  if ! ELSA_ACK=$ack ELSA_LOG=warn "$ELSA" cluster up --regions "$regions" --nodes-per-region 3 \
      --replication-factor 3 --workers "$WORKERS" --appendfsync "$fsync" \
      --base-port "$base" --dir "$dir" --fresh --ready-timeout-secs 60 "$@" \
      >"$TMP/$name.up.log" 2>&1; then
    mapfile -t got < <(cluster_pids "$dir")
    [ ${#got[@]} -eq 0 ] || PIDS+=("${got[@]}")
    echo "elsa cluster up ($name) failed:" >&2
    cat "$TMP/$name.up.log" >&2
    exit 1
  fi
  mapfile -t got < <(cluster_pids "$dir")
  [ ${#got[@]} -eq "$n" ] || { echo "$name: expected $n PIDs in cluster.toml, got ${#got[@]}" >&2; exit 1; }
  PIDS+=("${got[@]}")
  PORT=$base
  # What a new connection gets (the level ELSA_ACK set, or 2pc's `all`).
  local level
  level=$(redis-cli -p "$PORT" ACK)
  echo "$name: ${regions} region(s) x 3 nodes, client port $PORT, ack of a new connection: $level, pids ${got[*]}" >&2
}

down() { # name
  local got
  mapfile -t got < <(cluster_pids "$TMP/$1")
  stop_pids "${got[@]}"
  local keep=() pid g drop
  for pid in "${PIDS[@]}"; do
    drop=0
    for g in "${got[@]}"; do [ "$pid" = "$g" ] && drop=1; done
    [ $drop -eq 1 ] || keep+=("$pid")
  done
  PIDS=("${keep[@]}")
}

# CPU used so far, in clock ticks: "busy-on-the-machine ours total", ours
# being this script's servers plus its finished children (the bench).
cpu_mark() {
  python3 - "$$" "${PIDS[@]}" <<'PY'
import sys
f = open("/proc/stat").readline().split()[1:]
v = [int(x) for x in f[:8]]
total = sum(v)
busy = total - v[3] - v[4]  # minus idle and iowait
ours = 0
me, *servers = sys.argv[1:]
def fields(pid):
    t = open(f"/proc/{pid}/stat").read()
    return t[t.rindex(")") + 2:].split()
for pid in servers:
    try:
        x = fields(pid); ours += int(x[11]) + int(x[12])  # utime, stime
    except (OSError, ValueError):
        pass
x = fields(me); ours += int(x[13]) + int(x[14])  # cutime, cstime
print(busy, ours, total)
PY
}

# run PORT LABEL: one SET run and one MULTI run against the node; notes in
# OUT/other-load.tsv how many cores other processes on the machine used
# meanwhile.
run() {
  local port=$1 label=$2 before after
  before=$(cpu_mark)
  "$ELSA" bench commit -u "redis://127.0.0.1:$port" --threads "$THREADS" \
    --num-ops 100000000 --duration "$DURATION" --warmup "$WARMUP" \
    -o "$RESULTS" --label "$label" >"$TMP/last.txt" 2>&1 ||
    { cat "$TMP/last.txt" >&2; exit 1; }
  "$ELSA" bench batch -u "redis://127.0.0.1:$port" --op-type tx --batch-size 6 --get-ratio 0 \
    --num-keys 100000 --connections "$THREADS" --num-ops 100000000 \
    --duration "$DURATION" --warmup "$WARMUP" -o "$RESULTS" --label "$label" \
    >"$TMP/last.txt" 2>&1 || { cat "$TMP/last.txt" >&2; exit 1; }
  after=$(cpu_mark)
  python3 - "$RESULTS" "$OUT/other-load.tsv" "$(nproc)" $before $after <<'PY' >&2
import json, sys
results, tsv, ncpu = sys.argv[1:4]
b0, o0, t0, b1, o1, t1 = map(int, sys.argv[4:])
other = max(0, (b1 - b0) - (o1 - o0)) / ((t1 - t0) / int(ncpu))
r = json.load(open(results))[-2:]
with open(tsv, "a") as f:
    f.write(f"{r[0]['label']}\t{other:.2f}\n")
print("  %-34s SET %6.0f/s p50 %6d us p99 %6d us | MULTI %5.0f tx/s p50 %6d us p99 %6d us | others %.2f cores"
      % (r[0]["label"], r[0]["ops_per_sec"], r[0]["lat_p50_us"], r[0]["lat_p99_us"],
         r[1]["txns_per_sec"], r[1]["lat_p50_us"], r[1]["lat_p99_us"], other))
PY
}

started=$(date +%s)
MACHINE="$(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), $(free -h | awk '/^Mem:/ {print $2}') RAM, $(. /etc/os-release && echo "$PRETTY_NAME"); servers and client share the cores"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
echo "machine: $MACHINE" >&2
echo "load average before: $LOAD_BEFORE (other work on the machine skews every figure)" >&2
echo "elsa: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates src || echo ' + uncommitted changes'), binary built $(date -r "$ELSA" '+%F %T')" >&2

for fs in $FSYNCS; do
  up "local-$fs" 1 local "$fs"
  PL=$PORT
  up "region-$fs" 1 region "$fs"
  PR=$PORT
  for i in $(seq "$ROUNDS"); do
    run "$PL" "fsync=$fs ack=local"
    run "$PR" "fsync=$fs ack=region"
  done
  down "local-$fs"
  down "region-$fs"
done

if [ "$ALL" = 1 ]; then
  up "2r-region" 2 region always
  PR=$PORT
  up "2r-2pc" 2 region always --replication 2pc
  PA=$PORT
  for i in $(seq "$ALL_ROUNDS"); do
    run "$PR" "2 regions fsync=always ack=region"
    run "$PA" "2 regions fsync=always ack=all"
  done
  down "2r-region"
  down "2r-2pc"
fi

LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
python3 - "$RESULTS" "$OUT/ack-levels.md" "$MACHINE; load average before $LOAD_BEFORE, after $LOAD_AFTER" "$ROUNDS" "$ALL_ROUNDS" "$DURATION" "$THREADS" "$WORKERS" "$OUT/other-load.tsv" <<'PY'
import json, statistics, sys
path, md, machine, rounds, all_rounds, duration, threads, workers, tsv = sys.argv[1:]
runs = json.load(open(path))
other = {}
for line in open(tsv):
    label, cores = line.rstrip("\n").split("\t")
    other.setdefault(label, []).append(float(cores))
med = statistics.median
groups = {}
for r in runs:
    groups.setdefault((r["label"], r["workload"]), []).append(r)
labels = []
for r in runs:
    if r["label"] not in labels:
        labels.append(r["label"])
lines = [
    f"machine: {machine}",
    f"3 nodes per region, replication factor 3, {workers} shard worker per node, "
    f"{threads} client connections on the first node, {duration} s per run; "
    f"medians of {rounds} alternating runs ({all_rounds} for the 2-region rows)",
    "",
    "| configuration | SET commits/s | SET p50 | SET p99 | MULTI (6 SETs) tx/s | MULTI p50 | MULTI p99 | other processes (cores) |",
    "|---|---:|---:|---:|---:|---:|---:|---:|",
]
def ms(us):
    return f"{us / 1000:.2f} ms"
for label in labels:
    s = groups.get((label, "commit"), [])
    t = groups.get((label, "batch"), [])
    if not s or not t:
        continue
    lines.append(
        f"| {label} | {med(x['ops_per_sec'] for x in s):,.0f} | "
        f"{ms(med(x['lat_p50_us'] for x in s))} | {ms(med(x['lat_p99_us'] for x in s))} | "
        f"{med(x['txns_per_sec'] for x in t):,.0f} | "
        f"{ms(med(x['lat_p50_us'] for x in t))} | {ms(med(x['lat_p99_us'] for x in t))} | "
        f"{med(other.get(label, [0])):.2f} |"
    )
errors = sum(r["errors"] for r in runs)
lines.append("")
lines.append(f"failed operations over all runs: {errors}")
def ratio(a, b, wl, key):
    ga, gb = groups.get((a, wl)), groups.get((b, wl))
    if ga and gb:
        return med(x[key] for x in ga) / med(x[key] for x in gb)
for fs in ("always", "everysec"):
    a, b = f"fsync={fs} ack=region", f"fsync={fs} ack=local"
    s = ratio(a, b, "commit", "ops_per_sec")
    t = ratio(a, b, "batch", "txns_per_sec")
    if s:
        lines.append(f"region/local throughput, appendfsync {fs}: SET {s:.2f}, MULTI {t:.2f}")
s = ratio("2 regions fsync=always ack=all", "2 regions fsync=always ack=region", "commit", "ops_per_sec")
t = ratio("2 regions fsync=always ack=all", "2 regions fsync=always ack=region", "batch", "txns_per_sec")
if s:
    lines.append(f"all/region throughput (2 regions, always): SET {s:.2f}, MULTI {t:.2f}")
text = "\n".join(lines) + "\n"
open(md, "w").write(text)
print(text)
PY
echo "results: $OUT (took $(( $(date +%s) - started )) s)" >&2
