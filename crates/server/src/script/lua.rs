//! The script threads: each owns one Lua 5.1 state and runs scripts one at
//! a time, taking them from a queue shared by all of them.
//!
//! Why threads of their own: a worker thread runs a single-threaded tokio
//! runtime that owns a shard and serves many connections. A script is
//! arbitrary code (`while true do end` included); run on a worker it
//! would stall that worker's shard and every connection on it until it
//! ended. Here, a script occupies only its script thread. Each
//! `redis.call` is sent back to the connection's async task as an
//! [`Event::Call`] — the task runs it inside the script's transaction, on
//! its own worker, without blocking anything — and the script thread
//! waits (blocking only itself) for the answer.
//!
//! The state is sandboxed as Redis 7.0's: the base, table, string and math
//! libraries; no `os`, `io`, `package`/`require`, `debug` (its `getinfo`
//! is kept only inside the error handler), `dofile`, `loadfile`, `load`,
//! `loadstring`, `print`, `getfenv` or `setfenv` (which would reach the
//! real globals table behind the proxy). Globals are protected: scripts see them
//! through a read-only proxy, so creating or changing one is refused
//! ("Attempt to modify a readonly table") and reading a missing one is an
//! error ("Script attempted to access nonexistent global variable …"),
//! with Redis's texts. The library tables are read-only proxies too.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use mlua::{Function, HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Table, Value, VmState};

use super::cache::{sha1hex, ScriptCache};
use super::convert::{self, err_table, Reply, KILLED};
use super::RunCtl;

/// Instructions between two checks for SCRIPT KILL (Redis checks every
/// 100 000; a kill is answered sooner with fewer, and the check is an
/// atomic load).
const HOOK_EVERY: u32 = 10_000;

/// What EVAL of a binary chunk answers, as Redis's parser (patched to
/// read text only) answers it.
const BYTECODE_REFUSED: &str =
    "ERR Error compiling script (new function): user_script:1: unexpected symbol near 'char(27)'";

/// Most memory one script thread's Lua state may hold (scripts, their
/// tables and strings); past it an allocation fails as "not enough memory".
const STATE_MEMORY_LIMIT: usize = 1 << 30;

/// Work for a script thread.
pub enum Job {
    /// Compile a body (SCRIPT LOAD): `Err` is the compile error reply.
    Compile {
        body: Bytes,
        reply: tokio::sync::oneshot::Sender<Result<(), String>>,
    },
    /// Run a script.
    Run(Box<Run>),
    /// Check a function library's code (FUNCTION LOAD; its `#!lua` line
    /// included): what it registers, or the error reply.
    Load {
        code: Bytes,
        reply: tokio::sync::oneshot::Sender<Result<Vec<super::libload::Registered>, String>>,
    },
}

/// One run of a script.
pub struct Run {
    pub sha: String,
    pub body: Bytes,
    pub keys: Vec<Bytes>,
    pub argv: Vec<Bytes>,
    /// EVAL_RO / EVALSHA_RO: write commands are refused.
    pub ro: bool,
    pub ctl: Arc<RunCtl>,
    /// To the connection's task.
    pub events: tokio::sync::mpsc::UnboundedSender<Event>,
    /// The connection's answers to [`Event::Call`], in order.
    pub answers: Receiver<Reply>,
    /// Runs plain data commands here rather than on the connection
    /// (`super::inline`).
    pub inline: Option<super::inline::Inline>,
    /// FCALL: the function to call (then `sha` is its name, and `body`
    /// unused).
    pub function: Option<super::libload::Target>,
}

/// What a running script asks of its connection.
pub enum Event {
    /// Run this command (answer on [`Run::answers`]); `resp3` is the
    /// protocol the script asked for (`redis.setresp`).
    Call { args: Vec<Bytes>, resp3: bool },
    /// May the script's user run this command (`redis.acl_check_cmd`)?
    /// Answered `Int(1)`, `Int(0)` or an error.
    AclCheck { args: Vec<Bytes> },
    /// The script ended.
    Done(Outcome),
}

