//! CLUSTER: Elsa's placement as a Redis Cluster client reads it.
//!
//! Every key's hash carries its Redis Cluster slot (`elsa_shard::keyhash`),
//! and a slot's keys share one ring bucket, so each of the 16384 slots has one
//! owner: on a node alone, one of its workers; in a region, a worker of
//! the slot's primary node. CLUSTER SLOTS, SHARDS and NODES list those
//! owners as Redis Cluster nodes, each a master without replicas:
//!
//! - with `worker-port-base` set, each worker of this node is a "node" of
//!   its own, on port `worker-port-base + i`, so a cluster client sends a
//!   key's commands to the thread that owns it (no hop between threads);
//! - without it, this node is one "node", on the port the client reached;
//! - other nodes of the region are one "node" each, on their client port.
//!
//! Nothing is refused for being on the "wrong" node: any port of any node
//! serves any key (forwarding as for any client), so there is no MOVED or
//! ASK, and no CROSSSLOT — a command or transaction may span slots. The
//! slot map only tells clients where a key is served fastest. Slots are
//! never moved by hand (ADDSLOTS, SETSLOT, MEET… are not Elsa's: the ring
//! places slots itself).

use std::net::{IpAddr, SocketAddr};

use bytes::Bytes;
use elsa_lattice::NodeId;
use elsa_shard::keyhash::{cluster_slot, BUCKETS_PER_SLOT, CLUSTER_SLOTS};

use crate::cmd::is;
use crate::conn::Conn;

/// CLUSTER HELP's lines (after the first).
const HELP: &[&str] = &[
    "INFO",
    "    Return information about the cluster.",
    "KEYSLOT <key>",
    "    Return the hash slot for <key>.",
    "MYID",
    "    Return the node id.",
    "NODES",
    "    Return cluster configuration seen by node. Output format:",
    "    <id> <ip:port@cport> <flags> <master> <pings> <pongs> <epoch> <link> <slot> ...",
    "SHARDS",
    "    Return information about slot range mappings and the nodes that own them.",
    "SLOTS",
    "    Return information about slots range mappings. Each range is made of:",
    "    start, end, master and replicas IP addresses, ports and ids",
];

/// One Redis Cluster "node" as Elsa presents it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Endpoint {
    /// 40 hex digits: the Elsa node id, then the worker (1-based; 0 for a
    /// whole node).
    id: String,
    ip: IpAddr,
    port: u16,
    /// The node's peer port (Redis's cluster bus port); 0 without peers.
    cport: u16,
    /// The endpoint this connection is on.
    myself: bool,
}

/// The slot map: each endpoint with its slot ranges (inclusive), in
/// order of first slot.
struct SlotMap {
    endpoints: Vec<(Endpoint, Vec<(u16, u16)>)>,
}

fn endpoint_id(node: NodeId, worker: Option<usize>) -> String {
    format!("{node:032x}{:08x}", worker.map_or(0, |w| w + 1))
}

impl Conn {
    /// CLUSTER KEYSLOT|MYID|INFO|SLOTS|SHARDS|NODES|HELP.
    pub(crate) fn cluster(&mut self, args: &[Bytes]) {
        if self.refuse_subcommand("cluster", args) {
            return;
        }
        let sub = &args[1];
        if is(sub, "HELP") {
            return self.help("CLUSTER", HELP);
        }
        if is(sub, "KEYSLOT") {
            return self.w().int(i64::from(cluster_slot(&args[2])));
        }
        let map = self.slot_map();
        if is(sub, "MYID") {
            let me = map.endpoints.iter().find(|(e, _)| e.myself);
            let id = me.map_or_else(
                || endpoint_id(self.shared.config.node_id, None),
                |(e, _)| e.id.clone(),
            );
            self.w().bulk(id.as_bytes());
        } else if is(sub, "INFO") {
            let n = map.endpoints.len();
            let text = format!(
                "cluster_state:ok\r\ncluster_slots_assigned:{CLUSTER_SLOTS}\r\ncluster_slots_ok:{CLUSTER_SLOTS}\r\ncluster_slots_pfail:0\r\ncluster_slots_fail:0\r\ncluster_known_nodes:{n}\r\ncluster_size:{n}\r\ncluster_current_epoch:1\r\ncluster_my_epoch:1\r\ncluster_stats_messages_sent:0\r\ncluster_stats_messages_received:0\r\ntotal_cluster_links_buffer_limit_exceeded:0\r\n"
            );
            self.w().verbatim(&text);
        } else if is(sub, "SLOTS") {
            let mut ranges: Vec<(u16, u16, &Endpoint)> = map
                .endpoints
                .iter()
                .flat_map(|(e, rs)| rs.iter().map(move |&(a, b)| (a, b, e)))
                .collect();
            ranges.sort_by_key(|r| r.0);
            let mut w = self.w();
            w.array(ranges.len());
            for (start, end, e) in ranges {
                w.array(3);
                w.int(i64::from(start));
                w.int(i64::from(end));
                w.array(4);
                w.bulk(e.ip.to_string().as_bytes());
                w.int(i64::from(e.port));
                w.bulk(e.id.as_bytes());
                w.map(0);
            }
        } else if is(sub, "SHARDS") {
            let mut w = self.w();
            w.array(map.endpoints.len());
            for (e, ranges) in &map.endpoints {
                w.map(2);
                w.bulk(b"slots");
                w.array(ranges.len() * 2);
                for &(a, b) in ranges {
                    w.int(i64::from(a));
                    w.int(i64::from(b));
                }
                w.bulk(b"nodes");
                w.array(1);
                w.map(7);
                w.bulk(b"id");
                w.bulk(e.id.as_bytes());
                w.bulk(b"port");
                w.int(i64::from(e.port));
                w.bulk(b"ip");
                w.bulk(e.ip.to_string().as_bytes());
                w.bulk(b"endpoint");
                w.bulk(e.ip.to_string().as_bytes());
                w.bulk(b"role");
                w.bulk(b"master");
                w.bulk(b"replication-offset");
                w.int(0);
                w.bulk(b"health");
                w.bulk(b"online");
            }
        } else if is(sub, "NODES") {
            let mut text = String::new();
            for (e, ranges) in &map.endpoints {
                let flags = if e.myself { "myself,master" } else { "master" };
                text.push_str(&format!(
                    "{} {}@{} {flags} - 0 0 1 connected",
                    e.id,
                    SocketAddr::new(e.ip, e.port),
                    e.cport
                ));
                for &(a, b) in ranges {
                    if a == b {
                        text.push_str(&format!(" {a}"));
                    } else {
                        text.push_str(&format!(" {a}-{b}"));
                    }
                }
                text.push('\n');
            }
            self.w().verbatim(&text);
        }
    }

