"""redis-py (asyncio) as an ordinary application uses it, each step asserted.

Env: TARGET (elsa|redis), HOST, PORT, PASSWORD, RESTART_CMD, RESP (2|3),
PARSER (hiredis|python). Prints one `PASS|FAIL|SKIP feature` line per feature.
"""
import asyncio
import os
import sys
import time
import uuid

import redis
import redis.asyncio as aredis
from redis._parsers import _AsyncHiredisParser, _AsyncRESP2Parser
from redis.exceptions import ResponseError, WatchError

TARGET = os.environ.get("TARGET", "redis")
HOST = os.environ.get("HOST", "127.0.0.1")
PORT = int(os.environ.get("PORT", "6379"))
PASSWORD = os.environ.get("PASSWORD", "")
RESP = int(os.environ.get("RESP", "2"))
PARSER = os.environ.get("PARSER", "hiredis")
NAME = f"py-async-resp{RESP}-{PARSER}"
P = f"{NAME}:{uuid.uuid4().hex[:8]}:"

if PARSER == "hiredis":
    assert redis.utils.HIREDIS_AVAILABLE, "hiredis is not installed"
PARSER_CLASS = _AsyncHiredisParser if PARSER == "hiredis" else _AsyncRESP2Parser


def client(single=False, **kw):
    args = dict(host=HOST, port=PORT, password=PASSWORD or None, protocol=RESP,
                client_name=f"{NAME}-app", decode_responses=True, socket_timeout=15)
    args.update(kw)
    c = aredis.Redis(**args)
    c.connection_pool.connection_kwargs["parser_class"] = PARSER_CLASS
    if single:
        return aredis.Redis(connection_pool=c.connection_pool, single_connection_client=True)
    return c


results = []
features = []


class Skip(Exception):
    pass


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def eq(got, want, what=""):
    if got != want:
        raise AssertionError(f"{what} got {got!r}, want {want!r}")


def feature(fn):
    features.append(fn)
    return fn


async def run(fn):
    name = fn.__name__.removeprefix("f_")
    try:
        await asyncio.wait_for(fn(), timeout=60)
        results.append("PASS")
        print(f"PASS {name}", flush=True)
    except Skip as e:
        results.append("SKIP")
        print(f"SKIP {name}: {e}", flush=True)
    except Exception as e:  # noqa: BLE001
        results.append("FAIL")
        msg = f"{type(e).__name__}: {e}".replace("\n", " ")[:300]
        print(f"FAIL {name}: {msg}", flush=True)


r = None


@feature
async def f_connect():
    eq(await r.ping(), True, "PING")
    eq(await r.client_getname(), f"{NAME}-app", "CLIENT GETNAME")
    conn = await r.connection_pool.get_connection()
    want = {"hiredis": "_AsyncHiredisParser", "python": f"_AsyncRESP{RESP}Parser"}[PARSER]
    eq(type(conn._parser).__name__, want, "parser in use")
    await r.connection_pool.release(conn)
    bad = client(password="wrong-password", client_name=None)
    try:
        await bad.ping()
        raise AssertionError("a wrong password was accepted")
    except (redis.AuthenticationError, ResponseError):
        pass
    finally:
        await bad.aclose()


@feature
async def f_pool():
    n, iters = 50, 40

    async def worker(i):
        for j in range(iters):
            await r.incr(P + "pool:shared")
            await r.incr(P + f"pool:own:{i}")
            await r.set(P + f"pool:val:{i}", f"{i}-{j}")
            eq(await r.get(P + f"pool:val:{i}"), f"{i}-{j}", "own value")

    await asyncio.gather(*(worker(i) for i in range(n)))
    eq(int(await r.get(P + "pool:shared")), n * iters, "shared counter")
    got = await r.mget([P + f"pool:own:{i}" for i in range(n)])
    eq([int(v) for v in got], [iters] * n, "own counters")


@feature
async def f_pipeline():
    async with r.pipeline(transaction=False) as p:
        for i in range(1000):
            p.set(P + f"pipe:{i}", i)
        eq(await p.execute(), [True] * 1000, "1000 SETs")
    async with r.pipeline(transaction=False) as p:
        for i in range(1000):
            p.get(P + f"pipe:{i}")
        eq(await p.execute(), [str(i) for i in range(1000)], "1000 GETs")
    async with r.pipeline() as p:
        for _ in range(1000):
            p.incr(P + "pipe:tx")
        eq((await p.execute())[-1], 1000, "1000 INCRs in MULTI")


@feature
async def f_watch():
    key = P + "watch:counter"
    await r.set(key, 0)
    workers, per = 8, 15

    async def bump(pipe):
        v = int(await pipe.get(key))
        pipe.multi()
        pipe.set(key, v + 1)

    async def worker():
        for _ in range(per):
            await r.transaction(bump, key)

    await asyncio.gather(*(worker() for _ in range(workers)))
    eq(int(await r.get(key)), workers * per, "counter after WATCH/MULTI/EXEC retries")
    async with r.pipeline() as p:
        await p.watch(key)
        await r.set(key, "changed")
        p.multi()
        p.set(key, "mine")
        try:
            await p.execute()
            raise AssertionError("EXEC ran although a watched key changed")
        except WatchError:
            pass
    eq(await r.get(key), "changed", "value after aborted EXEC")


