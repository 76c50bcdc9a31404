//! EVAL: whatever script text and KEYS/ARGV a client sends, running it on
//! a script thread's Lua state ends — by itself or by the kill SCRIPT KILL
//! would send — without a panic, an abort or a sanitizer report, within
//! the state's memory limit, and leaves nothing behind that the next run
//! sees (a canary script answers the same after every input).
//!
//! One Lua state serves every input, as a script thread serves every
//! client's scripts, so what one input leaves in it meets the next; an
//! input can also hold up to four runs in a row, so such a finding can be
//! made into a reproducer that stands alone.
//!
//! Input: runs separated by `0xFE`; each run is a knob byte, the body, then
//! its arguments, each after a `0xFF`. Knobs: bit 0 the client speaks
//! RESP3; bit 1 SCRIPT LOAD the body first; bit 2 SCRIPT FLUSH first; bit 3
//! EVAL_RO; bits 4-6 how many of the arguments are KEYS (the rest are
//! ARGV); bit 7 run it twice (the second run takes the compiled function
//! from the state's cache).
#![no_main]

use std::sync::{Mutex, OnceLock};

use bytes::Bytes;
use elsa_server::script_fuzzing::{Eval, FuzzRunner};
use libfuzzer_sys::fuzz_target;

static RUNNER: OnceLock<Mutex<FuzzRunner>> = OnceLock::new();

/// Most runs in one input, and arguments in one run.
const MAX_RUNS: usize = 4;
const MAX_ARGS: usize = 64;

fn parse(run: &[u8]) -> Option<(Eval, bool)> {
    let (&knobs, rest) = run.split_first()?;
    let mut parts = rest.split(|&b| b == 0xFF);
    let body = Bytes::copy_from_slice(parts.next().unwrap_or_default());
    let mut args: Vec<Bytes> = parts.take(MAX_ARGS).map(Bytes::copy_from_slice).collect();
    let numkeys = (((knobs >> 4) & 7) as usize).min(args.len());
    let argv = args.split_off(numkeys);
    Some((
        Eval {
            body,
            keys: args,
            argv,
            ro: knobs & 8 != 0,
            client_resp3: knobs & 1 != 0,
            load_first: knobs & 2 != 0,
            flush_first: knobs & 4 != 0,
        },
        knobs & 0x80 != 0,
    ))
}

fuzz_target!(|data: &[u8]| {
    let runner = RUNNER.get_or_init(|| {
        let mut r = FuzzRunner::new();
        r.check_canary();
        Mutex::new(r)
    });
    let mut r = runner.lock().unwrap_or_else(|p| p.into_inner());
    for run in data.split(|&b| b == 0xFE).take(MAX_RUNS) {
        let Some((eval, twice)) = parse(run) else {
            continue;
        };
        for _ in 0..1 + twice as usize {
            let ran = r.eval(&eval);
            // A reply is never larger than what the result's bounds allow
            // (512 MiB of strings, 8M elements, a few bytes of framing each).
            assert!(ran.len <= (512 << 20) + (8 << 20) * 24, "{} bytes", ran.len);
        }
    }
    r.check_canary();
    let runs = r.stats.runs;
    if runs.is_power_of_two() && runs >= 1024 {
        eprintln!(
            "lua_script: {:?}, Lua memory now {} KiB",
            r.stats,
            r.lua_memory() >> 10
        );
    }
});
