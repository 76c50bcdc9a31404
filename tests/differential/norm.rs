//! How two replies are compared: exactly, unless the command's answer is
//! legitimately time- or implementation-dependent. Every relaxation is
//! listed here, with its reason, so none can hide elsewhere.
//!
//! Errors are never relaxed: whatever the norm, if either server answers
//! an error, both must answer the very same error text.

use super::resp::Reply;

/// Remaining-time tolerance for TTL (seconds). Redis and Elsa run the
/// same command a few milliseconds apart, and Redis rounds TTL to the
/// nearest second, so two honest answers can straddle a boundary by one.
/// Rounding itself is checked exactly by the generator's TTL probes.
const TTL_TOLERANCE_S: i64 = 1;
/// The same for PTTL, in milliseconds (generous: a debug build on a busy
/// machine can lag by hundreds of milliseconds between the two servers).
const PTTL_TOLERANCE_MS: i64 = 1_500;
/// TIME: the two clocks are the same machine's, read moments apart.
const TIME_TOLERANCE_S: i64 = 5;

/// How to compare the replies of one command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Norm {
    /// Byte for byte (the default).
    Exact,
    /// TTL/PTTL: -2 and -1 exact; positive values within a tolerance.
    Ttl { millis: bool },
    /// TIME: two decimal strings, seconds within a tolerance.
    Time,
    /// HELLO: same fields in the same order; `server`, `version` and `id`
    /// only need the same type (they name the implementation and the
    /// connection, not behaviour).
    Hello,
    /// INFO, CONFIG GET, CLIENT ID/INFO, COMMAND COUNT/INFO/DOCS, LASTSAVE:
    /// their contents describe the server, not the data — only the reply
    /// type must match.
    Shape,
    /// KEYS, HKEYS, SMEMBERS, SINTER…: an array (or RESP3 set) whose
    /// order Redis leaves unspecified (hash order; an intset sorted).
    Unordered,
    /// SCAN 0 with a COUNT above the key space: cursor exact, keys in any
    /// order (SCAN promises no order).
    Scan,
    /// OBJECT ENCODING: Elsa answers what SET would store (`int`,
    /// `embstr`, `raw` by content); Redis leaves values it built in place
    /// (APPEND, SETRANGE, SETBIT…) `raw` and INCRBYFLOAT's results never
    /// `int`. So Redis's `raw` matches anything, its `embstr` matches
    /// Elsa's `int` too; nil and the rest exactly. The probes after a SET
    /// compare exactly. Hashes, sets, sorted sets and lists are compared
    /// exactly too (Elsa answers Redis 7.0's names by size and content;
    /// `quicklist` for every list).
    Encoding,
    /// OBJECT REFCOUNT: Redis shares small integers (refcount INT_MAX)
    /// only when it stored them through SET or INCR, not when it built or
    /// copied them, so its 1 matches Elsa's INT_MAX; and inside EXEC its
    /// count includes the queued commands' own references to a value they
    /// stored, so more than 1 matches Elsa's 1. Else exact.
    Refcount,
    /// HGETALL: field–value pairs (a flat array in RESP2, a map in RESP3)
    /// in any order — Redis keeps a small hash in insertion order, Elsa in
    /// hash order; neither order is promised.
    Pairs,
    /// HSCAN: cursor exact, the pairs in any order (as `Pairs`).
    ScanPairs,
    /// HRANDFIELD with a count: the choice is random in both servers, so
    /// only the reply's type and length are compared.
    Count,
    /// EXEC: element-wise, each with the norm of the command queued there.
    Exec(Vec<Norm>),
    /// XPENDING's extended form: each entry exact but its idle time (the
    /// two servers delivered it moments apart), within the PTTL tolerance.
    PendingIdle,
    /// XINFO: exact, but a consumer's `idle` and `seen-time` and the
    /// delivery times of XINFO STREAM FULL (unix ms) within the PTTL
    /// tolerance, and `radix-tree-keys`/`radix-tree-nodes` not compared
    /// (Redis's memory layout: listpack nodes split at 4 kB, inner nodes
    /// of its radix tree; Elsa estimates them).
    StreamInfo,
}

