#!/usr/bin/env bash
# Runs BullMQ's own test suite (a checkout of taskforcesh/bullmq you
# fetched, e.g. tag v6.2.0; it stays outside this repository) against a
# fresh Elsa node, or with BULLMQ_AGAINST=redis a fresh redis-server, and
# prints its counts and failed tests.
#
#   scripts/bullmq-suite.sh /path/to/bullmq
#
# The checkout needs `npm install && npm run build` once (some tests load
# `dist/`). Its tests connect to 127.0.0.1:6379, so the server starts
# there: the port must be free. Runs the repo's own `test` command
# (`vitest run --no-file-parallelism`), at most 40 minutes.
set -euo pipefail
suite="${1:?path to a BullMQ checkout}"
root="$(cd "$(dirname "$0")/.." && pwd)"
against="${BULLMQ_AGAINST:-elsa}"
if redis-cli -p 6379 ping >/dev/null 2>&1; then
  echo "something already listens on 6379" >&2
  exit 1
fi
work="$(mktemp -d)"
if [ "$against" = redis ]; then
  redis-server --port 6379 --dir "$work" --save '' --appendonly no >"$work/server.log" 2>&1 &
else
  [ -x "$root/target/release/elsa" ] || { echo "build first: cargo build --release" >&2; exit 1; }
  "$root/target/release/elsa" server --port 6379 --data-dir "$work/data" >"$work/server.log" 2>&1 &
fi
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do
  redis-cli -p 6379 ping >/dev/null 2>&1 && break
  sleep 0.1
done
cd "$suite"
REDIS_HOST=127.0.0.1 REDIS_PORT=6379 NO_COLOR=1 CI=1 \
  timeout -k 30s 40m npx vitest run --no-file-parallelism >"$work/run.log" 2>&1 || true
echo "BullMQ's suite against $against:"
grep -E '^[[:space:]]*(Tests|Test Files)[[:space:]]+[0-9]' "$work/run.log" || echo "(no summary: cut off?)"
grep -E '^[[:space:]]+× ' "$work/run.log" || true
