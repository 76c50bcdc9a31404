"""redis-py (sync) as an ordinary application uses it, each step asserted.

Env: TARGET (elsa|redis), HOST, PORT, PASSWORD, RESTART_CMD, RESP (2|3),
PARSER (hiredis|python). Prints one `PASS|FAIL|SKIP feature` line per feature.
"""
import os
import subprocess
import sys
import threading
import time
import uuid

import redis
from redis._parsers import _HiredisParser, _RESP2Parser
from redis.exceptions import ResponseError, WatchError

TARGET = os.environ.get("TARGET", "redis")
HOST = os.environ.get("HOST", "127.0.0.1")
PORT = int(os.environ.get("PORT", "6379"))
PASSWORD = os.environ.get("PASSWORD", "")
RESP = int(os.environ.get("RESP", "2"))
PARSER = os.environ.get("PARSER", "hiredis")
NAME = f"py-sync-resp{RESP}-{PARSER}"
P = f"{NAME}:{uuid.uuid4().hex[:8]}:"  # every key this run writes starts with P

if PARSER == "hiredis":
    assert redis.utils.HIREDIS_AVAILABLE, "hiredis is not installed"
PARSER_CLASS = _HiredisParser if PARSER == "hiredis" else _RESP2Parser


def client(single=False, **kw):
    args = dict(host=HOST, port=PORT, password=PASSWORD or None, protocol=RESP,
                client_name=f"{NAME}-app", decode_responses=True, socket_timeout=15)
    args.update(kw)
    c = redis.Redis(**args)
    # Redis() takes no parser_class: its pool hands it to each new connection.
    c.connection_pool.connection_kwargs["parser_class"] = PARSER_CLASS
    if single:
        return redis.Redis(connection_pool=c.connection_pool, single_connection_client=True)
    return c


r = client(max_connections=64)
results = []


class Skip(Exception):
    pass


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def eq(got, want, what=""):
    if got != want:
        raise AssertionError(f"{what} got {got!r}, want {want!r}")


def feature(fn):
    name = fn.__name__.removeprefix("f_")
    try:
        fn()
        results.append("PASS")
        print(f"PASS {name}", flush=True)
    except Skip as e:
        results.append("SKIP")
        print(f"SKIP {name}: {e}", flush=True)
    except Exception as e:  # noqa: BLE001 — any failure is a FAIL line
        results.append("FAIL")
        msg = f"{type(e).__name__}: {e}".replace("\n", " ")[:300]
        print(f"FAIL {name}: {msg}", flush=True)
    return fn


def run_threads(n, target):
    errors = []

    def wrap(i):
        try:
            target(i)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=wrap, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]


@feature
def f_connect():
    eq(r.ping(), True, "PING")
    eq(r.client_getname(), f"{NAME}-app", "CLIENT GETNAME")
    conn = r.connection_pool.get_connection()
    want = {"hiredis": "_HiredisParser", "python": f"_RESP{RESP}Parser"}[PARSER]
    eq(type(conn._parser).__name__, want, "parser in use")
    r.connection_pool.release(conn)
    try:
        client(password="wrong-password", client_name=None).ping()
        raise AssertionError("a wrong password was accepted")
    except (redis.AuthenticationError, ResponseError):
        pass


@feature
def f_pool():
    n, iters = 50, 40

    def worker(i):
        for j in range(iters):
            r.incr(P + "pool:shared")
            r.incr(P + f"pool:own:{i}")
            r.set(P + f"pool:val:{i}", f"{i}-{j}")
            eq(r.get(P + f"pool:val:{i}"), f"{i}-{j}", "own value")

    run_threads(n, worker)
    eq(int(r.get(P + "pool:shared")), n * iters, "shared counter")
    eq([int(v) for v in r.mget([P + f"pool:own:{i}" for i in range(n)])], [iters] * n, "own counters")


@feature
def f_pipeline():
    with r.pipeline(transaction=False) as p:
        for i in range(1000):
            p.set(P + f"pipe:{i}", i)
        eq(p.execute(), [True] * 1000, "1000 SETs")
    with r.pipeline(transaction=False) as p:
        for i in range(1000):
            p.get(P + f"pipe:{i}")
        eq(p.execute(), [str(i) for i in range(1000)], "1000 GETs")
    with r.pipeline() as p:  # the default pipeline is MULTI/EXEC
        for _ in range(1000):
            p.incr(P + "pipe:tx")
        eq(p.execute()[-1], 1000, "1000 INCRs in MULTI")


