//! The cluster variant of the restart-differential test (issue 41): the
//! single-node checker's sequences (`restart_differential/gen_rdiff.rs`)
//! go in lockstep to a real `redis-server` (`appendonly yes`,
//! `appendfsync always`: the sequential model) and to an Elsa cluster,
//! through ONE client connection to one node of region `a` (the session
//! node), so SELECT, MULTI and WATCH stay on that connection. Replies are
//! compared as the single-node checker compares them, with its rules
//! (`restart_differential/run.rs`, shared: the cluster is a `run::Side`).
//!
//! Two shapes, one test each, one cluster at a time: one region of three
//! nodes, and two regions of two nodes (region `b` only receives
//! replication: its nodes show that cross-region replication, restarts
//! and collection converge to the sequential model). Each node runs with
//! `--appendfsync always --tombstone-ttl-sec 1 --databases 16`, the
//! sequence's `--snapshot-interval-sec` (0, 1, 2 or 5), and a replication
//! factor equal to its region's size (3, resp. 2: the default is 2), so
//! that every node holds every key: its `SCAN` (per node, as in Redis
//! Cluster: `docs/regions.md`, *Not done yet*) lists the whole key space
//! and `ELSA.DIGEST` is comparable across all nodes.
//!
//! At each restart item of the sequence Redis is stopped and started as
//! the single-node checker does it, and ONE node of the cluster, chosen at
//! random, is stopped the same way — SIGTERM, `SHUTDOWN`, `SAVE` then
//! `kill -9`, or `kill -9` — and started again on its files and ports;
//! then the checker waits until every node counts every node as a member
//! and has caught up. If the session node was the one restarted, the
//! session moves to a random node of region `a` (the same one or another)
//! and takes its database and protocol along, as the single-node checker
//! reconnects. Sometimes (0–2 times a sequence) a random node is cut off
//! for a few items while commands run, then healed (`ELSA.FAULT HEAL`)
//! 2–6 items later or before the next key-space comparison:
//! `ELSA.FAULT LAPSE` on any node (it acts as if it had been paused or cut
//! off: stops serving, catches up again; its peers route around it), and
//! with two regions also `ISOLATE` on any node (cut off from the other
//! region) or `LINKS-DOWN 500–2000` on a node of region `b` (its peer
//! connections drop and fail while membership goes on). Not `LINKS-DOWN`
//! in region `a`: a command the session node forwards to, or from, a node
//! whose links are down answers `-ERR no answer from the shard serving the
//! key …; it may or may not have been applied` (seed 1, the first version
//! of this test) — an outcome unknown by design (`docs/regions.md`: "While
//! a primary is down and not yet declared dead, its keys answer an
//! error"), which one lockstep session cannot resolve.
//!
//! Before each stop, after each restart and at the end, the checker waits
//! until every node has the same `ELSA.DIGEST` (twice in a row, up to
//! [`DIGEST_TIMEOUT`]; not converging is a divergence), then dumps the
//! whole key space through EVERY node — every database, key, type, value
//! and PTTL (`restart_differential/keyspace.rs`: its own `SCAN` and reads
//! that may be served by the key's primary) — and compares each with a
//! dump of Redis read just before it, with the single-node checker's
//! tolerances. A divergence names the node(s) and their regions.
//!
//! Left out: nothing by default. The commands whose replies are per node
//! (DBSIZE, KEYS, SCAN, RANDOMKEY) stay in: with every node holding every
//! key and acknowledgements at level `region` (the write is on every
//! replica of the region first), the session node's answers are the
//! cluster's; while a short TTL may lapse they are compared by errors only,
//! as on one node. FLUSHDB and FLUSHALL are replicated (`docs/regions.md`)
//! and stay in; Elsa never answers CROSSSLOT (`docs/commands.md`), so
//! multi-key commands, MULTI and scripts over any keys stay in. The base
//! generator already leaves out SWAPDB, CONFIG SET, BGSAVE and SHUTDOWN
//! (restarts are items of their own). BEGIN … COMMIT blocks stay in.
//! `ELSA_RDIFF_SKIP=NAME,…` leaves out more, as in the single-node test.
//! Not here: shrinking (`ELSA_RDIFF_SHRINK`: the shrinker replays on one
//! node); a region cut off for longer than a few items; node crashes
//! between a commit's decision and its install (`tests/cluster/commits.rs`).
//!
//! Seen in the first long run (30 sequences per shape, seeds 1–30, a
//! debug build on a machine loaded about 5× its two cores): no reply and
//! no key space of any node differed from Redis's. Twice (seeds 2 and 13,
//! one region) the cluster was not whole again after a restart: one
//! node's failure detector dropped a healthy peer for a moment while
//! another node restarted, took it back as "catching up", and still showed
//! it `ready=0` 120 s later, while the peer and the third node saw it
//! ready (its log shows no restart or pause) — an issue candidate, NOT
//! filtered (the default run does not meet it); it is reported as `the
//! cluster was not whole again after …`.
//!
//! Size: `ELSA_RDIFF_CLUSTER_SEQUENCES` sequences per shape (default 2:
//! about 3 minutes for both shapes in a debug build on two cores) of
//! about `ELSA_RDIFF_CLUSTER_LEN` commands (default 30), seeds from
//! `ELSA_RDIFF_SEED` (default 1). Each shape prints one summary line:
//! sequences, commands, restarts by kind and by node, cuts, keys compared
//! per node, divergences. On a divergence the test panics with the
//! listing of each kind, as the single-node test does (`report.rs`).
//!
//! ```text
//! ELSA_RDIFF_CLUSTER_SEQUENCES=30 cargo test --test restart_differential_cluster \
//!     -- --nocapture --test-threads 1
//! ```
//!
//! Replay one sequence: `ELSA_RDIFF_SEED=<seed> ELSA_RDIFF_CLUSTER_SEQUENCES=1`
//! and the shape's test name (the node restarted and the cuts are drawn
//! from the seed too; timing is not replayed). `ELSA_KEEP_TEST_DIRS=1`
//! keeps the nodes' files and logs.

