// ioredis 5 as an ordinary application uses it, each step asserted.
// Env: TARGET, HOST, PORT, PASSWORD, RESTART_CMD (see harness.mjs).
import { execSync } from 'node:child_process';
import Redis from 'ioredis';
import {
  TARGET, HOST, PORT, PASSWORD, RESTART_CMD, Skip, sleep, prefix, check, eq, feature, summary,
} from './harness.mjs';

const NAME = 'ioredis';
const P = prefix(NAME);
const options = (extra = {}) => ({
  host: HOST, port: PORT, password: PASSWORD, connectionName: `${NAME}-app`,
  retryStrategy: (times) => Math.min(times * 50, 500),
  ...extra,
});
const open = async (extra) => {
  const c = new Redis(options({ lazyConnect: true, ...extra }));
  c.on('error', () => {});
  await c.connect();
  return c;
};

const r = await open();

await feature('connect', async () => {
  eq(await r.ping(), 'PONG', 'PING');
  eq(await r.client('GETNAME'), `${NAME}-app`, 'CLIENT GETNAME');
  const bad = new Redis({ host: HOST, port: PORT, password: 'wrong-password', lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 });
  bad.on('error', () => {});
  let refused = false;
  try { await bad.connect(); await bad.ping(); } catch { refused = true; }
  check(refused, 'a wrong password was accepted');
  bad.disconnect();
});

await feature('pool', async () => {
  // ioredis multiplexes one connection: 50 concurrent workers share it,
  // and the auto-pipelining client batches them.
  const shared = await open({ enableAutoPipelining: true });
  const n = 50, iters = 40;
  await Promise.all(Array.from({ length: n }, async (_, i) => {
    const c = i % 2 ? shared : r;
    for (let j = 0; j < iters; j++) {
      await c.incr(`${P}pool:shared`);
      await c.incr(`${P}pool:own:${i}`);
      await c.set(`${P}pool:val:${i}`, `${i}-${j}`);
      eq(await c.get(`${P}pool:val:${i}`), `${i}-${j}`, 'own value');
    }
  }));
  eq(Number(await r.get(`${P}pool:shared`)), n * iters, 'shared counter');
  const own = await r.mget(Array.from({ length: n }, (_, i) => `${P}pool:own:${i}`));
  eq(own.map(Number), Array(n).fill(iters), 'own counters');
  shared.disconnect();
});

await feature('pipeline', async () => {
  const p = r.pipeline();
  for (let i = 0; i < 1000; i++) p.set(`${P}pipe:${i}`, i);
  eq(await p.exec(), Array(1000).fill([null, 'OK']), '1000 SETs');
  const g = r.pipeline();
  for (let i = 0; i < 1000; i++) g.get(`${P}pipe:${i}`);
  eq(await g.exec(), Array.from({ length: 1000 }, (_, i) => [null, String(i)]), '1000 GETs');
  const m = r.multi();
  for (let i = 0; i < 1000; i++) m.incr(`${P}pipe:tx`);
  eq((await m.exec()).at(-1), [null, 1000], '1000 INCRs in MULTI');
});

await feature('watch', async () => {
  const key = `${P}watch:counter`;
  await r.set(key, 0);
  const workers = 8, per = 15;
  let retries = 0;
  await Promise.all(Array.from({ length: workers }, async () => {
    const c = await open(); // WATCH holds its connection
    try {
      for (let k = 0; k < per; k++) {
        for (;;) {
          await c.watch(key);
          const v = Number(await c.get(key));
          const res = await c.multi().set(key, v + 1).exec();
          if (res !== null) break; // null: a watched key changed
          retries++;
        }
      }
    } finally {
      c.disconnect();
    }
  }));
  eq(Number(await r.get(key)), workers * per, `counter (${retries} retries)`);
});

await feature('begin', async () => {
  if (TARGET !== 'elsa') throw new Skip("BEGIN/COMMIT is Elsa's own (Redis has none)");
  const key = `${P}begin:counter`;
  await r.set(key, 0);
  const workers = 6, per = 10;
  let conflicts = 0;
  await Promise.all(Array.from({ length: workers }, async () => {
    const c = await open(); // BEGIN's state is per connection
    try {
      for (let k = 0; k < per; k++) {
        for (;;) {
          eq(await c.call('BEGIN', 'SI'), 'OK', 'BEGIN');
          const v = Number(await c.call('GET', key));
          eq(await c.call('PUT', key, v + 1), 'OK', 'PUT');
          try {
            const ts = await c.call('COMMIT');
            check(typeof ts === 'number' && ts > 0, `COMMIT answered ${ts}`);
            break;
          } catch (e) {
            if (!String(e?.message).startsWith('CONFLICT')) throw e;
            conflicts++;
          }
        }
      }
    } finally {
      c.disconnect();
    }
  }));
  eq(Number(await r.get(key)), workers * per, `counter (${conflicts} conflicts retried)`);
});