/// How a run ended.
#[derive(Debug)]
pub enum Outcome {
    /// It ran to the end: its result (possibly an error reply it returned),
    /// and whether that is an error a command it called answered, counted
    /// in errorstats already (`convert::COUNTED`).
    Ran(Reply, bool),
    /// It did not compile: this error reply; nothing ran.
    Compile(String),
    /// It raised an error, or was killed: this error reply, and whether it
    /// is a command's, counted already (as in `Ran`).
    Failed(String, bool),
}

/// The pool of script threads.
pub struct Pool {
    jobs: Mutex<Sender<Job>>,
    /// Each thread's Lua state's memory, after its last job (INFO's
    /// `used_memory_lua`).
    memory: Arc<Vec<AtomicUsize>>,
}

/// Stack of each script thread.
const SCRIPT_STACK: usize = 64 << 20;

impl Pool {
    /// Starts `threads` script threads.
    pub fn start(threads: usize, cache: Arc<ScriptCache>) -> Pool {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let memory: Arc<Vec<AtomicUsize>> =
            Arc::new((0..threads).map(|_| AtomicUsize::new(0)).collect());
        for i in 0..threads {
            let rx = rx.clone();
            let cache = cache.clone();
            let memory = memory.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("elsa-script-{i}"))
                // A result is converted recursively down to Redis's depth
                // limit (1,000 tables); unoptimised builds need more than
                // the default 2 MiB for that. Only touched pages are used.
                .stack_size(SCRIPT_STACK)
                .spawn(move || thread_main(&rx, &cache, &memory[i]));
            if let Err(e) = spawned {
                tracing::error!("cannot start script thread: {e}");
            }
        }
        Pool {
            jobs: Mutex::new(tx),
            memory,
        }
    }

    /// Bytes the script threads' Lua states use, summed.
    pub fn lua_memory(&self) -> usize {
        self.memory.iter().map(|m| m.load(Ordering::Relaxed)).sum()
    }

    /// Queues a job; false if no script thread is left to take it.
    pub fn send(&self, job: Job) -> bool {
        let tx = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        tx.send(job).is_ok()
    }
}

/// What the Lua callbacks of the run in progress use (Lua app data).
struct Ctx {
    ctl: Arc<RunCtl>,
    ro: bool,
    resp3: Cell<bool>,
    events: tokio::sync::mpsc::UnboundedSender<Event>,
    answers: Receiver<Reply>,
    inline: Option<super::inline::Inline>,
}

/// A script thread's Lua state and what it compiled.
pub(crate) struct State {
    pub(crate) lua: Lua,
    /// `xpcall`, the error handler, and the function giving a compiled
    /// script the protected globals.
    xpcall: Function,
    handler: Function,
    env: Table,
    globals: Table,
    /// Puts back what a run may have changed in the shared state (the
    /// collector's settings).
    after_run: Function,
    /// Compiled scripts by SHA1, kept in a Lua table (as Redis keeps its
    /// `f_<sha>` globals): an mlua `Function` held from Rust takes a slot
    /// of mlua's reference stack, 8,000 deep, and about 7,990 distinct
    /// scripts held that way made every later script on the thread fail.
    compiled: Table,
    pub(crate) generation: u64,
    /// Function libraries (`super::libload`): their environment, the
    /// setup's loader and caller, and those loaded on this thread.
    pub(super) libenv: Table,
    pub(super) load_library: Function,
    pub(super) call_function: Function,
    pub(super) libraries: Table,
}

fn thread_main(jobs: &Mutex<Receiver<Job>>, cache: &ScriptCache, memory: &AtomicUsize) {
    let mut state = match State::new() {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("cannot set up a Lua state: {e}");
            return;
        }
    };
    loop {
        memory.store(state.lua.used_memory(), Ordering::Relaxed);
        let job = {
            let rx = jobs.lock().unwrap_or_else(|p| p.into_inner());
            rx.recv()
        };
        let Ok(job) = job else { return };
        let generation = cache.generation();
        if generation != state.generation {
            // SCRIPT FLUSH: a new Lua state, as Redis makes one, so nothing
            // a script left behind (garbage included) outlives the flush.
            match State::new() {
                Ok(s) => state = s,
                Err(e) => tracing::error!("cannot set up a new Lua state: {e}"),
            }
            state.generation = generation;
        }
        state.handle(job);
    }
}

