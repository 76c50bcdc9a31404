//! Differential test against a real `redis-server`: random single-client
//! command sequences go to Elsa (two shards, so multi-key commands cross
//! shards) and to Redis 7 in lockstep, and every reply is compared — type,
//! bytes and error text. Elsa is meant to answer exactly as Redis does; the
//! few legitimate exceptions (times, server self-description, unordered
//! results) are the norms in `differential/norm.rs`, and what is not
//! generated at all (and why) is listed in `differential/gen.rs`.
//!
//! Every sequence runs twice: one command at a time, and pipelined (a chunk
//! of requests written at once, then all replies read). A run stops at its
//! first differing reply; the sequence is then shrunk to a minimal repro.
//! All divergences of the run are reported together at the end, grouped by
//! kind, and the test fails if there is any.
//!
//! Size: `ELSA_DIFF_SEQUENCES` sequences (default 200) of `ELSA_DIFF_LEN`
//! commands (default 40), seeds `ELSA_DIFF_SEED` (default 1) onwards.
//! `ELSA_DIFF_SHRINK` failing runs are shrunk per kind of divergence
//! (default 1). The long run:
//!
//! ```text
//! ELSA_DIFF_SEQUENCES=5000 ELSA_DIFF_LEN=80 cargo test --test differential -- --nocapture
//! ```
//!
//! Replay one sequence: `ELSA_DIFF_SEED=<seed> ELSA_DIFF_SEQUENCES=1`.
//!
//! Check the checker: `ELSA_DIFF_SELFTEST=1` runs the same thing with a
//! second `redis-server` in Elsa's place; it must pass (any divergence it
//! reports is a race or a missing norm in the harness, not a finding).

mod common;

#[path = "differential/gen.rs"]
mod gen;
#[path = "differential/norm.rs"]
mod norm;
#[path = "differential/resp.rs"]
mod resp;
#[path = "differential/runner.rs"]
mod runner;

use std::fmt::Write as _;
use std::time::Instant;

use common::{env_or, Elsa};
use gen::{Sequence, Step};
use runner::{Mismatch, Mode, Ports, RedisServer, Shrunk};

/// The commands of `steps` that were sent (up to `m.sent_upto`), numbered,
/// as redis-cli lines, the mismatching one marked; sleeps shown where they
/// happen.
fn listing(steps: &[Step], m: &Mismatch) -> String {
    let mut out = String::new();
    let mut i = 0;
    for s in steps {
        for c in &s.cmds {
            if i > m.sent_upto {
                return out;
            }
            let mark = if i == m.index { "  <-- differs" } else { "" };
            let _ = writeln!(out, "    {:>3}  {}{mark}", i + 1, c.line());
            i += 1;
        }
        if s.sleep_ms > 0 && i <= m.sent_upto {
            let _ = writeln!(out, "         (sleep {} ms)", s.sleep_ms);
        }
    }
    out
}

/// Full listings printed per kind of divergence (the rest: one line each).
const SHOWN_PER_KIND: usize = 3;
/// Most runs spent shrinking one failing sequence.
const MAX_SHRINK_RUNS: usize = 300;

/// The failing runs that share a signature.
struct Kind {
    signature: String,
    runs: usize,
    first: Option<Failure>,
    shrunk: Vec<Shrunk>,
}

/// One failing run.
struct Failure {
    seq: Sequence,
    mode: Mode,
    mismatch: Mismatch,
}

impl Failure {
    fn header(&self) -> String {
        let m = &self.mismatch;
        format!(
            "seed {}, {}, command {} of {}",
            self.seq.seed,
            self.mode,
            m.index + 1,
            self.seq.len()
        )
    }

    fn full(&self) -> String {
        let m = &self.mismatch;
        format!(
            "  {}\n{}    redis: {}\n    elsa:  {}\n    ({})\n",
            self.header(),
            listing(&self.seq.steps, m),
            m.redis,
            m.elsa,
            m.why
        )
    }
}

fn shrunk_text(s: &Shrunk) -> String {
    let m = &s.mismatch;
    format!(
        "  minimal repro ({} commands, {}, reproduced {}/{}, {} shrink runs):\n{}    redis: {}\n    elsa:  {}\n",
        m.sent_upto + 1,
        s.mode,
        s.reproduced,
        runner::REPRODUCE,
        s.runs,
        listing(&s.steps, m),
        m.redis,
        m.elsa
    )
}

#[test]
fn replies_match_redis() {
    let sequences = env_or::<u64>("ELSA_DIFF_SEQUENCES", 200);
    let len = env_or::<u64>("ELSA_DIFF_LEN", 40) as usize;
    let base = env_or::<u64>("ELSA_DIFF_SEED", 1);
    differential(gen::sequence, sequences, len, base, true);
}

/// Hashes, sets and sorted sets growing past the packing limits (128
/// entries, 64-byte elements) and shrinking back, many elements a command
/// (`differential/gen_bulk.rs`): Elsa's packed form turns into its map and
/// back while every reply is compared with Redis's. `ELSA_DIFF_BULK`
/// sequences (default 40) of `ELSA_DIFF_LEN` commands.
#[test]
fn collections_crossing_the_packing_limits_match_redis() {
    let sequences = env_or::<u64>("ELSA_DIFF_BULK", 40);
    let len = env_or::<u64>("ELSA_DIFF_LEN", 40) as usize;
    let base = env_or::<u64>("ELSA_DIFF_SEED", 1);
    differential(gen::bulk_sequence, sequences, len, base, false);
}