@feature
def f_watch():
    key = P + "watch:counter"
    r.set(key, 0)
    workers, per = 8, 15

    def bump(pipe):
        v = int(pipe.get(key))
        pipe.multi()
        pipe.set(key, v + 1)

    def worker(_):
        for _ in range(per):
            r.transaction(bump, key)

    run_threads(workers, worker)
    eq(int(r.get(key)), workers * per, "counter after WATCH/MULTI/EXEC retries")
    # And WatchError itself: a watched key changed under us aborts EXEC.
    with r.pipeline() as p:
        p.watch(key)
        r.set(key, "changed")
        p.multi()
        p.set(key, "mine")
        try:
            p.execute()
            raise AssertionError("EXEC ran although a watched key changed")
        except WatchError:
            pass
    eq(r.get(key), "changed", "value after aborted EXEC")


@feature
def f_begin():
    if TARGET != "elsa":
        raise Skip("BEGIN/COMMIT is Elsa's own (Redis has none)")
    key = P + "begin:counter"
    r.set(key, 0)
    workers, per = 6, 10
    conflicts = [0]

    def worker(_):
        c = client(single=True)  # BEGIN's state is per connection
        try:
            for _ in range(per):
                while True:
                    eq(c.execute_command("BEGIN", "SI"), "OK", "BEGIN")
                    v = int(c.execute_command("GET", key))
                    eq(c.execute_command("PUT", key, v + 1), "OK", "PUT")
                    try:
                        ts = c.execute_command("COMMIT")
                        check(isinstance(ts, int) and ts > 0, f"COMMIT answered {ts!r}")
                        break
                    except ResponseError as e:
                        if not str(e).startswith("CONFLICT"):
                            raise
                        conflicts[0] += 1
        finally:
            c.close()

    run_threads(workers, worker)
    eq(int(r.get(key)), workers * per, f"counter after BEGIN/COMMIT ({conflicts[0]} conflicts retried)")


@feature
def f_strings():
    eq(r.set(P + "s:a", "hello", ex=100), True)
    ttl = r.ttl(P + "s:a")
    check(0 < ttl <= 100, f"TTL {ttl}")
    eq(r.set(P + "s:a", "x", nx=True), None, "SET NX on existing key")
    eq(r.append(P + "s:a", " world"), 11)
    eq(r.getrange(P + "s:a", 0, 4), "hello")
    eq(r.strlen(P + "s:a"), 11)
    # BITFIELD: small counters packed in one string (a SAT one and a
    # wrapping one), read back with BITFIELD_RO.
    bf = r.bitfield(P + "s:bf").set("u8", "#1", 200).incrby("u8", "#1", 100, overflow="SAT")
    eq(bf.incrby("i4", 0, 9, overflow="WRAP").execute(), [0, 255, -7], "BITFIELD")
    eq(r.bitfield_ro(P + "s:bf", "u8", 8, items=[("i4", 0)]), [255, -7], "BITFIELD_RO")
    r.setex(P + "s:short", 1, "v")
    r.set(P + "s:ms", "v", px=150)
    check(0 < r.pttl(P + "s:ms") <= 150, "PTTL")
    r.mset({P + "s:m1": "1", P + "s:m2": "2"})
    eq(r.mget(P + "s:m1", P + "s:m2", P + "s:none"), ["1", "2", None])
    eq(r.persist(P + "s:a"), True)
    eq(r.ttl(P + "s:a"), -1)
    eq(r.getdel(P + "s:m1"), "1")
    eq(r.exists(P + "s:m1"), 0)
    time.sleep(0.3)
    eq(r.get(P + "s:ms"), None, "expired PX key")
    eq(r.expire(P + "s:m2", 50), True)
    check(0 < r.ttl(P + "s:m2") <= 50, "EXPIRE")


@feature
def f_hashes():
    h = P + "h"
    eq(r.hset(h, mapping={"name": "ada", "lang": "py", "n": "1"}), 3)
    eq(r.hget(h, "name"), "ada")
    eq(r.hgetall(h), {"name": "ada", "lang": "py", "n": "1"})
    eq(r.hexists(h, "lang"), True)
    eq(r.hdel(h, "lang"), 1)
    eq(r.hlen(h), 2)
    eq(sorted(r.hkeys(h)), ["n", "name"])
    eq(r.hmget(h, ["name", "nope"]), ["ada", None])
    eq(r.hsetnx(h, "name", "bob"), False)


@feature
def f_sets():
    s, t = P + "set:s", P + "set:t"
    eq(r.sadd(s, "a", "b", "c"), 3)
    eq(r.sadd(s, "a"), 0)
    eq(r.sismember(s, "b"), True)
    eq(r.smembers(s), {"a", "b", "c"})
    r.sadd(t, "b", "c", "d")
    eq(r.sinter(s, t), {"b", "c"})
    eq(r.sunion(s, t), {"a", "b", "c", "d"})
    eq(r.sdiff(s, t), {"a"})
    eq(r.srem(s, "a"), 1)
    eq(r.scard(s), 2)


