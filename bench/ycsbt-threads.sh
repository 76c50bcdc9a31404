#!/usr/bin/env bash
# YCSB-T throughput against client threads, one line per system — the
# paper's single-node experiments §5.2 (zipf 4, fig. 7) and §5.3 (zipf 1,
# fig. 8). Starts Elsa, Redis and PostgreSQL itself on loopback, runs the
# thread counts alternating between systems, stops them by PID, then writes
# results.json, results.md (tables) and SVG charts into OUT.
#
# Usage: bench/ycsbt-threads.sh ZIPF [OUT]
# Knobs (environment): FULL=1 (the paper's 10 000 operations per thread;
# default 1 000 and DURATION=10 s per run at most keep it to a few
# minutes), THREADS, SYSTEMS, RECORDS,
# OPS_PER_THREAD, DURABILITY=everysec|none, ELSA_FLAGS.
source "$(dirname "$0")/lib.sh"
ZIPF=${1:?usage: bench/ycsbt-threads.sh ZIPF [OUT]}
OUT=${2:-$ROOT/target/bench-results/ycsbt-zipf$ZIPF}
THREADS=${THREADS:-2 4 8 14 22 32}
SYSTEMS=${SYSTEMS:-elsa redis postgres}
RECORDS=${RECORDS:-100000}
# Short by default: 1 000 operations per thread and at most DURATION
# seconds per run (a run that hits the cap is still a valid throughput).
if [ "${FULL:-0}" = 1 ]; then
  OPS=${OPS_PER_THREAD:-10000}; CAP=()
else
  OPS=${OPS_PER_THREAD:-1000}; CAP=(--duration "${DURATION:-10}")
fi
mkdir -p "$OUT"
rm -f "$OUT/results.json"
build

declare -A URLS
for s in $SYSTEMS; do
  start_system "$s"
  URLS[$s]=$URL
  # Load the records once per system (a one-transaction run).
  "$ELSA" bench ycsbt -u "$URL" --records "$RECORDS" --threads 1 --txns 1 >/dev/null
done

# The paper runs Elsa at snapshot isolation; PostgreSQL's REPEATABLE READ
# is its snapshot isolation; Redis has only WATCH/MULTI/EXEC.
iso() { case $1 in redis) echo watch ;; *) echo si ;; esac; }

start=$(date +%s)
for t in $THREADS; do
  for s in $SYSTEMS; do
    echo "== zipf $ZIPF, $t threads, $s" >&2
    "$ELSA" bench ycsbt -u "${URLS[$s]}" --no-load --records "$RECORDS" --zipf "$ZIPF" \
      --threads "$t" --ops-per-thread "$OPS" --isolation "$(iso "$s")" "${CAP[@]}" \
      --output "$OUT/results.json" >"$OUT/$s-t$t.txt"
    grep -E 'Transactions\(txn/sec\)|AbortRate' "$OUT/$s-t$t.txt" >&2
  done
done
echo "ran in $(( $(date +%s) - start )) s" >&2

"$ELSA" bench plot "$OUT/results.json" --out-dir "$OUT" 2>/dev/null
{
  echo "Machine: $(machine)."
  echo "YCSB-T: zipf $ZIPF, $RECORDS records, $OPS operations per thread${CAP[*]:+ (each run capped at ${CAP[1]} s)}, transactions of 5 operations (50 % reads), 10 % read-only, 5 % long (50 operations); Elsa and PostgreSQL at SI, Redis WATCH/MULTI/EXEC."
  echo
  cat "$OUT/results.md"
} >"$OUT/README.md"
cat "$OUT/README.md"
