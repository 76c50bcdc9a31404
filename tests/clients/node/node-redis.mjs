// node-redis v5 as an ordinary application uses it, each step asserted.
// Env: TARGET, HOST, PORT, PASSWORD, RESTART_CMD (see harness.mjs).
import { execSync } from 'node:child_process';
import {
  createClient, createClientPool, defineScript, BasicClientSideCache, WatchError,
} from 'redis';
import {
  TARGET, HOST, PORT, PASSWORD, RESTART_CMD, Skip, sleep, prefix, check, eq, feature, summary,
} from './harness.mjs';

const NAME = 'node-redis';
const P = prefix(NAME);
const options = (extra = {}) => ({
  socket: { host: HOST, port: PORT, reconnectStrategy: (retries) => Math.min(retries * 50, 500) },
  password: PASSWORD,
  name: `${NAME}-app`,
  ...extra,
});
const plain = (o) => ({ ...o }); // node-redis answers null-prototype objects

const scripts = {
  luaIncrBy: defineScript({
    NUMBER_OF_KEYS: 1,
    SCRIPT: "return redis.call('INCRBY', KEYS[1], ARGV[1])",
    parseCommand(parser, key, n) {
      parser.pushKey(key);
      parser.push(String(n));
    },
    transformReply: (reply) => reply,
  }),
};

const client = createClient(options({ scripts }));
client.on('error', () => {}); // reconnects are expected (the restart test)
await client.connect();
const pool = createClientPool(options(), { minimum: 1, maximum: 50 });
pool.on('error', () => {});
await pool.connect();

await feature('connect', async () => {
  eq(await client.ping(), 'PONG', 'PING');
  eq(await client.clientGetName(), `${NAME}-app`, 'CLIENT GETNAME');
  const bad = createClient({ socket: { host: HOST, port: PORT, reconnectStrategy: false }, password: 'wrong-password' });
  bad.on('error', () => {});
  let refused = false;
  try { await bad.connect(); await bad.ping(); } catch { refused = true; }
  check(refused, 'a wrong password was accepted');
  try { bad.destroy(); } catch { /* already closed */ }
});

await feature('pool', async () => {
  const n = 50, iters = 40;
  await Promise.all(Array.from({ length: n }, async (_, i) => {
    for (let j = 0; j < iters; j++) {
      await pool.incr(`${P}pool:shared`);
      await pool.incr(`${P}pool:own:${i}`);
      await pool.set(`${P}pool:val:${i}`, `${i}-${j}`);
      eq(await pool.get(`${P}pool:val:${i}`), `${i}-${j}`, 'own value');
    }
  }));
  eq(Number(await client.get(`${P}pool:shared`)), n * iters, 'shared counter');
  const own = await client.mGet(Array.from({ length: n }, (_, i) => `${P}pool:own:${i}`));
  eq(own.map(Number), Array(n).fill(iters), 'own counters');
  check(pool.totalClients > 1, `the pool opened ${pool.totalClients} connection(s)`);
});

await feature('pipeline', async () => {
  let m = client.multi();
  for (let i = 0; i < 1000; i++) m = m.set(`${P}pipe:${i}`, String(i));
  eq(await m.execAsPipeline(), Array(1000).fill('OK'), '1000 SETs');
  // And the automatic pipelining of concurrent commands on one connection.
  const got = await Promise.all(Array.from({ length: 1000 }, (_, i) => client.get(`${P}pipe:${i}`)));
  eq(got, Array.from({ length: 1000 }, (_, i) => String(i)), '1000 GETs');
  let tx = client.multi();
  for (let i = 0; i < 1000; i++) tx = tx.incr(`${P}pipe:tx`);
  eq((await tx.exec()).at(-1), 1000, '1000 INCRs in MULTI');
});

await feature('watch', async () => {
  const key = `${P}watch:counter`;
  await client.set(key, '0');
  const workers = 8, per = 15;
  let retries = 0;
  await Promise.all(Array.from({ length: workers }, async () => {
    for (let k = 0; k < per; k++) {
      for (;;) {
        try {
          await pool.execute(async (c) => {
            await c.watch(key);
            const v = Number(await c.get(key));
            await c.multi().set(key, String(v + 1)).exec();
          });
          break;
        } catch (e) {
          if (!(e instanceof WatchError)) throw e;
          retries++;
        }
      }
    }
  }));
  eq(Number(await client.get(key)), workers * per, `counter (${retries} retries)`);
});

await feature('begin', async () => {
  if (TARGET !== 'elsa') throw new Skip("BEGIN/COMMIT is Elsa's own (Redis has none)");
  const key = `${P}begin:counter`;
  await client.set(key, '0');
  const workers = 6, per = 10;
  let conflicts = 0;
  await Promise.all(Array.from({ length: workers }, async () => {
    const c = createClient(options()); // BEGIN's state is per connection
    await c.connect();
    try {
      for (let k = 0; k < per; k++) {
        for (;;) {
          eq(await c.sendCommand(['BEGIN', 'SI']), 'OK', 'BEGIN');
          const v = Number(await c.sendCommand(['GET', key]));
          eq(await c.sendCommand(['PUT', key, String(v + 1)]), 'OK', 'PUT');
          try {
            const ts = await c.sendCommand(['COMMIT']);
            check(typeof ts === 'number' && ts > 0, `COMMIT answered ${ts}`);
            break;
          } catch (e) {
            if (!String(e?.message).startsWith('CONFLICT')) throw e;
            conflicts++;
          }
        }
      }
    } finally {
      c.destroy();
    }
  }));
  eq(Number(await client.get(key)), workers * per, `counter (${conflicts} conflicts retried)`);
});

