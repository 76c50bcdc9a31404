//! Typed lattice states as peers send them (`KeyState::from_bytes`): any
//! bytes decode to a state or to `None`, never a panic or a huge
//! allocation; a state that decodes encodes back to the same state; and
//! once merged into a replica, merging it again — gossip repeats itself,
//! anti-entropy resends — changes nothing, nor does merging the result
//! with itself.
//!
//! (A decoded state need not be in the form merges leave, e.g. a string
//! newer than the collection it should have displaced; the first merge
//! normalizes it. So idempotence is checked on what a replica holds after
//! taking it in, the only state a store ever keeps.)
#![no_main]

use bytes::Bytes;
use elsa_lattice::{Crdt, KeyState};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(state) = KeyState::from_bytes(Bytes::copy_from_slice(data)) else {
        return;
    };
    let again = KeyState::from_bytes(Bytes::from(state.to_bytes()))
        .expect("a decoded state's own encoding decodes");
    assert_eq!(state, again, "encoding changed the state");
    let mut held = KeyState::default();
    held.merge(state.clone());
    let mut twice = held.clone();
    twice.merge(state);
    assert_eq!(
        twice, held,
        "merging the same state again changed the replica"
    );
    let mut doubled = held.clone();
    doubled.merge(held.clone());
    assert_eq!(
        doubled, held,
        "merging a replica's state with itself changed it"
    );
});