    /// Who serves each slot, as this connection should be told.
    fn slot_map(&self) -> SlotMap {
        let config = &self.shared.config;
        let me = config.node_id;
        // The address this client reached: where it can reach this node's
        // other ports too.
        let local = self.local_addr();
        let local_ip = local.map_or(config.addr.ip(), |a| a.ip());
        let local_port = local.map_or(config.addr.port(), |a| a.port());
        let base = config.worker_port_base;
        let own = |worker: u16| -> Endpoint {
            let cport = config.cluster.peer_port;
            if base == 0 {
                return Endpoint {
                    id: endpoint_id(me, None),
                    ip: local_ip,
                    port: local_port,
                    cport,
                    myself: true,
                };
            }
            let port = base.saturating_add(worker);
            Endpoint {
                id: endpoint_id(me, Some(usize::from(worker))),
                ip: local_ip,
                port,
                cport,
                myself: port == local_port,
            }
        };
        let owners: Vec<Endpoint> = match &self.shared.cluster {
            None => {
                let ring = elsa_cluster::ring::Ring::alone(
                    me,
                    config.workers as u16,
                    config.cluster.vnodes,
                );
                (0..CLUSTER_SLOTS)
                    .map(|slot| own(ring.own_shard(slot * BUCKETS_PER_SLOT)))
                    .collect()
            }
            Some(cluster) => {
                let ring = cluster.ring();
                let region = ring.own_region();
                (0..CLUSTER_SLOTS)
                    .map(|slot| {
                        let primary = ring.replicas(slot * BUCKETS_PER_SLOT, region).first();
                        match primary.map(|id| (id, ring.member(id.node))) {
                            Some((id, _)) if id.node == me => own(id.index),
                            Some((id, Some(m))) => Endpoint {
                                id: endpoint_id(id.node, None),
                                // A node bound to every interface is
                                // reached where its peers reach it.
                                ip: if m.client.ip().is_unspecified() {
                                    m.peer.ip()
                                } else {
                                    m.client.ip()
                                },
                                port: m.client.port(),
                                cport: m.peer.port(),
                                myself: false,
                            },
                            // No primary in this view (a region still
                            // forming): this node serves it by forwarding.
                            _ => own(ring.own_shard(slot * BUCKETS_PER_SLOT)),
                        }
                    })
                    .collect()
            }
        };
        // Each endpoint's ranges: a slot extends its endpoint's last range
        // when it follows it, else starts a new one.
        let mut endpoints: Vec<(Endpoint, Vec<(u16, u16)>)> = Vec::new();
        for (slot, owner) in owners.into_iter().enumerate() {
            let slot = slot as u16;
            let i = match endpoints.iter().position(|(e, _)| *e == owner) {
                Some(i) => i,
                None => {
                    endpoints.push((owner, Vec::new()));
                    endpoints.len() - 1
                }
            };
            match endpoints[i].1.last_mut() {
                Some(range) if range.1 + 1 == slot => range.1 = slot,
                _ => endpoints[i].1.push((slot, slot)),
            }
        }
        SlotMap { endpoints }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_forty_hex_digits_and_tell_workers_apart() {
        let a = endpoint_id(7, None);
        let b = endpoint_id(7, Some(0));
        let c = endpoint_id(7, Some(1));
        for id in [&a, &b, &c] {
            assert_eq!(id.len(), 40);
            assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
        }
        assert!(a != b && b != c && a != c);
    }
}
