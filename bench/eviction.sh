#!/usr/bin/env bash
# Eviction quality, Elsa against Redis on the same machine in the same run:
# a cache workload (GET a key drawn from a Zipf distribution; on a miss,
# SET it) against a memory limit far smaller than the key space, under
# allkeys-lru and allkeys-lfu. Reports the hit rate (GETs that found their
# key / all GETs, counted by the client: the same figure as Redis's
# keyspace_hits / (keyspace_hits + keyspace_misses) for a GET-only read
# path) and INFO's evicted_keys.
#
# Both servers get the same room for data: maxmemory = the server's own
# used_memory when idle + ROOM (their idle figures differ: Elsa's shards,
# digests and threads vs Redis's few structures).
#   bench/eviction.sh            KEYS=200000 OPS=400000 SIZE=200 ROOM_MB=8 ZIPF=0.99
# Prints one line per (policy, server).
KEYS=${KEYS:-200000}
OPS=${OPS:-400000}
SIZE=${SIZE:-200}
ROOM_MB=${ROOM_MB:-8}
ZIPF=${ZIPF:-0.99}
DURABILITY=none
source "$(dirname "$0")/lib.sh"
[ -n "${NO_BUILD:-}" ] || build

workload() { # port -> "hits gets" (client-side counts)
  python3 - "$1" "$KEYS" "$OPS" "$SIZE" "$ZIPF" <<'PY'
import bisect, random, socket, sys
port, keys, ops, size, s = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
random.seed(7)  # the same request sequence for every server
cdf, acc = [], 0.0
for k in range(1, keys + 1):
    acc += 1.0 / k ** s
    cdf.append(acc)
# Ranks are scattered over the key names, so hot keys are not neighbours.
names = list(range(keys)); random.shuffle(names)
sock = socket.create_connection(("127.0.0.1", port)); f = sock.makefile("rb")
def enc(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out
def reply():
    line = f.readline()
    t = line[:1]
    if t == b"$":
        n = int(line[1:])
        if n < 0:
            return None
        data = f.read(n + 2)
        return data[:-2]
    if t == b"-":
        raise SystemExit("server error: %r" % line)
    return line
value = b"v" * size
hits = gets = 0
batch = 100
for start in range(0, ops, batch):
    ks = [b"key:%d" % names[bisect.bisect_left(cdf, random.random() * acc)] for _ in range(batch)]
    sock.sendall(b"".join(enc(b"GET", k) for k in ks))
    misses = []
    for k in ks:
        gets += 1
        if reply() is None:
            misses.append(k)
        else:
            hits += 1
    if misses:
        sock.sendall(b"".join(enc(b"SET", k, value) for k in misses))
        for _ in misses:
            reply()
print(hits, gets)
PY
}

info_field() { # port field
  redis-cli -p "$1" info all | tr -d '\r' | awk -F: -v f="$2" '$1 == f {print $2}'
}

run() { # name port policy
  local used room max
  used=$(info_field "$2" used_memory)
  room=$((ROOM_MB * 1024 * 1024))
  max=$((used + room))
  redis-cli -p "$2" config set maxmemory-policy "$3" >/dev/null
  redis-cli -p "$2" config set maxmemory "$max" >/dev/null
  read -r hits gets < <(workload "$2")
  printf '%-6s %-12s hit_rate=%.4f hits=%d gets=%d evicted_keys=%s maxmemory=%d used_memory=%s\n' \
    "$1" "$3" "$(python3 -c "print($hits/$gets)")" "$hits" "$gets" \
    "$(info_field "$2" evicted_keys)" "$max" "$(info_field "$2" used_memory)"
}

for policy in allkeys-lru allkeys-lfu; do
  start_redis; rport=${REDIS_URL##*:}
  run redis "$rport" "$policy"
  kill "${PIDS[-1]}"; wait "${PIDS[-1]}" 2>/dev/null || true; unset 'PIDS[-1]'
  rm -rf "$TMP/elsa"
  start_elsa; eport=${ELSA_URL##*:}
  run elsa "$eport" "$policy"
  kill "${PIDS[-1]}"; wait "${PIDS[-1]}" 2>/dev/null || true; unset 'PIDS[-1]'
done
echo "KEYS=$KEYS OPS=$OPS SIZE=$SIZE ROOM_MB=$ROOM_MB ZIPF=$ZIPF (client-side hit rate; same request sequence)"
