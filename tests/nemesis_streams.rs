//! A stream written in three regions (one node each, in network
//! namespaces cut with nftables: `tests/common/hosts.rs`) under random
//! faults, as issue 46 asks its checker to: in every region a writer
//! (`XADD ev * …`, paced; each alone, pipelined, in `MULTI`, in a script
//! or in `BEGIN … COMMIT` with a write of another shard's key, at random:
//! [`Way`]), a follower (`XREAD BLOCK` by the last ID it
//! read, reconnecting with it) and two consumers of group `g`
//! (`XREADGROUP … >`, then `XACK`; on reconnecting, their own pending
//! entries first, as applications do). Faults, one at a time for 4–9 s:
//!
//! - one region cut off from the other two;
//! - all three regions cut apart;
//! - `kill -9` of a node (`--appendfsync always`), started again;
//! - `SIGSTOP` of a node, `SIGCONT` after the hold;
//! - a node's clock 400 ms ahead or behind (`ELSA.FAULT CLOCK`).
//!
//! Checked after the last heal, once every node has the same digest and
//! the readers have drained:
//!
//! - every node holds the same entries (`XRANGE ev - +`), and every
//!   acknowledged `XADD` is among them;
//! - each follower read every entry exactly once, in the final order —
//!   none skipped, even those another region wrote with a lower ID than
//!   one already read (`docs/datatypes.md`, *Reads that skip nothing*);
//! - the group delivered every entry, within a region to one consumer
//!   only; across regions at least once, a second region's delivery
//!   within [`HEALTHY_LAG`] of the first unless a fault was on in between
//!   (the duplicate window is the convergence lag, `docs/datatypes.md`,
//!   *Groups across regions*; the duplicates are counted and printed);
//! - no node counted an entry of another region arriving below its read
//!   horizon (`stream_late_entries`).
//!
//! `ELSA_STREAMS_NEMESIS_SEED` replays a run (default 12: a clock ahead,
//! the three regions cut apart, a kill, a pause, a clock behind; `random`
//! draws one), `ELSA_STREAMS_NEMESIS_ROUNDS` sets its length (default 5).

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::Value;

use common::hosts::{broken, reconnected, Hosts};

const ALL: [usize; 3] = [0, 1, 2];
/// The convergence lag a group's state takes to reach another region
/// with no fault on, at most (a debug build on two cores included): a
/// second region delivers an entry again only within it.
const HEALTHY_LAG: Duration = Duration::from_secs(3);
/// How long after a fault's effects settled its lag still counts.
const SETTLE: Duration = Duration::from_secs(2);
const REGIONS: [&str; 3] = ["a", "b", "c"];

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(d) => String::from_utf8_lossy(d).into_owned(),
        Value::SimpleString(s) => s.clone(),
        x => panic!("not a string: {x:?}"),
    }
}

/// An entry ID as `(ms, seq)`, ordered as the stream orders them.
fn id(s: &str) -> (u64, u64) {
    let (ms, seq) = s.split_once('-').expect("an ID");
    (ms.parse().expect("ms"), seq.parse().expect("seq"))
}

/// The IDs of one key's part of an `XREAD`/`XREADGROUP` reply (RESP2: an
/// array of `[key, entries]`; nil when nothing came).
fn ids_of(v: &Value) -> Vec<String> {
    let Value::Array(keys) = v else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for k in keys {
        let Value::Array(kv) = k else { continue };
        let Some(Value::Array(entries)) = kv.get(1) else {
            continue;
        };
        for e in entries {
            if let Value::Array(parts) = e {
                out.push(text(&parts[0]));
            }
        }
    }
    out
}