/// `None` when the replies agree under `norm`, otherwise why not.
pub fn compare(norm: &Norm, redis: &Reply, elsa: &Reply) -> Option<String> {
    if let Reply::Broken(why) = redis {
        return Some(format!(
            "redis gave no reply ({why}): harness or environment problem"
        ));
    }
    if let Reply::Broken(why) = elsa {
        return Some(format!("elsa gave no reply ({why})"));
    }
    if redis.is_error() || elsa.is_error() {
        return (redis != elsa).then(|| "different error (or error vs value)".into());
    }
    match norm {
        Norm::Exact => (redis != elsa).then(|| "different reply".into()),
        Norm::Ttl { millis } => ttl(*millis, redis, elsa),
        Norm::Time => time(redis, elsa),
        Norm::Hello => hello(redis, elsa),
        Norm::Shape => (redis.kind() != elsa.kind()).then(|| {
            format!(
                "different reply type ({} vs {}); contents are not compared",
                redis.kind(),
                elsa.kind()
            )
        }),
        Norm::Unordered => match (redis, elsa) {
            (Reply::Array(a), Reply::Array(b)) | (Reply::Set(a), Reply::Set(b)) => {
                (sorted(a) != sorted(b)).then(|| "different elements (order ignored)".into())
            }
            _ => (redis != elsa).then(|| "different reply".into()),
        },
        Norm::Scan => match (redis, elsa) {
            (Reply::Array(a), Reply::Array(b)) if a.len() == 2 && b.len() == 2 => {
                if a[0] != b[0] {
                    return Some("different SCAN cursor".into());
                }
                compare(&Norm::Unordered, &a[1], &b[1])
            }
            _ => (redis != elsa).then(|| "different reply".into()),
        },
        Norm::Pairs => match (pairs(redis), pairs(elsa)) {
            (Some(mut a), Some(mut b)) => {
                a.sort_by_key(|p| format!("{p:?}"));
                b.sort_by_key(|p| format!("{p:?}"));
                (a != b || redis.kind() != elsa.kind())
                    .then(|| "different pairs (order ignored)".into())
            }
            _ => (redis != elsa).then(|| "different reply".into()),
        },
        Norm::ScanPairs => match (redis, elsa) {
            (Reply::Array(a), Reply::Array(b)) if a.len() == 2 && b.len() == 2 => {
                if a[0] != b[0] {
                    return Some("different HSCAN cursor".into());
                }
                compare(&Norm::Pairs, &a[1], &b[1])
            }
            _ => (redis != elsa).then(|| "different reply".into()),
        },
        Norm::Count => match (redis, elsa) {
            (Reply::Array(a), Reply::Array(b)) | (Reply::Set(a), Reply::Set(b)) => (a.len()
                != b.len()
                || a.iter().map(Reply::kind).collect::<Vec<_>>()
                    != b.iter().map(Reply::kind).collect::<Vec<_>>())
            .then(|| format!("{} vs {} random elements", a.len(), b.len())),
            _ => (redis != elsa).then(|| "different reply".into()),
        },
        Norm::Encoding => match (redis, elsa) {
            (Reply::Bulk(r), Reply::Bulk(e))
                if r == e || r == b"raw" || (r == b"embstr" && e == b"int") =>
            {
                None
            }
            _ => (redis != elsa).then(|| "different encoding".into()),
        },
        Norm::Refcount => match (redis, elsa) {
            (Reply::Int(1), Reply::Int(e)) if *e == i64::from(i32::MAX) => None,
            (Reply::Int(r), Reply::Int(1)) if *r > 1 && *r != i64::from(i32::MAX) => None,
            _ => (redis != elsa).then(|| "different refcount".into()),
        },
        Norm::PendingIdle => match (redis, elsa) {
            (Reply::Array(a), Reply::Array(b)) if a.len() == b.len() => a
                .iter()
                .zip(b)
                .enumerate()
                .find_map(|(i, (x, y))| match (x, y) {
                    (Reply::Array(p), Reply::Array(q)) if p.len() == 4 && q.len() == 4 => {
                        let idle = match (&p[2], &q[2]) {
                            (Reply::Int(m), Reply::Int(n)) => (m - n).abs() <= PTTL_TOLERANCE_MS,
                            _ => false,
                        };
                        (p[0] != q[0] || p[1] != q[1] || p[3] != q[3] || !idle)
                            .then(|| format!("pending entry {} differs", i + 1))
                    }
                    _ => (x != y).then(|| format!("pending entry {} differs", i + 1)),
                }),
            _ => (redis != elsa).then(|| "different reply".into()),
        },
        Norm::StreamInfo => (!near(redis, elsa, Relax::No)).then(|| "different stream info".into()),
        Norm::Exec(norms) => match (redis, elsa) {
            (Reply::Array(a), Reply::Array(b)) if a.len() == norms.len() && b.len() == a.len() => {
                norms
                    .iter()
                    .zip(a.iter().zip(b))
                    .enumerate()
                    .find_map(|(i, (n, (x, y)))| {
                        compare(n, x, y).map(|why| format!("EXEC element {}: {why}", i + 1))
                    })
            }
            _ => (redis != elsa).then(|| "different reply".into()),
        },
    }
}