/// Builds the `redis` table, the error handler and the protected globals.
/// Runs once per Lua state, before any script; its own frames are named
/// `=elsa` so the error handler can skip them.
const SETUP: &str = include_str!("setup.lua");

impl State {
    /// A state whose memory is bounded by `limit` bytes instead of
    /// [`STATE_MEMORY_LIMIT`] (the fuzz target's, under libFuzzer's RSS
    /// limit: `script/fuzzing.rs`).
    pub(crate) fn with_memory_limit(limit: usize) -> mlua::Result<State> {
        let state = State::new()?;
        state.lua.set_memory_limit(limit)?;
        Ok(state)
    }

    fn new() -> mlua::Result<State> {
        // SAFETY: `debug` is loaded only so the setup code can keep
        // `debug.getinfo` for the error handler; it removes the global
        // before any script runs, and no C module loader is loaded.
        let lua = unsafe {
            Lua::unsafe_new_with(
                StdLib::TABLE | StdLib::STRING | StdLib::MATH | StdLib::DEBUG,
                LuaOptions::new(),
            )
        };
        let call_fn = lua.create_function(call)?;
        let errtext = lua.create_function(|lua, s: mlua::LuaString| {
            let s = s.as_bytes();
            let dashed = if s.first() == Some(&b'-') {
                s.to_vec()
            } else {
                [b"-", &s[..]].concat()
            };
            lua.create_string(convert::error_text(&dashed))
        })?;
        let sha1 = lua.create_function(|lua, args: MultiValue| {
            if args.len() != 1 {
                return Ok((
                    Value::Table(err_table(lua, b"ERR wrong number of arguments")?),
                    true,
                ));
            }
            let data = match &args[0] {
                Value::String(s) => s.as_bytes().to_vec(),
                Value::Number(n) => lua_number_text(*n).into_bytes(),
                Value::Integer(n) => n.to_string().into_bytes(),
                _ => Vec::new(),
            };
            Ok((Value::String(lua.create_string(sha1hex(&data))?), false))
        })?;
        let log = lua.create_function(log)?;
        let killed = lua.create_function(|lua, ()| {
            Ok(lua
                .app_data_ref::<Ctx>()
                .is_some_and(|c| c.ctl.killed.load(Ordering::Relaxed)))
        })?;
        let setresp = lua.create_function(|lua, args: MultiValue| {
            let fail = |m: &str| Ok((Value::Table(err_table(lua, m.as_bytes())?), true));
            let Some(ctx) = lua.app_data_ref::<Ctx>() else {
                return fail("ERR redis.setresp can only be called inside a script invocation");
            };
            if args.len() != 1 {
                return fail("ERR redis.setresp() requires one argument.");
            }
            match lua_number(&args[0]).map(|n| n as i64) {
                Some(2) => ctx.resp3.set(false),
                Some(3) => ctx.resp3.set(true),
                _ => return fail("ERR RESP version must be 2 or 3."),
            }
            Ok((Value::Nil, false))
        })?;
        // The raising forms are C functions, as Redis's: a Lua wrapper
        // would be tail-called by `return redis.call(…)`, and the error
        // would lose the script's line.
        let aclcheck = lua.create_function(acl_check)?;
        for (i, f) in [&call_fn, &sha1, &log, &setresp, &aclcheck]
            .into_iter()
            .enumerate()
        {
            lua.set_named_registry_value(RAISING[i], f)?;
        }
        // SAFETY: `raising` only moves values on the Lua stack and calls a
        // function of ours; it owns nothing that needs dropping.
        let (rawcall, call_c, sha1_c, log_c, setresp_c, aclcheck_c) = unsafe {
            (
                lua.create_c_function(returning_call)?,
                lua.create_c_function(raising::<0>)?,
                lua.create_c_function(raising::<1>)?,
                lua.create_c_function(raising::<2>)?,
                lua.create_c_function(raising::<3>)?,
                lua.create_c_function(raising::<4>)?,
            )
        };
        let cjson = super::cjson::table(&lua)?;
        let globals = lua.globals();
        globals.raw_set("bit", super::bit::table(&lua)?)?;
        globals.raw_set("struct", super::lstruct::table(&lua)?)?;
        globals.raw_set("cmsgpack", super::cmsgpack::table(&lua)?)?;
        type Setup = (
            Function,
            Function,
            Table,
            Function,
            Table,
            Function,
            Function,
        );
        let (xpcall, handler, env, after_run, libenv, load_library, call_function): Setup =
            lua.load(SETUP).set_name("=elsa").call((
                rawcall, errtext, call_c, sha1_c, log_c, setresp_c, killed, cjson, aclcheck_c,
            ))?;
        // A script that builds more than this fails with Lua's "not enough
        // memory" instead of taking the node's memory (Redis sets no bound).
        lua.set_memory_limit(STATE_MEMORY_LIMIT)?;
        // SCRIPT KILL: checked every HOOK_EVERY instructions. Once killed,
        // every check raises again, so a `pcall` in the script cannot
        // swallow the kill for long (Redis re-raises on every line).
        lua.set_hook(
            HookTriggers::new().every_nth_instruction(HOOK_EVERY),
            |lua, _| {
                if super::libload::past_deadline(lua) {
                    return Err(mlua::Error::runtime(super::libload::LOAD_TIMEOUT));
                }
                match lua.app_data_ref::<Ctx>() {
                    Some(ctx) if ctx.ctl.killed.load(Ordering::Relaxed) => {
                        Err(mlua::Error::runtime(KILLED))
                    }
                    _ => Ok(VmState::Continue),
                }
            },
        )?;
        let compiled = lua.create_table()?;
        let libraries = lua.create_table()?;
        Ok(State {
            lua,
            xpcall,
            handler,
            env,
            globals,
            after_run,
            compiled,
            generation: 0,
            libenv,
            load_library,
            call_function,
            libraries,
        })
    }