@feature
def f_zsets():
    z = P + "z"
    eq(r.zadd(z, {"a": 1, "b": 2, "c": 3}), 3)
    eq([tuple(x) for x in r.zrange(z, 0, -1, withscores=True)], [("a", 1.0), ("b", 2.0), ("c", 3.0)])
    eq(r.zincrby(z, 5, "a"), 6.0)
    eq(r.zrank(z, "a"), 2)
    eq(r.zrevrange(z, 0, 0), ["a"])
    eq(r.zrangebyscore(z, 2, 3), ["b", "c"])
    eq(r.zscore(z, "b"), 2.0)
    eq(r.zcard(z), 3)
    eq(r.zrem(z, "b"), 1)
    eq(r.zcount(z, "-inf", "+inf"), 2)


@feature
def f_lists():
    q = P + "list"
    eq(r.rpush(q, "a", "b", "c"), 3)
    eq(r.lpush(q, "z"), 4)
    eq(r.lrange(q, 0, -1), ["z", "a", "b", "c"])
    eq(r.lpop(q), "z")
    eq(r.rpop(q), "c")
    eq(r.llen(q), 2)
    eq(r.lindex(q, 1), "b")
    # Blocking pop: a waiter is woken by another client's push.
    bq = P + "list:blocking"
    pusher = client()
    t = threading.Timer(0.3, lambda: pusher.rpush(bq, "job-1"))
    t.start()
    t0 = time.time()
    got = r.blpop([bq], timeout=5)
    t.join()
    eq(got, [bq, "job-1"] if RESP == 3 else (bq, "job-1"), "BLPOP")
    check(time.time() - t0 < 4, "BLPOP woke late")
    eq(r.blpop([bq], timeout=0.2), None, "BLPOP timeout on an empty list")


@feature
def f_counters():
    c = P + "ctr"
    eq(r.incrby(c, 10), 10)
    eq(r.incrby(c, -3), 7)
    eq(r.decrby(c, 2), 5)
    eq(r.incrbyfloat(c, 0.5), 5.5)
    eq(r.hincrby(P + "ctr:h", "f", 4), 4)
    eq(r.hincrby(P + "ctr:h", "f", -1), 3)
    try:
        r.incr(P + "s:a")  # "hello world" is not an integer
        raise AssertionError("INCR of a non-integer succeeded")
    except ResponseError:
        pass


@feature
def f_scan():
    with r.pipeline(transaction=False) as p:
        for i in range(300):
            p.set(P + f"scan:{i}", i)
        p.execute()
    seen = set(r.scan_iter(match=P + "scan:*", count=50))
    eq(len(seen), 300, "keys SCAN found")
    eq(set(r.hscan_iter(P + "h")), {("name", "ada"), ("n", "1")}, "HSCAN")


@feature
def f_pubsub():
    ps = r.pubsub()
    ch = P + "chan"
    ps.subscribe(ch)
    ps.psubscribe(P + "pat.*")
    got = []
    deadline = time.time() + 5
    while len([m for m in got if m["type"] in ("subscribe", "psubscribe")]) < 2 and time.time() < deadline:
        m = ps.get_message(timeout=0.5)
        if m:
            got.append(m)
    eq(r.publish(ch, "hello"), 1, "PUBLISH receivers")
    eq(r.publish(P + "pat.x", "world"), 1, "PUBLISH receivers (pattern)")
    msgs = []
    while len(msgs) < 2 and time.time() < deadline:
        m = ps.get_message(ignore_subscribe_messages=True, timeout=0.5)
        if m:
            msgs.append((m["type"], m["channel"], m["data"]))
    eq(msgs, [("message", ch, "hello"), ("pmessage", P + "pat.x", "world")], "messages")
    ps.unsubscribe(ch)
    ps.punsubscribe()
    # redis-py sends UNSUBSCRIBE without waiting: read until both are confirmed.
    left, deadline = 2, time.time() + 5
    while left and time.time() < deadline:
        m = ps.get_message(timeout=0.5)
        if m and m["type"] in ("unsubscribe", "punsubscribe"):
            left -= 1
    eq(left, 0, "unconfirmed unsubscribes")
    eq(r.publish(ch, "nobody"), 0, "PUBLISH after UNSUBSCRIBE")
    ps.close()


@feature
def f_lua():
    lock = r.lock(P + "lock", timeout=10)
    check(lock.acquire(blocking=False), "Lock acquire")
    check(not r.lock(P + "lock").acquire(blocking=False), "second Lock acquired a held lock")
    lock.release()  # a Lua script
    check(r.lock(P + "lock").acquire(blocking=False), "Lock not free after release")
    incr_by = r.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
    eq(incr_by(keys=[P + "lua:n"], args=[5]), 5)
    eq(incr_by(keys=[P + "lua:n"], args=[5]), 10)
    eq(r.eval("return {KEYS[1], ARGV[1]}", 1, "k", "v"), ["k", "v"])


