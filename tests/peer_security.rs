//! Issue 16's peer attacks as regression tests, against real `elsa server`
//! processes on loopback: the peer port reads nothing and merges nothing
//! without the cluster secret, a frame with a far-future timestamp is
//! refused even with it, and a node with another secret never joins.
//!
//! Frames are forged with `elsa_cluster::wire` over
//! `elsa_cluster::peer_auth::PeerConn` (TLS and the HMAC handshake, or
//! plaintext).

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use common::cluster::{new_secret, write_secret, Cluster};
use common::{Node, TestDir};
use elsa_cluster::peer_auth::PeerConn;
use elsa_cluster::wire::{self, Body, Frame};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn now_ts() -> u64 {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as u64;
    ms << 16
}

fn peer_addr(c: &Cluster, i: usize) -> SocketAddr {
    format!("127.0.0.1:{}", c.specs[i].peer).parse().unwrap()
}

fn lattice(key: &str, value: &str, commit_ts: u64) -> wire::Lattice {
    wire::Lattice {
        key: Bytes::from(key.to_string()),
        value: Some(Bytes::from(value.to_string())),
        expire_ms: None,
        start_ts: commit_ts.saturating_sub(1),
        commit_ts,
        origin: 99,
        unit: 0,
        typed: None,
        ..Default::default()
    }
}

fn gossip(flushed_ts: u64, lattices: Vec<wire::Lattice>) -> Frame {
    Frame::new(Body::Gossip(wire::Gossip {
        to_shard: 0,
        from_shard: 0,
        flushed_ts,
        lattices,
        after_gap: false,
        ..Default::default()
    }))
}

/// The anti-entropy request that read every key: all 65 536 buckets.
fn pull_everything() -> Frame {
    Frame::new(Body::AeEntries(wire::AeEntries {
        round: 1,
        lattices: Vec::new(),
        pull: (0..65_536).collect(),
        full: true,
        ..Default::default()
    }))
}

fn get(c: &Cluster, key: &str) -> Option<String> {
    let mut conn = c.conn(0);
    redis::cmd("GET").arg(key).query(&mut conn).expect("GET")
}

fn wait_log(c: &Cluster, i: usize, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if c.node(i).log_text().contains(needle) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!(
        "node {i} never logged {needle:?}; log tail:\n{}",
        c.log_tail(i, 30)
    );
}

#[test]
fn without_the_secret_the_peer_port_reads_and_writes_nothing() {
    let c = Cluster::start(&["r1"], &[]);
    let mut conn = c.conn(0);
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v1")
        .query(&mut conn)
        .unwrap();
    let addr = peer_addr(&c, 0);
    let rt = rt();

    // Plaintext, as the attack did: a Hello, a read of every bucket, a
    // forged write. The node expects TLS: nothing comes back.
    rt.block_on(async {
        let mut p = PeerConn::open(addr, None, 99, "r1").await.expect("tcp");
        let _ = p.send(pull_everything()).await;
        let _ = p
            .send(gossip(
                now_ts(),
                vec![
                    lattice("k", "pwned", now_ts()),
                    lattice("planted", "x", now_ts()),
                ],
            ))
            .await;
        let got = p.recv(Duration::from_secs(2)).await;
        assert!(got.is_none(), "a plaintext peer got an answer: {got:?}");
    });
    wait_log(&c, 0, "refused");

    // TLS with another secret: the handshake fails, nothing is sent.
    let wrong = new_secret();
    let r = rt.block_on(PeerConn::open(addr, Some(wrong.as_bytes()), 99, "r1"));
    assert!(r.is_err(), "a wrong secret was accepted");
    wait_log(&c, 0, "wrong cluster secret");

    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        get(&c, "k").as_deref(),
        Some("v1"),
        "the key was overwritten"
    );
    assert_eq!(get(&c, "planted"), None, "a key was planted");
}

