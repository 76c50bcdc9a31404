//! Tests of the log and snapshot format (`codec.rs`).

use super::*;
use proptest::prelude::*;

fn entry(k: &str, v: Option<&str>, ttl: Option<u64>, ts: u64) -> LogEntry {
    LogEntry {
        key: Bytes::copy_from_slice(k.as_bytes()),
        state: EntryState::Plain(v.map(|v| Current {
            value: Bytes::copy_from_slice(v.as_bytes()),
            expire_ms: ttl,
            ttl_of: None,
        })),
        start_ts: ts,
        version: Version::new(ts + 1, 3),
        unit: Default::default(),
    }
}

fn frame(entries: &[LogEntry]) -> Vec<u8> {
    let mut body = Vec::new();
    for e in entries {
        encode_entry(
            &mut body,
            EntryRef::of(&e.key, &e.state, e.start_ts, e.version).with_unit(e.unit),
        );
    }
    let mut out = Vec::new();
    encode_frame(&mut out, entries.len() as u32, &body);
    out
}

fn decode_all(data: &[u8]) -> (Vec<Vec<LogEntry>>, Result<Tail, Corrupt>) {
    let mut got = Vec::new();
    let tail = decode_file(data, |r| match r {
        Logged::Lattices(r) | Logged::Own(r) | Logged::Remote(r) | Logged::Parked(r) => got.push(r),
        Logged::Flush(ts) => got.push(vec![entry("FLUSH", None, None, ts)]),
        Logged::FlushDb(db, ts) => got.push(vec![entry(&format!("FLUSH{db}"), None, None, ts)]),
        Logged::Confirmed { seq, offset } => {
            got.push(vec![entry("CONFIRMED", None, None, seq + offset)])
        }
    });
    (got, tail)
}

#[test]
fn own_and_confirmation_records_roundtrip() {
    let r1 = vec![entry("a", Some("1"), None, 1), entry("b", None, None, 2)];
    let mut file = frame(&r1);
    let at = open_frame(&mut file);
    for e in &r1 {
        encode_entry(
            &mut file,
            EntryRef::of(&e.key, &e.state, e.start_ts, e.version),
        );
    }
    close_frame(&mut file, at, 2 | OWN);
    encode_confirmed(&mut file, 7, 1234);
    let mut got = Vec::new();
    let tail = decode_file_at(&file, |end, r| got.push((end, r)));
    assert_eq!(tail, Ok(Tail::Clean));
    let ends: Vec<u64> = got.iter().map(|(e, _)| *e).collect();
    assert_eq!(*ends.last().unwrap(), file.len() as u64);
    assert!(ends.windows(2).all(|w| w[0] < w[1]));
    let kinds: Vec<Logged> = got.into_iter().map(|(_, r)| r).collect();
    assert_eq!(
        kinds,
        vec![
            Logged::Lattices(r1.clone()),
            Logged::Own(r1),
            Logged::Confirmed {
                seq: 7,
                offset: 1234
            }
        ]
    );
}

/// Issue 42: another region's lattices and parked parts keep their
/// kind of frame; two kinds at once are refused.
#[test]
fn remote_and_parked_records_roundtrip() {
    let r1 = vec![entry("a", Some("1"), None, 1)];
    let mut file = Vec::new();
    for kind in [Frame::Remote, Frame::Parked, Frame::Own, Frame::Plain] {
        let at = open_frame(&mut file);
        encode_entry(
            &mut file,
            EntryRef::of(&r1[0].key, &r1[0].state, r1[0].start_ts, r1[0].version),
        );
        close_frame_of(&mut file, at, 1, kind);
    }
    let mut got = Vec::new();
    assert_eq!(decode_file(&file, |r| got.push(r)), Ok(Tail::Clean));
    assert_eq!(
        got,
        vec![
            Logged::Remote(r1.clone()),
            Logged::Parked(r1.clone()),
            Logged::Own(r1.clone()),
            Logged::Lattices(r1.clone()),
        ]
    );
    let mut bad = Vec::new();
    let at = open_frame(&mut bad);
    encode_entry(
        &mut bad,
        EntryRef::of(&r1[0].key, &r1[0].state, r1[0].start_ts, r1[0].version),
    );
    close_frame(&mut bad, at, 1 | OWN | PARKED);
    assert!(decode_file(&bad, |_| {}).is_err());
}