    /// Does one job, then puts back what a run may have changed in the
    /// shared state (the collector's and cjson's settings) and takes a
    /// small step of garbage collection.
    pub(crate) fn handle(&mut self, job: Job) {
        match job {
            Job::Compile { body, reply } => {
                let sha = sha1hex(&body);
                let _ = reply.send(self.function(&sha, &body).map(|_| ()));
            }
            Job::Run(run) => {
                let events = run.events.clone();
                let outcome = self.run(*run);
                let _ = events.send(Event::Done(outcome));
            }
            Job::Load { code, reply } => {
                let _ = reply.send(self.check_library(&code));
            }
        }
        let _ = self.after_run.call::<()>(());
        super::cjson::reset(&self.lua);
        // Keep the garbage collector's work per script small and even.
        let _ = self.lua.gc_step();
    }

    /// The compiled script, compiling it on first use; `Err` is Redis's
    /// compile error reply.
    fn function(&mut self, sha: &str, body: &[u8]) -> Result<Function, String> {
        match self.compiled.raw_get::<Option<Function>>(sha) {
            Ok(Some(f)) => return Ok(f),
            Ok(None) => {}
            Err(e) => return Err(format!("ERR Error compiling script (new function): {e}")),
        }
        if body.first() == Some(&0x1b) {
            // Lua bytecode: never loaded (Lua 5.1 does not verify it). The
            // reply Redis's text-only parser gives.
            return Err(BYTECODE_REFUSED.into());
        }
        // A `#!lua` line is dropped, its newline kept (`super::shebang`).
        let (_, shebang) = super::shebang::parse(body)?;
        let f = self.compile(
            &body[shebang..],
            "@user_script",
            self.env.clone(),
            "ERR Error compiling script (new function)",
        )?;
        self.compiled
            .raw_set(sha, &f)
            .map_err(|e| format!("ERR Error compiling script (new function): {e}"))?;
        Ok(f)
    }

    /// Compiles Lua text (never bytecode) named `name` in `env`; a
    /// compile error is the reply `failed: <Lua's message>`.
    pub(super) fn compile(
        &self,
        code: &[u8],
        name: &str,
        env: Table,
        failed: &str,
    ) -> Result<Function, String> {
        self.lua
            .load(code)
            .set_mode(mlua::chunk::ChunkMode::Text)
            .set_name(name)
            .set_environment(env)
            .into_function()
            .map_err(|e| {
                let msg = match e {
                    mlua::Error::SyntaxError { message, .. } => message,
                    e => e.to_string(),
                };
                format!("{failed}: {msg}")
            })
    }

