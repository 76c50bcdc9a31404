//! Region commands: `INFO replication`, `WAITREGION` (is my commit visible
//! in region R yet?), `ELSA.DIGEST` (this node's data, for comparing
//! replicas) and `ELSA.FAULT` (test-only: cut this node off from the other
//! regions, and heal it).

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use bytes::Bytes;
use elsa_shard::ShardMsg;

use crate::cmd::{int_arg, is};
use crate::conn::Conn;

impl Conn {
    /// The `# Replication` section of INFO.
    /// `pending` is the number of changed keys waiting for the epoch flush.
    pub(crate) fn info_replication(&self, t: &mut String, pending: usize) {
        let c = &self.shared.config;
        let _ = write!(t, "# Replication\r\nrole:master\r\nconnected_slaves:0\r\n");
        let Some(cl) = &self.shared.cluster else {
            let _ = write!(
                t,
                "cluster_enabled:0\r\nregion:{}\r\n\r\n",
                c.cluster.region
            );
            return;
        };
        let ring = cl.ring();
        let (p50, p99, max) = cl.lag_percentiles();
        let _ = write!(
            t,
            "cluster_enabled:1\r\nregion:{}\r\nregions:{}\r\nmembers:{}\r\nreplication:{}\r\nrouting:{}\r\nreplication_factor:{}\r\nvnodes:{}\r\nmerge_epoch_ms:{}\r\nepochs_flushed:{}\r\npending_deltas:{pending}\r\ngossip_frames_dropped:{}\r\nconvergence_lag_p50_ms:{p50}\r\nconvergence_lag_p99_ms:{p99}\r\nconvergence_lag_max_ms:{max}\r\nfault_isolated:{}\r\ncatching_up:{}\r\n",
            c.cluster.region,
            ring.regions().join(","),
            ring.members().len(),
            cl.replication().name(),
            c.cluster.routing.name(),
            c.cluster.replication_factor,
            c.cluster.vnodes,
            c.merge_epoch_ms,
            cl.epochs(),
            cl.gossip_frames_dropped(),
            cl.isolated() as u8,
            !cl.is_serving() as u8,
        );
        // Streams to other regions (`elsa_cluster`'s `service/streams`).
        let (waiting, given_up, gaps) = cl.gossip_streams();
        let _ = write!(
            t,
            "gossip_frames_waiting:{waiting}\r\ngossip_frames_given_up:{given_up}\r\ngossip_gaps:{gaps}\r\n"
        );
        // How far behind the clock XREAD's view of streams is (-1: no
        // bound, one region or `stream-read-horizon immediate`).
        let _ = write!(
            t,
            "stream_read_horizon_lag_ms:{}\r\nstream_late_entries:{}\r\n",
            match elsa_shard::ops::streams::read_horizon() {
                _ if elsa_shard::ops::streams::read_immediate() => -1,
                u64::MAX => -1,
                h => elsa_shard::unix_ms().saturating_sub(h) as i64,
            },
            // Another region's entries that came below the horizon: 0
            // unless the promise of no skipped entry broke.
            elsa_shard::ops::streams::late_count()
        );
        let _ = write!(
            t,
            "peer_links:{}\r\npeer_frames_refused:{}\r\npeer_datagrams_dropped:{}\r\n",
            if cl.settings().auth.is_some() {
                "tls"
            } else {
                "plaintext"
            },
            cl.frames_refused(),
            cl.datagrams_dropped(),
        );
        // How far behind tombstone collection is: the age of the horizon
        // every peer is proven to hold (`Cluster::tombstone_horizon`; -1
        // while nothing is proven).
        let horizon_ms = cl.tombstone_horizon() >> 16;
        let _ = write!(
            t,
            "tombstone_horizon_age_ms:{}\r\n",
            if horizon_ms == 0 || horizon_ms == u64::MAX >> 16 {
                -1
            } else {
                elsa_shard::unix_ms().saturating_sub(horizon_ms) as i64
            }
        );
        // Who serves a slot in the region (see `elsa_cluster::owners`).
        let _ = write!(t, "ownership:{}\r\n", c.cluster.ownership.name());
        if let Some(r) = cl.region() {
            let view = r.view();
            let left = r.lease_left_ms();
            let _ = write!(
                t,
                "ownership_leader:{}\r\nownership_index:{}\r\nownership_nodes_in:{}\r\nlease_ms_left:{left}\r\n",
                r.leader().map_or(-1, i64::from),
                view.index,
                view.inside.len(),
            );
        }
        // Where this node sits on the ring, and its decommission (see
        // `elsa_cluster::service::decommission`).
        let d = cl.decommission_status();
        let _ = write!(
            t,
            "slots_primary:{}\r\nslots_replica:{}\r\ndecommission:{}\r\ndecommission_slots_remaining:{}\r\n",
            ring.primary_slots(cl.settings().node),
            ring.replica_slots(cl.settings().node),
            d.phase,
            d.slots_remaining,
        );
        let now = elsa_shard::unix_ms();
        for (i, p) in cl.peer_info().iter().enumerate() {
            let ae_ago = if p.stats.last_ae_unix_ms == 0 {
                -1
            } else {
                now.saturating_sub(p.stats.last_ae_unix_ms) as i64
            };
            let _ = write!(
                t,
                "peer{i}:node={},region={},addr={},client={},state={},ready={},lag_ms={},received={},queued={},dropped={},ae_last_ms_ago={ae_ago},ae_last_differing_buckets={},ae_shipped={},ae_waited_for_stream={},stream_wait_ms={},stream_stuck={}\r\n",
                p.node,
                p.region,
                p.addr,
                p.client,
                if p.connected { "up" } else { "down" },
                p.ready as u8,
                p.stats.lag_ms,
                p.stats.received,
                p.queued,
                p.dropped,
                p.stats.last_ae_buckets,
                p.stats.ae_shipped,
                p.stats.ae_waited_for_stream,
                p.stream.0.as_millis(),
                p.stream.1 as u8,
            );
        }
        for r in ring.regions() {
            let wm = cl.watermark(r);
            let behind = if wm == u64::MAX || wm == 0 {
                -1
            } else {
                now.saturating_sub(wm >> 16) as i64
            };
            let _ = write!(t, "watermark_ms_behind_{r}:{behind}\r\n");
        }
        t.push_str("\r\n");
    }