#[test]
fn flush_records_roundtrip() {
    let r1 = vec![entry("a", Some("1"), None, 1)];
    let mut file = frame(&r1);
    encode_flush(&mut file, None, 77);
    encode_flush(&mut file, Some(3), 78);
    let mut got = Vec::new();
    let tail = decode_file(&file, |r| got.push(r));
    assert_eq!(tail, Ok(Tail::Clean));
    assert_eq!(
        got,
        vec![
            Logged::Lattices(r1),
            Logged::Flush(77),
            Logged::FlushDb(3, 78)
        ]
    );
}

/// Issue 42: the kind of commit that wrote an entry survives a
/// restart, plain, tombstone and typed alike.
#[test]
fn unit_marks_roundtrip() {
    use crate::record::Unit;
    let typed = LogEntry {
        state: EntryState::Typed(Arc::new(KeyState::of_string(
            elsa_lattice::Counter::default(),
        ))),
        ..entry("t", None, None, 7)
    };
    let r = vec![
        LogEntry {
            unit: Unit::Here,
            ..entry("a", Some("1"), Some(5), 1)
        },
        LogEntry {
            unit: Unit::Shards,
            ..entry("b", None, None, 2)
        },
        LogEntry {
            unit: Unit::Shards,
            ..typed
        },
        entry("c", Some("2"), None, 3),
    ];
    let (got, tail) = decode_all(&frame(&r));
    assert!(tail.is_ok());
    assert_eq!(got, vec![r]);
}

#[test]
fn roundtrips_records() {
    let r1 = vec![entry("a", Some("1"), None, 1), entry("b", None, None, 2)];
    let r2 = vec![entry("c", Some("xyz"), Some(99), 5)];
    let mut file = frame(&r1);
    file.extend(frame(&r2));
    let (got, tail) = decode_all(&file);
    assert_eq!(tail, Ok(Tail::Clean));
    assert_eq!(got, vec![r1, r2]);
}

#[test]
fn torn_tail_is_cut_never_applied() {
    let r1 = vec![entry("a", Some("1"), None, 1)];
    let r2 = vec![
        entry("b", Some("2"), None, 2),
        entry("c", Some("3"), None, 3),
    ];
    let mut file = frame(&r1);
    let good = file.len();
    file.extend(frame(&r2));
    for cut in good + 1..file.len() {
        let (got, tail) = decode_all(&file[..cut]);
        assert_eq!(got, vec![r1.clone()], "cut at {cut}");
        assert_eq!(tail, Ok(Tail::Torn { valid_len: good }));
    }
    // A damaged last frame (garbage in place) is torn too.
    let mut bad = file.clone();
    let n = bad.len();
    bad[n - 3] ^= 0xff;
    assert_eq!(decode_all(&bad).1, Ok(Tail::Torn { valid_len: good }));
    // Zeros after the data (a file extended but never written) too.
    let mut zeros = file.clone();
    zeros.extend(vec![0u8; 100]);
    assert_eq!(
        decode_all(&zeros).1,
        Ok(Tail::Torn {
            valid_len: file.len()
        })
    );
}

#[test]
fn damage_in_the_middle_stops_recovery() {
    let r = vec![entry("a", Some("1"), None, 1)];
    let mut file = frame(&r);
    file.extend(frame(&r));
    file.extend(frame(&r));
    file[14] ^= 0xff; // inside the first frame's payload
    let (_, tail) = decode_all(&file);
    assert!(matches!(tail, Err(Corrupt { offset: 0, .. })), "{tail:?}");
}

proptest! {
    #[test]
    fn never_panics_on_garbage(data in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = decode_all(&data);
    }

    #[test]
    fn any_prefix_yields_a_prefix_of_the_records(n in 1usize..6, cut_frac in 0.0f64..1.0) {
        let records: Vec<Vec<LogEntry>> = (0..n)
            .map(|i| vec![entry(&format!("k{i}"), Some("v"), None, i as u64)])
            .collect();
        let file: Vec<u8> = records.iter().flat_map(|r| frame(r)).collect();
        let cut = (file.len() as f64 * cut_frac) as usize;
        let (got, tail) = decode_all(&file[..cut]);
        prop_assert!(tail.is_ok());
        prop_assert_eq!(&got[..], &records[..got.len()]);
    }
}
