#!/usr/bin/env bash
# The real YCSB 0.17.0 (Java) with its own Redis binding (Jedis 2.9.0),
# against Elsa and against redis-server, alternately in the same run: the
# measurement the issue quotes (Elsa/Redis throughput A 0.74 … E 0.80).
# Each (workload, round, server) gets a fresh server, `ycsb load redis`
# of RECORDS records (hashes of 10 fields × 100 bytes, YCSB's defaults),
# then a measured `ycsb run redis` of OPS operations on THREADS threads.
# Servers without durability: Redis --save "" --appendonly no; Elsa
# --appendfsync no --workers WORKERS (2 by default, the machine's cores
# here). Redis is single-threaded, so it uses one core of the same budget.
# SERVER_CPUS / CLIENT_CPUS (taskset lists) optionally pin the server and
# YCSB; unpinned by default, as in the issue. Rounds alternate the order
# (Redis first, then Elsa first) so neither always runs on a warmer machine.
#
# YCSB is built once and cached in YCSB_DIR (target/ycsb): core-0.17.0
# and Jedis from Maven Central, the Redis binding compiled from YCSB's
# 0.17.0 tag (a git dir of brianfrankcooper/YCSB in YCSB_GIT; default the
# `fetch` mirror) and packed as YCSB's per-binding tarball (bin/, lib/,
# workloads/). Logs of every run go to YCSB_DIR/logs/DATE/.
#
#   bench/ycsb-java.sh                               (A–F, 2 rounds: ~40 min on 2 cores)
#   RECORDS=10000 OPS=20000 WORKLOADS="a c" RUNS=1 bench/ycsb-java.sh  (quick)
#   THREADS=64 WORKLOADS=a bench/ycsb-java.sh
#   ELSA_BIN=/path/to/elsa bench/ycsb-java.sh        (that build, no cargo build)
# Prints one line per run, then per workload the medians over rounds:
# ops/s, Elsa/Redis, p99 of reads (SCAN for E) and writes (UPDATE; INSERT
# for D, E) in µs, and server CPU µs per operation (utime+stime of the
# server from /proc/PID/stat around the run phase, all threads).
DURABILITY=none
source "$(dirname "$0")/lib.sh"
if [ -n "${ELSA_BIN:-}" ]; then ELSA=$ELSA_BIN; else build; fi
WORKLOADS=${WORKLOADS:-a b c d e f} RUNS=${RUNS:-2} RECORDS=${RECORDS:-100000}
OPS=${OPS:-200000} THREADS=${THREADS:-16} WORKERS=${WORKERS:-2}
YCSB_DIR=${YCSB_DIR:-$ROOT/target/ycsb}
YCSB_HOME=${YCSB_HOME:-$YCSB_DIR/ycsb-redis-binding-0.17.0}
YCSB_GIT=${YCSB_GIT:-/work/.mirror/brianfrankcooper+YCSB/repo}
LOGS=$YCSB_DIR/logs/$(date +%Y%m%d-%H%M%S)
mkdir -p "$LOGS"
spin=() cpin=()
[ -z "${SERVER_CPUS:-}" ] || spin=(taskset -c "$SERVER_CPUS")
[ -z "${CLIENT_CPUS:-}" ] || cpin=(taskset -c "$CLIENT_CPUS")

build_ycsb() {
  local src=$YCSB_DIR/src
  git --git-dir="$YCSB_GIT" rev-parse -q --verify 0.17.0 >/dev/null || {
    echo "needs YCSB's git history in YCSB_GIT (fetch github:brianfrankcooper/YCSB, or git clone --bare it)" >&2; exit 1; }
  echo "building YCSB 0.17.0's redis binding in $src (log: $YCSB_DIR/build.log) ..." >&2
  rm -rf "$src"; mkdir -p "$src"
  # Only what the binding's build reads: the root pom (versions, Java 8
  # target, checkstyle), binding-parent and the redis module; bin/ and
  # workloads/ go into the tarball. core is not built: the binding's pom
  # takes site.ycsb:core:0.17.0 from Maven Central.
  git --git-dir="$YCSB_GIT" archive 0.17.0 pom.xml checkstyle.xml LICENSE.txt NOTICE.txt \
    bin workloads binding-parent redis | tar -x -C "$src"
  # binding-parent's assembly (the ycsb-redis-binding-0.17.0.tar.gz YCSB
  # releases) needs site.ycsb:datastore-specific-descriptor, which is not on
  # Maven Central: install it, with binding-parent, in the local repository.
  (cd "$src" && mvn -B -f binding-parent/pom.xml install &&
    mvn -B -f redis/pom.xml package -DskipTests) >"$YCSB_DIR/build.log" 2>&1 ||
    { tail -30 "$YCSB_DIR/build.log" >&2; exit 1; }
  tar -xzf "$src/redis/target/ycsb-redis-binding-0.17.0.tar.gz" -C "$(dirname "$YCSB_HOME")"
}
[ -x "$YCSB_HOME/bin/ycsb.sh" ] || build_ycsb
ls "$YCSB_HOME"/lib/jedis-*.jar "$YCSB_HOME"/lib/core-0.17.0.jar >/dev/null

ticks_per_s=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; } # utime+stime, all threads

