//! Payloads redis-server 7.0.15 answered DUMP with (the key, its
//! encoding there, the payload in hex), read back here; and Elsa's own
//! payloads read back.

use super::*;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn bs(items: &[&str]) -> Vec<Bytes> {
    items.iter().map(|s| b(s)).collect()
}

#[test]
fn redis_payloads_read_back() {
    let cases: Vec<(&str, Value)> = vec![
        ("00c07b0a0048e253e1007a67b9", Value::Str(b("123"))),
        ("00c290eefeff0a002875de7b13eb2800", Value::Str(b("-70000"))),
        ("000568656c6c6f0a006372df766534200a", Value::Str(b("hello"))),
        (
            "00c3094064016161e057000161610a00e8a3b507b06df271",
            Value::Str(Bytes::from(vec![b'a'; 100])),
        ),
        (
            "120102c31b405b135b00000005008161028162020c01dffb02e04678e03c000148ff0a00db99677cb385702f",
            Value::List(vec![b("a"), b("b"), b("12"), b("-5"), Bytes::from(vec![b'x'; 70])]),
        ),
        (
            "0b140400000003000000feffffff01000000e09304000a00c1a88fb6df40a557",
            Value::Set(bs(&["-2", "1", "300000"])),
        ),
        ("02030163016201610a005ea67e5623750bab", Value::Set(bs(&["c", "b", "a"]))),
        (
            "111a1a0000000600816302dffd02816102010181620283322e3504ff0a00a68a1ab1a9f2dcc2",
            Value::ZSet(vec![(b("c"), -3.0), (b("a"), 1.0), (b("b"), 2.5)]),
        ),
        (
            "0502016200000000000004400161000000000000f03f0a00f46eb73919767291",
            Value::ZSet(vec![(b("b"), 2.5), (b("a"), 1.0)]),
        ),
        (
            "1012120000000400816602817602816e020c01ff0a0001369481d35b8974",
            Value::Hash(vec![(b("f"), b("v")), (b("n"), b("12"))]),
        ),
        (
            "040201660176016701770a00bc76c6208426f9f2",
            Value::Hash(vec![(b("f"), b("v")), (b("g"), b("w"))]),
        ),
    ];
    for (payload, want) in cases {
        assert_eq!(restore(&hex(payload)), Ok(want), "{payload}");
    }
}

#[test]
fn a_compressed_quicklist_node_of_every_integer_width_reads_back() {
    let payload = include_str!("rdb_biglist.hex").trim();
    let Ok(Value::List(items)) = restore(&hex(payload)) else {
        panic!("not a list");
    };
    let mut want: Vec<Bytes> = (0..300).map(|i| Bytes::from(i.to_string())).collect();
    want.extend((0..10).map(|_| Bytes::from(vec![b'y'; 20])));
    want.extend(bs(&["-1000", "70000", "-8000000", "5000000000"]));
    assert_eq!(items, want);
}

#[test]
fn elsa_payloads_read_back_and_damage_is_refused() {
    let values = [
        Value::Str(b("")),
        Value::Str(Bytes::from(vec![b'z'; 20_000])),
        Value::List(bs(&["a", "", "c"])),
        Value::Set(bs(&["x"])),
        Value::ZSet(vec![(b("m"), f64::INFINITY), (b("n"), -0.5)]),
        Value::Hash(vec![(b("f"), b("")), (b(""), b("v"))]),
    ];
    for v in values {
        let p = dump(&v);
        assert_eq!(restore(&p), Ok(v.clone()));
        let mut bad = p.clone();
        bad[1] ^= 1;
        assert_eq!(restore(&bad), Err(Refused::VersionOrChecksum));
        let mut newer = p[..p.len() - 10].to_vec();
        newer.extend_from_slice(&11u16.to_le_bytes());
        let crc = CRC.checksum(&newer);
        newer.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(restore(&newer), Err(Refused::VersionOrChecksum));
    }
    // A well-formed footer over a body that is not an object.
    for body in [&b""[..], b"\x63", b"\x00\x05ab", b"\x02\x00", b"\x00\x01ab"] {
        let mut p = body.to_vec();
        p.extend_from_slice(&RDB_VERSION.to_le_bytes());
        let crc = CRC.checksum(&p);
        p.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(restore(&p), Err(Refused::BadFormat), "{body:?}");
    }
    assert_eq!(restore(b"short"), Err(Refused::VersionOrChecksum));
}

/// Stream payloads, Elsa's own read back; then mangled (bytes changed,
/// cut, repeated) under a good footer: refused or read, never a panic,
/// and what is read builds a stream or is refused.
#[test]
fn stream_payloads_read_back_and_mangled_ones_never_panic() {
    use elsa_lattice::stream::{GroupParts, Parts, Stream, StreamId};
    use elsa_lattice::stream_fields::Fields;
    use elsa_lattice::{Elem, Version};
    let f = |pairs: &[(&str, &str)]| {
        Fields::new(pairs.iter().map(|(a, b)| (a.as_bytes(), b.as_bytes())))
    };
    let mut entries: Vec<(StreamId, Fields)> = (1..=230u64)
        .map(|i| {
            (
                StreamId::new(i, i % 3),
                f(&[("a", &i.to_string()), ("b", "x")]),
            )
        })
        .collect();
    entries.push((StreamId::new(400, 0), f(&[("other", &"y".repeat(5000))])));
    entries.push((StreamId::new(401, 0), f(&[])));
    let parts = Parts {
        entries,
        last: StreamId::new(500, 1),
        entries_added: 300,
        max_deleted: StreamId::new(2, 9),
        groups: vec![GroupParts {
            name: Elem::new(b"g"),
            last: StreamId::new(3, 0),
            read: u64::MAX,
            pending: vec![(StreamId::new(1, 1), Elem::new(b"c"), 1_700_000_000_000, 2)],
            consumers: vec![(Elem::new(b"c"), 1_700_000_000_001, 1_700_000_000_001)],
        }],
    };
    let p = dump(&Value::Stream(Box::new(parts.clone())));
    assert_eq!(restore(&p), Ok(Value::Stream(Box::new(parts))));
    let body = &p[..p.len() - 10];
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..20_000 {
        let mut m = body.to_vec();
        for _ in 0..1 + next() % 4 {
            let at = (next() % m.len() as u64) as usize;
            match next() % 4 {
                0 => m[at] = next() as u8,
                1 => m.truncate(at.max(1)),
                2 => m.insert(at, next() as u8),
                _ => {
                    let end = (at + (next() % 40) as usize).min(m.len());
                    let piece = m[at..end].to_vec();
                    m.splice(at..at, piece);
                }
            }
        }
        if let Ok(Value::Stream(parts)) = restore(&with_footer(m)) {
            let _ = Stream::from_parts(*parts, Version::new(1, 0));
        }
    }
}
