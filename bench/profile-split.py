#!/usr/bin/env python3
"""Where a server's CPU goes, by kind of work: reads `perf report --stdio
--no-children --sort dso,sym -g none` (self samples per symbol) on stdin and
sums the percentages into buckets — the kernel, the allocator, memcpy, the
event loop, parsing and replies, the key table, and, for Elsa, the work its
guarantees need (write-ahead log, timestamps, versions and history, the
anti-entropy digest). bench/profile-split.sh runs it on Elsa and Redis
under the same workload; with each server's CPU per request it gives
nanoseconds per request per bucket, side by side.

Usage: perf report ... | profile-split.py elsa|redis [NS_PER_REQUEST]
Prints one `bucket percent [ns]` line per bucket, biggest first.
"""
import re
import sys

# First match wins: order matters (the guarantee buckets before the
# general Elsa ones). Patterns are matched against "dso symbol".
ELSA = [
    ("kernel", r"\[kernel|\[k\]"),
    ("wal", r"wal::|Wal::|crc32|crc::|stage_|LogEntry|encode_record"),
    ("timestamps", r"hlc::|Hlc::|next_ts|clock_gettime|vdso|Instant::now"),
    ("versions/history", r"history::|History|prune_history|versions|Version"),
    ("digest", r"digest|::touch\b|antientropy"),  # not get_touched (LRU/LFU)
    ("allocator", r"_rjem|je_|jemalloc|malloc|free|sdallocx|realloc|alloc::alloc|__rust_(de)?alloc"),
    ("memcpy", r"memmove|memcpy|memset"),
    ("runtime (tokio)", r"tokio::|mio::|futures|Notify|waker|Waker|parking|epoll|std::sync|std::thread"),
    ("parse + reply", r"resp::|parse_request|Reply|reply|write_op|itoa|Partial|take_batch|read_some|write_some"),
    ("key table", r"table::|Table::|Record|record::|hashbrown|keyhash|crc16|hash_one|Hasher|foldhash|ahash"),
    ("commands", r"cmd::|classify|lookup|Coordinator|conn::|session::|intro::|cmdstats|execute|run_lone|lone::|KeyOp|op_|Shard::|shard::|lattice::|elsa_"),
    ("libc other", r"libc"),
]
REDIS = [
    ("kernel", r"\[kernel|\[k\]"),
    ("allocator", r"je_|jemalloc|malloc|free|zmalloc|zfree|zrealloc|sdsMakeRoomFor|sdsRemoveFreeSpace"),
    ("memcpy", r"memmove|memcpy|memset"),
    ("event loop", r"ae[A-Z]|epoll|beforeSleep|handleClientsWithPendingWrites|connSocket|readQueryFromClient|writeToClient|_writeToClient"),
    ("parse + reply", r"processMultibulk|processInputBuffer|addReply|_addReply|string2ll|ll2string|sdsnew|createStringObject|resetClient|freeClientArgv"),
    ("key table", r"dict|lookupKey|siphash|dbAdd|setKey|genericSetKey|keyHashSlot"),
    ("commands", r"Command|call|propagate|lookupCommand|processCommand|signalModifiedKey|notifyKeyspaceEvent|server\.|redis-server"),
    ("libc other", r"libc"),
]

LINE = re.compile(r"^\s*([\d.]+)%\s+(\S+)\s+(.*)$")


def main():
    rules = [(n, re.compile(p)) for n, p in (ELSA if sys.argv[1] == "elsa" else REDIS)]
    ns = float(sys.argv[2]) if len(sys.argv) > 2 else None
    buckets = {}
    for line in sys.stdin:
        m = LINE.match(line)
        if not m:
            continue
        pct, dso, sym = float(m.group(1)), m.group(2), m.group(3)
        text = f"{dso} {sym}"
        name = next((n for n, r in rules if r.search(text)), "other")
        buckets[name] = buckets.get(name, 0.0) + pct
    for name, pct in sorted(buckets.items(), key=lambda kv: -kv[1]):
        extra = f" {pct * ns / 100:.0f}" if ns else ""
        print(f"{name}\t{pct:.1f}{extra}")


if __name__ == "__main__":
    main()