#[test]
fn with_the_secret_far_future_timestamps_are_refused() {
    let c = Cluster::start(&["r1"], &[]);
    let mut conn = c.conn(0);
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v1")
        .query(&mut conn)
        .unwrap();
    let addr = peer_addr(&c, 0);
    let rt = rt();
    rt.block_on(async {
        let mut p = PeerConn::open(addr, Some(c.secret.as_bytes()), 99, "r1")
            .await
            .expect("the right secret authenticates");
        assert_eq!(p.hello.node, c.specs[0].id, "the node introduced itself");

        // The channel works: an honest frame is merged and acknowledged.
        p.send(gossip(now_ts(), vec![lattice("honest", "yes", now_ts())]))
            .await
            .unwrap();
        let ack = p.recv(Duration::from_secs(5)).await;
        assert!(
            matches!(
                ack,
                Some(Frame {
                    body: Some(Body::GossipAck(_))
                })
            ),
            "no ack for an honest frame: {ack:?}"
        );

        // 2^64−2 would lock the key for good; 2^63−1 would drag the clock.
        for forged in [u64::MAX - 1, (1u64 << 63) - 1] {
            p.send(gossip(now_ts(), vec![lattice("k", "forged", forged)]))
                .await
                .unwrap();
            p.send(gossip(forged, vec![lattice("other", "forged", now_ts())]))
                .await
                .unwrap();
            p.send(Frame::new(Body::Request(wire::Request {
                id: 7,
                shard: 0,
                hlc: forged,
                call: Bytes::new(),
            })))
            .await
            .unwrap();
            let got = p.recv(Duration::from_secs(1)).await;
            assert!(got.is_none(), "a forged frame was answered: {got:?}");
        }
        // A pipeline's pivot batch reserves a block of timestamps: one of
        // 2^62 would drag the clock as far.
        let call = elsa_cluster::remote::Call {
            kind: 1,
            batch_mode: 1,
            block: 1 << 62,
            ..Default::default()
        };
        p.send(Frame::new(Body::Request(wire::Request {
            id: 8,
            shard: 0,
            hlc: now_ts(),
            call: prost::Message::encode_to_vec(&call).into(),
        })))
        .await
        .unwrap();
        let got = p.recv(Duration::from_secs(1)).await;
        assert!(got.is_none(), "a forged block was answered: {got:?}");
    });
    wait_log(&c, 0, "frame refused");
    assert_eq!(c.replication_field(0, "peer_links").as_deref(), Some("tls"));
    let refused: u64 = c
        .replication_field(0, "peer_frames_refused")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(refused >= 7, "INFO counts {refused} refused frames");
    assert_eq!(get(&c, "honest").as_deref(), Some("yes"));
    assert_eq!(get(&c, "k").as_deref(), Some("v1"), "a forged lattice won");
    assert_eq!(get(&c, "other"), None);

    // The key still takes writes and deletes.
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v2")
        .query(&mut conn)
        .unwrap();
    assert_eq!(get(&c, "k").as_deref(), Some("v2"));
    let n: i64 = redis::cmd("DEL").arg("k").query(&mut conn).unwrap();
    assert_eq!(n, 1);
    assert_eq!(get(&c, "k"), None);

    // The clock stayed near wall time: a commit's timestamp is positive
    // and within seconds of now.
    let _: () = redis::cmd("BEGIN").query(&mut conn).unwrap();
    let _: () = redis::cmd("SET")
        .arg("t")
        .arg("1")
        .query(&mut conn)
        .unwrap();
    let ts: i64 = redis::cmd("COMMIT").query(&mut conn).unwrap();
    assert!(ts > 0, "COMMIT answered {ts}");
    let ms = (ts as u64) >> 16;
    let now = now_ts() >> 16;
    assert!(
        ms.abs_diff(now) < 10_000,
        "commit at {ms} ms, wall clock {now} ms"
    );
}

#[test]
fn a_node_with_another_secret_never_joins() {
    let c = Cluster::start(&["r1"], &[]);
    let dir = TestDir::new("wrong-secret");
    let file = write_secret(&dir, &new_secret());
    let peer = common::cluster::free_tcp_udp_port();
    let seed = format!("127.0.0.1:{}", c.specs[0].peer);
    let args = [
        "--bind",
        "127.0.0.1",
        "--node-id",
        "2",
        "--region",
        "r2",
        "--region-nodes",
        "1",
        "--peer-port",
        &peer.to_string(),
        "--seeds",
        &seed,
        "--workers",
        "2",
        "--merge-epoch-ms",
        "50",
        "--anti-entropy-ms",
        "300",
        "--cluster-secret-file",
        &file.display().to_string(),
    ]
    .map(|s| s.to_string());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let intruder = Node::start(&dir.data(), &dir.log(), &args);
    let mut ic = intruder.conn();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r: redis::RedisResult<()> = redis::cmd("SET").arg("intruder").arg("x").query(&mut ic);
        if r.is_ok() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the intruder never took a write: {r:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Several membership and anti-entropy periods.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(
        c.replication_field(0, "members").as_deref(),
        Some("1"),
        "the intruder joined:\n{}",
        c.info_replication(0)
    );
    assert_eq!(get(&c, "intruder"), None, "the intruder's write arrived");
    wait_log(&c, 0, "membership: dropped a datagram");
    let dropped: u64 = c
        .replication_field(0, "peer_datagrams_dropped")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(dropped > 0, "INFO counts no dropped datagram");
}

/// The review's finding: the callee answered a caller's first Hello with
/// its own — node id and region — before checking the caller's proof, so
/// anyone reaching the peer port learnt them. A caller without the secret
/// now reads the callee's nonce and nothing else, whatever it sends.
#[test]
fn an_unauthenticated_caller_learns_neither_node_nor_region() {
    let region = "hidden-region-7f3a";
    let c = Cluster::start(&[region], &[]);
    let addr = peer_addr(&c, 0);
    let seen = rt().block_on(async {
        let mut p = PeerConn::open_unauthenticated(addr)
            .await
            .expect("TLS is open to anyone");
        // What a caller sends first: its nonce.
        let first = wire::Hello {
            nonce: vec![7u8; 32].into(),
            ..Default::default()
        };
        p.send(Frame::new(Body::Hello(first.clone())))
            .await
            .expect("send");
        let mut seen = p.read_all(Duration::from_secs(1)).await;
        // A proof made up without the secret; the callee closes.
        let forged = wire::Hello {
            proof: vec![9u8; 32].into(),
            ..first
        };
        let _ = p.send(Frame::new(Body::Hello(forged))).await;
        seen.extend(p.read_all(Duration::from_secs(10)).await);
        seen
    });
    wait_log(&c, 0, "wrong cluster secret");
    assert!(
        !seen.windows(region.len()).any(|w| w == region.as_bytes()),
        "the region was sent to a caller without the secret"
    );
    let mut buf = bytes::BytesMut::from(&seen[..]);
    let mut hellos = 0;
    while let Some(frame) = wire::decode_frame(&mut buf).expect("whole frames") {
        match frame.body {
            Some(Body::Hello(h)) => {
                assert_eq!(
                    (h.node, h.region.as_str()),
                    (0, ""),
                    "the callee named itself (node {}) to a caller without the secret",
                    c.specs[0].id
                );
                assert!(h.proof.is_empty());
                hellos += 1;
            }
            other => panic!("sent before authentication: {other:?}"),
        }
    }
    assert!(buf.is_empty(), "a partial frame");
    assert_eq!(hellos, 1, "the callee's nonce, and nothing more");
}
