//! Concurrent writers in both regions, judged against the CRDT rules of
//! `docs/datatypes.md` (issue 41: "every acknowledged remove and add
//! accounted for"). `tests/restart_differential_cluster.rs` drives one
//! sequential session and compares with Redis; here four writers race on
//! the same few keys from both regions at once, through restarts and
//! cuts, and what every node reads once converged is compared with what
//! the rules make of the ops each writer got acknowledged.
//!
//! **Shape.** Two regions of two nodes (`a a b b`), `--appendfsync always
//! --tombstone-ttl-sec 1 --replication-factor 2` (every node holds every
//! key; removes are collected during the run; `ELSA_CRDT_TOMBSTONE_TTL`
//! sets another TTL). One writer thread per
//! node, on its own connection to its own node, seeded RNG
//! (`crdt_concurrent/writer.rs`), on fourteen shared hot keys
//! (`crdt_concurrent/ops.rs`): two each of a counter, a set, a hash, a
//! sorted set, a list, a last-writer-wins string and a HyperLogLog. Meanwhile
//! `ELSA_CRDT_ROUNDS` faults (default 6: each of `kill -9` + restart,
//! SIGTERM + restart, `ELSA.FAULT ISOLATE` for 1–3 s then `HEAL`, and
//! `ELSA.FAULT LAPSE` once, in a seeded order, then random ones) hit one
//! random node at a time, 1.5–3.5 s apart; after each the run waits until
//! every node counts every member and has caught up. Then the writers
//! stop, every node is healed, and the run waits until all four report
//! the same `ELSA.DIGEST` twice in a row (180 s; not converging fails),
//! then reads every key through every node.
//!
//! **Ops and the model** (`crdt_concurrent/check.rs`). Every element,
//! field, member, list item and string value is unique to the op that
//! wrote it; removes are only of the same writer's acknowledged adds. An
//! op is acknowledged (a reply that is not an error), in doubt (an error
//! — `-ERR no answer …`, `-TRYAGAIN` — or a broken connection after
//! sending: never retried, the connection is opened again) or certainly
//! not applied (a block whose `EXEC`/`COMMIT` was never sent, or answered
//! `CONFLICT`, `EXECABORT` or nil). A refused connection sends nothing
//! and is only counted. Once converged, on every node:
//!
//! - counters (`INCRBY`), a hash's shared field (`HINCRBY`) and a sorted
//!   set's shared member (`ZINCRBY`), positive deltas: between the sum of
//!   the acknowledged deltas and that plus the deltas in doubt
//!   (concurrent increments all count);
//! - set members (`SADD`/`SREM`), hash fields (`HSET`/`HDEL`, with their
//!   value), sorted-set members (`ZADD`/`ZREM`, with their score), list
//!   items (`RPUSH`/`LREM k 0`): present if the add was acknowledged and
//!   nothing may have removed it; absent if the add was not applied, or
//!   an acknowledged remove or `DEL` certainly saw it; either way if an
//!   op about it is in doubt. Nothing never sent is there;
//! - `DEL` (of sets and lists, about 1 % of ops; observed-remove, "`DEL`
//!   of a set removes every member it saw"): a `DEL` acknowledged in the
//!   add's region after the add was acknowledged saw it (one primary per
//!   key in a region), so the element is absent; an add sent after a
//!   `DEL` was acknowledged cannot have been seen by it; every other
//!   pair (the other region, overlapping, a `DEL` in doubt) leaves the
//!   element free;
//! - a remove (or such a `DEL`) sent from 2 s before a node was stopped
//!   or cut off until more than the tombstone TTL before the cluster was
//!   whole again leaves its element free: the others may collect it while
//!   that node is out of their view, and the node brings its old add back
//!   — the documented trade (`docs/regions.md`, *Tombstones*: "A node that
//!   is away longer than the TTL and comes back with an old value can
//!   bring that value back … keep the TTL above your longest expected
//!   outage"). With the default TTL of 1 s that frees most removes made
//!   during a restart (the summary counts them); with
//!   `ELSA_CRDT_TOMBSTONE_TTL=60` none are freed and removes are checked
//!   across every outage (collection then runs only on removes older than
//!   a minute);
//! - lists: every item at most once, each writer's acknowledged pushes in
//!   the order it made them, and one lone `RPUSH`'s items next to each
//!   other ("a b c stays together");
//! - HyperLogLogs (`PFADD` of one element, lone or in blocks): every
//!   acknowledged element counted — its register at least its rank in
//!   the bytes every node reads alike (concurrent `PFADD`s all count);
//! - strings (`SET`, last writer wins): one writer's last acknowledged
//!   value, or a value in doubt (a write in doubt can land late, newer);
//! - every node reads exactly what the first one read.
//!
//! About 8 % of ops are blocks of 2–4 of those changes: `MULTI`/`EXEC`,
//! `BEGIN RC|SI … COMMIT`, or one `EVAL` running them all; all or nothing.
//! `EXPIRE k 100000` (a TTL far beyond the run) hits any key now and then,
//! alone or in blocks: it must undo no concurrent write ("A string's TTL
//! changed alone", expiry of a collection).
//!
//! **Left out, by the rules.** A block writes what the key then shows
//! (`KeyState::replace_with`, `docs/transactions.md`): an `INCRBY` or
//! `HINCRBY` in a block is a `SET` of the value it computed, which a
//! concurrent block of the other region overwrites (last writer wins), and
//! which a concurrent `EXPIRE` of a counter made of increments alone beats
//! when the block missed an increment the `EXPIRE` saw; a `ZINCRBY` in a
//! block writes the score as a `ZADD`, which a later lone `ZINCRBY`
//! elsewhere replaces. So blocks increment counters and hash fields, and
//! `EXPIRE` touches counters, only in region `a` (inside one region
//! they are sequential), and `ZINCRBY` stays out of blocks. No `DEL` of
//! hashes or sorted sets (their shared counters), none of strings; no
//! `LPUSH`, `LINSERT`, pops, `SET` of a counter, change of type, expiry
//! that lapses, `FLUSHALL`, or `LINKS-DOWN`. Nothing checks a list's
//! order across writers beyond "the same on every node", nor which
//! writer's string wins (clocks decide).
//!
//! **Found.** The first runs (seeds 2 and 3) flagged `HDEL`s and `ZREM`s
//! acknowledged while a node of the other region was stopped, back on
//! every node once converged. Not a defect: it is the trade above. A
//! minimal run shows it for every type (`kill -9` of a node of region
//! `b`, ten members, fields, sorted-set members and list items of
//! region-`a` keys removed, 4 s, restart: 10 of 10 of each back with
//! `--tombstone-ttl-sec 1`, none with 30); the checker now models it.
//!
//! **Defects found and fixed.** (1) Seed 3 once lost, on every node, two
//! acknowledged writes of region `b` — `ZINCRBY cc:zset:0 5 shared` and
//! `ZADD cc:zset:0 283 w2:283` — as a region-`a` `BEGIN [ZREM …; RPUSH
//! …]` committed: a single-shard commit diffed its target against what the
//! shard stored at commit, not against what it read
//! (`crdt_concurrent/defect.rs`, deterministic). (2) Digests that never
//! agreed after healing (seeds 8 and 12, then 3): removed elements counted
//! in collection digests, and replicas collect them at different times
//! (`orset::Shows`). (3) Elements back on every node after their removes
//! were collected — in 5 runs of 10, every one added by a `MULTI`, `EVAL`
//! or `BEGIN` block: another region's transaction installed again from its
//! record (kept 10 minutes, shipped again by anti-entropy) merged its old
//! add into a key whose remove was gone. Each shard now keeps a collection
//! floor that such a redelivery (and recovery's `restore_writes`) never
//! brings back anything from before (`docs/regions.md`, *A transaction
//! delivered again*; `crates/shard/src/shard/floor_tests.rs`). A "busy"
//! node (a script that waited out a fault past `busy-reply-threshold`
//! answers `-BUSY` to everyone) is waited for.
//!
//! `ELSA_CRDT_SEED` (default 1) seeds the writers and the faults (timing
//! is not replayed); `ELSA_KEEP_TEST_DIRS=1` keeps the nodes' logs;
//! `ELSA_CRDT_DUMP=FILE` writes every op with its outcome and times;
//! `ELSA_CRDT_WATCH=FILE` every change of an element's presence on each
//! node as it happened (`crdt_concurrent/watch.rs`). The
//! run prints the faults, one summary line (ops acknowledged / in doubt /
//! not applied per kind, errors by kind, faults, keys compared, elements
//! by expectation, times) and, on a divergence, the seed, node, key,
//! element, the expected state with the op that decides it, and what the
//! node read. A cluster that is not whole again after a fault fails too
//! (a finding, not a checker error).
//!
//! **Still seen** (26 runs after the fix, seeds 1–22, release build: 23
//! clean; the build before it, 6 runs: 2 clean). Seeds 12 and 16: the
//! shared `HINCRBY` field of a hash sums a little short of the
//! acknowledged increments on every node (2469 of 2471, 993 of 995–999,
//! 1105 of 1110) — the build before the fix shows it too, at the same
//! seeds (2203 of 2205–2208; 2562 of 2565 and 2720 of 2725), so it is
//! older than it; and once, one field removed by an `EVAL` came back, its
//! add a `BEGIN` whose install in region `b` failed while a node there was
//! stopped (SIGTERM), its parts shown alone 10 s later. Both runs stopped
//! a region-`b` node whose restart left out a lattice its replica never
//! confirmed. A rerun of seed 12 with a per-key state dump (a throwaway
//! `ELSA.FAULT STATE key` printing the stored `KeyState`) read the field
//! as a base of 2202 written last by a region-`a` block (origin 1), having
//! observed every tally there is (origins 2, 3, 4): the block computed its
//! value from a read that already lacked an acknowledged +2 — an earlier
//! block's base (a block's `HINCRBY` writes the value it computed) that a
//! later block of the same region did not see, a lost update inside one
//! region. A +2 block was acknowledged at 24.0 s, just after node 1's
//! `LAPSE` (22.4 s; it hands its slots over and takes them back): a lead
//! toward issue 42's one owner per slot, not a proof.
//!
//! **Seen since, and fixed** (2026-11-30, seed 17, debug build, 2
//! cores): an acknowledged remove undone on every node — `HDEL` (3 runs),
//! `ZREM`, `SREM` inside a `MULTI`, a whole list's `DEL` and an `LREM` —
//! in 5 of 15 runs with small collections packed and in none of 11
//! without (packing's timing; lists never pack), and a list's order (an
//! element after one pushed later by the same writer) in runs of both.
//! `ELSA_CRDT_WATCH` (when each element appeared and went on each node)
//! and the nodes' logs read back per key told two races of tombstone
//! collection apart: (1) an `HDEL` of region `b`, which region `a`'s node
//! held only *parked* (a lone write waiting behind a part of an older
//! transaction of the key), was collected in region `b` because that node
//! answered the anti-entropy round as if it had merged the shipment; its
//! stale state then brought the field back (`order_tests::
//! a_bucket_with_a_parked_lattice_is_held_so_no_round_proves_it`); (2) a
//! list item pushed 1 s into the run and removed at once came back 29 s in,
//! just after the node that pushed it restarted from `kill -9`: recovery's
//! tail, its commits of the 30 s before the crash, went to region `b`
//! again and merged below the collection floor (`floor_tests::
//! a_lone_write_resent_after_a_restart_brings_back_nothing_collected`).
//! After both fixes, 12 runs with packing: no undone remove. Packing is
//! on again. Convergence took 60 s (`PART_WAIT`: a part of another
//! region's transaction shown alone) in 7 of those 12 runs; the one traced
//! was a lone `HSET` of region `a` that reached region `b` marked as a
//! part of a multi-shard transaction (region `b`'s `MULTI` had been
//! installed on the key in the same merge epoch, and the flush shipped
//! the `HSET`'s delta with the key's last unit) and waited for a rest that
//! does not exist (fixed: `order_tests::
//! a_lone_write_is_gossiped_as_lone_after_an_install_on_its_key`). Runs
//! after that fix still see 60 s waits where a region could not install
//! the other's transactions for long (leases lost, nodes starved of CPU
//! by a parallel build: "transactions of other regions waited 60s for
//! parts they carry").
//!
//! Ignored by default (`#[ignore]`) until its long runs are clean. Run it:
//!
//! ```text
//! cargo test --release --test crdt_concurrent -- --ignored --nocapture
//! ELSA_CRDT_SEED=7 ELSA_CRDT_ROUNDS=12 cargo test --release \
//!     --test crdt_concurrent concurrent_writers -- --ignored --nocapture
//! ```

