//! Running EVAL for the `lua_script` fuzz target (`fuzz/`): whatever body,
//! KEYS and ARGV a client sends, the run must end — by itself, or by the
//! kill SCRIPT KILL would send — without a crash, and within the Lua
//! state's memory limit.
//!
//! [`FuzzRunner`] is a script thread and its connection in one process,
//! without a node. The script thread is `lua.rs`'s [`State`], driven as
//! `thread_main` drives it (a new state when the cache's generation moves,
//! the collector's settings put back and a GC step after every job), and it
//! keeps its state from one run to the next, so what a script leaves behind
//! meets the next one. The connection's side answers every `redis.call` /
//! `redis.pcall` with a canned reply chosen from the command's arguments
//! (`canned.rs`), written in the script's protocol and read back exactly as
//! `run.rs` does (so RESP3 maps, sets, doubles, booleans and nulls reach
//! the script after `redis.setresp(3)`), and plays SCRIPT KILL: a run still
//! going after [`FuzzRunner::kill_after`] gets its kill flag set, as
//! `SCRIPT KILL` sets it.
//!
//! What it checks, by panicking (which the fuzz target reports):
//! - a command's reply, written as the server writes it, reads back
//!   (`convert::parse`), else a script would see `ERR unreadable reply`;
//! - a script's result, written for its client, reads back too;
//! - a fixed canary script answers the same after any run as on a new
//!   state ([`FuzzRunner::check_canary`]): no run changes what the next
//!   one sees (globals, libraries, the string metatable, the collector's
//!   settings, the `redis` API).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use super::cache::{sha1hex, ScriptCache};
use super::convert;
use super::lua::{Event, Job, Outcome, Run, State};
use super::RunCtl;
use crate::resp::ReplyWriter;

mod canned;
use canned::{acl_reply, command_reply};

/// The Lua state's memory limit for fuzzing (the node's is 1 GiB). With
/// AddressSanitizer's quarantine and shadow, and a script's result
/// converted (up to 512 MiB of strings, reachable from a few shared ones)
/// and written, it keeps the process under libFuzzer's
/// `-rss_limit_mb=2048` (`scripts/fuzz.sh`); and a script that fills it
/// fails in a fraction of a second under the sanitizer, where 256 MiB took
/// seconds and dragged the fuzzer down to about 11 inputs a second.
pub const FUZZ_MEMORY_LIMIT: usize = 64 << 20;

/// When a run still going is killed (SCRIPT KILL's flag). Short, so that
/// `while true do end` costs the fuzzer little; `ELSA_FUZZ_KILL_MS`
/// overrides it.
pub const KILL_AFTER: Duration = Duration::from_millis(100);

/// Past this much Lua memory after a job (compiled scripts pile up: one
/// per distinct body, as on a node), the runner flushes (SCRIPT FLUSH:
/// a new state).
const FLUSH_ABOVE: usize = 16 << 20;

/// The script thread's stack. A result nested 1000 deep
/// (`convert::from_lua`'s limit) takes 0.64–0.77 MiB in a release build,
/// 2–4 MiB in a debug build, and 3–3.5 MiB under AddressSanitizer (`-O`),
/// whose frames are several times larger. 8 MiB keeps a margin of about
/// 2.3×, so a change that made the conversion much deeper would overflow
/// here (a node's script threads have 64 MiB: `lua.rs`).
const SCRIPT_THREAD_STACK: usize = 8 << 20;