/// How [`Norm::StreamInfo`] compares one value.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Relax {
    No,
    Time,
    Ignore,
}

/// The relaxation for the value named `key` in an XINFO reply.
fn relax_of(key: &Reply) -> Relax {
    match key {
        Reply::Bulk(k) if k == b"idle" || k == b"seen-time" => Relax::Time,
        Reply::Bulk(k) if k == b"radix-tree-keys" || k == b"radix-tree-nodes" => Relax::Ignore,
        _ => Relax::No,
    }
}

/// [`Norm::StreamInfo`]'s comparison: structure exact, the relaxed values
/// within their tolerance; any integer that is a unix time in ms on both
/// sides (a delivery time) within the PTTL tolerance.
fn near(r: &Reply, e: &Reply, relax: Relax) -> bool {
    const UNIX_MS: i64 = 1_000_000_000_000;
    match (r, e) {
        (Reply::Int(a), Reply::Int(b)) => match relax {
            Relax::Ignore => true,
            Relax::Time => (a - b).abs() <= PTTL_TOLERANCE_MS,
            Relax::No => a == b || (*a.min(b) >= UNIX_MS && (a - b).abs() <= PTTL_TOLERANCE_MS),
        },
        (Reply::Array(x), Reply::Array(y)) => {
            x.len() == y.len()
                && (0..x.len()).all(|i| {
                    let relax = if i > 0 {
                        relax_of(&x[i - 1])
                    } else {
                        Relax::No
                    };
                    near(&x[i], &y[i], relax)
                })
        }
        (Reply::Map(x), Reply::Map(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((k, v), (l, w))| k == l && near(v, w, relax_of(k)))
        }
        _ => r == e,
    }
}

/// A reply as field–value pairs: a map, or a flat array of even length.
fn pairs(r: &Reply) -> Option<Vec<(Reply, Reply)>> {
    match r {
        Reply::Map(p) => Some(p.clone()),
        Reply::Array(v) if v.len() % 2 == 0 => {
            Some(v.chunks(2).map(|c| (c[0].clone(), c[1].clone())).collect())
        }
        _ => None,
    }
}

fn sorted(items: &[Reply]) -> Vec<Reply> {
    let mut v = items.to_vec();
    v.sort_by_key(|r| format!("{r:?}"));
    v
}

fn ttl(millis: bool, redis: &Reply, elsa: &Reply) -> Option<String> {
    let (Reply::Int(r), Reply::Int(e)) = (redis, elsa) else {
        return (redis != elsa).then(|| "different reply".into());
    };
    if *r < 0 || *e < 0 {
        return (r != e).then(|| "different TTL state (-2 missing, -1 no TTL)".into());
    }
    let tol = if millis {
        PTTL_TOLERANCE_MS
    } else {
        TTL_TOLERANCE_S
    };
    ((r - e).abs() > tol).then(|| format!("TTLs differ by more than {tol}"))
}

fn time(redis: &Reply, elsa: &Reply) -> Option<String> {
    fn parts(r: &Reply) -> Option<(i64, i64)> {
        let Reply::Array(v) = r else { return None };
        let num = |r: &Reply| match r {
            Reply::Bulk(b) => std::str::from_utf8(b).ok()?.parse::<i64>().ok(),
            _ => None,
        };
        match v.as_slice() {
            [s, us] => Some((num(s)?, num(us)?)),
            _ => None,
        }
    }
    match (parts(redis), parts(elsa)) {
        (Some((rs, _)), Some((es, eus))) => {
            if (rs - es).abs() > TIME_TOLERANCE_S {
                Some("TIME seconds too far apart".into())
            } else if !(0..1_000_000).contains(&eus) {
                Some("TIME microseconds out of range".into())
            } else {
                None
            }
        }
        (Some(_), None) => Some("elsa's TIME is not [secs, micros] as bulk strings".into()),
        _ => Some("redis's TIME is not [secs, micros]: harness problem".into()),
    }
}

