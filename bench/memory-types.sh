#!/usr/bin/env bash
# Memory of big collections, Elsa against Redis on the same machine in the
# same run (issue 13: a 1M-member set of 16-byte members and a 1M-field
# hash of 16-byte fields and values cost at most 2x Redis's RSS; issue 14:
# a 1M-member sorted set and a 1M-element list too; issue 46: a stream of
# 1M entries of 3 fields within 1.5x, TYPES=stream). Each server starts
# empty, without
# persistence; the script loads one collection (SADD / HSET / ZADD / RPUSH, 1000 elements
# per command, through redis-cli --pipe), then reads the growth of the
# server's RSS (VmRSS in /proc/PID/status) and its element count.
#   bench/memory-types.sh [N]        (default N = 1000000; TYPES="list" for one;
#                                     list1: the list pushed one element per RPUSH)
#   ELSA_BIN=/path/to/elsa bench/memory-types.sh   (that build, no cargo build)
# Prints one line per type: Redis MB, Elsa MB, ratio.
N=${1:-1000000}
DURABILITY=none
source "$(dirname "$0")/lib.sh"
if [ -n "${ELSA_BIN:-}" ]; then ELSA=$ELSA_BIN; else build; fi

rss_kb() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }

load() { # type -> RESP on stdout
  python3 - "$1" "$N" <<'PY'
import sys
kind, n = sys.argv[1], int(sys.argv[2])
out = sys.stdout.buffer
for base in range(0, n, 1000):
    if kind == "set":
        args = [b"SADD", b"big:set"] + [b"m%015d" % i for i in range(base, min(n, base + 1000))]
    elif kind == "list":
        args = [b"RPUSH", b"big:list"] + [b"e%015d" % i for i in range(base, min(n, base + 1000))]
    elif kind == "list1":
        # A queue's way: one element per push.
        for i in range(base, min(n, base + 1000)):
            one = [b"RPUSH", b"big:list1", b"e%015d" % i]
            out.write(b"*3\r\n")
            for a in one:
                out.write(b"$%d\r\n%s\r\n" % (len(a), a))
        continue
    elif kind == "stream":
        # Issue 46: 1M entries of 3 small fields, one XADD * each.
        for i in range(base, min(n, base + 1000)):
            v = b"%08d" % i
            one = [b"XADD", b"big:stream", b"*", b"a", v, b"b", v, b"c", v]
            out.write(b"*9\r\n")
            for a in one:
                out.write(b"$%d\r\n%s\r\n" % (len(a), a))
        continue
    elif kind == "zset":
        args = [b"ZADD", b"big:zset"]
        for i in range(base, min(n, base + 1000)):
            args += [b"%d" % ((i * 7919) % n), b"m%015d" % i]
    else:
        args = [b"HSET", b"big:hash"]
        for i in range(base, min(n, base + 1000)):
            args += [b"f%015d" % i, b"v%015d" % i]
    out.write(b"*%d\r\n" % len(args))
    for a in args:
        out.write(b"$%d\r\n%s\r\n" % (len(a), a))
PY
}

measure() { # type port pid -> MB
  local before after
  before=$(rss_kb "$3")
  redis-cli -p "$2" --pipe < "$TMP/$1.resp" > /dev/null
  # A rank query: Elsa builds a big sorted set's order index on the first
  # ordered read, so it is counted.
  [ "$1" = zset ] && redis-cli -p "$2" ZRANK big:zset m000000000000007 > /dev/null
  sleep 1
  after=$(rss_kb "$3")
  echo $(( (after - before) / 1024 ))
}

for t in ${TYPES:-set hash zset list}; do
  load "$t" > "$TMP/$t.resp"
  start_redis
  rport=${REDIS_URL##*:}
  r=$(measure "$t" "$rport" "${PIDS[-1]}")
  count=$(redis-cli -p "$rport" "$(case $t in set) echo SCARD;; hash) echo HLEN;; zset) echo ZCARD;; list|list1) echo LLEN;; stream) echo XLEN;; esac)" "big:$t")
  start_elsa
  eport=${ELSA_URL##*:}
  e=$(measure "$t" "$eport" "${PIDS[-1]}")
  ecount=$(redis-cli -p "$eport" "$(case $t in set) echo SCARD;; hash) echo HLEN;; zset) echo ZCARD;; list|list1) echo LLEN;; stream) echo XLEN;; esac)" "big:$t")
  printf "%-5s N=%s  Redis %5s MB (%s elements)  Elsa %5s MB (%s elements)  Elsa/Redis %.2fx\n" \
    "$t" "$N" "$r" "$count" "$e" "$ecount" "$(echo "$e / $r" | bc -l)"
  kill "${PIDS[-1]}" "${PIDS[-2]}" 2>/dev/null || true
done