mod common;

#[path = "crdt_concurrent/check.rs"]
mod check;
#[path = "crdt_concurrent/defect.rs"]
mod defect;
#[path = "crdt_concurrent/ops.rs"]
mod ops;
#[path = "crdt_concurrent/selftest.rs"]
mod selftest;
#[path = "crdt_concurrent/watch.rs"]
mod watch;
#[path = "crdt_concurrent/writer.rs"]
mod writer;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use check::{Absence, Divergence, Got, Model};
use common::caught;
use common::cluster::Cluster;
use common::env_or;
use ops::{KeyType, Op, Outcome};
use writer::{Done, Writer};

/// Two regions of two nodes; one writer per node.
const REGIONS: [&str; 4] = ["a", "a", "b", "b"];
/// How long the nodes may take to agree once healed (generous: a debug
/// build on a loaded machine). Not a measure: a bound on a hang.
const DIGEST_TIMEOUT: Duration = Duration::from_secs(180);
/// How long a node may take to rejoin and catch up after a fault.
const WHOLE_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Clone, Copy, Debug)]
enum Fault {
    Kill9,
    Sigterm,
    Isolate,
    Lapse,
}

/// [`caught`], retried while a node answers `-BUSY`: a script whose calls
/// wait out a fault can run past `busy-reply-threshold`, and the node then
/// answers every other command `-BUSY` until it ends (`docs/transactions.md`,
/// *Busy scripts*) — the harness's `INFO` too.
fn unbusy<T>(f: impl Fn() -> T) -> Result<T, String> {
    let started = Instant::now();
    loop {
        match caught(&f) {
            Err(e) if e.contains("BUSY") && started.elapsed() < WHOLE_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(200));
            }
            other => return other,
        }
    }
}

