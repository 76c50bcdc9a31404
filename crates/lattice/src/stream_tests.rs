//! [`Stream`]'s merge rules, case by case (the laws: `tests/stream.rs`).

use super::*;

fn v(ts: u64, origin: NodeId) -> Version {
    Version::new(ts, origin)
}

fn fields(f: &str) -> Vec<(Elem, Elem)> {
    vec![(Elem::new(b"f"), Elem::new(f.as_bytes()))]
}

fn ids(s: &Stream) -> Vec<String> {
    s.entries().map(|(id, _)| id.to_string()).collect()
}

#[test]
fn entries_show_in_id_order_whatever_order_they_arrive_in() {
    let base = Stream::default();
    let a = base.add(StreamId::new(5, 0), fields("a"), v(10, 1));
    let b = base.add(StreamId::new(3, 1), fields("b"), v(11, 2));
    let mut x = base.clone();
    x.merge(a.clone());
    x.merge(b.clone());
    let mut y = base;
    y.merge(b);
    y.merge(a);
    assert_eq!(x, y);
    assert_eq!(ids(&x), ["3-1", "5-0"]);
    assert_eq!(x.last_id(), StreamId::new(5, 0));
    assert_eq!(x.entries_added(), 2);
}

#[test]
fn a_trim_in_one_region_wins_over_an_add_below_it_in_another() {
    let mut s = Stream::default();
    for i in 1..=4 {
        let d = s.add(StreamId::new(i, 0), fields("x"), v(i, 1));
        s.merge(d);
    }
    let trim = s.trim_below(StreamId::new(3, 0), v(20, 1));
    // Another region, not yet trimmed, adds 2-5 and deletes 4-0.
    let mut other = s.clone();
    let add = other.add(StreamId::new(2, 5), fields("late"), v(21, 2));
    other.merge(add.clone());
    let del = other.delete(&[StreamId::new(4, 0)], v(22, 2));
    other.merge(del.clone());
    other.merge(trim.clone());
    s.merge(trim);
    s.merge(add);
    s.merge(del);
    assert_eq!(s, other);
    assert_eq!(ids(&s), ["3-0"]);
    assert_eq!(s.max_deleted_id(), StreamId::new(4, 0));
    assert_eq!(s.last_id(), StreamId::new(4, 0));
}

#[test]
fn a_delete_of_the_key_forgets_the_trim_and_keeps_a_concurrent_add_below_it() {
    let mut s = Stream::default();
    for i in 1..=2 {
        let d = s.add(StreamId::new(i, 0), fields("x"), v(i, 1));
        s.merge(d);
    }
    let trim = s.trim_below(StreamId::new(3, 0), v(3, 1));
    s.merge(trim);
    assert!(s.is_empty() && !s.has_no_entries());
    // Added below the floor elsewhere, after the trim's version: kept,
    // out of sight.
    let late = Stream::default().add(StreamId::new(1, 5), fields("late"), v(5, 2));
    s.merge(late);
    assert!(s.is_empty());
    // The key deleted at version 4: the trim and what it covered go,
    // the concurrent add shows.
    assert!(s.drop_through(v(4, 1)));
    assert_eq!(ids(&s), ["1-5"]);
    assert_eq!(s.entries_added(), 1);
    assert_eq!(s.newest(), v(5, 2));
    assert!(s.drop_through(v(5, 2)));
    assert!(s.has_no_entries());
}

#[test]
fn a_floor_below_every_part_drops_nothing_and_one_above_any_part_drops_it() {
    // An XADD after a DEL: the delta is all newer than the DEL's floor.
    let s = Stream::default();
    let mut d = s.add(StreamId::new(9, 0), fields("x"), v(9, 1));
    let before = d.clone();
    assert!(!d.drop_through(v(8, 1)));
    assert_eq!(d, before);
    // Each kind of part, alone at the floor, goes (the fast check must
    // not miss one).
    let mut parts = vec![s.add(StreamId::new(2, 0), fields("x"), v(2, 1))];
    let mut full = Stream::default();
    full.merge(parts[0].clone());
    parts.push(full.delete(&[StreamId::new(2, 0)], v(3, 1)));
    parts.push(full.trim_below(StreamId::new(2, 0), v(3, 1)));
    for p in parts {
        let mut both = before.clone();
        both.merge(p);
        let want = both.clone();
        assert!(both.drop_through(v(8, 1)), "{want:?}");
        assert_eq!(ids(&both), ["9-0"]);
    }
}