@feature
async def f_begin():
    if TARGET != "elsa":
        raise Skip("BEGIN/COMMIT is Elsa's own (Redis has none)")
    key = P + "begin:counter"
    await r.set(key, 0)
    workers, per = 6, 10
    conflicts = 0

    async def worker():
        nonlocal conflicts
        c = client(single=True)
        try:
            for _ in range(per):
                while True:
                    eq(await c.execute_command("BEGIN", "SI"), "OK", "BEGIN")
                    v = int(await c.execute_command("GET", key))
                    eq(await c.execute_command("PUT", key, v + 1), "OK", "PUT")
                    try:
                        ts = await c.execute_command("COMMIT")
                        check(isinstance(ts, int) and ts > 0, f"COMMIT answered {ts!r}")
                        break
                    except ResponseError as e:
                        if not str(e).startswith("CONFLICT"):
                            raise
                        conflicts += 1
        finally:
            await c.aclose()

    await asyncio.gather(*(worker() for _ in range(workers)))
    eq(int(await r.get(key)), workers * per, f"counter after BEGIN/COMMIT ({conflicts} conflicts retried)")


@feature
async def f_strings():
    eq(await r.set(P + "s:a", "hello", ex=100), True)
    ttl = await r.ttl(P + "s:a")
    check(0 < ttl <= 100, f"TTL {ttl}")
    eq(await r.set(P + "s:a", "x", nx=True), None, "SET NX on existing key")
    eq(await r.append(P + "s:a", " world"), 11)
    eq(await r.getrange(P + "s:a", 0, 4), "hello")
    # BITFIELD: small counters packed in one string, read back with BITFIELD_RO.
    bf = r.bitfield(P + "s:bf").set("u8", "#1", 200).incrby("u8", "#1", 100, overflow="SAT")
    eq(await bf.incrby("i4", 0, 9, overflow="WRAP").execute(), [0, 255, -7], "BITFIELD")
    eq(await r.bitfield_ro(P + "s:bf", "u8", 8, items=[("i4", 0)]), [255, -7], "BITFIELD_RO")
    await r.set(P + "s:ms", "v", px=150)
    check(0 < await r.pttl(P + "s:ms") <= 150, "PTTL")
    await r.mset({P + "s:m1": "1", P + "s:m2": "2"})
    eq(await r.mget(P + "s:m1", P + "s:m2", P + "s:none"), ["1", "2", None])
    eq(await r.persist(P + "s:a"), True)
    eq(await r.ttl(P + "s:a"), -1)
    eq(await r.getdel(P + "s:m1"), "1")
    await asyncio.sleep(0.3)
    eq(await r.get(P + "s:ms"), None, "expired PX key")


@feature
async def f_hashes():
    h = P + "h"
    eq(await r.hset(h, mapping={"name": "ada", "lang": "py", "n": "1"}), 3)
    eq(await r.hget(h, "name"), "ada")
    eq(await r.hgetall(h), {"name": "ada", "lang": "py", "n": "1"})
    eq(await r.hdel(h, "lang"), 1)
    eq(await r.hlen(h), 2)
    eq(await r.hmget(h, ["name", "nope"]), ["ada", None])


@feature
async def f_sets():
    s, t = P + "set:s", P + "set:t"
    eq(await r.sadd(s, "a", "b", "c"), 3)
    eq(await r.sismember(s, "b"), True)
    eq(await r.smembers(s), {"a", "b", "c"})
    await r.sadd(t, "b", "c", "d")
    eq(await r.sinter(s, t), {"b", "c"})
    eq(await r.srem(s, "a"), 1)
    eq(await r.scard(s), 2)


@feature
async def f_zsets():
    z = P + "z"
    eq(await r.zadd(z, {"a": 1, "b": 2, "c": 3}), 3)
    eq([tuple(x) for x in await r.zrange(z, 0, -1, withscores=True)], [("a", 1.0), ("b", 2.0), ("c", 3.0)])
    eq(await r.zincrby(z, 5, "a"), 6.0)
    eq(await r.zrank(z, "a"), 2)
    eq(await r.zrangebyscore(z, 2, 3), ["b", "c"])
    eq(await r.zrem(z, "b"), 1)
    eq(await r.zcard(z), 2)


@feature
async def f_lists():
    q = P + "list"
    eq(await r.rpush(q, "a", "b", "c"), 3)
    eq(await r.lpush(q, "z"), 4)
    eq(await r.lrange(q, 0, -1), ["z", "a", "b", "c"])
    eq(await r.lpop(q), "z")
    eq(await r.rpop(q), "c")
    eq(await r.llen(q), 2)
    bq = P + "list:blocking"

    async def push_later():
        await asyncio.sleep(0.3)
        await r.rpush(bq, "job-1")

    t0 = time.time()
    got, _ = await asyncio.gather(r.blpop([bq], timeout=5), push_later())
    eq(list(got), [bq, "job-1"], "BLPOP")
    check(time.time() - t0 < 4, "BLPOP woke late")
    eq(await r.blpop([bq], timeout=0.2), None, "BLPOP timeout on an empty list")