/// The cluster and what was done to it.
struct Run {
    cluster: Cluster,
    rng: StdRng,
    t0: Instant,
    events: Vec<String>,
    counts: BTreeMap<String, usize>,
    /// Nodes stopped or cut off, until the cluster was whole again.
    absences: Vec<Absence>,
}

impl Run {
    fn name(&self, i: usize) -> String {
        let s = &self.cluster.specs[i];
        format!("node {} ({})", s.id, s.region)
    }

    fn event(&mut self, what: String) {
        let at = self.t0.elapsed().as_secs_f64();
        self.events.push(format!("{at:.1}s {what}"));
    }

    /// Waits until every node counts every node as a member and has
    /// caught up.
    fn whole(&self) -> Result<(), String> {
        let all: Vec<usize> = (0..self.cluster.len()).collect();
        unbusy(|| {
            self.cluster.wait_members(&all, all.len(), WHOLE_TIMEOUT);
            self.cluster.wait_caught_up(&all, WHOLE_TIMEOUT);
        })
    }

    /// Does `f` to a random node, undoes it, and waits for the cluster to
    /// be whole again.
    fn fault(&mut self, f: Fault) -> Result<(), String> {
        let v = self.rng.gen_range(0..self.cluster.len());
        let who = self.name(v);
        let down = Duration::from_millis(self.rng.gen_range(300..1500));
        let cut = Duration::from_millis(self.rng.gen_range(1000..3000));
        *self.counts.entry(format!("{f:?}")).or_default() += 1;
        self.event(format!("{f:?} {who}"));
        let from = Instant::now();
        match f {
            Fault::Kill9 | Fault::Sigterm => {
                if matches!(f, Fault::Kill9) {
                    self.cluster.kill9(v);
                } else {
                    caught(|| self.cluster.terminate(v))?;
                }
                std::thread::sleep(down);
                caught(|| self.cluster.restart(v))?;
                self.event(format!("{who} started again"));
            }
            Fault::Isolate => {
                unbusy(|| self.cluster.fault(v, "ISOLATE"))?;
                std::thread::sleep(cut);
                unbusy(|| self.cluster.fault(v, "HEAL"))?;
                self.event(format!("{who} healed"));
            }
            Fault::Lapse => unbusy(|| self.cluster.fault(v, "LAPSE"))?,
        }
        self.whole()
            .map_err(|e| format!("after {f:?} of {who}: {e}"))?;
        self.event("whole again".into());
        // A lapsed node stays in its peers' view (catching up).
        if !matches!(f, Fault::Lapse) {
            let to = Instant::now();
            self.absences.push(Absence { who, from, to });
        }
        Ok(())
    }