    /// `WAIT numreplicas timeout`: how many replicas hold every write this
    /// connection was answered, as Redis counts its replicas — here the
    /// other nodes of the region that replicate its keys (the replication
    /// factor, less this node, at most the region's other nodes; none
    /// alone). A write acknowledged at level `region` or `all` is on them
    /// already; one at level `local` once the region's watermark passed
    /// it. Fewer than `numreplicas`: it waits until the timeout (0:
    /// forever), as Redis does, and answers the count then — unless
    /// `block` is false (inside EXEC, where Redis answers at once).
    pub(crate) async fn wait(&mut self, args: &[Bytes], block: bool) {
        let numreplicas = match int_arg(&args[1]) {
            Ok(n) => n,
            Err(e) => return self.w().error(&e.0),
        };
        let timeout = match elsa_shard::ops::parse_i64(&args[2]) {
            Some(ms) if ms < 0 => return self.w().error("ERR timeout is negative"),
            Some(ms) => ms as u64,
            None => {
                return self
                    .w()
                    .error("ERR timeout is not an integer or out of range")
            }
        };
        let deadline = (timeout > 0).then(|| Instant::now() + Duration::from_millis(timeout));
        let since = self.coord.node.hlc.peek();
        loop {
            let acked = self.replicas_holding(since).await;
            if acked >= numreplicas || !block {
                return self.w().int(acked);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return self.w().int(acked);
            }
            let step = Duration::from_millis(self.shared.config.merge_epoch_ms.max(10));
            let step = deadline.map_or(step, |d| {
                step.min(d.saturating_duration_since(Instant::now()))
            });
            tokio::time::sleep(step).await;
        }
    }

    /// The region's other replicas of this node's keys that hold every
    /// commit before `ts` (see [`Conn::wait`]).
    async fn replicas_holding(&self, ts: u64) -> i64 {
        let Some(cl) = self.shared.cluster.clone() else {
            return 0;
        };
        let region = self.shared.config.cluster.region.clone();
        let others = cl
            .ring()
            .members()
            .iter()
            .filter(|m| m.region == region)
            .count()
            .saturating_sub(1);
        let replicas = (self
            .shared
            .config
            .cluster
            .replication_factor
            .saturating_sub(1))
        .min(others);
        if self.s.ack == elsa_shard::AckLevel::Local && cl.region_watermark(&region).await < ts {
            return 0;
        }
        replicas as i64
    }

