//! A clean shutdown ends, whatever the node holds: SIGTERM of a node
//! holding its part of a transaction nobody has decided yet (the
//! coordinator died between prepare and install) leaves after the
//! node's resolver finishes it, with its snapshot, and loses no part of
//! it. Found by the two-region CRDT checker (seed 17): the shutdown
//! stopped the resolver before its snapshot, which waits for every hold
//! to go, and the node never exited.

use std::time::Duration;

use super::commits::{keys, orphan_a_commit, read_all, three_nodes};
use super::one_at_a_time;

#[test]
fn sigterm_ends_a_node_holding_an_undecided_transaction() {
    let _one = one_at_a_time();
    let mut c = three_nodes();
    let ks = keys();
    // Nobody will tell node 1 the outcome: its keys stay held until its
    // resolver reads the transaction's record (holds older than 3 s).
    let _ = orphan_a_commit(&mut c, &ks);
    c.fault(1, "HEAL");
    // SIGTERM while the holds are younger than that: the node must still
    // end (`terminate` fails the test after 60 s).
    c.terminate(1);
    c.restart(0);
    c.restart(1);
    c.wait_caught_up(&[0, 1, 2], Duration::from_secs(60));
    // The client never heard; the commit is all or nothing, and the same
    // through every node.
    let got = read_all(&c, 2, &ks);
    let ones = got.iter().filter(|v| v.as_deref() == Some("1")).count();
    assert!(ones == 0 || ones == ks.len(), "a commit in part: {got:?}");
    for i in [0, 1] {
        assert_eq!(read_all(&c, i, &ks), got, "node {i} and node 2 agree");
    }
}