mod common;

#[allow(dead_code)]
#[path = "differential/gen.rs"]
mod gen;
#[allow(dead_code)]
#[path = "differential/norm.rs"]
mod norm;
#[allow(dead_code)]
#[path = "differential/resp.rs"]
mod resp;

#[allow(dead_code)]
#[path = "restart_differential/gen_rdiff.rs"]
mod gen_rdiff;
#[allow(dead_code)]
#[path = "restart_differential/keyspace.rs"]
mod keyspace;
#[allow(dead_code)]
#[path = "restart_differential/report.rs"]
mod report;
#[allow(dead_code)]
#[path = "restart_differential/run.rs"]
mod run;
#[allow(dead_code)]
#[path = "restart_differential/servers.rs"]
mod servers;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use common::caught;
use common::cluster::Cluster;
use common::env_or;
use gen_rdiff::RSequence;
use resp::{Conn, Reply};
use run::{Side, Space};
use servers::RestartKind;

/// How long the nodes may take to agree (generous: a debug build on a
/// shared machine). Not a measure: a bound on a hang.
const DIGEST_TIMEOUT: Duration = Duration::from_secs(180);
/// How long a restarted node may take to rejoin and catch up.
const WHOLE_TIMEOUT: Duration = Duration::from_secs(120);

/// A cluster's layout.
struct Shape {
    name: &'static str,
    /// Each node's region.
    regions: &'static [&'static str],
    /// Equal to a region's size: every node holds every key.
    replication_factor: u32,
}

const ONE_REGION: Shape = Shape {
    name: "1 region x 3 nodes",
    regions: &["a", "a", "a"],
    replication_factor: 3,
};

const TWO_REGIONS: Shape = Shape {
    name: "2 regions x 2 nodes",
    regions: &["a", "a", "b", "b"],
    replication_factor: 2,
};

/// One cluster at a time (the two shapes are two tests of this binary):
/// a starved failure detector would see dead nodes.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A node cut off: its index, the fault, the items it started before and
/// is healed before.
struct Cut {
    node: usize,
    fault: String,
    from: usize,
    until: usize,
}

/// The Elsa side of a run: a cluster and the session node.
struct ClusterSide {
    cluster: Cluster,
    rng: StdRng,
    /// The node the session connection goes to (of region `a`).
    session: usize,
    /// Items before which a cut starts.
    cut_at: Vec<usize>,
    cut: Option<Cut>,
    notes: Vec<String>,
    counters: BTreeMap<String, usize>,
}