/// How a writer adds its entry: each path chooses the `*` ID at another
/// moment relative to the shard that applies it (the read horizon must
/// hold for all of them, `elsa_shard`'s `streams/id_floor.rs`).
#[derive(Clone, Copy, Debug)]
enum Way {
    /// `XADD` alone: chosen and applied in one step on the key's shard.
    Lone,
    /// `XADD` pipelined with a write of a key of another shard: the
    /// pipeline's parts run under holds, one with a block of stamps
    /// reserved by the other.
    Pipelined,
    /// `MULTI` with `XADD` and `INCR` of another shard's key: chosen
    /// under holds, installed by the commit.
    Multi,
    /// The same in `EVAL`: chosen inside the script's transaction.
    Script,
    /// `BEGIN … COMMIT`: chosen at the command, installed at `COMMIT`.
    Begin,
}

impl Way {
    const ALL: [Way; 5] = [
        Way::Lone,
        Way::Pipelined,
        Way::Multi,
        Way::Script,
        Way::Begin,
    ];

    /// Adds entry `n` of region `r`'s writer: its ID once committed.
    fn xadd(self, con: &mut redis::Connection, r: &str, n: u64) -> redis::RedisResult<String> {
        let mut xadd = redis::cmd("XADD");
        xadd.arg("ev").arg("*").arg("r").arg(r).arg("n").arg(n);
        let other = format!("other:{r}:{}", n % 64);
        match self {
            Way::Lone => xadd.query::<Value>(con).map(|v| text(&v)),
            Way::Pipelined => {
                let (x, _): (Value, Value) = redis::pipe()
                    .add_command(xadd)
                    .cmd("SET")
                    .arg(&other)
                    .arg(n)
                    .query(con)?;
                Ok(text(&x))
            }
            Way::Multi => {
                let (x, _): (Value, i64) = redis::pipe()
                    .atomic()
                    .add_command(xadd)
                    .cmd("INCR")
                    .arg(&other)
                    .query(con)?;
                Ok(text(&x))
            }
            Way::Script => {
                let v: Value = redis::cmd("EVAL")
                    .arg(
                        "local id = redis.call('XADD', KEYS[1], '*', 'r', ARGV[1], 'n', ARGV[2]) \
                         redis.call('INCR', KEYS[2]) return id",
                    )
                    .arg(2)
                    .arg("ev")
                    .arg(&other)
                    .arg(r)
                    .arg(n)
                    .query(con)?;
                Ok(text(&v))
            }
            Way::Begin => {
                let _: Value = redis::cmd("BEGIN").arg("SI").query(con)?;
                let added = xadd.query::<Value>(con);
                // An INCR refused (the node not serving for a moment) must
                // not leave the transaction open: the writer's next lone
                // XADDs would run in it, answer IDs, and never commit (seen:
                // 14 "lost" entries after a pause, seed 163).
                let incr = redis::cmd("INCR").arg(&other).query::<Value>(con);
                let committed: redis::RedisResult<Value> = match incr {
                    Ok(_) => redis::cmd("COMMIT").query(con),
                    Err(e) => Err(e),
                };
                match (added, committed) {
                    (Ok(x), Ok(_)) => Ok(text(&x)),
                    (Err(e), _) | (_, Err(e)) => {
                        // Not committed: nothing was added (a broken
                        // connection's outcome is unknown, as always).
                        let _: redis::RedisResult<Value> = redis::cmd("ABORT").query(con);
                        Err(e)
                    }
                }
            }
        }
    }
}

/// How an acknowledged entry was written: its way, its writer's count,
/// and when (after the run's start) the reply came.
type Written = (Way, u64, Duration);

#[derive(Default)]
struct Tally {
    /// Each acknowledged ID, with how it was written.
    acked: Mutex<Vec<(String, Written)>>,
    unknown: AtomicUsize,
    /// Per region, the IDs its follower read, in order.
    followed: Mutex<BTreeMap<usize, Vec<String>>>,
    /// Every delivery: (ID, region, consumer, when).
    delivered: Mutex<Vec<(String, usize, usize, Instant)>>,
}

