//! Peer frames: whatever bytes arrive on a peer link, the frame decoder
//! and every decoder behind it — forwarded calls (`remote::start`), the
//! typed lattice states inside gossip, anti-entropy and replication
//! frames — either produce values or refuse, never panic or allocate from
//! an unchecked length. A frame that decodes re-encodes to a frame that
//! decodes to the same value.
#![no_main]

use bytes::BytesMut;
use elsa_cluster::remote::{self, Call};
use elsa_cluster::wire::{self, Body, Lattice};
use libfuzzer_sys::fuzz_target;
use prost::Message;

fn lattices(l: &[Lattice]) {
    for e in l {
        if let Some(t) = &e.typed {
            let _ = wire::typed_from(t.clone());
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut buf = BytesMut::from(data);
    // Every frame in the input, as a link reads them one after another.
    while let Ok(Some(frame)) = wire::decode_frame(&mut buf) {
        let mut out = BytesMut::new();
        frame.encode_to(&mut out);
        let again = wire::decode_frame(&mut out)
            .expect("a frame's own encoding decodes")
            .expect("a frame's own encoding is whole");
        assert!(again == frame, "encoding changed the frame");
        match frame.body {
            Some(Body::Request(r)) => {
                if let Ok(call) = Call::decode(r.call) {
                    lattices(&call.entries);
                    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
                    let _ = remote::start(call, &tx);
                }
            }
            Some(Body::Gossip(g)) => lattices(&g.lattices),
            Some(Body::AeEntries(a)) => lattices(&a.lattices),
            Some(Body::Replicate(r)) => lattices(&r.lattices),
            _ => {}
        }
    }
});
