#!/usr/bin/env bash
# Runs a file of Redis's own Tcl test suite (tests/unit/… of a Redis 7.0
# source tree you fetched; it stays outside this repository) against a
# fresh Elsa node, in the suite's external-server mode, and prints the
# counts and the failed tests.
#
#   scripts/redis-tcl.sh /path/to/redis-7.0.15 unit/scripting [elsa flags…]
#
# With REDIS_TCL_AGAINST=redis, the same file runs against a fresh
# redis-server instead (the counts to compare with). REDIS_TCL_SKIP holds
# test names (or `/regexps`) to skip, one per line: tests that would hang
# on a feature Elsa does not have, so the rest of the file still runs
# (docs/redis-tests.md lists them; skip them on both servers).
#
# The tree is copied to a temporary folder and adapted there, never in
# place: `FUNCTION FLUSH` (run before every test group) may fail, and
# scripting.tcl runs its EVAL half only (its other half runs the same
# cases as FUNCTIONs, which Elsa does not have yet). Needs tclsh and a
# release build (`cargo build --release`).
set -euo pipefail
src="${1:?path to a Redis 7.0 source tree}"
unit="${2:?test file, e.g. unit/scripting}"
shift 2
root="$(cd "$(dirname "$0")/.." && pwd)"
elsa="$root/target/release/elsa"
[ -x "$elsa" ] || { echo "build first: cargo build --release" >&2; exit 1; }

work="$(mktemp -d)"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
against="${REDIS_TCL_AGAINST:-elsa}"
if [ "$against" = redis ]; then
  mkdir -p "$work/data"
  redis-server --port "$port" --dir "$work/data" --save '' --appendonly no >"$work/elsa.log" 2>&1 &
else
  "$elsa" server --port "$port" --data-dir "$work/data" "$@" >"$work/elsa.log" 2>&1 &
fi
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do
  redis-cli -p "$port" ping >/dev/null 2>&1 && break
  sleep 0.1
done

cp -r "$src" "$work/redis"
cd "$work/redis"
skips=()
while IFS= read -r t; do
  [ -n "$t" ] && skips+=(--skiptest "$t")
done <<<"${REDIS_TCL_SKIP:-}"
./runtest --host 127.0.0.1 --port "$port" --single "$unit" --durable \
  --tags -needs:repl --tags -needs:debug --ignore-encoding "${skips[@]}" >"$work/run.log" 2>&1 || true
sed 's/\x1b\[[0-9;]*m//g' "$work/run.log" >"$work/plain.log"
echo "$unit against $against:"
grep -oE '^\[(ok|err|exception|ignore)\]' "$work/plain.log" | sort | uniq -c
grep -E -A4 "^\[(err|exception)\]" "$work/plain.log" || true
