//! Writes the starting corpus of each fuzz target (`cargo run --bin seeds`
//! in `fuzz/`): real requests, real lattice states of every type and real
//! peer frames carrying them, so the fuzzers start from valid inputs and
//! mutate inward instead of searching for the framing from nothing.

use std::path::Path;

use bytes::{Bytes, BytesMut};
use elsa_cluster::remote::Call;
use elsa_cluster::wire::{self, AeEntries, Body, Frame, Gossip, Lattice, Replicate, Request};
use elsa_lattice::{Collection, Counter, KeyState, List, OrMap, OrSet, Version, ZSet};
use prost::Message;

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::create_dir_all(dir).expect("corpus directory");
    std::fs::write(dir.join(name), bytes).expect("seed file");
}

fn states() -> Vec<KeyState> {
    let v = |ts| Version::new(ts, 1);
    let string = Counter::default().set(Some(Bytes::from_static(b"value")), Some(99), 5, v(6));
    let hash = OrMap::default()
        .set(b"field", b"x", 5, v(6))
        .set(b"other", b"y", 7, v(8));
    let set = OrSet::default().add(elsa_lattice::Elem::from(Bytes::from_static(b"m")), v(6));
    let zset = ZSet::default().set(b"member", 1.5, v(6));
    let list = List::default().insert(0, [&b"a"[..], &b"b"[..]], v(6));
    vec![
        KeyState::of_string(string),
        KeyState::of(Collection::Hash(hash)),
        KeyState::of(Collection::Set(set)),
        KeyState::of(Collection::ZSet(zset)),
        KeyState::of(Collection::list(list)),
    ]
}

fn lattice(key: &[u8], s: &KeyState) -> Lattice {
    Lattice {
        key: Bytes::copy_from_slice(key),
        value: None,
        expire_ms: None,
        start_ts: 5,
        commit_ts: 6,
        origin: 1,
        unit: 0,
        typed: Some(wire::typed_bytes(s)),
        ..Default::default()
    }
}

fn frame_bytes(body: Body) -> Vec<u8> {
    let mut out = BytesMut::new();
    Frame::new(body).encode_to(&mut out);
    out.to_vec()
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let resp = root.join("resp_request");
    let requests: [&[u8]; 6] = [
        b"\x01*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n",
        b"\x00*2\r\n$4\r\nAUTH\r\n$6\r\ns3cret\r\n",
        b"\x05PING\r\nGET \"a b\" 'c'\r\n",
        b"\x03*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
        b"\x01*-1\r\n*0\r\n",
        b"\x00POST / HTTP/1.1\r\nHost: x\r\n\r\nSET a b\r\n",
    ];
    for (i, r) in requests.iter().enumerate() {
        write(&resp, &format!("seed{i}"), r);
    }
    let states = states();
    for (i, s) in states.iter().enumerate() {
        write(
            &root.join("lattice_state"),
            &format!("seed{i}"),
            &s.to_bytes(),
        );
    }
    let lattices: Vec<Lattice> = states
        .iter()
        .enumerate()
        .map(|(i, s)| lattice(format!("key{i}").as_bytes(), s))
        .collect();
    let peer = root.join("peer_frame");
    write(
        &peer,
        "seed-gossip",
        &frame_bytes(Body::Gossip(Gossip {
            lattices: lattices.clone(),
            ..Default::default()
        })),
    );
    write(
        &peer,
        "seed-ae-entries",
        &frame_bytes(Body::AeEntries(AeEntries {
            lattices: lattices.clone(),
            ..Default::default()
        })),
    );
    write(
        &peer,
        "seed-replicate",
        &frame_bytes(Body::Replicate(Replicate {
            lattices: lattices.clone(),
            ..Default::default()
        })),
    );
    for kind in 1..=10u32 {
        let call = Call {
            kind,
            entries: lattices.clone(),
            ..Default::default()
        };
        write(
            &peer,
            &format!("seed-request{kind}"),
            &frame_bytes(Body::Request(Request {
                id: 1,
                shard: 0,
                hlc: 6,
                call: Bytes::from(call.encode_to_vec()),
            })),
        );
    }
}