await feature('strings', async () => {
  eq(await r.set(`${P}s:a`, 'hello', 'EX', 100), 'OK');
  const ttl = await r.ttl(`${P}s:a`);
  check(ttl > 0 && ttl <= 100, `TTL ${ttl}`);
  eq(await r.set(`${P}s:a`, 'x', 'NX'), null, 'SET NX on an existing key');
  eq(await r.append(`${P}s:a`, ' world'), 11);
  eq(await r.getrange(`${P}s:a`, 0, 4), 'hello');
  // BITFIELD: small counters packed in one string, read back with BITFIELD_RO.
  eq(await r.bitfield(`${P}s:bf`, 'SET', 'u8', '#1', 200, 'OVERFLOW', 'SAT', 'INCRBY', 'u8', '#1', 100,
    'OVERFLOW', 'WRAP', 'INCRBY', 'i4', 0, 9), [0, 255, -7], 'BITFIELD');
  eq(await r.bitfield_ro(`${P}s:bf`, 'GET', 'u8', 8, 'GET', 'i4', 0), [255, -7], 'BITFIELD_RO');
  await r.set(`${P}s:ms`, 'v', 'PX', 150);
  await r.mset({ [`${P}s:m1`]: '1', [`${P}s:m2`]: '2' });
  eq(await r.mget(`${P}s:m1`, `${P}s:m2`, `${P}s:none`), ['1', '2', null]);
  eq(await r.persist(`${P}s:a`), 1);
  eq(await r.ttl(`${P}s:a`), -1);
  eq(await r.getdel(`${P}s:m1`), '1');
  await sleep(300);
  eq(await r.get(`${P}s:ms`), null, 'expired PX key');
});

await feature('hashes', async () => {
  const h = `${P}h`;
  eq(await r.hset(h, { name: 'ada', lang: 'js', n: '1' }), 3);
  eq(await r.hget(h, 'name'), 'ada');
  eq(await r.hgetall(h), { name: 'ada', lang: 'js', n: '1' });
  eq(await r.hdel(h, 'lang'), 1);
  eq(await r.hlen(h), 2);
  eq(await r.hmget(h, 'name', 'nope'), ['ada', null]);
});

await feature('sets', async () => {
  const s = `${P}set:s`, t = `${P}set:t`;
  eq(await r.sadd(s, 'a', 'b', 'c'), 3);
  eq(await r.sismember(s, 'b'), 1);
  eq((await r.smembers(s)).sort(), ['a', 'b', 'c']);
  await r.sadd(t, 'b', 'c', 'd');
  eq((await r.sinter(s, t)).sort(), ['b', 'c']);
  eq(await r.srem(s, 'a'), 1);
  eq(await r.scard(s), 2);
});

await feature('zsets', async () => {
  const z = `${P}z`;
  eq(await r.zadd(z, 1, 'a', 2, 'b', 3, 'c'), 3);
  eq(await r.zrange(z, 0, -1, 'WITHSCORES'), ['a', '1', 'b', '2', 'c', '3']);
  eq(await r.zincrby(z, 5, 'a'), '6');
  eq(await r.zrank(z, 'a'), 2);
  eq(await r.zrangebyscore(z, 2, 3), ['b', 'c']);
  eq(await r.zrem(z, 'b'), 1);
  eq(await r.zcard(z), 2);
});

await feature('lists', async () => {
  const q = `${P}list`;
  eq(await r.rpush(q, 'a', 'b', 'c'), 3);
  eq(await r.lpush(q, 'z'), 4);
  eq(await r.lrange(q, 0, -1), ['z', 'a', 'b', 'c']);
  eq(await r.lpop(q), 'z');
  eq(await r.rpop(q), 'c');
  eq(await r.llen(q), 2);
  const bq = `${P}list:blocking`;
  const blocker = await open(); // a blocking pop holds its connection
  const t0 = Date.now();
  const popped = blocker.blpop(bq, 5);
  await sleep(300);
  await r.rpush(bq, 'job-1');
  eq(await popped, [bq, 'job-1'], 'BLPOP');
  check(Date.now() - t0 < 4000, 'BLPOP woke late');
  eq(await blocker.blpop(bq, 0.2), null, 'BLPOP timeout on an empty list');
  blocker.disconnect();
});