impl ClusterSide {
    fn start(seq: &RSequence, shape: &Shape) -> Result<Box<dyn Side>, String> {
        let mut flags = servers::durability_flags(seq.snapshot_sec);
        flags.extend([
            "--replication-factor".into(),
            shape.replication_factor.to_string(),
        ]);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        // (`Cluster::start` starts again on other ports when a node loses
        // a port race to another process.)
        let cluster = caught(|| Cluster::start(shape.regions, &flags))?;
        let mut rng = StdRng::seed_from_u64(seq.seed ^ 0x636c_7573_7465_7221);
        let session = *cluster.in_region("a").choose(&mut rng).expect("region a");
        let cuts = match rng.gen_range(0..10) {
            0..=4 => 0,
            5..=7 => 1,
            _ => 2,
        };
        let cut_at = (0..cuts)
            .map(|_| rng.gen_range(0..seq.items.len().max(1)))
            .collect();
        let mut side = ClusterSide {
            cluster,
            rng,
            session,
            cut_at,
            cut: None,
            notes: Vec::new(),
            counters: BTreeMap::new(),
        };
        side.notes
            .push(format!("session on {}", side.name(side.session)));
        Ok(Box::new(side))
    }

    fn name(&self, i: usize) -> String {
        let s = &self.cluster.specs[i];
        format!("node {} ({})", s.id, s.region)
    }

    fn count(&mut self, what: String) {
        *self.counters.entry(what).or_default() += 1;
    }

    fn all(&self) -> Vec<usize> {
        (0..self.cluster.len()).collect()
    }

    /// Heals the node cut off, if one is.
    fn heal(&mut self, why: &str) {
        let Some(cut) = self.cut.take() else {
            return;
        };
        let who = self.name(cut.node);
        match caught(|| self.cluster.fault(cut.node, "HEAL")) {
            Ok(()) => self
                .notes
                .push(format!("{who} healed ({}) {why}", cut.fault)),
            Err(e) => self.notes.push(format!("HEAL of {who} failed: {e}")),
        }
    }

    /// Waits until every node counts every node as a member and has
    /// caught up.
    fn whole(&self) -> Result<(), String> {
        let all = self.all();
        caught(|| {
            self.cluster.wait_members(&all, all.len(), WHOLE_TIMEOUT);
            self.cluster.wait_caught_up(&all, WHOLE_TIMEOUT);
        })
    }

    /// Stops node `v` `kind`'s way.
    fn stop(&mut self, v: usize, kind: RestartKind) -> Result<(), String> {
        let port = self.cluster.port(v);
        let conn = || {
            let mut c = Conn::connect(port).map_err(|e| format!("connect: {e}"))?;
            c.set_read_timeout(Duration::from_secs(60));
            Ok::<Conn, String>(c)
        };
        match kind {
            RestartKind::Sigterm => caught(|| self.cluster.terminate(v)),
            RestartKind::Shutdown => {
                // Success is the connection closing without a reply.
                match conn()?.call(&[b"SHUTDOWN"]) {
                    Reply::Broken(_) => caught(|| self.cluster.terminate(v)),
                    other => Err(format!("SHUTDOWN answered {other}")),
                }
            }
            RestartKind::SaveKill9 => match servers::save(&mut conn()?) {
                Reply::Simple(ok) if ok == b"OK" => {
                    self.cluster.kill9(v);
                    Ok(())
                }
                other => Err(format!("SAVE answered {other}")),
            },
            RestartKind::Kill9 => {
                self.cluster.kill9(v);
                Ok(())
            }
        }
    }
}

impl ClusterSide {
    fn add_ms(&mut self, what: &str, since: Instant) {
        *self.counters.entry(format!("ms {what}")).or_default() +=
            since.elapsed().as_millis() as usize;
    }