await feature('strings', async () => {
  eq(await client.set(`${P}s:a`, 'hello', { EX: 100 }), 'OK');
  const ttl = await client.ttl(`${P}s:a`);
  check(ttl > 0 && ttl <= 100, `TTL ${ttl}`);
  eq(await client.set(`${P}s:a`, 'x', { NX: true }), null, 'SET NX on an existing key');
  eq(await client.append(`${P}s:a`, ' world'), 11);
  eq(await client.getRange(`${P}s:a`, 0, 4), 'hello');
  // BITFIELD: small counters packed in one string, read back with BITFIELD_RO.
  eq(await client.bitField(`${P}s:bf`, [
    { operation: 'SET', encoding: 'u8', offset: '#1', value: 200 },
    { operation: 'OVERFLOW', behavior: 'SAT' },
    { operation: 'INCRBY', encoding: 'u8', offset: '#1', increment: 100 },
    { operation: 'OVERFLOW', behavior: 'WRAP' },
    { operation: 'INCRBY', encoding: 'i4', offset: 0, increment: 9 },
  ]), [0, 255, -7], 'BITFIELD');
  eq(await client.bitFieldRo(`${P}s:bf`, [{ encoding: 'u8', offset: 8 }, { encoding: 'i4', offset: 0 }]),
    [255, -7], 'BITFIELD_RO');
  await client.set(`${P}s:ms`, 'v', { PX: 150 });
  await client.mSet({ [`${P}s:m1`]: '1', [`${P}s:m2`]: '2' });
  eq(await client.mGet([`${P}s:m1`, `${P}s:m2`, `${P}s:none`]), ['1', '2', null]);
  eq(await client.persist(`${P}s:a`), 1);
  eq(await client.ttl(`${P}s:a`), -1);
  eq(await client.getDel(`${P}s:m1`), '1');
  await sleep(300);
  eq(await client.get(`${P}s:ms`), null, 'expired PX key');
});

await feature('hashes', async () => {
  const h = `${P}h`;
  eq(await client.hSet(h, { name: 'ada', lang: 'js', n: '1' }), 3);
  eq(await client.hGet(h, 'name'), 'ada');
  eq(plain(await client.hGetAll(h)), { name: 'ada', lang: 'js', n: '1' });
  eq(await client.hDel(h, 'lang'), 1);
  eq(await client.hLen(h), 2);
  eq(await client.hmGet(h, ['name', 'nope']), ['ada', null]);
});

await feature('sets', async () => {
  const s = `${P}set:s`, t = `${P}set:t`;
  eq(await client.sAdd(s, ['a', 'b', 'c']), 3);
  eq(await client.sIsMember(s, 'b'), 1);
  eq((await client.sMembers(s)).sort(), ['a', 'b', 'c']);
  await client.sAdd(t, ['b', 'c', 'd']);
  eq((await client.sInter([s, t])).sort(), ['b', 'c']);
  eq(await client.sRem(s, 'a'), 1);
  eq(await client.sCard(s), 2);
});

await feature('zsets', async () => {
  const z = `${P}z`;
  eq(await client.zAdd(z, [{ score: 1, value: 'a' }, { score: 2, value: 'b' }, { score: 3, value: 'c' }]), 3);
  eq(await client.zRangeWithScores(z, 0, -1), [{ value: 'a', score: 1 }, { value: 'b', score: 2 }, { value: 'c', score: 3 }]);
  eq(Number(await client.zIncrBy(z, 5, 'a')), 6);
  eq(await client.zRank(z, 'a'), 2);
  eq(await client.zRangeByScore(z, 2, 3), ['b', 'c']);
  eq(await client.zRem(z, 'b'), 1);
  eq(await client.zCard(z), 2);
});

await feature('lists', async () => {
  const q = `${P}list`;
  eq(await client.rPush(q, ['a', 'b', 'c']), 3);
  eq(await client.lPush(q, 'z'), 4);
  eq(await client.lRange(q, 0, -1), ['z', 'a', 'b', 'c']);
  eq(await client.lPop(q), 'z');
  eq(await client.rPop(q), 'c');
  eq(await client.lLen(q), 2);
  const bq = `${P}list:blocking`;
  const blocker = client.duplicate(); // a blocking pop holds its connection
  await blocker.connect();
  const t0 = Date.now();
  const popped = blocker.blPop(bq, 5);
  await sleep(300);
  await client.rPush(bq, 'job-1');
  eq(plain(await popped), { key: bq, element: 'job-1' }, 'BLPOP');
  check(Date.now() - t0 < 4000, 'BLPOP woke late');
  eq(await blocker.blPop(bq, 0.2), null, 'BLPOP timeout on an empty list');
  blocker.destroy();
});