    fn run(&mut self, run: Run) -> Outcome {
        let f = match &run.function {
            Some(target) => match self.library_function(target) {
                Ok(f) => f,
                Err(e) => return Outcome::Failed(e, false),
            },
            None => match self.function(&run.sha, &run.body) {
                Ok(f) => f,
                Err(e) => return Outcome::Compile(e),
            },
        };
        let array = |items: &[Bytes]| -> mlua::Result<Table> {
            let t = self.lua.create_table_with_capacity(items.len(), 0)?;
            for (i, b) in items.iter().enumerate() {
                t.raw_set(i + 1, self.lua.create_string(b)?)?;
            }
            Ok(t)
        };
        let set = |name: &str, items: &[Bytes]| self.globals.raw_set(name, array(items)?);
        // A script reads KEYS and ARGV as globals; a function gets them as
        // its two arguments.
        let fargs = match run.function {
            Some(_) => match array(&run.keys).and_then(|k| Ok((k, array(&run.argv)?))) {
                Ok(a) => Some(a),
                Err(e) => return Outcome::Failed(format!("ERR {e}"), false),
            },
            None => {
                if let Err(e) = set("KEYS", &run.keys).and_then(|_| set("ARGV", &run.argv)) {
                    return Outcome::Failed(format!("ERR {e}"), false);
                }
                None
            }
        };
        let ctl = run.ctl.clone();
        self.lua.set_app_data(Ctx {
            ctl: run.ctl,
            ro: run.ro,
            resp3: Cell::new(false),
            events: run.events,
            answers: run.answers,
            inline: run.inline,
        });
        let result = match fargs {
            Some((keys, args)) => self.call_function.call::<MultiValue>((f, keys, args)),
            None => self.xpcall.call::<MultiValue>((f, self.handler.clone())),
        };
        let ctx = self.lua.remove_app_data::<Ctx>();
        let resp3 = ctx.as_ref().is_some_and(|c| c.resp3.get());
        drop(ctx);
        let killed = ctl.killed.load(Ordering::Relaxed);
        let values: Vec<Value> = match result {
            Ok(v) => v.into_iter().collect(),
            Err(e) if killed => return Outcome::Failed(format!("{KILLED} {e}"), false),
            Err(e) => return Outcome::Failed(format!("ERR {e}"), false),
        };
        let ok = matches!(values.first(), Some(Value::Boolean(true)));
        let value = values.get(1).cloned().unwrap_or(Value::Nil);
        if ok {
            return match convert::from_lua(&value, resp3, &ctl.killed) {
                Ok(reply) => Outcome::Ran(reply, convert::counted(&value)),
                Err(stopped) => Outcome::Failed(stopped.text().into(), false),
            };
        }
        Outcome::Failed(
            failure(&value, &run.sha, killed),
            !killed && convert::counted(&value),
        )
    }
}

/// The error reply of a script that raised `err` (as Redis's
/// `luaCallFunction`: the message, then where it happened).
fn failure(err: &Value, sha: &str, killed: bool) -> String {
    let Value::Table(t) = err else {
        return format!("ERR Error running script {sha}, execution failure");
    };
    let text = |k: &str| match t.raw_get::<Value>(k) {
        Ok(Value::String(s)) => Some(s.to_string_lossy()),
        Ok(Value::Number(n)) => Some(lua_number_text(n)),
        Ok(Value::Integer(n)) => Some(n.to_string()),
        _ => None,
    };
    let mut msg = if killed {
        KILLED.to_string()
    } else {
        text("err").unwrap_or_else(|| "ERR unknown error".into())
    };
    if let (Some(source), Some(line)) = (text("source"), text("line")) {
        msg.push_str(&format!(" script: {sha}, on {source}:{line}."));
    }
    msg
}

fn lua_number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => Some(*n),
        Value::Integer(n) => Some(*n as f64),
        Value::String(s) => s.to_str().ok()?.trim().parse().ok(),
        _ => None,
    }
}