    /// Heals everything and waits until every node has the same
    /// `ELSA.DIGEST` twice in a row.
    fn settle(&mut self) -> Result<Duration, String> {
        let started = Instant::now();
        for i in 0..self.cluster.len() {
            let _ = unbusy(|| self.cluster.fault(i, "HEAL"));
        }
        self.whole()?;
        let all: Vec<usize> = (0..self.cluster.len()).collect();
        unbusy(|| self.cluster.wait_same_digest(&all, DIGEST_TIMEOUT))?;
        Ok(started.elapsed())
    }
}

/// `name acked/unknown/not-applied` per op kind.
fn per_kind(ops: &[Op]) -> String {
    let mut m: BTreeMap<&str, [usize; 3]> = BTreeMap::new();
    for op in ops {
        let c = m.entry(op.kind).or_default();
        c[op.outcome as usize] += 1;
    }
    let parts: Vec<String> = m
        .iter()
        .map(|(k, c)| format!("{k} {}/{}/{}", c[0], c[1], c[2]))
        .collect();
    parts.join(", ")
}

/// Ignored until its long runs are clean: about one run in eight still
/// diverges (see the module doc, *Still seen*).
#[test]
#[ignore = "about one run in eight still diverges (module doc: Still seen)"]
fn concurrent_writers_in_two_regions_converge_by_the_crdt_rules() {
    let seed = env_or::<u64>("ELSA_CRDT_SEED", 1);
    let rounds = env_or::<usize>("ELSA_CRDT_ROUNDS", 6);
    let ttl = env_or::<u64>("ELSA_CRDT_TOMBSTONE_TTL", 1);
    println!(
        "[crdt] seed {seed} (ELSA_CRDT_SEED), {rounds} fault rounds (ELSA_CRDT_ROUNDS), \
         tombstone TTL {ttl}s (ELSA_CRDT_TOMBSTONE_TTL)"
    );
    let ttl_flag = ttl.to_string();
    let started = Instant::now();
    let flags = [
        "--appendfsync",
        "always",
        "--tombstone-ttl-sec",
        &ttl_flag,
        "--replication-factor",
        "2",
    ];
    let cluster = Cluster::start(&REGIONS, &flags);
    let nodes: Vec<(u16, String)> = (0..cluster.len())
        .map(|i| (cluster.port(i), cluster.specs[i].region.clone()))
        .collect();
    let mut run = Run {
        cluster,
        rng: StdRng::seed_from_u64(seed ^ 0x6372_6474_6661_756c),
        t0: Instant::now(),
        events: Vec::new(),
        counts: BTreeMap::new(),
        absences: Vec::new(),
    };
    // Every kind of fault once (in a seeded order), then any.
    let mut faults = vec![Fault::Kill9, Fault::Sigterm, Fault::Isolate, Fault::Lapse];
    faults.shuffle(&mut run.rng);
    let all = [Fault::Kill9, Fault::Sigterm, Fault::Isolate, Fault::Lapse];
    while faults.len() < rounds {
        faults.push(*all.choose(&mut run.rng).expect("faults"));
    }
    faults.truncate(rounds);

    let watching = std::env::var("ELSA_CRDT_WATCH").ok().map(|path| {
        let ports: Vec<u16> = nodes.iter().map(|(p, _)| *p).collect();
        let (t0, stop) = (run.t0, std::sync::Arc::new(AtomicBool::new(false)));
        let flag = stop.clone();
        let keys = KeyType::all_keys();
        let h = std::thread::spawn(move || watch::watch(&path, &ports, &keys, t0, &flag));
        (stop, h)
    });
    let stop = AtomicBool::new(false);
    let (dones, harness): (Vec<Done>, Result<(), String>) = std::thread::scope(|s| {
        let handles: Vec<_> = nodes
            .iter()
            .enumerate()
            .map(|(i, (port, region))| {
                let (stop, w) = (&stop, Writer::new(i, region, *port, seed));
                s.spawn(move || w.run(stop))
            })
            .collect();
        let mut result = Ok(());
        for &f in &faults {
            std::thread::sleep(Duration::from_millis(run.rng.gen_range(1500..3500)));
            if let Err(e) = run.fault(f) {
                result = Err(e);
                break;
            }
        }
        std::thread::sleep(Duration::from_secs(1));
        stop.store(true, Ordering::Relaxed);
        let dones = handles
            .into_iter()
            .map(|h| h.join().expect("a writer panicked"))
            .collect();
        (dones, result)
    });
    let wrote = run.t0.elapsed();
    println!("[crdt] seed {seed}: {}", run.events.join("; "));
    if let Err(e) = harness {
        panic!("seed {seed}: the cluster was not whole again: {e}");
    }
    // Not converging fails, after the keys are read and compared: what
    // differs is the diagnosis.
    let (settled, unsettled) = match run.settle() {
        Ok(took) => (took, None),
        Err(e) => (DIGEST_TIMEOUT, Some(e)),
    };
    if let Some((stop, h)) = watching {
        stop.store(true, Ordering::Relaxed);
        h.join().expect("the watcher panicked");
    }

    let ops: Vec<Op> = dones.iter().flat_map(|d| d.ops.iter().cloned()).collect();
    let mut errors: BTreeMap<String, usize> = BTreeMap::new();
    for d in &dones {
        for (k, n) in &d.errors {
            *errors.entry(k.clone()).or_default() += n;
        }
    }
    let count = |o: Outcome| ops.iter().filter(|op| op.outcome == o).count();
    let (acked, unknown, not_applied) = (
        count(Outcome::Acked),
        count(Outcome::Unknown),
        count(Outcome::NotApplied),
    );
    let model = Model::build(&ops, run.t0, &run.absences, Duration::from_secs(ttl));
    if let Ok(path) = std::env::var("ELSA_CRDT_DUMP") {
        let lines: Vec<String> = (0..ops.len()).map(|i| model.said(i)).collect();
        std::fs::write(&path, lines.join("\n") + "\n").expect("write ELSA_CRDT_DUMP");
    }

    let keys = KeyType::all_keys();
    let mut divergences: Vec<Divergence> = Vec::new();
    for key in &keys {
        let mut first: Option<(usize, Got)> = None;
        for i in 0..run.cluster.len() {
            let got = match unbusy(|| check::read(&mut run.cluster.conn(i), key)) {
                Ok(Ok(g)) => g,
                Ok(Err(e)) => {
                    divergences.push(Divergence {
                        node: i,
                        key: key.clone(),
                        what: "read".into(),
                        expected: "an answer".into(),
                        got: e.to_string(),
                    });
                    continue;
                }
                Err(e) => panic!("seed {seed}: reading {key} on node {i}: {e}"),
            };
            divergences.extend(model.check(i, key, &got));
            match &first {
                None => first = Some((i, got)),
                Some((j, g)) if *g != got => divergences.push(Divergence {
                    node: i,
                    key: key.clone(),
                    what: format!("the same as node index {j}"),
                    expected: format!("{g:?}"),
                    got: format!("{got:?}"),
                }),
                Some(_) => {}
            }
        }
    }

    let musts: Vec<String> = model
        .musts
        .iter()
        .map(|(m, n)| format!("{m:?} {n}"))
        .collect();
    let errs: Vec<String> = errors.iter().map(|(k, n)| format!("{k}: {n}")).collect();
    let connects: usize = dones.iter().map(|d| d.connect_failures).sum();
    println!(
        "[crdt] seed {seed}: {} ops ({acked} acked, {unknown} unknown, {not_applied} not applied; \
         by kind acked/unknown/not-applied: {}); errors: [{}]; {connects} refused connections; \
         faults: {:?}; {} keys compared on {} nodes, elements {} ({} of the Either only as a \
         node was away past the tombstone TTL after their remove); wrote {:.1}s, converged in \
         {:.1}s, total {:.1}s; {} divergences",
        ops.len(),
        per_kind(&ops),
        errs.join(", "),
        run.counts,
        keys.len(),
        run.cluster.len(),
        musts.join(", "),
        model.exempt,
        wrote.as_secs_f64(),
        settled.as_secs_f64(),
        started.elapsed().as_secs_f64(),
        divergences.len()
    );
    assert!(acked > 0, "seed {seed}: every op failed");
    for (w, d) in dones.iter().enumerate() {
        assert!(
            d.ops.iter().any(|op| op.outcome == Outcome::Acked),
            "seed {seed}: writer {w} got no op acknowledged"
        );
    }
    if let Some(e) = &unsettled {
        println!("[crdt] seed {seed}: the nodes did not converge once healed: {e}");
    }
    if divergences.is_empty() && unsettled.is_none() {
        return;
    }
    let mut report = String::new();
    for d in divergences.iter().take(40) {
        let s = &run.cluster.specs[d.node];
        report.push_str(&format!(
            "  node {} ({}), key {}, {}:\n    expected {}\n    got      {}\n",
            s.id, s.region, d.key, d.what, d.expected, d.got
        ));
    }
    let converged = match unsettled {
        Some(_) => "the nodes did NOT converge (ELSA.DIGEST differs) once healed; ",
        None => "",
    };
    panic!(
        "seed {seed} (ELSA_CRDT_SEED={seed} ELSA_CRDT_ROUNDS={rounds}): {converged}{} divergences \
         from the CRDT rules (first 40):\n{report}",
        divergences.len()
    );
}