await feature('counters', async () => {
  const c = `${P}ctr`;
  eq(await r.incrby(c, 10), 10);
  eq(await r.decrby(c, 3), 7);
  eq(await r.incrbyfloat(c, 0.5), '7.5');
  eq(await r.hincrby(`${P}ctr:h`, 'f', 4), 4);
  eq(await r.hincrby(`${P}ctr:h`, 'f', -1), 3);
});

await feature('scan', async () => {
  const p = r.pipeline();
  for (let i = 0; i < 300; i++) p.set(`${P}scan:${i}`, i);
  await p.exec();
  const seen = new Set();
  await new Promise((resolve, reject) => {
    r.scanStream({ match: `${P}scan:*`, count: 50 })
      .on('data', (keys) => keys.forEach((k) => seen.add(k)))
      .on('end', resolve)
      .on('error', reject);
  });
  eq(seen.size, 300, 'keys SCAN found');
});

await feature('pubsub', async () => {
  const sub = await open();
  try {
    const got = [];
    const ch = `${P}chan`;
    sub.on('message', (channel, message) => got.push(['message', channel, message]));
    sub.on('pmessage', (_pattern, channel, message) => got.push(['pmessage', channel, message]));
    await sub.subscribe(ch);
    await sub.psubscribe(`${P}pat.*`);
    eq(await r.publish(ch, 'hello'), 1, 'PUBLISH receivers');
    eq(await r.publish(`${P}pat.x`, 'world'), 1, 'PUBLISH receivers (pattern)');
    for (let i = 0; i < 60 && got.length < 2; i++) await sleep(50);
    eq(got, [['message', ch, 'hello'], ['pmessage', `${P}pat.x`, 'world']], 'messages');
    await sub.unsubscribe(ch);
    await sub.punsubscribe();
    eq(await r.publish(ch, 'nobody'), 0, 'PUBLISH after UNSUBSCRIBE');
  } finally {
    sub.disconnect();
  }
});

await feature('lua', async () => {
  r.defineCommand('luaIncrBy', { numberOfKeys: 1, lua: "return redis.call('INCRBY', KEYS[1], ARGV[1])" });
  eq(await r.luaIncrBy(`${P}lua:n`, 5), 5, 'defineCommand (EVALSHA, EVAL on NOSCRIPT)');
  eq(await r.luaIncrBy(`${P}lua:n`, 5), 10, 'defineCommand again');
  eq(await r.eval('return {KEYS[1], ARGV[1]}', 1, 'k', 'v'), ['k', 'v'], 'EVAL');
});

await feature('select', async () => {
  const r1 = new Redis(options({ db: 1, lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 }));
  r1.on('error', () => {});
  const k = `${P}db`;
  try {
    await r1.connect();
    await r1.set(k, 'in-db1');
    eq(await r1.get(k), 'in-db1');
    eq(await r.get(k), null, "db 0 sees db 1's key");
    await r1.del(k);
  } finally {
    r1.disconnect();
  }
});

await feature('cache', async () => {
  throw new Skip('ioredis 5 has no client-side cache');
});

await feature('reconnect', async () => {
  if (!RESTART_CMD) throw new Skip('no RESTART_CMD');
  const k = `${P}restart`;
  await r.set(k, 'before');
  execSync(RESTART_CMD, { stdio: 'inherit' });
  const deadline = Date.now() + 20000;
  let errors = 0, last = '';
  for (;;) {
    try {
      await r.set(`${k}:after`, 'after');
      break;
    } catch (e) {
      errors++; last = String(e?.message ?? e);
      if (Date.now() > deadline) throw e;
      await sleep(200);
    }
  }
  console.log(`INFO reconnect: ${errors} errors reached the application before it worked again ${last}`);
  eq(await r.get(`${k}:after`), 'after');
  eq(await r.client('GETNAME'), `${NAME}-app`, 'client name after reconnect');
  if (TARGET === 'elsa') eq(await r.get(k), 'before', 'a key written before the restart');
  await Promise.all(Array.from({ length: 10 }, () => r.incr(`${P}restart:n`)));
});

const rc = summary(NAME);
r.disconnect();
process.exit(rc);