    /// `WAITREGION region timeout-ms [commit-ts]`: 1 once every commit this
    /// client made (or the given one) is merged in every node of `region`
    /// that replicates it, 0 if the timeout passed first.
    pub(crate) async fn waitregion(&mut self, args: &[Bytes]) {
        let Some(cl) = self.shared.cluster.clone() else {
            // Alone: a commit is visible in this (the only) region at once.
            return self.w().int(1);
        };
        let region = String::from_utf8_lossy(&args[1]).to_string();
        if !cl.ring().regions().contains(&region) {
            return self.w().error(&format!("ERR unknown region '{region}'"));
        }
        let timeout = match int_arg(&args[2]) {
            Ok(ms) if ms >= 0 => Duration::from_millis(ms as u64),
            Ok(_) => return self.w().error("ERR timeout is negative"),
            Err(e) => return self.w().error(&e.0),
        };
        let ts = match args.get(3) {
            Some(a) => match int_arg(a) {
                Ok(ts) if ts >= 0 => ts as u64,
                _ => {
                    return self
                        .w()
                        .error("ERR commit timestamp must be a positive integer")
                }
            },
            // Everything this connection saw acknowledged happened before
            // now: the clock has passed every commit it was answered.
            None => self.coord.node.hlc.peek(),
        };
        let deadline = Instant::now() + timeout;
        let step = Duration::from_millis(self.shared.config.merge_epoch_ms.max(10) / 2);
        loop {
            if cl.region_watermark(&region).await >= ts {
                return self.w().int(1);
            }
            if Instant::now() >= deadline {
                return self.w().int(0);
            }
            tokio::time::sleep(step.min(deadline - Instant::now())).await;
        }
    }

    /// `ELSA.DIGEST`: XOR of every lattice fingerprint this node holds
    /// (tombstones included) and its record count — equal on two nodes
    /// exactly when they hold the same keys at the same versions.
    pub(crate) async fn elsa_digest(&mut self, args: &[Bytes]) {
        if let Some(a) = args.get(1) {
            if args.len() == 2 && a.eq_ignore_ascii_case(b"records") {
                return self.elsa_digest_records(None).await;
            }
            if args.len() == 3 && a.eq_ignore_ascii_case(b"state") {
                return self.elsa_digest_records(Some(&args[2])).await;
            }
            return self
                .w()
                .error("ERR syntax error: ELSA.DIGEST [RECORDS | STATE key]");
        }
        let mut xor = 0u64;
        for i in 0..self.coord.node.shards() {
            match self
                .coord
                .ask(self.coord.node.local(i), ShardMsg::Digests)
                .await
            {
                Ok(d) => xor ^= d.iter().fold(0, |a, b| a ^ b),
                Err(e) => return self.w().error(&e.to_string()),
            }
        }
        let stats = match self.shard_stats().await {
            Ok(s) => s,
            Err(e) => return self.w().error(&e.to_string()),
        };
        let records: usize = stats.iter().map(|s| s.records).sum();
        let mut w = self.w();
        w.array(2);
        w.bulk(format!("{xor:016x}").as_bytes());
        w.int(records as i64);
    }

    /// `ELSA.DIGEST RECORDS`: every record this node holds, tombstones
    /// included, one line each — `key version kind content` (the key as
    /// stored, its database byte first; `kind` is `tombstone`, `string` or
    /// the typed state's type; `content` a typed state's digest) — sorted,
    /// so that two nodes' listings can be compared line by line when their
    /// digests differ (tests). `ELSA.DIGEST STATE key`: the lattice state
    /// of `key` in every database, as the code prints it (what differs
    /// inside a record).
    async fn elsa_digest_records(&mut self, only: Option<&Bytes>) {
        let mut lines = Vec::new();
        let now_ms = elsa_shard::unix_ms();
        let wanted = vec![u64::MAX; elsa_shard::table::DIGEST_BUCKETS.div_ceil(64)];
        for i in 0..self.coord.node.shards() {
            let make = |reply| ShardMsg::BucketEntries {
                wanted: wanted.clone(),
                limit: usize::MAX,
                older_than: elsa_lattice::Ts::MAX,
                whole: Vec::new(),
                reply,
            };
            let batch = match self.coord.ask(self.coord.node.local(i), make).await {
                Ok(b) => b,
                Err(e) => return self.w().error(&e.to_string()),
            };
            for e in batch.entries {
                use elsa_shard::wal::codec::EntryState;
                if let Some(key) = only {
                    if elsa_shard::db::user_key(&e.key) == &key[..] {
                        let db = elsa_shard::db::db_of(&e.key);
                        lines.push(format!(
                            "db {db}: {}@{} {:#?}",
                            e.version.commit_ts, e.version.origin, e.state
                        ));
                    }
                    continue;
                }
                let (kind, content) = match &e.state {
                    EntryState::Plain(None) => ("tombstone".to_string(), 0),
                    EntryState::Plain(Some(_)) => ("string".to_string(), 0),
                    EntryState::Typed(t) => (format!("{:?}", t.kind(now_ms)), t.digest()),
                };
                lines.push(format!(
                    "{} {}@{} {kind} {content:016x}",
                    e.key.escape_ascii(),
                    e.version.commit_ts,
                    e.version.origin
                ));
            }
        }
        if let Some(key) = only {
            // And what of other regions' transactions waits for it (as
            // stored in database 0).
            for i in 0..self.coord.node.shards() {
                let make = |reply| {
                    ShardMsg::Admin(elsa_shard::AdminMsg::Parts {
                        key: key.clone(),
                        reply,
                    })
                };
                if let Ok(parts) = self.coord.ask(self.coord.node.local(i), make).await {
                    if !parts.is_empty() {
                        lines.push(format!("shard {i} {parts}"));
                    }
                }
            }
        }
        lines.sort();
        let mut w = self.w();
        w.array(lines.len());
        for l in &lines {
            w.bulk(l.as_bytes());
        }
    }

