#!/usr/bin/env bash
# The paper's §5.2: single-node throughput under high contention
# (zipf coefficient 4) for 2-32 client threads (fig. 7).
exec "$(dirname "$0")/ycsbt-threads.sh" 4 "${1:-}"