/// A number as Lua's `tostring` writes it (`%.14g`).
fn lua_number_text(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

/// Registry names of the functions [`raising`] calls.
const RAISING: [&str; 5] = [
    "elsa.call",
    "elsa.sha1hex",
    "elsa.log",
    "elsa.setresp",
    "elsa.acl_check_cmd",
];
const RAISING_C: [&std::ffi::CStr; 5] = [
    c"elsa.call",
    c"elsa.sha1hex",
    c"elsa.log",
    c"elsa.setresp",
    c"elsa.acl_check_cmd",
];

/// The functions of [`RAISING`] that take a command line: [`invoke`]
/// reads it off the Lua stack into [`ARGV`] and calls them with no
/// arguments (through mlua, each argument would be a value reference, a
/// table slot and a guard — a quarter of a `redis.call('sadd', k, i)` —
/// and mlua holds a callback's arguments in a stack of about 8,000 slots,
/// while `redis.call('lpush', k, unpack(t))` may pass 7,999).
const PACKED: [bool; 5] = [true, false, false, false, true];

thread_local! {
    /// The command line of the `redis.call`, `redis.pcall` or
    /// `redis.acl_check_cmd` in progress on this script thread, as
    /// [`invoke`] read it, or Redis's error text for arguments it refuses.
    static ARGV: std::cell::RefCell<Result<Vec<Bytes>, &'static str>> =
        const { std::cell::RefCell::new(Ok(Vec::new())) };
}

/// The arguments on the stack as a command line (strings and numbers
/// only, at least one), or Redis's error text. Reads only: nothing here
/// allocates in Lua or can raise a Lua error.
unsafe fn read_argv(l: *mut mlua::ffi::lua_State) -> Result<Vec<Bytes>, &'static str> {
    use mlua::ffi;
    let n = ffi::lua_gettop(l);
    if n == 0 {
        return Err("ERR Please specify at least one argument for this redis lib call");
    }
    let mut argv = Vec::with_capacity(n as usize);
    for i in 1..=n {
        argv.push(match ffi::lua_type(l, i) {
            ffi::LUA_TSTRING => {
                let mut len = 0;
                let p = ffi::lua_tolstring(l, i, &mut len);
                Bytes::copy_from_slice(std::slice::from_raw_parts(p.cast::<u8>(), len))
            }
            // `%.17g`, as Redis formats a number argument.
            ffi::LUA_TNUMBER => Bytes::from(convert::fmt_g17(ffi::lua_tonumber(l, i))),
            _ => return Err("ERR Lua redis lib command arguments must be strings or integers"),
        });
    }
    Ok(argv)
}

/// The command line [`invoke`] read for the call in progress.
fn take_argv() -> Result<Vec<Bytes>, &'static str> {
    ARGV.with(|a| std::mem::replace(&mut *a.borrow_mut(), Ok(Vec::new())))
}

/// Calls the registry function `RAISING[k]` with the arguments on the
/// stack (in [`ARGV`] when [`PACKED`] says so), leaving its two results.
unsafe fn invoke(l: *mut mlua::ffi::lua_State, k: usize) {
    use mlua::ffi;
    let mut n = ffi::lua_gettop(l);
    if PACKED[k] {
        let argv = read_argv(l);
        ARGV.with(|a| *a.borrow_mut() = argv);
        ffi::lua_settop(l, 0);
        n = 0;
    }
    ffi::lua_getfield(l, ffi::LUA_REGISTRYINDEX, RAISING_C[k].as_ptr());
    ffi::lua_insert(l, 1);
    ffi::lua_call(l, n, 2);
}

/// `redis.pcall`: `redis.call`'s answer, an error reply returned rather
/// than raised.
unsafe extern "C-unwind" fn returning_call(l: *mut mlua::ffi::lua_State) -> std::ffi::c_int {
    invoke(l, 0);
    mlua::ffi::lua_pop(l, 1);
    1
}

/// A C function calling the registry function `RAISING[K]`, which answers
/// `(value, is_error)`, and raising `value` (Redis's `{err=…}` table) as
/// the Lua error when it is one — what Redis's C functions do with
/// `lua_error`. mlua can only raise its own error objects from Rust.
unsafe extern "C-unwind" fn raising<const K: usize>(
    l: *mut mlua::ffi::lua_State,
) -> std::ffi::c_int {
    use mlua::ffi;
    invoke(l, K);
    if ffi::lua_toboolean(l, -1) != 0 {
        ffi::lua_pop(l, 1);
        if ffi::lua_type(l, -1) == ffi::LUA_TSTRING {
            // A message, as `luaL_error` raises it: prefixed with where in
            // the script the C function was called from.
            ffi::luaL_where(l, 1);
            ffi::lua_insert(l, -2);
            ffi::lua_concat(l, 2);
        }
        ffi::lua_error(l)
    }
    ffi::lua_pop(l, 1);
    1
}