/// The clients of host `i` (see the module doc) until `stop` (writers)
/// and `drained` (readers).
fn clients(
    hosts: &Hosts,
    seed: u64,
    i: usize,
    stop: &Arc<AtomicBool>,
    drained: &Arc<AtomicBool>,
    tally: &Arc<Tally>,
    started: Instant,
) -> Vec<std::thread::JoinHandle<()>> {
    let (ns, addr) = (hosts.hosts[i].ns.clone(), hosts.hosts[i].addr);
    let mut threads = Vec::new();
    {
        let (ns, stop, tally) = (ns.clone(), stop.clone(), tally.clone());
        threads.push(std::thread::spawn(move || {
            use rand::{Rng, SeedableRng};
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ (i as u64) << 32);
            let mut c = None;
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let Some(con) = reconnected(&mut c, &ns, addr) else {
                    continue;
                };
                n += 1;
                let way = Way::ALL[rng.gen_range(0..Way::ALL.len())];
                match way.xadd(con, REGIONS[i], n) {
                    Ok(x) => tally
                        .acked
                        .lock()
                        .unwrap()
                        .push((x, (way, n, started.elapsed()))),
                    Err(e) if broken(&e) => {
                        tally.unknown.fetch_add(1, Ordering::Relaxed);
                        c = None;
                    }
                    Err(_) => {}
                }
                std::thread::sleep(Duration::from_millis(15));
            }
        }));
    }
    {
        let (ns, drained, tally) = (ns.clone(), drained.clone(), tally.clone());
        threads.push(std::thread::spawn(move || {
            let mut c = None;
            let mut last = "0-0".to_string();
            while !drained.load(Ordering::Relaxed) {
                let Some(con) = reconnected(&mut c, &ns, addr) else {
                    continue;
                };
                let r = redis::cmd("XREAD")
                    .arg("COUNT")
                    .arg(500)
                    .arg("BLOCK")
                    .arg(1000)
                    .arg("STREAMS")
                    .arg("ev")
                    .arg(&last)
                    .query::<Value>(con);
                match r {
                    Ok(v) => {
                        let ids = ids_of(&v);
                        if let Some(l) = ids.last() {
                            last = l.clone();
                        }
                        tally
                            .followed
                            .lock()
                            .unwrap()
                            .entry(i)
                            .or_default()
                            .extend(ids);
                    }
                    Err(e) if broken(&e) => c = None,
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        }));
    }
    for k in 0..2 {
        let (ns, drained, tally) = (ns.clone(), drained.clone(), tally.clone());
        threads.push(std::thread::spawn(move || {
            let name = format!("c{i}{k}");
            let mut c = None;
            // After a (re)connection, the consumer's own pending entries
            // first (a reply lost with its connection is still pending).
            let mut own = true;
            while !drained.load(Ordering::Relaxed) {
                if c.is_none() {
                    own = true;
                }
                let Some(con) = reconnected(&mut c, &ns, addr) else {
                    continue;
                };
                let from = if own { "0" } else { ">" };
                let r = redis::cmd("XREADGROUP")
                    .arg("GROUP")
                    .arg("g")
                    .arg(&name)
                    .arg("COUNT")
                    .arg(50)
                    .arg("BLOCK")
                    .arg(1000)
                    .arg("STREAMS")
                    .arg("ev")
                    .arg(from)
                    .query::<Value>(con);
                let ids = match r {
                    Ok(v) => ids_of(&v),
                    Err(e) if broken(&e) => {
                        c = None;
                        continue;
                    }
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(50));
                        continue;
                    }
                };
                // History until it runs dry, then new entries.
                if ids.is_empty() {
                    own = false;
                    continue;
                }
                let now = Instant::now();
                tally
                    .delivered
                    .lock()
                    .unwrap()
                    .extend(ids.iter().map(|x| (x.clone(), i, k, now)));
                let r = redis::cmd("XACK")
                    .arg("ev")
                    .arg("g")
                    .arg(&ids)
                    .query::<Value>(con);
                if matches!(&r, Err(e) if broken(e)) {
                    c = None;
                }
            }
        }));
    }
    threads
}

