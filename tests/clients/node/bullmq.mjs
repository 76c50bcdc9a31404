// BullMQ 6 (a job queue built on ioredis) as an ordinary application uses it,
// each step asserted. Jobs are added to Queues and run by Workers in this
// process; BullMQ does almost everything through its Lua scripts (EVALSHA,
// cmsgpack-packed options), wakes workers with BZPOPMIN on a marker sorted
// set, and publishes its events to a stream read with XREAD BLOCK by
// QueueEvents. Features: queue delayed priority retries failed repeatable
// flows events ratelimit cleanup.
//
// Keys: BullMQ's `<prefix>:<queue>:…` with prefix `node-bullmq:<random>` and
// queue names `<feature>-<random>`; `cleanup` obliterates every queue of the
// run and checks that SCAN finds no key under the prefix.
// Env: TARGET, HOST, PORT, PASSWORD (see harness.mjs).
import Redis from 'ioredis';
import { FlowProducer, Job, Queue, QueueEvents, Worker } from 'bullmq';
import {
  HOST, PORT, PASSWORD, sleep, prefix, check, eq, feature, summary,
} from './harness.mjs';

const NAME = 'node-bullmq';
const PFX = prefix(NAME).slice(0, -1); // node-bullmq:<random>; BullMQ adds the ':'
const RUN = PFX.split(':')[1];
const connection = { host: HOST, port: PORT, password: PASSWORD || undefined, maxRetriesPerRequest: null };
const opts = { connection, prefix: PFX };