#[test]
fn an_ack_hides_a_delivery_before_it_and_a_claim_after_it_shows_again() {
    let mut s = Stream::default();
    let d = s.add(StreamId::new(1, 0), fields("x"), v(1, 1));
    s.merge(d);
    let d = s.create_group(Elem::new(b"g"), StreamId::MIN, 0, v(2, 1));
    s.merge(d);
    let id = [StreamId::new(1, 0)];
    let read = s
        .deliver(b"g", b"alice", &id, Some((id[0], 1)), 100, v(3, 1))
        .unwrap();
    s.merge(read);
    assert_eq!(s.group(b"g").unwrap().pending().count(), 1);
    assert_eq!(s.group(b"g").unwrap().last_delivered(), (id[0], 1));
    // Region b acknowledges; region a claims it for bob, later.
    let ack = s.ack(b"g", &id, v(4, 2)).unwrap();
    let claim = s.deliver(b"g", b"bob", &id, None, 200, v(5, 1)).unwrap();
    let mut other = s.clone();
    other.merge(ack.clone());
    other.merge(claim.clone());
    s.merge(claim);
    s.merge(ack);
    assert_eq!(s, other);
    let pending: Vec<_> = s.group(b"g").unwrap().pending().collect();
    assert_eq!(pending.len(), 1);
    assert_eq!(&pending[0].1.consumer[..], b"bob");
    assert_eq!(pending[0].1.count, 2);
}

#[test]
fn a_destroy_ends_the_incarnation_and_a_later_create_starts_afresh() {
    let mut s = Stream::default();
    let d = s.create_group(Elem::new(b"g"), StreamId::MIN, 0, v(1, 1));
    s.merge(d);
    let destroy = s.destroy_group(b"g", v(2, 1)).unwrap();
    let touch = s.touch_consumer(b"g", b"c", 50, v(3, 2)).unwrap();
    let mut t = s.clone();
    t.merge(touch.clone());
    t.merge(destroy.clone());
    s.merge(destroy);
    s.merge(touch);
    assert_eq!(s, t);
    assert!(s.group(b"g").is_none());
    let again = s.create_group(Elem::new(b"g"), StreamId::new(7, 0), 0, v(4, 1));
    s.merge(again);
    let g = s.group(b"g").unwrap();
    assert_eq!(g.last_delivered().0, StreamId::new(7, 0));
    assert_eq!(g.consumers().count(), 0);
}

#[test]
fn setid_moves_the_group_back_and_deliveries_only_forward_after_it() {
    let mut s = Stream::default();
    let d = s.create_group(Elem::new(b"g"), StreamId::MIN, 0, v(1, 1));
    s.merge(d);
    let far = s
        .deliver(b"g", b"c", &[], Some((StreamId::new(9, 0), 3)), 1, v(2, 1))
        .unwrap();
    s.merge(far);
    let back = s
        .set_group_id(b"g", StreamId::new(2, 0), 1, v(3, 1))
        .unwrap();
    s.merge(back);
    assert_eq!(
        s.group(b"g").unwrap().last_delivered().0,
        StreamId::new(2, 0)
    );
    let on = s
        .deliver(b"g", b"c", &[], Some((StreamId::new(4, 0), 2)), 2, v(4, 1))
        .unwrap();
    s.merge(on);
    assert_eq!(
        s.group(b"g").unwrap().last_delivered().0,
        StreamId::new(4, 0)
    );
}

#[test]
fn a_stream_read_as_parts_builds_one_that_shows_the_same() {
    let mut s = Stream::default();
    for i in 1..=5 {
        let d = s.add(StreamId::new(i, 0), fields(&i.to_string()), v(i, 1));
        s.merge(d);
    }
    s.merge(s.delete(&[StreamId::new(2, 0)], v(6, 1)));
    s.merge(s.create_group(Elem::new(b"g"), StreamId::MIN, 0, v(7, 1)));
    let ids = [StreamId::new(1, 0), StreamId::new(3, 0)];
    let read = Some((StreamId::new(3, 0), 2));
    s.merge(
        s.deliver(b"g", b"c", &ids, read, 1_000, v(8, 1))
            .expect("a group"),
    );
    let parts = s.to_parts();
    assert_eq!(parts.entries.len(), 4);
    assert_eq!(parts.groups[0].pending.len(), 2);
    let back = Stream::from_parts(parts.clone(), v(20, 2)).expect("well formed");
    assert_eq!(back.to_parts(), parts);
    assert_eq!(back.len(), 4);
    assert_eq!(back.max_deleted_id(), StreamId::new(2, 0));
    // An ID twice, or out of order: refused.
    let mut twice = parts.clone();
    twice.entries.swap(0, 1);
    assert!(Stream::from_parts(twice, v(20, 2)).is_none());
}