    /// Heals the cut, waits for the cluster to be whole and for every
    /// node to have the same digest.
    fn settle_all(&mut self) -> Result<(), String> {
        self.heal("before the key spaces are compared");
        self.whole()?;
        let all = self.all();
        let started = Instant::now();
        let mut previous: Option<Vec<(String, i64)>> = None;
        loop {
            let now = caught(|| {
                all.iter()
                    .map(|&i| self.cluster.digest(i))
                    .collect::<Vec<_>>()
            })?;
            let same = now.windows(2).all(|w| w[0] == w[1]);
            if same && previous.as_ref() == Some(&now) {
                return Ok(());
            }
            if started.elapsed() > DIGEST_TIMEOUT {
                let lines: Vec<String> = all
                    .iter()
                    .zip(&now)
                    .map(|(&i, d)| format!("      {}: {} records, {}", self.name(i), d.1, d.0))
                    .collect();
                return Err(format!(
                    "    ELSA.DIGEST still differs after {DIGEST_TIMEOUT:?}:\n{}\n      {}",
                    lines.join("\n"),
                    self.cluster.records_not_everywhere(&all)
                ));
            }
            previous = same.then_some(now);
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn restart_one(&mut self, kind: RestartKind) -> Result<(), String> {
        self.heal("before the restart");
        let v = self.rng.gen_range(0..self.cluster.len());
        let who = self.name(v);
        let role = if v == self.session {
            "the session node".to_string()
        } else {
            format!("a node of {}", self.cluster.specs[v].region)
        };
        self.count(format!("restarted {role}"));
        self.notes.push(format!("restarted: {who}, {role}"));
        self.stop(v, kind)
            .map_err(|e| format!("stop: {who}: {e}"))?;
        caught(|| self.cluster.restart(v)).map_err(|e| format!("start: {who}: {e}"))?;
        self.whole()
            .map_err(|e| format!("whole: {who} is up (node indices below from 0): {e}"))?;
        if v == self.session {
            let a = self.cluster.in_region("a");
            self.session = *a.choose(&mut self.rng).expect("region a");
            let to = self.name(self.session);
            self.notes.push(format!("session moves to {to}"));
        }
        Ok(())
    }
}

impl Side for ClusterSide {
    fn port(&self) -> u16 {
        self.cluster.port(self.session)
    }

    fn restart(&mut self, kind: RestartKind) -> Result<(), String> {
        let t0 = Instant::now();
        let done = self.restart_one(kind);
        self.add_ms("restarting", t0);
        done
    }

    fn before_item(&mut self, i: usize) {
        if self.cut.as_ref().is_some_and(|c| i >= c.until) {
            let n = self.cut.as_ref().map_or(0, |c| i - c.from);
            self.heal(&format!("{n} items later"));
        }
        if self.cut.is_some() || !self.cut_at.contains(&i) {
            return;
        }
        let n = self.cluster.len();
        let in_b = self.cluster.in_region("b");
        let (node, fault) = match self.rng.gen_range(0..3) {
            0 if !in_b.is_empty() => (self.rng.gen_range(0..n), "ISOLATE".to_string()),
            1 if !in_b.is_empty() => (
                *in_b.choose(&mut self.rng).expect("region b"),
                format!("LINKS-DOWN {}", self.rng.gen_range(500..=2000)),
            ),
            _ => (self.rng.gen_range(0..n), "LAPSE".to_string()),
        };
        let who = self.name(node);
        match caught(|| self.cluster.fault(node, &fault)) {
            Ok(()) => {
                let verb = fault.split(' ').next().unwrap_or("").to_string();
                self.count(format!("cut {verb}"));
                self.notes.push(format!("cut: {who}, ELSA.FAULT {fault}"));
                let until = i + self.rng.gen_range(2..=6);
                self.cut = Some(Cut {
                    node,
                    fault,
                    from: i,
                    until,
                });
            }
            Err(e) => self
                .notes
                .push(format!("cut: ELSA.FAULT {fault} on {who} failed: {e}")),
        }
    }

    fn settle(&mut self) -> Result<(), String> {
        let t0 = Instant::now();
        let done = self.settle_all();
        self.add_ms("settling", t0);
        done
    }

    fn spaces(&self) -> Vec<Space> {
        self.all()
            .into_iter()
            .map(|i| Space {
                port: self.cluster.port(i),
                name: Some(self.name(i)),
                group: format!("region {}", self.cluster.specs[i].region),
            })
            .collect()
    }

    fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }

    fn counters(&self) -> BTreeMap<String, usize> {
        self.counters.clone()
    }
}

/// The failing runs that share a signature.
struct Kind {
    signature: String,
    seeds: Vec<u64>,
    first: String,
}

/// `name n, …` of a counter map, keys filtered by `prefix` (cut off).
fn counted(m: &BTreeMap<String, usize>, prefix: &str) -> String {
    let parts: Vec<String> = m
        .iter()
        .filter_map(|(k, n)| Some(format!("{} {n}", k.strip_prefix(prefix)?)))
        .collect();
    parts.join(", ")
}

fn check(shape: &Shape) {
    let _one = one_at_a_time();
    let sequences = env_or::<u64>("ELSA_RDIFF_CLUSTER_SEQUENCES", 2);
    let len = env_or::<usize>("ELSA_RDIFF_CLUSTER_LEN", 30);
    let base = env_or::<u64>("ELSA_RDIFF_SEED", 1);
    let skip = gen_rdiff::skip_from_env();
    let started = Instant::now();
    let mut stats = run::Stats::default();
    let mut kinds: Vec<Kind> = Vec::new();
    let mut failed = 0;
    for i in 0..sequences {
        let seq = gen_rdiff::without(gen_rdiff::sequence(base + i, len), &skip);
        // Its own tag: a dir named like the single-node checker's could be
        // swept by a run of that one side by side (Redis then cannot start
        // again: a harness failure seen once).
        let outcome = match run::run_on(&seq, "crdiff", |_| ClusterSide::start(&seq, shape)) {
            Ok(o) => o,
            Err(e) => panic!("harness failure at seed {}: {e}", seq.seed),
        };
        stats.add(&outcome.stats);
        let Some(f) = outcome.failure else {
            continue;
        };
        failed += 1;
        let restart = f
            .restart
            .map(|k| format!(", last restart {k}"))
            .unwrap_or_default();
        let full = format!(
            "  {}, seed {}{restart}, item {} of {}, snapshot-interval-sec {}\n{}{}\n",
            shape.name,
            seq.seed,
            f.item + 1,
            seq.items.len(),
            seq.snapshot_sec,
            report::listing(&seq, f.item, f.command, &outcome.notes),
            f.detail
        );
        eprintln!("DIVERGENCE [{}]\n{full}", f.signature);
        match kinds.iter_mut().find(|k| k.signature == f.signature) {
            Some(k) => k.seeds.push(seq.seed),
            None => kinds.push(Kind {
                signature: f.signature.clone(),
                seeds: vec![seq.seed],
                first: full,
            }),
        }
    }
    let restarts: usize = stats.restarts.values().sum();
    let cuts: usize = stats
        .side
        .iter()
        .filter(|(k, _)| k.starts_with("cut "))
        .map(|(_, n)| n)
        .sum();
    let per_node: Vec<String> = stats
        .keys_by_space
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    let commands: usize = stats.commands;
    let secs = |what: &str| stats.side.get(what).copied().unwrap_or(0) as f64 / 1000.0;
    let summary = format!(
        "restart-differential-cluster [{}]: {sequences} sequences (seeds {base}..{}), \
         {commands} commands, {restarts} restarts ({}; {}), {cuts} cuts ({}), \
         {} keys compared ({}), {} rules applied, in {:.1}s ({:.1}s restarting one node \
         and waiting for it, {:.1}s waiting for equal digests); {failed} sequences diverged, \
         {} kinds of divergence",
        shape.name,
        base + sequences,
        stats.restarts_by_kind(),
        counted(&stats.side, "restarted "),
        counted(&stats.side, "cut "),
        stats.keys_compared,
        per_node.join(", "),
        stats.rules_applied,
        started.elapsed().as_secs_f64(),
        secs("ms restarting"),
        secs("ms settling"),
        kinds.len()
    );
    println!("{summary}");
    if kinds.is_empty() {
        return;
    }
    let mut report = format!("{summary}\n");
    for (n, k) in kinds.iter().enumerate() {
        let seeds: Vec<String> = k.seeds.iter().take(12).map(u64::to_string).collect();
        let _ = writeln!(
            report,
            "\n=== divergence {}: {}   ({} sequences; seeds {})",
            n + 1,
            k.signature,
            k.seeds.len(),
            seeds.join(" ")
        );
        report.push_str(&k.first);
    }
    panic!("an Elsa cluster's key space differs from Redis 7's across restarts:\n{report}");
}

#[test]
fn one_region_of_three_nodes_converges_to_redis_across_restarts() {
    check(&ONE_REGION);
}

#[test]
fn two_regions_of_two_nodes_converge_to_redis_across_restarts() {
    check(&TWO_REGIONS);
}
