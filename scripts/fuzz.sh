#!/usr/bin/env bash
# Fuzzes the decoders that read untrusted bytes (fuzz/: client requests,
# peer frames, lattice states) and the Lua scripts clients send (EVAL)
# with cargo-fuzz, each target for the given
# number of seconds (default 40: the CI smoke run; the closing notes'
# figures come from runs of 600 or more). Installs cargo-fuzz if missing;
# needs the nightly toolchain (rustup) for the sanitizer flags.
#
#   scripts/fuzz.sh [seconds] [target...]
#
# FUZZ_DEV=1 builds without optimizations (debug assertions and overflow
# checks on; a fraction of the build time, fewer runs a second: CI's smoke).
# FUZZ_TARGET_DIR keeps the build elsewhere (CI: a cache outside the clone,
# so only the workspace's own crates are built again).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

secs="${1:-40}"
shift || true
targets=("$@")
((${#targets[@]})) || targets=(resp_request peer_frame lattice_state membership_datagram lua_script)

rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked --version 0.13.2

build=(-O)
[ -n "${FUZZ_DEV:-}" ] && build=(--dev)
[ -n "${FUZZ_TARGET_DIR:-}" ] && build+=(--target-dir "$FUZZ_TARGET_DIR")
cargo +nightly fuzz build "${build[@]}"
# Known false leaks (mlua's shared reference counts): see lsan.supp.
export LSAN_OPTIONS="suppressions=$PWD/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
for t in "${targets[@]}"; do
  echo "fuzz $t: ${secs}s"
  mkdir -p target
  log="target/fuzz-$t.log"
  # A target's dictionary (Lua tokens for lua_script), when it has one.
  dict=()
  case "$t" in
    lua_script) dict=(-dict="$PWD/lua.dict") ;;
  esac
  # A crash, a leak or a timeout fails the run and leaves the input under
  # fuzz/artifacts/$t; -rss_limit_mb catches an allocation sized by a
  # length read from the input.
  rc=0
  cargo +nightly fuzz run "${build[@]}" "$t" -- -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 \
    -print_final_stats=1 "${dict[@]}" >"$log" 2>&1 || rc=$?
  grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|Done)|ERROR|panicked|SUMMARY' "$log" || true
  if ((rc != 0)); then
    tail -50 "$log"
    exit "$rc"
  fi
done