start_server() { # redis|elsa log -> PORT SPID
  PORT=$(free_port); rm -rf "$TMP/data"; mkdir -p "$TMP/data"
  if [ "$1" = redis ]; then
    "${spin[@]}" redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no \
      --dir "$TMP/data" >"$2" 2>&1 &
  else
    ELSA_LOG=warn "${spin[@]}" "$ELSA" server --port "$PORT" --data-dir "$TMP/data" \
      --appendfsync no --workers "$WORKERS" ${ELSA_FLAGS:-} >"$2" 2>&1 &
  fi
  SPID=$!; PIDS=("$SPID") # taskset execs the server: same PID
  wait_ping "$PORT"
}
stop_server() { kill "$SPID" 2>/dev/null || true; wait "$SPID" 2>/dev/null || true; PIDS=(); }

ycsb() { # load|run workload port log
  "${cpin[@]}" "$YCSB_HOME/bin/ycsb.sh" "$1" redis -P "$YCSB_HOME/workloads/workload$2" \
    -p redis.host=127.0.0.1 -p redis.port="$3" -p recordcount="$RECORDS" \
    -p operationcount="$OPS" -threads "$THREADS" >"$4" 2>&1 ||
    { echo "ycsb $1 failed, see $4" >&2; tail -5 "$4" >&2; exit 1; }
}
metric() { # log section field -> value ("-" when absent)
  awk -F', ' -v s="[$2]" -v f="$3" '$1 == s && $2 == f {v = $3} END {print (v == "" ? "-" : v)}' "$1"
}

RESULTS=$LOGS/results.tsv
echo "$(machine); YCSB 0.17.0 redis binding, $(basename "$YCSB_HOME"/lib/jedis-*.jar .jar); records=$RECORDS ops=$OPS threads=$THREADS elsa-workers=$WORKERS; logs in $LOGS"
for w in $WORKLOADS; do
  for r in $(seq "$RUNS"); do
    order="redis elsa"; [ $((r % 2)) -eq 1 ] || order="elsa redis"
    for sys in $order; do
      tag=$w-$r-$sys
      start_server "$sys" "$LOGS/$tag.server.log"
      ycsb load "$w" "$PORT" "$LOGS/$tag.load.log"
      keys=$(redis-cli -p "$PORT" dbsize)  # the records and the binding's _indices zset
      [ "$keys" -eq $((RECORDS + 1)) ] || echo "warning: $sys holds $keys keys after load, not $((RECORDS + 1))" >&2
      c0=$(cpu_ticks "$SPID")
      ycsb run "$w" "$PORT" "$LOGS/$tag.run.log"
      c1=$(cpu_ticks "$SPID")
      stop_server
      log=$LOGS/$tag.run.log
      ops=$(metric "$log" OVERALL "Throughput(ops/sec)")
      rd=$(metric "$log" READ 99thPercentileLatency\(us\)); [ "$rd" != - ] || rd=$(metric "$log" SCAN 99thPercentileLatency\(us\))
      wr=$(metric "$log" UPDATE 99thPercentileLatency\(us\)); [ "$wr" != - ] || wr=$(metric "$log" INSERT 99thPercentileLatency\(us\))
      cpu=$(awk -v d=$((c1 - c0)) -v t="$ticks_per_s" -v n="$OPS" 'BEGIN {printf "%.1f", d / t * 1e6 / n}')
      # Any operation that did not return OK (ERROR, NOT_FOUND …) is counted per type.
      bad=$(grep -E '^\[[A-Z-]+\], Return=' "$log" | grep -v 'Return=OK' | tr '\n' ' ' || true)
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$w" "$sys" "$r" "$ops" "$rd" "$wr" "$cpu" >>"$RESULTS"
      printf 'workload %s round %s %-5s %8.0f ops/s  p99 read %6s µs  p99 write %6s µs  cpu %5s µs/op %s\n' \
        "$w" "$r" "$sys" "$ops" "$rd" "$wr" "$cpu" "${bad:+ NOT OK: $bad}"
    done
  done
done

# Medians over the rounds, one row per workload (Markdown).
python3 - "$RESULTS" <<'PY'
import sys, statistics, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    w, sys_, _, *vals = line.rstrip("\n").split("\t")
    rows[(w, sys_)].append([None if v == "-" else float(v) for v in vals])
def med(w, s, i):
    vs = [r[i] for r in rows[(w, s)] if r[i] is not None]
    return statistics.median(vs) if vs else None
def pair(w, i, f="{:.0f}"):  # "Redis / Elsa", "-" for a type the workload lacks
    return " / ".join("-" if v is None else f.format(v) for v in (med(w, "redis", i), med(w, "elsa", i)))
print("\n| workload | Redis ops/s | Elsa ops/s | Elsa/Redis | p99 read µs Redis / Elsa | p99 write µs Redis / Elsa | server CPU µs/op Redis / Elsa |")
print("|---|---|---|---|---|---|---|")
for w in dict.fromkeys(k[0] for k in rows):
    r, e = med(w, "redis", 0), med(w, "elsa", 0)
    print(f"| {w.upper()} | {r:.0f} | {e:.0f} | {e / r:.2f} | {pair(w, 1)} | {pair(w, 2)} | {pair(w, 3, '{:.1f}')} |")
PY