/// HELLO's reply as field/value pairs (a map in RESP3, a flat array in
/// RESP2), with the container type.
fn hello_pairs(r: &Reply) -> Option<(&'static str, Vec<(Reply, Reply)>)> {
    match r {
        Reply::Map(p) => Some(("map", p.clone())),
        Reply::Array(v) if v.len() % 2 == 0 => Some((
            "array",
            v.chunks(2).map(|c| (c[0].clone(), c[1].clone())).collect(),
        )),
        _ => None,
    }
}

fn hello(redis: &Reply, elsa: &Reply) -> Option<String> {
    let (Some((rk, rp)), Some((ek, ep))) = (hello_pairs(redis), hello_pairs(elsa)) else {
        return (redis != elsa).then(|| "different reply".into());
    };
    if rk != ek {
        return Some(format!("HELLO as {rk} vs {ek}"));
    }
    let keys = |p: &[(Reply, Reply)]| p.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
    if keys(&rp) != keys(&ep) {
        return Some("HELLO fields differ".into());
    }
    for ((k, rv), (_, ev)) in rp.iter().zip(&ep) {
        let free = matches!(k, Reply::Bulk(b) | Reply::Simple(b)
            if b == b"server" || b == b"version" || b == b"id");
        let same = if free {
            rv.kind() == ev.kind()
        } else {
            rv == ev
        };
        if !same {
            return Some(format!("HELLO field {k} differs"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relaxations_are_narrow() {
        let err = |s: &str| Reply::Error(s.as_bytes().to_vec());
        // Errors are exact even under a relaxed norm.
        assert!(compare(&Norm::Shape, &err("ERR a"), &err("ERR b")).is_some());
        assert!(compare(
            &Norm::Ttl { millis: false },
            &Reply::Int(100),
            &Reply::Int(99)
        )
        .is_none());
        assert!(compare(
            &Norm::Ttl { millis: false },
            &Reply::Int(-1),
            &Reply::Int(100)
        )
        .is_some());
        assert!(compare(
            &Norm::Ttl { millis: false },
            &Reply::Int(100),
            &Reply::Int(97)
        )
        .is_some());
        assert!(compare(&Norm::Exact, &Reply::NilBulk, &Reply::NilArray).is_some());
        let a = Reply::Array(vec![Reply::Bulk(b"x".to_vec()), Reply::Bulk(b"y".to_vec())]);
        let b = Reply::Array(vec![Reply::Bulk(b"y".to_vec()), Reply::Bulk(b"x".to_vec())]);
        assert!(compare(&Norm::Unordered, &a, &b).is_none());
        assert!(compare(&Norm::Exact, &a, &b).is_some());
        let bulk = |s: &str| Reply::Bulk(s.as_bytes().to_vec());
        assert!(compare(&Norm::Encoding, &bulk("raw"), &bulk("int")).is_none());
        assert!(compare(&Norm::Encoding, &bulk("embstr"), &bulk("int")).is_none());
        assert!(compare(&Norm::Encoding, &bulk("int"), &bulk("embstr")).is_some());
        assert!(compare(&Norm::Encoding, &Reply::NilBulk, &bulk("raw")).is_some());
        assert!(compare(&Norm::Encoding, &bulk("quicklist"), &bulk("list")).is_some());
        assert!(compare(&Norm::Encoding, &bulk("quicklist"), &Reply::NilBulk).is_some());
        assert!(compare(&Norm::Encoding, &bulk("listpack"), &bulk("hashtable")).is_some());
        let max = Reply::Int(i64::from(i32::MAX));
        assert!(compare(&Norm::Refcount, &Reply::Int(1), &max).is_none());
        assert!(compare(&Norm::Refcount, &max, &Reply::Int(1)).is_some());
    }
}
