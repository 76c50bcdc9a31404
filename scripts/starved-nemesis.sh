#!/usr/bin/env bash
# A nemesis test under CPU starvation: N runs of one test binary (default
# tests/nemesis_streams.rs, a random seed each), each with six busy loops
# hogging the cores, as a loaded machine starves a node. Long runs belong
# in closing notes, not in CI (issue 46: a run in 30-60 found each of the
# defects behind docs/regions.md's "blocked now and then" and the phantom
# part, and docs/datatypes.md's pinned IDs across a pause).
#
#   scripts/starved-nemesis.sh [runs] [test]      (default: 20 nemesis_streams)
#
# Writes target/starved/summary (one line a run: exit status, seed, time,
# and how many "shown alone" lines the nodes logged); keeps a failing run's
# test dirs (data and node logs) under target/starved/run-<i>. Stop after
# the current run: touch target/starved/stop.
set -uo pipefail
cd "$(dirname "$0")/.."
runs="${1:-20}"
test="${2:-nemesis_streams}"
out="$PWD/target/starved"
mkdir -p "$out"
rm -f "$out/stop"
cargo build -q --bin elsa && cargo test -q --no-run --test "$test" || exit 1
for i in $(seq 1 "$runs"); do
  [ -e "$out/stop" ] && break
  hogs=()
  for _ in 1 2 3 4 5 6; do (while :; do :; done) & hogs+=($!); done
  dir="$out/tmp-$i"
  mkdir -p "$dir"
  start=$(date +%s)
  TMPDIR="$dir" ELSA_KEEP_TEST_DIRS=1 ELSA_STREAMS_NEMESIS_SEED=random \
    ELSA_NEMESIS_SEED=random timeout 900 cargo test -q --test "$test" >"$out/run-$i.log" 2>&1
  rc=$?
  kill "${hogs[@]}" 2>/dev/null
  wait "${hogs[@]}" 2>/dev/null
  seed=$(grep -o 'seed [0-9]*' "$out/run-$i.log" | head -1)
  alone=$(cat "$dir"/*/server.log 2>/dev/null | grep -c "shown alone\|their parts show alone")
  echo "run $i: rc=$rc ${seed:-seed ?} $(($(date +%s) - start))s alone-lines=$alone" | tee -a "$out/summary"
  if [ "$rc" -eq 0 ] && [ "$alone" -eq 0 ]; then
    rm -rf "$dir"
  else
    mv "$dir" "$out/run-$i"
  fi
done
