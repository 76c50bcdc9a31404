#!/usr/bin/env bash
# How close used_memory (the allocator's figure, what maxmemory is checked
# against) is to the process's RSS and to the shards' own accounting of
# their tables (used_memory_dataset), after loading N strings of SIZE bytes
# and H hashes of 10 fields; Redis beside it for the same load.
#   bench/memory-margin.sh       N=1000000 SIZE=100 H=100000
# Prints INFO memory's used_memory, used_memory_rss, used_memory_dataset,
# used_memory_startup and the ratios, one line per server.
N=${N:-1000000}
SIZE=${SIZE:-100}
H=${H:-100000}
DURABILITY=none
source "$(dirname "$0")/lib.sh"
[ -n "${NO_BUILD:-}" ] || build

load() { # RESP for N SETs and H HSETs on stdout
  python3 - "$N" "$SIZE" "$H" <<'PY'
import sys
n, size, h = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
out = sys.stdout.buffer
v = b"v" * size
def enc(*args):
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)
for i in range(n):
    out.write(enc(b"SET", b"key:%08d" % i, v))
for i in range(h):
    args = [b"HSET", b"hash:%07d" % i]
    for f in range(10):
        args += [b"field%d" % f, b"value-%08d" % f]
    out.write(enc(*args))
PY
}

report() { # name port
  local t
  t=$(redis-cli -p "$2" info memory | tr -d '\r')
  python3 - "$1" "$t" <<'PY'
import sys
name, text = sys.argv[1], sys.argv[2]
f = dict(l.split(":", 1) for l in text.splitlines() if ":" in l)
used, rss, data = int(f["used_memory"]), int(f["used_memory_rss"]), int(f["used_memory_dataset"])
start = int(f["used_memory_startup"])
print(f"{name:6} used_memory={used/2**20:.1f}MiB rss={rss/2**20:.1f}MiB dataset={data/2**20:.1f}MiB "
      f"startup={start/2**20:.1f}MiB rss/used={rss/used:.3f} used/dataset={used/max(data,1):.3f} "
      f"(used-dataset)={(used-data)/2**20:.1f}MiB")
PY
}

start_redis; rport=${REDIS_URL##*:}
load | redis-cli -p "$rport" --pipe >/dev/null
report redis "$rport"
start_elsa; eport=${ELSA_URL##*:}
load | redis-cli -p "$eport" --pipe >/dev/null
sleep 2  # the sampler and the epoch timers settle
report elsa "$eport"
echo "N=$N SIZE=$SIZE H=$H"