/// The canary: what a script sees of the shared state, as text. Anything
/// a run could leave behind that the next run sees shows up here.
const CANARY: &str = r#"
local out = {}
local function add(...)
  for i = 1, select('#', ...) do out[#out + 1] = tostring((select(i, ...))) end
end
local function keys(t)
  local ks = {}
  for k, v in pairs(t) do ks[#ks + 1] = tostring(k) .. ':' .. type(v) end
  table.sort(ks)
  return table.concat(ks, ',')
end
add(keys(_G))
for _, lib in ipairs({'string', 'table', 'math', 'redis', 'cjson', 'bit', 'struct', 'cmsgpack', 'coroutine'}) do
  add(lib, keys(_G[lib]))
end
add(#KEYS, #ARGV, KEYS[1], ARGV[1], ARGV[2])
add(redis.call('ECHO', 'canary'), redis.pcall('ELSA.UNKNOWN').err)
add(pcall(function() undefined_global_canary = 1 end))
add(pcall(function() return undefined_global_canary end))
add(pcall(rawset, string, 'x', 1), pcall(setmetatable, _G, {}))
add(getmetatable('abc') ~= nil, ('abc'):upper(), ('x'):rep(3, '-'))
add(table.concat({1, 2, 3}, ','), math.floor(2.5), math.huge, string.format('%5.2f|%q', 3.14159, 'a\n'))
add(cjson.encode({1, 2, {a = cjson.null}}), cjson.decode('[1,"x",null]')[2])
add(cjson.encode_sparse_array(), cjson.encode_max_depth(), cjson.decode_max_depth())
add(cjson.encode_number_precision(), cjson.encode_keep_buffer())
add(cjson.encode_invalid_numbers(), cjson.decode_invalid_numbers())
add(cmsgpack.unpack(cmsgpack.pack({1, 'a', {b = 2}}))[3].b, bit.tohex(255), bit.band(12, 10))
add(struct.unpack('>I2', struct.pack('>I2', 258)), redis.sha1hex('abc'))
add(type(loadstring), loadstring('return 1 + 1')(), loadstring('\27Lua'))
add(pcall(string.dump, function() end))
add(collectgarbage('setpause', 200), collectgarbage('setstepmul', 200))
local co = coroutine.wrap(function(a) local b = coroutine.yield(a + 1); return b * 2 end)
add(co(1), co(5))
add(redis.setresp(3), redis.call('ELSA.BOOL', '1'), redis.call('ELSA.NULL'))
redis.setresp(2)
return out
"#;

/// One EVAL and how to run it.
#[derive(Clone, Debug, Default)]
pub struct Eval {
    pub body: Bytes,
    pub keys: Vec<Bytes>,
    pub argv: Vec<Bytes>,
    /// EVAL_RO: write commands are refused.
    pub ro: bool,
    /// The client speaks RESP3 (HELLO 3): how the result is written.
    pub client_resp3: bool,
    /// SCRIPT LOAD the body first (compiled by the script thread before it
    /// runs, as EVALSHA after SCRIPT LOAD).
    pub load_first: bool,
    /// SCRIPT FLUSH first.
    pub flush_first: bool,
}

/// How a run ended.
#[derive(Debug)]
pub struct Ran {
    /// The reply the client gets (RESP, lossy UTF-8, at most 4 KiB of it).
    pub text: String,
    /// Its length in bytes.
    pub len: usize,
    /// The kill flag was set (the run went past [`FuzzRunner::kill_after`]).
    pub killed: bool,
    /// `redis.call`/`pcall`/`acl_check_cmd` answered.
    pub calls: usize,
    /// From the job sent to its end.
    pub elapsed: Duration,
    /// From the kill to the end, when killed.
    pub after_kill: Option<Duration>,
}

/// Figures of a runner's life so far.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub runs: u64,
    pub killed: u64,
    pub compile_errors: u64,
    pub failed: u64,
    pub flushes: u64,
    pub calls: u64,
    /// Longest time from a kill to the run's end.
    pub max_after_kill: Duration,
    /// Longest run.
    pub max_elapsed: Duration,
    /// Most Lua memory seen after a job.
    pub max_lua_memory: usize,
}

/// A script thread kept across runs, and the connection side that feeds
/// it (see the module's text).
pub struct FuzzRunner {
    jobs: Option<Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    cache: Arc<ScriptCache>,
    /// Lua memory in use after the last job.
    memory: Arc<AtomicUsize>,
    rt: tokio::runtime::Runtime,
    /// When a run is killed.
    pub kill_after: Duration,
    pub stats: Stats,
    canary: Option<String>,
}

impl FuzzRunner {
    /// A runner with a Lua state bounded by [`FUZZ_MEMORY_LIMIT`].
    pub fn new() -> FuzzRunner {
        FuzzRunner::with_memory_limit(FUZZ_MEMORY_LIMIT)
    }

    /// A runner whose Lua states are bounded by `limit` bytes.
    pub fn with_memory_limit(limit: usize) -> FuzzRunner {
        let cache = Arc::new(ScriptCache::default());
        let memory = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let thread = {
            let cache = cache.clone();
            let memory = memory.clone();
            std::thread::Builder::new()
                .name("elsa-script-fuzz".into())
                .stack_size(SCRIPT_THREAD_STACK)
                .spawn(move || script_thread(&rx, &cache, limit, &memory))
                .expect("a script thread")
        };
        let kill_after = std::env::var("ELSA_FUZZ_KILL_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map(Duration::from_millis)
            .unwrap_or(KILL_AFTER);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime");
        FuzzRunner {
            jobs: Some(tx),
            thread: Some(thread),
            cache,
            memory,
            rt,
            kill_after,
            stats: Stats::default(),
            canary: None,
        }
    }

    /// SCRIPT FLUSH: the script thread makes a new Lua state before its
    /// next job.
    pub fn flush(&mut self) {
        self.cache.flush();
        self.stats.flushes += 1;
    }

    /// Lua memory in use after the last job.
    pub fn lua_memory(&self) -> usize {
        self.memory.load(Ordering::Relaxed)
    }

    fn send(&self, job: Job) {
        let sent = self.jobs.as_ref().is_some_and(|j| j.send(job).is_ok());
        assert!(sent, "the script thread stopped");
    }

    /// SCRIPT LOAD: the compile error reply, if any.
    pub fn load(&mut self, body: &Bytes) -> Result<(), String> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.send(Job::Compile {
            body: body.clone(),
            reply,
        });
        rx.blocking_recv().expect("the script thread answers")
    }

    /// EVAL `body` with these KEYS and ARGV (RESP2, not read-only): the
    /// reply the client gets, as text.
    pub fn run(&mut self, body: &[u8], keys: &[Bytes], argv: &[Bytes]) -> String {
        let e = Eval {
            body: Bytes::copy_from_slice(body),
            keys: keys.to_vec(),
            argv: argv.to_vec(),
            ..Eval::default()
        };
        String::from_utf8_lossy(&self.eval_written(&e).1).into_owned()
    }

    /// Runs one EVAL as a connection runs it (`run.rs`): the job to the
    /// script thread, its calls answered, the kill flag set once it runs
    /// past [`FuzzRunner::kill_after`], and its result written for the
    /// client.
    pub fn eval(&mut self, e: &Eval) -> Ran {
        self.eval_written(e).0
    }

    /// [`FuzzRunner::eval`], and the whole reply as written.
    fn eval_written(&mut self, e: &Eval) -> (Ran, BytesMut) {
        if e.flush_first || self.lua_memory() > FLUSH_ABOVE {
            self.flush();
        }
        let sha = sha1hex(&e.body);
        if e.load_first {
            if let Ok(()) = self.load(&e.body) {
                self.cache.insert(sha.clone(), e.body.clone());
            }
        }
        let ctl = Arc::new(RunCtl {
            started: Instant::now(),
            killed: Default::default(),
            function: None,
        });
        let (events_tx, mut events) = tokio::sync::mpsc::unbounded_channel();
        let (answers_tx, answers) = std::sync::mpsc::channel();
        self.send(Job::Run(Box::new(Run {
            sha: sha.clone(),
            body: e.body.clone(),
            keys: e.keys.clone(),
            argv: e.argv.clone(),
            ro: e.ro,
            ctl: ctl.clone(),
            events: events_tx,
            answers,
            inline: None,
            function: None,
        })));
        let started = Instant::now();
        let deadline = tokio::time::Instant::from_std(started + self.kill_after);
        let ro = e.ro;
        let mut calls = 0;
        let (outcome, killed_at) = self.rt.block_on(async {
            let mut killed_at = None;
            loop {
                let event = if killed_at.is_none() {
                    match tokio::time::timeout_at(deadline, events.recv()).await {
                        Ok(event) => event,
                        Err(_) => {
                            // SCRIPT KILL.
                            ctl.killed.store(true, Ordering::Relaxed);
                            killed_at = Some(Instant::now());
                            continue;
                        }
                    }
                } else {
                    events.recv().await
                };
                match event {
                    Some(Event::Call { args, resp3 }) => {
                        calls += 1;
                        let _ = answers_tx.send(command_reply(&args, ro, resp3));
                    }
                    Some(Event::AclCheck { args }) => {
                        calls += 1;
                        let _ = answers_tx.send(acl_reply(&args));
                    }
                    Some(Event::Done(outcome)) => return (outcome, killed_at),
                    None => panic!("the script thread stopped during a run"),
                }
            }
        });
        let elapsed = started.elapsed();
        let after_kill = killed_at.map(|k| k.elapsed());
        // As `run.rs`'s `answer`: a script that compiled is cached.
        if !matches!(outcome, Outcome::Compile(_)) {
            self.cache.insert(sha, e.body.clone());
        }
        let mut out = BytesMut::new();
        let mut w = ReplyWriter {
            out: &mut out,
            resp3: e.client_resp3,
        };
        match &outcome {
            Outcome::Ran(reply, _) => convert::write(&mut w, reply),
            Outcome::Compile(m) | Outcome::Failed(m, _) => w.error(m),
        }
        assert!(
            convert::parse(&out).is_some(),
            "a script's result written for its client does not read back: {outcome:?}"
        );
        let memory = self.lua_memory();
        let s = &mut self.stats;
        s.runs += 1;
        s.calls += calls as u64;
        match outcome {
            Outcome::Compile(_) => s.compile_errors += 1,
            Outcome::Failed(..) => s.failed += 1,
            Outcome::Ran(..) => {}
        }
        if let Some(a) = after_kill {
            s.killed += 1;
            s.max_after_kill = s.max_after_kill.max(a);
        }
        s.max_elapsed = s.max_elapsed.max(elapsed);
        s.max_lua_memory = s.max_lua_memory.max(memory);
        let shown = &out[..out.len().min(4096)];
        let ran = Ran {
            text: String::from_utf8_lossy(shown).into_owned(),
            len: out.len(),
            killed: after_kill.is_some(),
            calls,
            elapsed,
            after_kill,
        };
        (ran, out)
    }

    /// Runs the canary script and panics if it answers other than it did
    /// the first time (on a new state): some run changed what later runs
    /// see.
    pub fn check_canary(&mut self) {
        let keys = [Bytes::from_static(b"canary-key")];
        let argv = [Bytes::from_static(b"a1"), Bytes::from_static(b"")];
        let saved = std::mem::take(&mut self.stats);
        let kill_after = std::mem::replace(&mut self.kill_after, Duration::from_secs(30));
        let got = self.run(CANARY.as_bytes(), &keys, &argv);
        self.kill_after = kill_after;
        self.stats = saved;
        match &self.canary {
            None => self.canary = Some(got),
            Some(first) => assert!(
                *first == got,
                "the canary script answers differently after a run:\nfirst: {first}\nnow:   {got}"
            ),
        }
    }
}

impl Default for FuzzRunner {
    fn default() -> Self {
        FuzzRunner::new()
    }
}

impl Drop for FuzzRunner {
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The script thread: `lua.rs`'s `thread_main`, with a Lua state bounded
/// by `limit` and its memory reported after each job; each job handled by
/// the same `State::handle`.
fn script_thread(jobs: &Receiver<Job>, cache: &ScriptCache, limit: usize, memory: &AtomicUsize) {
    let mut state = State::with_memory_limit(limit).expect("a Lua state");
    while let Ok(job) = jobs.recv() {
        let generation = cache.generation();
        if generation != state.generation {
            state = State::with_memory_limit(limit).expect("a new Lua state");
            state.generation = generation;
        }
        state.handle(job);
        memory.store(state.lua.used_memory(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(r: &mut FuzzRunner, body: &str, argv: &[&str]) -> Ran {
        r.eval(&Eval {
            body: Bytes::copy_from_slice(body.as_bytes()),
            argv: argv
                .iter()
                .map(|a| Bytes::copy_from_slice(a.as_bytes()))
                .collect(),
            ..Eval::default()
        })
    }

    #[test]
    fn runs_scripts_with_canned_replies_and_kills_endless_ones() {
        let mut r = FuzzRunner::new();
        r.check_canary();
        assert_eq!(run(&mut r, "return 1 + 1", &[]).text, ":2\r\n");
        assert_eq!(
            run(&mut r, "return redis.call('INCRBY', 'k', ARGV[1])", &["7"]).text,
            ":7\r\n"
        );
        assert!(run(&mut r, "return redis.call('NOPE')", &[])
            .text
            .starts_with("-ERR Unknown Redis command called from script"));
        let map = run(
            &mut r,
            "redis.setresp(3); local m = redis.call('HGETALL', 'a'); return type(m.map)",
            &[],
        );
        assert_eq!(map.text, "$5\r\ntable\r\n");
        let looped = run(&mut r, "while true do end", &[]);
        assert!(looped.killed);
        assert!(
            looped
                .text
                .starts_with("-ERR Script killed by user with SCRIPT KILL"),
            "{}",
            looped.text
        );
        let caught = run(
            &mut r,
            "while true do pcall(function() while true do end end) end",
            &[],
        );
        assert!(
            caught.text.starts_with("-ERR Script killed"),
            "{}",
            caught.text
        );
        r.check_canary();
        r.flush();
        r.check_canary();
    }

    #[test]
    fn the_canary_sees_what_a_run_leaves() {
        let mut r = FuzzRunner::new();
        r.check_canary();
        // A run that changes the collector's settings: put back after it,
        // so the canary answers the same.
        run(
            &mut r,
            "collectgarbage('setpause', 1); collectgarbage('stop')",
            &[],
        );
        r.check_canary();
        // cjson's settings: put back too.
        run(
            &mut r,
            "cjson.encode_max_depth(3); cjson.encode_sparse_array(true)",
            &[],
        );
        r.check_canary();
    }

    #[test]
    fn memory_past_the_limit_fails_the_script() {
        let mut r = FuzzRunner::with_memory_limit(32 << 20);
        let out = run(
            &mut r,
            "local t = {} for i = 1, 1e7 do t[i] = string.rep('x', 100) .. i end return #t",
            &[],
        );
        assert!(out.text.starts_with('-'), "{}", out.text);
        assert!(r.lua_memory() <= 32 << 20);
        r.check_canary();
    }

    /// Found with this runner: every distinct body a script thread
    /// compiled was held as an mlua `Function`, a slot on mlua's reference
    /// thread, whose stack holds 8000 (Lua 5.1's `LUAI_MAXCSTACK`). Past
    /// about 7990 distinct scripts every script on that thread failed with
    /// "out of Lua stack" until SCRIPT FLUSH (`lua.rs` now keeps them in a
    /// Lua table; `tests/script_sandbox.rs` checks it on a node).
    #[test]
    fn many_distinct_scripts_leave_the_state_usable() {
        let mut r = FuzzRunner::new();
        for i in 0..10_000 {
            let ran = run(&mut r, &format!("return {{'{i}', #KEYS}}"), &[]);
            assert!(ran.text.starts_with('*'), "script {i}: {}", ran.text);
        }
        assert_eq!(run(&mut r, "return 1", &[]).text, ":1\r\n");
    }
}
