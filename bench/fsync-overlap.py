#!/usr/bin/env python3
"""What a node-wide fsync group would save over one syncer per shard.

Issue 18 asked for one sync for all shards' logs. Each shard has its own
log file and its own syncer thread (crates/shard/src/wal), so with two
shards two `fdatasync`s run at once. This measures, in the given
directory (default: the current one; put it on the disk the data
directory uses), the time per `fdatasync` of a 100-byte append:

- one file, one thread (what one group for the whole node would pay);
- two files synced one after the other by one thread (one node-wide
  syncer over the shards' separate files);
- two files, each synced by its own thread at the same time (today).

Usage: bench/fsync-overlap.py [DIR] [SYNCS]
"""
import os
import sys
import tempfile
import threading
import time

DIR = sys.argv[1] if len(sys.argv) > 1 else "."
N = int(sys.argv[2]) if len(sys.argv) > 2 else 1500


def appender(d, name):
    return os.open(os.path.join(d, name), os.O_WRONLY | os.O_CREAT | os.O_APPEND)


def one_file(d):
    f = appender(d, "one")
    t = time.perf_counter()
    for _ in range(N):
        os.write(f, b"x" * 100)
        os.fdatasync(f)
    return (time.perf_counter() - t) / N


def two_files_in_turn(d):
    a, b = appender(d, "a"), appender(d, "b")
    t = time.perf_counter()
    for _ in range(N):
        os.write(a, b"x" * 100)
        os.write(b, b"x" * 100)
        os.fdatasync(a)
        os.fdatasync(b)
    return (time.perf_counter() - t) / N


def two_files_at_once(d):
    def loop(name):
        f = appender(d, name)
        for _ in range(N):
            os.write(f, b"x" * 100)
            os.fdatasync(f)

    threads = [threading.Thread(target=loop, args=(n,)) for n in ("c", "d")]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return (time.perf_counter() - t) / N


def main():
    print(f"{N} rounds; microseconds per round (a round makes each file durable once)")
    print("round | one file | two files, one syncer | two files, two syncers at once")
    for r in range(3):
        with tempfile.TemporaryDirectory(dir=DIR) as d:
            row = [one_file(d), two_files_in_turn(d), two_files_at_once(d)]
        print(f"{r + 1} | " + " | ".join(f"{x * 1e6:.0f}" for x in row))


if __name__ == "__main__":
    main()