await feature('counters', async () => {
  const c = `${P}ctr`;
  eq(await client.incrBy(c, 10), 10);
  eq(await client.decrBy(c, 3), 7);
  eq(Number(await client.incrByFloat(c, 0.5)), 7.5);
  eq(await client.hIncrBy(`${P}ctr:h`, 'f', 4), 4);
  eq(await client.hIncrBy(`${P}ctr:h`, 'f', -1), 3);
});

await feature('scan', async () => {
  let m = client.multi();
  for (let i = 0; i < 300; i++) m = m.set(`${P}scan:${i}`, String(i));
  await m.execAsPipeline();
  const seen = new Set();
  for await (const keys of client.scanIterator({ MATCH: `${P}scan:*`, COUNT: 50 })) {
    for (const k of keys) seen.add(k);
  }
  eq(seen.size, 300, 'keys SCAN found');
});

await feature('pubsub', async () => {
  const sub = client.duplicate();
  sub.on('error', () => {});
  await sub.connect();
  const got = [];
  const ch = `${P}chan`;
  await sub.subscribe(ch, (message, channel) => got.push(['message', channel, message]));
  await sub.pSubscribe(`${P}pat.*`, (message, channel) => got.push(['pmessage', channel, message]));
  eq(await client.publish(ch, 'hello'), 1, 'PUBLISH receivers');
  eq(await client.publish(`${P}pat.x`, 'world'), 1, 'PUBLISH receivers (pattern)');
  for (let i = 0; i < 60 && got.length < 2; i++) await sleep(50);
  eq(got, [['message', ch, 'hello'], ['pmessage', `${P}pat.x`, 'world']], 'messages');
  await sub.unsubscribe(ch);
  await sub.pUnsubscribe();
  eq(await client.publish(ch, 'nobody'), 0, 'PUBLISH after UNSUBSCRIBE');
  sub.destroy();
});

await feature('lua', async () => {
  // defineScript: the client's command runs EVALSHA, and EVAL on NOSCRIPT.
  eq(await client.luaIncrBy(`${P}lua:n`, 5), 5, 'script');
  eq(await client.luaIncrBy(`${P}lua:n`, 5), 10, 'script again');
  eq(await client.eval('return {KEYS[1], ARGV[1]}', { keys: ['k'], arguments: ['v'] }), ['k', 'v'], 'EVAL');
});

await feature('select', async () => {
  const r1 = createClient(options({ database: 1 }));
  await r1.connect();
  const k = `${P}db`;
  try {
    await r1.set(k, 'in-db1');
    eq(await r1.get(k), 'in-db1');
    eq(await client.get(k), null, "db 0 sees db 1's key");
    await r1.del(k);
  } finally {
    r1.destroy();
  }
});

await feature('cache', async () => {
  const cache = new BasicClientSideCache({ recordStats: true });
  const c = createClient(options({ RESP: 3, clientSideCache: cache }));
  let firstError;
  c.on('error', (e) => { firstError ??= e; });
  try {
    await Promise.race([c.connect(), sleep(5000).then(() => {
      throw new Error(`no connection within 5 s: ${firstError?.message}`);
    })]);
    const k = `${P}cached`;
    await client.set(k, 'v1');
    eq(await c.get(k), 'v1');
    eq(await c.get(k), 'v1');
    check(cache.stats().hitCount >= 1, `no cache hit (${JSON.stringify(cache.stats())})`);
    await client.set(k, 'v2'); // the server's invalidation must evict the entry
    let v;
    for (let i = 0; i < 60; i++) {
      v = await c.get(k);
      if (v === 'v2') break;
      await sleep(50);
    }
    eq(v, 'v2', 'value after invalidation');
  } finally {
    try { c.destroy(); } catch { /* never connected */ }
  }
});

await feature('reconnect', async () => {
  if (!RESTART_CMD) throw new Skip('no RESTART_CMD');
  const k = `${P}restart`;
  await client.set(k, 'before');
  execSync(RESTART_CMD, { stdio: 'inherit' });
  const deadline = Date.now() + 20000;
  let errors = 0, last = '';
  for (;;) {
    try {
      await client.set(`${k}:after`, 'after');
      break;
    } catch (e) {
      errors++; last = String(e?.message ?? e);
      if (Date.now() > deadline) throw e;
      await sleep(200);
    }
  }
  console.log(`INFO reconnect: ${errors} errors reached the application before it worked again ${last}`);
  eq(await client.get(`${k}:after`), 'after');
  eq(await client.clientGetName(), `${NAME}-app`, 'client name after reconnect');
  if (TARGET === 'elsa') eq(await client.get(k), 'before', 'a key written before the restart');
  await Promise.all(Array.from({ length: 10 }, () => pool.incr(`${P}restart:n`)));
});

const rc = summary(NAME);
await Promise.allSettled([client.quit(), pool.close()]);
process.exit(rc);
