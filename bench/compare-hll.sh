#!/usr/bin/env bash
# PFADD, PFCOUNT and PFMERGE throughput, Elsa vs Redis on this machine
# (issue 45): both servers pinned to core 0, redis-benchmark (-P 16 -c 50)
# on core 1, one after the other; Elsa with one worker, neither server
# durable (DURABILITY=none). PFADD adds random elements to one key (dense
# after a few thousand); PFCOUNT counts it (its cached count stays valid
# between PFADDs: what a counter read mostly does) and a union of two
# keys (no cache: all 16 384 registers every time). Prints requests per
# second and the ratio.
#
# Usage: bench/compare-hll.sh
DURABILITY=${DURABILITY:-none}
ELSA_FLAGS=${ELSA_FLAGS:---workers 1}
source "$(dirname "$0")/lib.sh"
build

run() { # port -> "pfadd pfcount pfcount2 pfmerge" requests per second
  local p=$1 out=()
  redis-cli -p "$p" flushall >/dev/null
  rps() { taskset -c 1 redis-benchmark -p "$p" -q -c 50 -P 16 "$@" | tr '\r' '\n' | grep -a "per second" | tail -1 | awk '{print $(NF-5)}'; }
  out+=("$(rps -n 300000 -r 1000000 PFADD hll e:__rand_int__)")
  redis-cli -p "$p" pfadd other a b c >/dev/null
  out+=("$(rps -n 300000 PFCOUNT hll)")
  out+=("$(rps -n 50000 PFCOUNT hll other)")
  out+=("$(rps -n 50000 PFMERGE dest hll other)")
  echo "${out[@]}"
}

start_elsa
elsa_port=${ELSA_URL##*:}
taskset -pc 0 "${PIDS[-1]}" >/dev/null
read -r ea ec ec2 em < <(run "$elsa_port")
start_redis
redis_port=${REDIS_URL##*:}
taskset -pc 0 "${PIDS[-1]}" >/dev/null
read -r ra rc rc2 rm < <(run "$redis_port")
ratio() { python3 -c "print(f'{$1/$2:.2f}')"; }
echo "| command | Elsa req/s | Redis req/s | ratio |"
echo "|---|---|---|---|"
echo "| PFADD (random elements, one key) | $ea | $ra | $(ratio "$ea" "$ra") |"
echo "| PFCOUNT of one key (cached count) | $ec | $rc | $(ratio "$ec" "$rc") |"
echo "| PFCOUNT of two keys (union) | $ec2 | $rc2 | $(ratio "$ec2" "$rc2") |"
echo "| PFMERGE of two keys | $em | $rm | $(ratio "$em" "$rm") |"