/// `redis.call`/`redis.pcall`: the command's reply, and whether it is an
/// error (which `redis.call` raises, `redis.pcall` returns).
fn call(lua: &Lua, _: ()) -> mlua::Result<(Value, bool)> {
    let fail = |m: &str| Ok((Value::Table(err_table(lua, m.as_bytes())?), true));
    let argv = take_argv();
    let Some(ctx) = lua.app_data_ref::<Ctx>() else {
        return fail("ERR redis.call/pcall can only be called inside a script invocation");
    };
    if ctx.ctl.killed.load(Ordering::Relaxed) {
        return fail(KILLED);
    }
    let argv = match argv {
        Ok(a) => a,
        Err(m) => return fail(m),
    };
    let _ = ctx.ro; // the connection checks read-only runs (it knows the command's flags)
    if let Some(reply) = ctx
        .inline
        .as_ref()
        .and_then(|i| i.call(&argv, ctx.resp3.get()))
    {
        return convert::to_lua(lua, &reply);
    }
    let sent = ctx.events.send(Event::Call {
        args: argv,
        resp3: ctx.resp3.get(),
    });
    let reply = match sent {
        Ok(()) => super::handoff::answer(&ctx.answers),
        Err(_) => None,
    };
    let Some(reply) = reply else {
        // The connection is gone: end the script.
        ctx.ctl.killed.store(true, Ordering::Relaxed);
        return fail("ERR the client's connection closed");
    };
    convert::to_lua(lua, &reply)
}

/// `redis.acl_check_cmd(command, args…)`: whether the script's user may
/// run it (`true`/`false`); an unknown command is an error.
fn acl_check(lua: &Lua, _: ()) -> mlua::Result<(Value, bool)> {
    let fail = |m: &str| Ok((Value::Table(err_table(lua, m.as_bytes())?), true));
    let argv = take_argv();
    let Some(ctx) = lua.app_data_ref::<Ctx>() else {
        return fail("ERR redis.acl_check_cmd can only be called inside a script invocation");
    };
    let argv = match argv {
        Ok(a) => a,
        Err(m) => return fail(m),
    };
    let sent = ctx.events.send(Event::AclCheck { args: argv });
    match sent.ok().and_then(|_| super::handoff::answer(&ctx.answers)) {
        Some(Reply::Int(n)) => Ok((Value::Boolean(n != 0), false)),
        Some(Reply::Error(e)) => Ok((Value::Table(err_table(lua, &e)?), true)),
        _ => {
            ctx.ctl.killed.store(true, Ordering::Relaxed);
            fail("ERR the client's connection closed")
        }
    }
}

/// `redis.log(level, message…)`, to `tracing`.
fn log(lua: &Lua, args: MultiValue) -> mlua::Result<(Value, bool)> {
    let fail = |m: &str| Ok((Value::Table(err_table(lua, m.as_bytes())?), true));
    if args.len() < 2 {
        return fail("ERR redis.log() requires two arguments or more.");
    }
    let Some(level) = lua_number(&args[0]) else {
        return fail("ERR First argument must be a number (log level).");
    };
    let level = level as i64;
    if !(0..=3).contains(&level) {
        return fail("ERR Invalid debug level.");
    }
    let parts: Vec<String> = args
        .iter()
        .skip(1)
        .filter_map(|v| match v {
            Value::String(s) => Some(s.to_string_lossy()),
            Value::Number(n) => Some(lua_number_text(*n)),
            Value::Integer(n) => Some(n.to_string()),
            _ => None,
        })
        .collect();
    let text = parts.join(" ");
    match level {
        0 | 1 => tracing::debug!(target: "elsa::script", "{text}"),
        2 => tracing::info!(target: "elsa::script", "{text}"),
        _ => tracing::warn!(target: "elsa::script", "{text}"),
    }
    Ok((Value::Nil, false))
}
