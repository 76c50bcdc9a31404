#!/usr/bin/env bash
# Runs every test of the workspace, installing first what the tests need on a
# fresh Debian machine: redis-server and redis-tools (the tests drive the real
# redis-cli, and compare against a real Redis), chromium and chromium-driver
# (tests/status_page.rs drives the status page in headless Chromium),
# iproute2 and nftables (the multi-host tests). Then the client-library suite
# (scripts/clients.sh: redis-py, go-redis, Jedis, Lettuce, node-redis, ioredis
# against Elsa and redis-server; it installs their packages itself) — unless
# arguments narrow `cargo test` to part of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
# tests/multihost.rs makes network namespaces (iproute2) and cuts them
# apart with nftables; Debian keeps nft in /usr/sbin.
command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || need+=(iproute2)
command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ] || need+=(nftables)
# PostgreSQL (elsa bench's live tests): Debian keeps initdb/pg_ctl off PATH.
compgen -G '/usr/lib/postgresql/*/bin/pg_ctl' >/dev/null || command -v pg_ctl >/dev/null 2>&1 || need+=(postgresql)
if ((${#need[@]})); then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "installing ${need[*]} ..."
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi

# The server's layers (docs/ARCHITECTURE.md): no import circle of more than
# two files.
python3 scripts/modgraph.py crates/server/src --check 2 >/dev/null

# tests/tls.rs drives redis-py over TLS: the client suite's venv
# (target/clients/venv) is made first.
./scripts/clients.sh --install-only --only py
cargo test --workspace "$@"
if (($# == 0)); then
  ./scripts/clients.sh
fi