@feature
async def f_counters():
    c = P + "ctr"
    eq(await r.incrby(c, 10), 10)
    eq(await r.decrby(c, 3), 7)
    eq(await r.incrbyfloat(c, 0.5), 7.5)
    eq(await r.hincrby(P + "ctr:h", "f", 4), 4)
    eq(await r.hincrby(P + "ctr:h", "f", -1), 3)


@feature
async def f_scan():
    async with r.pipeline(transaction=False) as p:
        for i in range(300):
            p.set(P + f"scan:{i}", i)
        await p.execute()
    seen = {k async for k in r.scan_iter(match=P + "scan:*", count=50)}
    eq(len(seen), 300, "keys SCAN found")


@feature
async def f_pubsub():
    ps = r.pubsub()
    ch = P + "chan"
    await ps.subscribe(ch)
    await ps.psubscribe(P + "pat.*")
    confirmed = 0
    while confirmed < 2:
        m = await ps.get_message(timeout=1)
        check(m is not None, "no subscribe confirmation")
        confirmed += m["type"] in ("subscribe", "psubscribe")
    eq(await r.publish(ch, "hello"), 1, "PUBLISH receivers")
    eq(await r.publish(P + "pat.x", "world"), 1, "PUBLISH receivers (pattern)")
    msgs = []
    while len(msgs) < 2:
        m = await ps.get_message(ignore_subscribe_messages=True, timeout=2)
        check(m is not None, f"only {msgs} arrived")
        msgs.append((m["type"], m["channel"], m["data"]))
    eq(msgs, [("message", ch, "hello"), ("pmessage", P + "pat.x", "world")], "messages")
    await ps.unsubscribe(ch)
    await ps.punsubscribe()
    # redis-py sends UNSUBSCRIBE without waiting: read until both are confirmed.
    left, deadline = 2, time.time() + 5
    while left and time.time() < deadline:
        m = await ps.get_message(timeout=0.5)
        if m and m["type"] in ("unsubscribe", "punsubscribe"):
            left -= 1
    eq(left, 0, "unconfirmed unsubscribes")
    eq(await r.publish(ch, "nobody"), 0, "PUBLISH after UNSUBSCRIBE")
    await ps.aclose()


@feature
async def f_lua():
    lock = r.lock(P + "lock", timeout=10)
    check(await lock.acquire(blocking=False), "Lock acquire")
    check(not await r.lock(P + "lock").acquire(blocking=False), "second Lock acquired a held lock")
    await lock.release()
    check(await r.lock(P + "lock").acquire(blocking=False), "Lock not free after release")
    incr_by = r.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
    eq(await incr_by(keys=[P + "lua:n"], args=[5]), 5)
    eq(await incr_by(keys=[P + "lua:n"], args=[5]), 10)


@feature
async def f_select():
    r1 = client(db=1)
    k = P + "db"
    await r1.set(k, "in-db1")
    eq(await r1.get(k), "in-db1")
    eq(await r.get(k), None, "db 0 sees db 1's key")
    await r1.delete(k)
    await r1.aclose()


@feature
async def f_cache():
    raise Skip("redis-py 6.4's asyncio client has no client-side cache")


@feature
async def f_reconnect():
    cmd = os.environ.get("RESTART_CMD")
    if not cmd:
        raise Skip("no RESTART_CMD")
    k = P + "restart"
    await r.set(k, "before")
    proc = await asyncio.create_subprocess_shell(cmd)
    eq(await proc.wait(), 0, "restart command")
    deadline, errors, last = time.time() + 20, 0, ""
    while True:
        try:
            await r.set(k + ":after", "after")
            break
        except redis.ConnectionError as e:
            errors, last = errors + 1, str(e)
            if time.time() > deadline:
                raise
            await asyncio.sleep(0.2)
    print(f"INFO reconnect: {errors} errors reached the application before it worked again {last}", flush=True)
    eq(await r.get(k + ":after"), "after")
    eq(await r.client_getname(), f"{NAME}-app", "client name after reconnect")
    if TARGET == "elsa":
        eq(await r.get(k), "before", "a key written before the restart")
    await asyncio.gather(*(r.incr(P + "restart:n") for _ in range(10)))


async def main():
    global r
    r = client(max_connections=64)
    for fn in features:
        await run(fn)
    print(f"SUMMARY {NAME} {TARGET}: {results.count('PASS')} passed, {results.count('FAIL')} failed, "
          f"{results.count('SKIP')} skipped", flush=True)
    return 1 if "FAIL" in results else 0


sys.exit(asyncio.run(main()))
