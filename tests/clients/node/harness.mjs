// Shared by node-redis.mjs and ioredis.mjs: env, assertions, PASS/FAIL lines.
import { randomBytes } from 'node:crypto';
import { isDeepStrictEqual, inspect } from 'node:util';

export const TARGET = process.env.TARGET ?? 'redis';
export const HOST = process.env.HOST ?? '127.0.0.1';
export const PORT = Number(process.env.PORT ?? 6379);
export const PASSWORD = process.env.PASSWORD ?? '';
export const RESTART_CMD = process.env.RESTART_CMD ?? '';

export class Skip extends Error {}
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
export const prefix = (name) => `${name}:${randomBytes(4).toString('hex')}:`;

export function check(cond, what) {
  if (!cond) throw new Error(what);
}
export function eq(got, want, what = '') {
  if (!isDeepStrictEqual(got, want)) {
    throw new Error(`${what} got ${inspect(got)}, want ${inspect(want)}`);
  }
}

const results = [];
export async function feature(name, fn) {
  let timer;
  try {
    await Promise.race([
      fn(),
      new Promise((_, reject) => { timer = setTimeout(() => reject(new Error('timed out after 60 s')), 60000); }),
    ]);
    results.push('PASS');
    console.log(`PASS ${name}`);
  } catch (e) {
    if (e instanceof Skip) {
      results.push('SKIP');
      console.log(`SKIP ${name}: ${e.message}`);
    } else {
      results.push('FAIL');
      console.log(`FAIL ${name}: ${String(e?.message ?? e).replace(/\n/g, ' ').slice(0, 300)}`);
    }
  } finally {
    clearTimeout(timer);
  }
}

export function summary(name) {
  const n = (v) => results.filter((r) => r === v).length;
  console.log(`SUMMARY ${name} ${TARGET}: ${n('PASS')} passed, ${n('FAIL')} failed, ${n('SKIP')} skipped`);
  return n('FAIL') ? 1 : 0;
}
