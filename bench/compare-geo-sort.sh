#!/usr/bin/env bash
# GEOADD, GEOSEARCH and SORT throughput, Elsa vs Redis on this machine (issue
# 45): both servers pinned to core 0, redis-benchmark (-P 16 -c 50) on core 1,
# one after the other; Elsa with one worker, neither server durable
# (DURABILITY=none). Prints requests per second and the ratio.
#
# Usage: bench/compare-geo-sort.sh
DURABILITY=${DURABILITY:-none}
ELSA_FLAGS=${ELSA_FLAGS:---workers 1}
source "$(dirname "$0")/lib.sh"
build

run() { # port -> "geoadd geosearch sort" requests per second
  local p=$1 out=()
  redis-cli -p "$p" flushall >/dev/null
  for _ in $(seq 100); do echo "RPUSH sortme $RANDOM"; done | redis-cli -p "$p" >/dev/null
  rps() { taskset -c 1 redis-benchmark -p "$p" -q -c 50 -P 16 "$@" | tr '\r' '\n' | grep -a "per second" | tail -1 | awk '{print $(NF-5)}'; }
  out+=("$(rps -n 300000 -r 100000 GEOADD geo 13.__rand_int__ 38.__rand_int__ m:__rand_int__)")
  out+=("$(rps -n 100000 GEOSEARCH geo FROMLONLAT 13.5 38.5 BYRADIUS 20 km COUNT 10 ASC)")
  out+=("$(rps -n 100000 SORT sortme LIMIT 0 10)")
  echo "${out[@]}"
}

start_elsa
elsa_port=${ELSA_URL##*:}
taskset -pc 0 "${PIDS[-1]}" >/dev/null
read -r eg es esort < <(run "$elsa_port")
start_redis
redis_port=${REDIS_URL##*:}
taskset -pc 0 "${PIDS[-1]}" >/dev/null
read -r rg rs rsort < <(run "$redis_port")
ratio() { python3 -c "print(f'{$1/$2:.2f}')"; }
echo "| command | Elsa req/s | Redis req/s | ratio |"
echo "|---|---|---|---|"
echo "| GEOADD (random points) | $eg | $rg | $(ratio "$eg" "$rg") |"
echo "| GEOSEARCH 20 km COUNT 10 ASC | $es | $rs | $(ratio "$es" "$rs") |"
echo "| SORT of 100 numbers, LIMIT 0 10 | $esort | $rsort | $(ratio "$esort" "$rsort") |"
