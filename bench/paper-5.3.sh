#!/usr/bin/env bash
# The paper's §5.3: single-node throughput under low contention
# (zipf coefficient 1) for 2-32 client threads (fig. 8).
exec "$(dirname "$0")/ycsbt-threads.sh" 1 "${1:-}"