/// Found by this test (session 52, CI, seed 12; session 53, seed 4 in
/// release): followers of two regions skipped entries of a third. Its
/// node, let go after a pause, sent its backlog of frames at once; the
/// receivers took them in order, but the empty frames behind the one with
/// the entries finished merging first (no busy shard to wait for), and
/// the read horizon moved by their flush times past the entries still
/// being merged. The horizon now moves by frames merged in a row only
/// (`elsa_cluster`'s `service/inbox.rs`), and every node counts what
/// arrives below it (`stream_late_entries`, checked 0 here: the invariant
/// itself, not only whether a follower happened to read past it). Its
/// writers' transactions then found three more (`docs/datatypes.md`,
/// *Reads that skip nothing*), and two more around `kill -9` (seeds 4 and
/// 10 in release: an entry committed just before the kill reached the
/// other regions after the restarted node's new frames moved their
/// horizon), fixed since. An acknowledged `XADD` reported lost (seed 163)
/// was this writer's own doing: a refused `INCR` left its `BEGIN` open,
/// and the lone `XADD`s after it ran inside, never committed; a lost
/// entry is now printed with how and when it was written.
#[test]
fn three_regions_follow_a_stream_under_random_faults_skipping_nothing() {
    use rand::{Rng, SeedableRng};
    let seed = match std::env::var("ELSA_STREAMS_NEMESIS_SEED").as_deref() {
        Ok("random") => rand::random::<u32>() as u64,
        _ => common::env_or("ELSA_STREAMS_NEMESIS_SEED", 12),
    };
    let rounds = common::env_or("ELSA_STREAMS_NEMESIS_ROUNDS", 5);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    eprintln!("nemesis streams: seed {seed}, {rounds} rounds");
    let mut hosts = Hosts::new("nems", 3);
    let flags = ["--appendfsync", "always", "--fault-injection", "true"];
    for (i, node) in ALL.iter().zip(1..) {
        let seeds: Vec<usize> = ALL.iter().copied().filter(|j| j != i).collect();
        hosts.start(*i, REGIONS[*i], node, &seeds, &flags);
    }
    let long = Duration::from_secs(90);
    hosts.wait_settled(&ALL, 3, long);
    // The group, before any entry, seen by every node.
    let mut create = redis::cmd("XGROUP");
    create
        .arg("CREATE")
        .arg("ev")
        .arg("g")
        .arg("0")
        .arg("MKSTREAM");
    let _: Value = hosts.query(0, &create);
    for i in ALL {
        hosts.wait_until(i, "the group", Duration::from_secs(30), || {
            let mut groups = redis::cmd("XINFO");
            groups.arg("GROUPS").arg("ev");
            hosts
                .try_conn(i)
                .and_then(|mut c| groups.query::<Vec<Value>>(&mut c))
                .is_ok_and(|g| g.len() == 1)
        });
    }

    let t0 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let drained = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let threads: Vec<_> = ALL
        .iter()
        .flat_map(|&i| clients(&hosts, seed, i, &stop, &drained, &tally, t0))
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let mut faults = Vec::new();
    // When each fault was on (until its effects settled).
    let mut windows: Vec<(Instant, Instant)> = Vec::new();
    for _ in 0..rounds {
        let started = t0.elapsed();
        let began = Instant::now();
        let x = rng.gen_range(0..3usize);
        let others: Vec<usize> = ALL.iter().copied().filter(|&j| j != x).collect();
        let hold = Duration::from_secs(rng.gen_range(4..=9));
        let what = match rng.gen_range(0..5) {
            0 => {
                hosts.cut(&[x], &others);
                std::thread::sleep(hold);
                hosts.heal();
                format!("region {} cut off", REGIONS[x])
            }
            1 => {
                hosts.cut(&[0], &[1, 2]);
                hosts.cut(&[1], &[2]);
                std::thread::sleep(hold);
                hosts.heal();
                "all three regions cut apart".to_string()
            }
            2 => {
                hosts.kill(x);
                std::thread::sleep(hold);
                hosts.restart(x);
                format!("region {}'s node killed and restarted", REGIONS[x])
            }
            3 => {
                hosts.pause(x, true);
                std::thread::sleep(hold);
                hosts.pause(x, false);
                format!("region {}'s node paused", REGIONS[x])
            }
            _ => {
                let ms: i64 = if rng.gen_bool(0.5) { 400 } else { -400 };
                hosts.skew_clock(x, ms, hold);
                format!("region {}'s clock {ms} ms", REGIONS[x])
            }
        };
        hosts.wait_settled(&ALL, 3, long);
        windows.push((began, Instant::now() + SETTLE));
        faults.push(format!("{started:.1?}: {what} for {hold:?}"));
        std::thread::sleep(Duration::from_secs(2));
    }
    stop.store(true, Ordering::Relaxed);
    let converged = hosts.wait_same_digest(&ALL, long);
    // The entries held, and the region that wrote each.
    let range = |i: usize| -> Vec<(String, String)> {
        let v: Vec<Value> = hosts.query(i, redis::cmd("XRANGE").arg("ev").arg("-").arg("+"));
        v.iter()
            .map(|e| match e {
                Value::Array(parts) => match &parts[1] {
                    Value::Array(f) => (text(&parts[0]), text(&f[1])),
                    x => panic!("XRANGE fields {x:?}"),
                },
                x => panic!("XRANGE entry {x:?}"),
            })
            .collect()
    };
    let written = range(0);
    let fin: Vec<String> = written.iter().map(|(x, _)| x.clone()).collect();
    let region_of: HashMap<&str, &str> = written
        .iter()
        .map(|(x, r)| (x.as_str(), r.as_str()))
        .collect();
    // The readers drain: every follower reaches the last entry, the group
    // has delivered every entry somewhere.
    let everything: BTreeSet<&String> = fin.iter().collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let followed = tally.followed.lock().unwrap();
        let caught_up = ALL
            .iter()
            .all(|i| followed.get(i).is_some_and(|f| f.len() >= fin.len()));
        drop(followed);
        let delivered: BTreeSet<String> = tally
            .delivered
            .lock()
            .unwrap()
            .iter()
            .map(|d| d.0.clone())
            .collect();
        if caught_up && everything.iter().all(|x| delivered.contains(*x)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    drained.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }

    let acked = tally.acked.lock().unwrap().clone();
    let followed = tally.followed.lock().unwrap().clone();
    let delivered = tally.delivered.lock().unwrap().clone();
    // Deliveries per ID: which regions, which consumers.
    let mut per: HashMap<&str, BTreeSet<(usize, usize)>> = HashMap::new();
    // And the first delivery of each in each region.
    let mut first: HashMap<&str, BTreeMap<usize, Instant>> = HashMap::new();
    for (x, r, k, at) in &delivered {
        per.entry(x).or_default().insert((*r, *k));
        let t = first.entry(x).or_default().entry(*r).or_insert(*at);
        *t = (*t).min(*at);
    }
    // Across regions at least once, the duplicate window bounded by the
    // convergence lag: a second region's delivery comes within
    // `HEALTHY_LAG` of the first, unless a fault was on in between.
    let mut widest_healthy = Duration::ZERO;
    let mut in_faults = 0;
    let mut beyond: Vec<(&str, Duration)> = Vec::new();
    for (x, regions) in &first {
        let t0 = *regions.values().min().expect("one");
        for t in regions.values().filter(|t| **t > t0) {
            let gap = *t - t0;
            if windows.iter().any(|(a, b)| *a <= *t && *b >= t0) {
                in_faults += 1;
            } else if gap <= HEALTHY_LAG {
                widest_healthy = widest_healthy.max(gap);
            } else {
                beyond.push((x, gap));
            }
        }
    }
    let in_two_regions = per
        .values()
        .filter(|c| c.iter().map(|(r, _)| r).collect::<BTreeSet<_>>().len() > 1)
        .count();
    let two_in_a_region: Vec<&&str> = per
        .iter()
        .filter(|(_, c)| {
            let regions: Vec<usize> = c.iter().map(|(r, _)| *r).collect();
            regions.len() != regions.iter().collect::<BTreeSet<_>>().len()
        })
        .map(|(x, _)| x)
        .collect();
    let skipped: Vec<(usize, usize)> = ALL
        .iter()
        .map(|i| {
            let f = followed.get(i).cloned().unwrap_or_default();
            (*i, fin.iter().filter(|x| !f.contains(x)).count())
        })
        .collect();
    eprintln!(
        "nemesis streams seed {seed}: {faults:#?}\n{} entries, {} XADDs acknowledged, {} of \
         unknown outcome; converged {converged:.1?} after the writers stopped; followers \
         read {:?}, skipped {skipped:?}; group: {} deliveries, {} entries delivered in two \
         or more regions ({in_faults} second deliveries during faults, the rest within \
         {widest_healthy:?} of the first), {} to two consumers of one region",
        fin.len(),
        acked.len(),
        tally.unknown.load(Ordering::Relaxed),
        ALL.iter()
            .map(|i| followed.get(i).map_or(0, Vec::len))
            .collect::<Vec<_>>(),
        delivered.len(),
        in_two_regions,
        two_in_a_region.len()
    );
    // Where the guarantee broke, each node says so (`stream_late_entries`).
    for i in ALL {
        let late = hosts.replication_field(i, "stream_late_entries");
        eprintln!("region {}: stream_late_entries {late:?}", REGIONS[i]);
        for l in hosts.log_lines_with(i, "below the read horizon") {
            eprintln!("  {l}");
        }
    }
    assert!(acked.len() > 300, "too little written to judge");
    for i in [1, 2] {
        assert!(
            range(i) == written,
            "region {} holds other entries",
            REGIONS[i]
        );
    }
    let held: BTreeSet<&String> = fin.iter().collect();
    let lost: Vec<&(String, Written)> = acked.iter().filter(|(x, _)| !held.contains(x)).collect();
    assert!(lost.is_empty(), "acknowledged XADDs lost: {lost:?}");
    assert!(
        fin.windows(2).all(|w| id(&w[0]) < id(&w[1])),
        "XRANGE out of order"
    );
    for i in ALL {
        let f = followed.get(&i).cloned().unwrap_or_default();
        let read: BTreeSet<&String> = f.iter().collect();
        let missed: Vec<(&String, &str)> = fin
            .iter()
            .filter(|x| !read.contains(x))
            .map(|x| (x, region_of[x.as_str()]))
            .collect();
        let at = f.iter().zip(&fin).position(|(a, b)| a != b);
        assert!(
            f == fin,
            "region {}'s follower read {} entries, not the {} held once each in order: \
             first difference at {at:?}, missed (ID, writer) {missed:?}; read around it \
             {:?}",
            REGIONS[i],
            f.len(),
            fin.len(),
            at.map(|a| &f[a.saturating_sub(3)..(a + 3).min(f.len())])
        );
    }
    for i in ALL {
        assert_eq!(
            hosts.replication_field(i, "stream_late_entries").as_deref(),
            Some("0"),
            "region {}: entries of another region arrived below the read horizon",
            REGIONS[i]
        );
    }
    let undelivered: Vec<&String> = fin
        .iter()
        .filter(|x| !per.contains_key(x.as_str()))
        .collect();
    assert!(undelivered.is_empty(), "never delivered: {undelivered:?}");
    assert!(
        two_in_a_region.is_empty(),
        "delivered to two consumers of one region: {two_in_a_region:?}"
    );
    assert!(
        beyond.is_empty(),
        "delivered again in another region more than {HEALTHY_LAG:?} after the first, with no \
         fault on: {:?}",
        &beyond[..beyond.len().min(5)]
    );
}