// Everything opened, closed at the end (and by each feature when it is done).
const open = [];
const errors = []; // 'error' events of queues, workers and QueueEvents
const queueNames = [];
const track = (o) => {
  o.on?.('error', (e) => errors.push(String(e?.message ?? e)));
  open.push(o);
  return o;
};
const queue = (feat) => {
  const name = `${feat}-${RUN}`;
  queueNames.push(name);
  return track(new Queue(name, opts));
};
const worker = (q, fn, extra = {}) => track(new Worker(q.name, fn, { ...opts, ...extra }));
const close = async (...objs) => {
  for (const o of objs) {
    await o.close();
    open.splice(open.indexOf(o), 1);
  }
};
async function until(what, cond, ms = 20000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}${errors.length ? `; errors: ${errors.slice(-3).join(' | ')}` : ''}`);
    }
    await sleep(50);
  }
}
const counts = (q) => q.getJobCounts('waiting', 'active', 'delayed', 'prioritized', 'completed', 'failed');
const zero = { waiting: 0, active: 0, delayed: 0, prioritized: 0, completed: 0, failed: 0 };

await feature('queue', async () => {
  const q = queue('queue');
  const added = [];
  for (let n = 1; n <= 5; n++) added.push(await q.add('square', { n }));
  added.push(await q.add('square', { n: 6 }, { jobId: 'order-6' }));
  eq(added.map((j) => j.id), ['1', '2', '3', '4', '5', 'order-6'], 'job ids');
  eq(await counts(q), { ...zero, waiting: 6 }, 'counts before the worker');
  const j2 = await Job.fromId(q, '2');
  eq([j2.name, j2.data, await j2.getState()], ['square', { n: 2 }, 'waiting'], 'Job.fromId');
  const seen = [];
  const w = worker(q, async (job) => {
    seen.push(job.id);
    return { n: job.data.n, square: job.data.n ** 2 };
  });
  await until('6 completed jobs', async () => (await q.getJobCounts('completed')).completed === 6);
  eq(seen, ['1', '2', '3', '4', '5', 'order-6'], 'processing order (FIFO)');
  for (const [i, id] of ['1', '2', '3', '4', '5', 'order-6'].entries()) {
    const job = await q.getJob(id);
    eq(job.returnvalue, { n: i + 1, square: (i + 1) ** 2 }, `job ${id} returnvalue`);
    eq(await job.getState(), 'completed', `job ${id} state`);
    eq(job.attemptsMade, 1, `job ${id} attemptsMade`);
    check(job.finishedOn >= job.processedOn && job.processedOn >= job.timestamp, `job ${id} timestamps`);
  }
  eq(await counts(q), { ...zero, completed: 6 }, 'counts after');
  eq((await q.getCompleted()).map((j) => j.id).sort(), ['1', '2', '3', '4', '5', 'order-6'], 'getCompleted');
  eq(await q.getJob('nope'), undefined, 'a missing job');
  await close(w, q);
});

await feature('delayed', async () => {
  const q = queue('delayed');
  const done = [];
  const w = worker(q, async (job) => {
    done.push([job.name, Date.now()]);
    return job.data.v;
  });
  await w.waitUntilReady();
  const t0 = Date.now();
  const later = await q.add('later', { v: 'L' }, { delay: 1500 });
  const now = await q.add('now', { v: 'N' });
  eq(await later.getState(), 'delayed', 'state of the delayed job');
  eq(await later.isDelayed(), true, 'isDelayed');
  await until('the immediate job', async () => done.length >= 1);
  eq(done.map((d) => d[0]), ['now'], 'only the immediate job ran first');
  eq((await q.getJobCounts('delayed')).delayed, 1, 'delayed count while waiting');
  await until('the delayed job', async () => (await q.getJobCounts('completed')).completed === 2);
  eq(done.map((d) => d[0]), ['now', 'later'], 'order');
  const ran = done[1][1] - t0;
  check(ran >= 1450, `the delayed job ran after ${ran} ms, before its 1500 ms delay`);
  const job = await q.getJob(later.id);
  eq([later.delay, job.opts.delay, job.returnvalue], [1500, 1500, 'L'], 'delay and returnvalue');
  check(job.processedOn - job.timestamp >= 1500, `processedOn - timestamp = ${job.processedOn - job.timestamp}`);
  eq((await q.getJob(now.id)).returnvalue, 'N');
  await close(w, q);
});

await feature('priority', async () => {
  const q = queue('priority');
  const prios = { e: 5, a: 1, c: 3, f: 10, b: 2, d: 4, a2: 1 };
  for (const [name, priority] of Object.entries(prios)) await q.add(name, { name }, { priority });
  eq(await counts(q), { ...zero, prioritized: 7 }, 'counts before the worker');
  const order = [];
  const w = worker(q, async (job) => {
    order.push(job.name);
    await sleep(10);
  }, { concurrency: 1 });
  await until('7 completed jobs', async () => (await q.getJobCounts('completed')).completed === 7);
  eq(order, ['a', 'a2', 'b', 'c', 'd', 'e', 'f'], 'processing order (priority, then FIFO)');
  await close(w, q);
});

await feature('retries', async () => {
  const q = queue('retries');
  const starts = [];
  const failures = [];
  const w = worker(q, async (job) => {
    starts.push(Date.now());
    if (starts.length < 3) throw new Error(`flaky ${starts.length}`);
    return `ok after ${job.attemptsMade} failures`;
  });
  w.on('failed', (job, err) => failures.push([job.attemptsMade, err.message]));
  const job = await q.add('flaky', { x: 1 }, { attempts: 3, backoff: { type: 'fixed', delay: 200 } });
  await until('the job to complete', async () => (await job.getState()) === 'completed');
  eq(starts.length, 3, 'runs');
  eq(failures, [[1, 'flaky 1'], [2, 'flaky 2']], 'failed events (attemptsMade, message)');
  for (let i = 1; i < 3; i++) {
    check(starts[i] - starts[i - 1] >= 190, `attempt ${i + 1} ran ${starts[i] - starts[i - 1]} ms after the one before (backoff 200)`);
  }
  const got = await q.getJob(job.id);
  eq([got.returnvalue, got.attemptsMade, got.stacktrace.length], ['ok after 2 failures', 3, 2], 'returnvalue, attemptsMade, stacktraces');
  eq(await counts(q), { ...zero, completed: 1 }, 'counts');
  await close(w, q);
});

await feature('failed', async () => {
  const q = queue('failed');
  let fixed = false;
  let runs = 0;
  const w = worker(q, async (job) => {
    runs++;
    if (!fixed) throw new Error(`cannot charge card ${job.data.card}`);
    return 'charged';
  });
  const job = await q.add('charge', { card: 42 });
  await until('the job to fail', async () => (await job.getState()) === 'failed');
  let got = await q.getJob(job.id);
  eq([got.failedReason, got.attemptsMade, got.returnvalue], ['cannot charge card 42', 1, null], 'failedReason, attemptsMade, returnvalue');
  check(got.stacktrace.length === 1 && got.stacktrace[0].includes('cannot charge card 42'), `stacktrace ${got.stacktrace}`);
  eq(await counts(q), { ...zero, failed: 1 }, 'counts after the failure');
  eq((await q.getFailed()).map((j) => j.id), [job.id], 'getFailed');
  fixed = true;
  await got.retry();
  await until('the retried job to complete', async () => (await job.getState()) === 'completed');
  got = await q.getJob(job.id);
  eq([runs, got.returnvalue, got.failedReason, got.attemptsMade], [2, 'charged', undefined, 2], 'runs, returnvalue, failedReason, attemptsMade (kept by retry)');
  eq(await counts(q), { ...zero, completed: 1 }, 'counts after the retry');
  await close(w, q);
});

await feature('repeatable', async () => {
  const q = queue('repeatable');
  const runs = [];
  const w = worker(q, async (job) => {
    runs.push([job.name, job.data, Date.now(), job.id, job.opts.repeat.count]);
    return runs.length;
  });
  await w.waitUntilReady();
  const first = await q.upsertJobScheduler('tick', { every: 500, limit: 3 }, { name: 'tick', data: { v: 1 } });
  eq(first.name, 'tick', 'first job of the scheduler');
  const schedulers = await q.getJobSchedulers();
  eq(schedulers.map((s) => [s.key, s.every, s.limit]), [['tick', 500, 3]], 'getJobSchedulers');
  await until('3 runs', async () => runs.length >= 3);
  await sleep(1200); // a 4th would come 500 ms after the 3rd
  eq(runs.map((r) => [r[0], r[1]]), Array(3).fill(['tick', { v: 1 }]), 'runs (exactly 3)');
  // Each job's id is repeat:<scheduler>:<the time it is due>, 500 ms apart.
  const due = Number(first.id.split(':')[2]);
  eq(runs.map((r) => [r[3], r[4]]), [0, 1, 2].map((i) => [`repeat:tick:${due + 500 * i}`, i + 1]), 'job ids and repeat counts');
  runs.forEach((r, i) => check(r[2] >= due + 500 * i - 20, `run ${i + 1} came ${due + 500 * i - r[2]} ms early`));
  eq((await q.getJobCounts('completed')).completed, 3, 'completed count');
  console.log(`INFO repeatable: runs ${runs[1][2] - runs[0][2]} and ${runs[2][2] - runs[1][2]} ms apart`);
  await close(w, q);
});

await feature('flows', async () => {
  const q = queue('flows');
  const flow = track(new FlowProducer(opts));
  const tree = await flow.add({
    name: 'total', queueName: q.name, data: { what: 'sum' },
    children: [
      { name: 'part', queueName: q.name, data: { n: 2 } },
      { name: 'part', queueName: q.name, data: { n: 3 } },
    ],
  });
  const parent = tree.job;
  const kids = tree.children.map((c) => c.job);
  eq(await parent.getState(), 'waiting-children', 'parent state before the worker');
  eq(await Promise.all(kids.map((k) => k.getState())), ['waiting', 'waiting'], 'children states');
  eq(await parent.getDependenciesCount(), { processed: 0, unprocessed: 2, ignored: 0, failed: 0 }, 'getDependenciesCount before');
  const log = [];
  const w = worker(q, async (job) => {
    log.push(job.name);
    if (job.name === 'part') return job.data.n * 10;
    const values = await job.getChildrenValues();
    return { values, sum: Object.values(values).reduce((a, b) => a + b, 0) };
  });
  await until('the parent to complete', async () => (await parent.getState()) === 'completed');
  eq(log, ['part', 'part', 'total'], 'the parent ran after both children');
  const done = await q.getJob(parent.id);
  eq(done.returnvalue, {
    values: { [`${PFX}:${q.name}:${kids[0].id}`]: 20, [`${PFX}:${q.name}:${kids[1].id}`]: 30 }, sum: 50,
  }, 'the parent saw its children values');
  for (const k of kids) {
    const c = await q.getJob(k.id);
    eq(c.parentKey, `${PFX}:${q.name}:${parent.id}`, 'child parentKey');
    check(c.finishedOn <= done.processedOn, 'a child finished after its parent started');
  }
  eq(await counts(q), { ...zero, completed: 3 }, 'counts');
  await close(w, flow, q);
});

await feature('events', async () => {
  const q = queue('events');
  const qe = track(new QueueEvents(q.name, opts));
  await qe.waitUntilReady();
  // QueueEvents reads from '$': let its first XREAD BLOCK be in place before any event.
  await until('QueueEvents to block in XREAD', () => qe.blocking);
  await sleep(200);
  const got = [];
  qe.on('completed', ({ jobId, returnvalue }) => got.push(['completed', jobId, returnvalue]));
  qe.on('failed', ({ jobId, failedReason }) => got.push(['failed', jobId, failedReason]));
  const waiting = [];
  qe.on('waiting', ({ jobId }) => waiting.push(jobId));
  const w = worker(q, async (job) => {
    if (job.data.fail) throw new Error(`no ${job.data.x}`);
    return { doubled: job.data.x * 2 };
  });
  const ok = await q.add('ok', { x: 21 });
  const bad = await q.add('bad', { x: 7, fail: true });
  eq(await ok.waitUntilFinished(qe, 15000), { doubled: 42 }, 'waitUntilFinished');
  let reason = null;
  try {
    await bad.waitUntilFinished(qe, 15000);
  } catch (e) {
    reason = e.message;
  }
  eq(reason, 'no 7', 'waitUntilFinished of a failing job rejects with its failedReason');
  await until('both events', async () => got.length >= 2);
  got.sort((a, b) => a[0].localeCompare(b[0]));
  eq(got, [['completed', ok.id, { doubled: 42 }], ['failed', bad.id, 'no 7']], 'completed and failed events');
  await until('waiting events', async () => waiting.length >= 2);
  eq(waiting, [ok.id, bad.id], 'waiting events');
  await close(w, qe, q);
});

await feature('ratelimit', async () => {
  const q = queue('ratelimit');
  for (let i = 0; i < 4; i++) await q.add('call', { i });
  const starts = [];
  const w = worker(q, async (job) => {
    starts.push([job.data.i, Date.now()]);
    return job.data.i;
  }, { limiter: { max: 2, duration: 1000 }, concurrency: 4 });
  await until('4 completed jobs', async () => (await q.getJobCounts('completed')).completed === 4);
  eq(starts.map((s) => s[0]).sort(), [0, 1, 2, 3], 'every job ran once');
  const span = starts[3][1] - starts[0][1];
  check(span >= 800, `4 jobs at 2 per second started within ${span} ms`);
  console.log(`INFO ratelimit: 4 jobs started over ${span} ms`);
  await close(w, q);
});

await feature('cleanup', async () => {
  const r = new Redis({ host: HOST, port: PORT, password: PASSWORD || undefined, lazyConnect: true });
  r.on('error', () => {});
  await r.connect();
  const scan = async (match) => {
    const keys = [];
    let cursor = '0';
    do {
      const [next, batch] = await r.scan(cursor, 'MATCH', match, 'COUNT', 100);
      keys.push(...batch);
      cursor = next;
    } while (cursor !== '0');
    return keys;
  };
  try {
    await Promise.all(open.filter((o) => !(o instanceof Queue)).map((o) => close(o))); // workers first
    const before = await scan(`${PFX}:*`);
    const limiters = [];
    let wait = 0;
    check(before.length > 0, 'no keys of this run to clean');
    for (const name of queueNames) {
      const q = track(new Queue(name, opts));
      check((await scan(`${PFX}:${name}:*`)).length > 0, `queue ${name} has no keys`);
      await q.obliterate({ force: true });
      // Obliterate leaves the rate limiter's counter (INCR, PEXPIRE duration) to expire.
      for (const k of await scan(`${PFX}:${name}:*`)) {
        const ttl = await r.pttl(k);
        check(k === `${PFX}:${name}:limiter` && ttl > 0 && ttl <= 1000, `${k} (PTTL ${ttl}) left after obliterate`);
        limiters.push(k);
        wait = Math.max(wait, ttl);
      }
      await close(q);
    }
    // Only the limiter key, if ratelimit's last second is not over yet.
    eq(limiters, [`${PFX}:ratelimit-${RUN}:limiter`].slice(0, limiters.length), 'keys left by obliterate');
    console.log(`INFO cleanup: ${before.length} keys; obliterate left ${limiters.length ? `the limiter key (PTTL ${wait})` : 'none'}`);
    await sleep(wait + 100);
    eq(await scan(`${PFX}:*`), [], `keys under ${PFX} (${before.length} before)`);
  } finally {
    r.disconnect();
  }
});

await Promise.allSettled(open.map((o) => o.close()));
console.log(`INFO ${errors.length} error events${errors.length ? `: ${errors.slice(0, 3).join(' | ')}` : ''}`);
const rc = summary(NAME);
process.exit(rc);