/// Runs `sequences` sequences from `make` (seeds `base` on) against Elsa
/// and Redis and fails on any divergence; `moves` also requires that
/// connections moved between Elsa's workers often enough to judge that.
fn differential(
    make: fn(u64, usize) -> gen::Sequence,
    sequences: u64,
    len: usize,
    base: u64,
    moves: bool,
) {
    let shrink_per_kind = env_or::<u64>("ELSA_DIFF_SHRINK", 1) as usize;

    let redis = RedisServer::start();
    // The self-test puts a second Redis where Elsa goes: every divergence
    // it reports is then a flaw of the harness (a race, a missing norm).
    let selftest = std::env::var_os("ELSA_DIFF_SELFTEST").is_some();
    let (_elsa, _other_redis, elsa_port) = if selftest {
        let other = RedisServer::start();
        let port = other.port;
        (None, Some(other), port)
    } else {
        // Streams packed in chunks of three entries (100 by default): the
        // generated streams of a few entries cross chunk boundaries, and
        // entries land inside chunks and split them
        // (`elsa_lattice::stream::log`). The node inherits it.
        std::env::set_var("ELSA_STREAM_CHUNK_ENTRIES", "3");
        // `--worker-move-after 1`: a connection moves to the other worker
        // whenever a lone command's key is on that worker's shard, so
        // every command kind (blocking, MULTI, SELECT, CLIENT, every data
        // type) meets connections that have just moved, and a move that
        // loses or reorders anything of a session shows as a divergence.
        let elsa = Elsa::start(&["--workers", "2", "--worker-move-after", "1"]);
        let port = elsa.port;
        (Some(elsa), None, port)
    };
    let ports = Ports {
        redis: redis.port,
        elsa: elsa_port,
    };
    let started = Instant::now();

    let mut compared = 0usize;
    let mut runs = 0usize;
    // Failures grouped by signature, in order of discovery.
    let mut kinds: Vec<Kind> = Vec::new();
    // Set when a server stopped answering: the run ends there.
    let mut died: Option<String> = None;
    'sequences: for i in 0..sequences {
        let seq = make(base + i, len);
        for mode in [Mode::Sequential, Mode::Pipelined(seq.chunk)] {
            runs += 1;
            let outcome = match runner::run(ports, &seq.steps, mode) {
                Ok(o) => o,
                Err(e) => {
                    died = Some(format!("before seed {} ({mode}): {e}", seq.seed));
                    break 'sequences;
                }
            };
            compared += outcome.compared;
            let Some(mismatch) = outcome.mismatch else {
                continue;
            };
            let failure = Failure {
                seq: seq.clone(),
                mode,
                mismatch,
            };
            let sig = failure.mismatch.signature.clone();
            let at = match kinds.iter().position(|k| k.signature == sig) {
                Some(at) => at,
                None => {
                    kinds.push(Kind {
                        signature: sig.clone(),
                        runs: 0,
                        first: None,
                        shrunk: Vec::new(),
                    });
                    kinds.len() - 1
                }
            };
            let kind = &mut kinds[at];
            kind.runs += 1;
            // The whole sequence for the first few of a kind; one line for
            // the rest, so a frequent divergence does not drown the others.
            if kind.runs <= SHOWN_PER_KIND {
                eprintln!("MISMATCH [{sig}]\n{}", failure.full());
            } else {
                eprintln!("MISMATCH [{sig}] {}", failure.header());
            }
            if kind.shrunk.len() < shrink_per_kind {
                let s = runner::shrink(ports, &seq.steps, mode, &failure.mismatch, MAX_SHRINK_RUNS);
                eprintln!("{}", shrunk_text(&s));
                kind.shrunk.push(s);
            }
            kind.first.get_or_insert(failure);
        }
    }

    let elapsed = started.elapsed();
    let failed_runs: usize = kinds.iter().map(|k| k.runs).sum();
    let summary = format!(
        "differential: {sequences} sequences × 2 modes ({runs} runs, ~{len} commands each), \
         {compared} replies compared in {:.1}s; {failed_runs} runs diverged, {} kinds of divergence",
        elapsed.as_secs_f64(),
        kinds.len()
    );
    println!("{summary}");
    if let (Some(elsa), true, true) = (&_elsa, died.is_none(), moves) {
        // The moves the divergences above were judged across happened.
        let moved = common::clients_moved(elsa.port);
        println!("differential: connections moved between Elsa's workers {moved} times");
        assert!(
            moved > 100,
            "only {moved} moves: the run did not exercise them"
        );
    }
    if kinds.is_empty() && died.is_none() {
        return;
    }
    let mut report = format!("{summary}\n");
    if let Some(why) = &died {
        // The last divergence listed (a reply that never came) is usually
        // what killed it.
        let _ = writeln!(report, "\n!!! a server stopped answering {why}");
    }
    for (n, kind) in kinds.iter().enumerate() {
        let _ = writeln!(
            report,
            "\n=== divergence {}: {}   ({} runs)",
            n + 1,
            kind.signature,
            kind.runs
        );
        if let Some(first) = &kind.first {
            let _ = writeln!(report, "  first seen: {}", first.header());
            if kind.shrunk.is_empty() {
                report.push_str(&first.full());
            }
        }
        for s in &kind.shrunk {
            report.push_str(&shrunk_text(s));
        }
    }
    panic!("Elsa's replies differ from Redis 7's:\n{report}");
}