@feature
def f_select():
    r1 = client(db=1)
    k = P + "db"
    r1.set(k, "in-db1")
    eq(r1.get(k), "in-db1")
    eq(r.get(k), None, "db 0 sees db 1's key")
    r1.delete(k)
    r1.close()


@feature
def f_cache():
    k = P + "cached"
    w = client()
    if RESP == 3:
        from redis.cache import CacheConfig

        try:
            c = client(cache_config=CacheConfig())
            w.set(k, "v1")
            eq(c.get(k), "v1")
            eq(c.get(k), "v1")
            check(len(c.get_cache().collection) >= 1, "nothing was cached")
            w.set(k, "v2")  # the server's invalidation must evict the entry
            deadline = time.time() + 3
            while c.get(k) != "v2" and time.time() < deadline:
                time.sleep(0.05)
            eq(c.get(k), "v2", "value after invalidation")
            c.close()
            return
        except redis.ConnectionError as e:
            # redis-py 6.x refuses a server that reports a version below 7.4
            # (Debian's redis-server is 7.0): test the tracking it builds on.
            if "7.4 or later" not in str(e):
                raise
    # CLIENT TRACKING with invalidations redirected to a RESP2 subscriber.
    inv = redis.Connection(host=HOST, port=PORT, password=PASSWORD or None, socket_timeout=5,
                           decode_responses=True)
    inv.send_command("CLIENT", "ID")
    inv_id = inv.read_response()
    inv.send_command("SUBSCRIBE", "__redis__:invalidate")
    eq(inv.read_response()[0], "subscribe")
    t = client(single=True)
    check(t.client_tracking_on(clientid=inv_id) in (True, "OK"), "CLIENT TRACKING ON REDIRECT")
    w.set(k, "v1")
    eq(t.get(k), "v1")  # now tracked
    w.set(k, "v2")
    check(inv.can_read(timeout=3), "no invalidation message within 3 s")
    msg = inv.read_response()
    eq(msg[:2], ["message", "__redis__:invalidate"])
    eq(msg[2], [k], "invalidated keys")
    t.close()
    inv.disconnect()


@feature
def f_cluster_client():
    if TARGET != "elsa":
        raise Skip("this suite's redis-server is not in cluster mode")
    from redis.cluster import RedisCluster
    rc = RedisCluster(host=HOST, port=PORT, password=PASSWORD or None, protocol=RESP,
                      decode_responses=True, socket_timeout=15)
    try:
        # The suite starts Elsa with a port per worker: one cluster node each.
        nodes = rc.get_nodes()
        check(len(nodes) >= 1, f"nodes {nodes!r}")
        keys = [P + f"cluster:{i}" for i in range(200)] + [P + "{cart}:" + str(i) for i in range(20)]
        for i, k in enumerate(keys):
            eq(rc.set(k, i), True, "SET through the cluster client")
        for k in keys[:50]:
            eq(rc.keyslot(k), r.execute_command("CLUSTER", "KEYSLOT", k), f"slot of {k}")
        eq(rc.mget_nonatomic(keys), [str(i) for i in range(len(keys))], "MGET across slots")
        with rc.pipeline() as p:
            for k in keys:
                p.incr(k)
            p.execute()
        eq(r.mget(keys), [str(i + 1) for i in range(len(keys))], "seen by an ordinary client")
        ports = {rc.get_node_from_key(k).port for k in keys}
        eq(len(ports), len(nodes), f"ports serving keys ({ports}) of {len(nodes)} nodes")
    finally:
        rc.close()


@feature
def f_reconnect():
    cmd = os.environ.get("RESTART_CMD")
    if not cmd:
        raise Skip("no RESTART_CMD")
    k = P + "restart"
    r.set(k, "before")
    subprocess.run(cmd, shell=True, check=True)
    deadline, errors, last = time.time() + 20, 0, ""
    while True:
        try:
            r.set(k + ":after", "after")
            break
        except redis.ConnectionError as e:
            errors, last = errors + 1, str(e)
            if time.time() > deadline:
                raise
            time.sleep(0.2)
    print(f"INFO reconnect: {errors} errors reached the application before it worked again {last}", flush=True)
    eq(r.get(k + ":after"), "after")
    eq(r.client_getname(), f"{NAME}-app", "client name after reconnect")
    if TARGET == "elsa":
        eq(r.get(k), "before", "a key written before the restart")
    run_threads(10, lambda i: eq(r.incr(P + "restart:n") > 0, True))


print(f"SUMMARY {NAME} {TARGET}: {results.count('PASS')} passed, {results.count('FAIL')} failed, "
      f"{results.count('SKIP')} skipped", flush=True)
sys.exit(1 if "FAIL" in results else 0)
