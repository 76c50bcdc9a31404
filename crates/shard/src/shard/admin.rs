//! Node-wide requests to a shard (`AdminMsg`): statistics, snapshots,
//! flushes, freezes, key listings — what INFO, SAVE, FLUSHALL and their
//! relatives ask of every shard.

use crate::msg::AdminMsg;

use super::*;

impl Shard {
    pub(super) fn handle_admin(&mut self, msg: AdminMsg) {
        match msg {
            AdminMsg::Dbsize { db, reply } => {
                self.keyset.track();
                let n = self.live_keys(db);
                self.respond(reply, n);
            }
            AdminMsg::Keyspace(reply) => {
                let rows = self.keyspace();
                self.respond(reply, rows);
            }
            AdminMsg::Flush { db, at, reply } => {
                self.op_flush(db, at);
                let floors = self.flush_floor.clone();
                self.respond(reply, floors);
            }
            AdminMsg::RaiseFloors(floors) => {
                self.raise_flush_floors(&floors);
            }
            AdminMsg::Floors(reply) => {
                let _ = reply.send(self.flush_floor.clone());
            }
            AdminMsg::SetFsync(policy) => {
                if let Some(d) = &mut self.durability {
                    d.wal.set_policy(policy);
                }
            }
            AdminMsg::Scan {
                db,
                segment,
                count,
                pattern,
                kind,
                reply,
            } => {
                self.keyset.track();
                let r = self.op_scan(db, segment, count, pattern.as_deref(), kind.as_deref());
                self.respond(reply, r);
            }
            AdminMsg::RandomKey { db, seed, reply } => {
                self.keyset.track();
                let k = self.op_random_key(db, seed);
                self.respond(reply, k);
            }
            AdminMsg::Stats(reply) => {
                let _ = reply.send(self.stats());
            }
            AdminMsg::StaleHolds { older_than, reply } => {
                let _ = reply.send(self.stale_holds(older_than));
            }
            AdminMsg::HeldInstall { txn, reply } => {
                let _ = reply.send(self.held_install(txn));
            }
            AdminMsg::RefuseRemoteInstalls(on) => self.refuse_remote_installs = on,
            AdminMsg::Parts { key, reply } => {
                let _ = reply.send(self.describe_parts(&key));
            }
            AdminMsg::Freeze(reply) => {
                self.frozen = true;
                if self.holds.is_empty() {
                    let _ = reply.send(());
                } else {
                    self.freeze_waiters.push(reply);
                }
            }
            AdminMsg::Dump { seq, reply } => {
                let dumped = self.op_dump(seq);
                // The snapshot replaces the log, which tells confirmed own
                // records from the rest: it may only hold what the region's
                // replicas confirmed, so it is answered once they have.
                match &self.repl {
                    Some(r) if dumped.is_ok() && r.gate.confirmed_through() < r.horizon() => {
                        let gate = r.gate.clone();
                        r.gate.wait(
                            r.horizon(),
                            Box::new(move |ok| {
                                let _ = reply.send(if ok && !gate.any_failed() {
                                    dumped
                                } else {
                                    Err("the region's replicas did not confirm every write the snapshot holds".into())
                                });
                            }),
                        );
                    }
                    _ => {
                        let _ = reply.send(dumped);
                    }
                }
            }
            AdminMsg::Thaw => self.frozen = false,
        }
    }
}