    /// `ELSA.DECOMMISSION`: this node leaves the cluster gracefully — it
    /// stops being primary of anything and hands its slots' data to their
    /// new replicas; progress in INFO replication (`decommission:`).
    pub(crate) fn elsa_decommission(&mut self) {
        let Some(cl) = self.shared.cluster.clone() else {
            return self.w().error("ERR this node has no peers");
        };
        match cl.decommission() {
            Ok(()) => self.w().simple("OK"),
            Err(e) => self.w().error(&e),
        }
    }

    /// `ELSA.FAULT ISOLATE|DROP-INSTALLS|BUSY-INSTALLS|REFUSE-REMOTE-INSTALLS|DELAY-INSTALLS
    /// ms|DELAY-ANSWERS ms [PREPARES]|LINKS-DOWN ms|FORGET-PEERS ms|CRASH-AFTER-RECORD|CRASH-BEFORE-SHIP prefix|
    /// PAUSE-BEFORE-SHIP prefix|CRASH-AFTER-SHIP-TO-ONE prefix|PAUSE-REPAIR|
    /// LAPSE|CLOCK ms|HEAL` (needs
    /// `fault-injection = true`):
    /// cut this node off from other regions; have it ignore the installs
    /// of multi-shard commits coordinated elsewhere (a node that dies
    /// between a commit's decision and its install, for tests), or answer
    /// them Busy (a node no longer their primary); have its shards refuse
    /// every install of other regions' transactions, its own installer's
    /// too (a node whose region never confirms them); have the commits it
    /// coordinates wait `ms` between decision and install (a slow
    /// coordinator); hold its answers to peers `ms` (with PREPARES, only
    /// those to prepares); drop its peer connections and fail its
    /// attempts to connect for `ms` while membership goes on (a network
    /// hiccup); leave the region's other nodes out of the views it
    /// installs for `ms` (its failure detector dropping them in a cut,
    /// while the region's group goes on); die right after logging
    /// a transaction record (or a write of a key with `prefix`), before
    /// shipping it, or stop itself there (SIGSTOP), or ship it to one
    /// replica and die once that one has it; start no anti-entropy round;
    /// act as if it had just
    /// noticed a pause (it stops serving and catches up again); run its
    /// clock `ms` ahead (negative: behind) of the real one (clock skew);
    /// HEAL undoes the delays, cuts and skew.
    pub(crate) fn elsa_fault(&mut self, args: &[Bytes]) {
        let Some(cl) = self.shared.cluster.clone() else {
            return self.w().error("ERR this node has no peers");
        };
        if !self.shared.config.cluster.fault_injection {
            return self
                .w()
                .error("ERR fault injection is off (start the node with --fault-injection true)");
        }
        if is(&args[1], "isolate") {
            cl.set_isolated(true);
        } else if is(&args[1], "drop-installs") {
            cl.set_drop_installs(true);
        } else if is(&args[1], "delay-installs") {
            let Some(ms) = millis(args.get(2)) else {
                return self
                    .w()
                    .error("ERR ELSA.FAULT DELAY-INSTALLS takes milliseconds");
            };
            self.coord.node.set_install_delay(ms);
        } else if is(&args[1], "delay-answers") {
            let Some(ms) = millis(args.get(2)) else {
                return self
                    .w()
                    .error("ERR ELSA.FAULT DELAY-ANSWERS takes milliseconds");
            };
            let prepares_only = args.get(3).is_some_and(|a| is(a, "prepares"));
            cl.set_answer_delay_of(ms, prepares_only);
        } else if is(&args[1], "links-down") {
            let Some(ms) = millis(args.get(2)) else {
                return self
                    .w()
                    .error("ERR ELSA.FAULT LINKS-DOWN takes milliseconds");
            };
            cl.set_links_down(std::time::Duration::from_millis(ms));
        } else if is(&args[1], "forget-peers") {
            let Some(ms) = millis(args.get(2)) else {
                return self
                    .w()
                    .error("ERR ELSA.FAULT FORGET-PEERS takes milliseconds");
            };
            cl.set_peers_forgotten(std::time::Duration::from_millis(ms));
        } else if is(&args[1], "busy-installs") {
            cl.set_busy_installs(true);
        } else if is(&args[1], "refuse-remote-installs") {
            self.refuse_remote_installs(true);
        } else if is(&args[1], "crash-after-record") {
            cl.set_crash_before_ship(Some((
                Bytes::from_static(elsa_txn::record::RECORD_PREFIX),
                libc::SIGKILL,
            )));
        } else if is(&args[1], "crash-before-ship") || is(&args[1], "pause-before-ship") {
            let Some(prefix) = args.get(2) else {
                return self.w().error(
                    "ERR ELSA.FAULT CRASH-BEFORE-SHIP and PAUSE-BEFORE-SHIP take a key prefix",
                );
            };
            let signal = if is(&args[1], "crash-before-ship") {
                libc::SIGKILL
            } else {
                libc::SIGSTOP
            };
            cl.set_crash_before_ship(Some((prefix.clone(), signal)));
        } else if is(&args[1], "crash-after-ship-to-one") {
            let Some(prefix) = args.get(2) else {
                return self
                    .w()
                    .error("ERR ELSA.FAULT CRASH-AFTER-SHIP-TO-ONE takes a key prefix");
            };
            cl.set_ship_to_one(Some(prefix.clone()));
        } else if is(&args[1], "pause-repair") {
            cl.set_repair_paused(true);
        } else if is(&args[1], "lapse") {
            cl.simulate_pause();
        } else if is(&args[1], "clock") {
            let Some(ms) = args
                .get(2)
                .and_then(|a| std::str::from_utf8(a).ok()?.parse::<i64>().ok())
                .filter(|ms| ms.unsigned_abs() <= 24 * 3_600_000)
            else {
                return self.w().error(
                    "ERR ELSA.FAULT CLOCK takes milliseconds (negative: behind), at most a day",
                );
            };
            cl.set_clock_offset(ms);
        } else if is(&args[1], "heal") {
            cl.set_isolated(false);
            cl.set_drop_installs(false);
            cl.set_answer_delay(0);
            cl.set_links_down(std::time::Duration::ZERO);
            cl.set_peers_forgotten(std::time::Duration::ZERO);
            cl.set_busy_installs(false);
            cl.set_repair_paused(false);
            cl.set_clock_offset(0);
            self.coord.node.set_install_delay(0);
            self.refuse_remote_installs(false);
        } else {
            return self
                .w()
                .error("ERR ELSA.FAULT takes ISOLATE, DROP-INSTALLS, DELAY-INSTALLS ms, DELAY-ANSWERS ms [PREPARES], LINKS-DOWN ms, FORGET-PEERS ms, BUSY-INSTALLS, REFUSE-REMOTE-INSTALLS, CRASH-AFTER-RECORD, CRASH-BEFORE-SHIP prefix, PAUSE-BEFORE-SHIP prefix, CRASH-AFTER-SHIP-TO-ONE prefix, PAUSE-REPAIR, LAPSE, CLOCK ms or HEAL");
        }
        self.w().simple("OK");
    }

    /// `ELSA.FAULT REFUSE-REMOTE-INSTALLS` (on) and `HEAL` (off), on every
    /// shard of this node.
    fn refuse_remote_installs(&self, on: bool) {
        for inbox in &self.coord.node.inboxes {
            let _ = inbox.send(elsa_shard::ShardMsg::Admin(
                elsa_shard::AdminMsg::RefuseRemoteInstalls(on),
            ));
        }
    }
}

/// A fault's millisecond argument, if it is one.
fn millis(arg: Option<&Bytes>) -> Option<u64> {
    std::str::from_utf8(arg?).ok()?.parse().ok()
}
