#!/usr/bin/env bash
# The paper's §5.5: throughput at each isolation level, 32 client threads,
# zipf 1 and 4 (fig. 11). Elsa at RC/RR/SI; PostgreSQL at READ COMMITTED,
# REPEATABLE READ (its SI) and SERIALIZABLE for reference. Writes
# results.json, results.md and the chart into OUT.
#
# Usage: bench/paper-5.5.sh [OUT]
# Knobs: FULL=1 (10 000 operations per thread, default 1 000 and at most
# DURATION=10 s per run), THREADS_55,
# SYSTEMS, RECORDS, DURABILITY, ELSA_FLAGS.
source "$(dirname "$0")/lib.sh"
OUT=${1:-$ROOT/target/bench-results/isolation}
T=${THREADS_55:-32}
SYSTEMS=${SYSTEMS:-elsa postgres}
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
  "$ELSA" bench ycsbt -u "$URL" --records "$RECORDS" --threads 1 --txns 1 >/dev/null
done
levels() { case $1 in elsa) echo rc rr si ;; postgres) echo rc rr serializable ;; redis) echo watch ;; esac; }

for z in 1 4; do
  for s in $SYSTEMS; do
    for l in $(levels "$s"); do
      echo "== zipf $z, $T threads, $s $l" >&2
      "$ELSA" bench ycsbt -u "${URLS[$s]}" --no-load --records "$RECORDS" --zipf "$z" \
        --threads "$T" --ops-per-thread "$OPS" --isolation "$l" "${CAP[@]}" \
        --output "$OUT/results.json" >"$OUT/$s-$l-zipf$z.txt"
      grep -E 'Transactions\(txn/sec\)|AbortRate' "$OUT/$s-$l-zipf$z.txt" >&2
    done
  done
done

"$ELSA" bench plot "$OUT/results.json" --out-dir "$OUT" 2>/dev/null
{
  echo "Machine: $(machine)."
  echo "YCSB-T: $T threads, $RECORDS records, $OPS operations per thread${CAP[*]:+ (each run capped at ${CAP[1]} s)}."
  echo
  cat "$OUT/results.md"
} >"$OUT/README.md"
cat "$OUT/README.md"
