//! XCLAIM and XAUTOCLAIM: pending entries handed to another consumer,
//! with Redis's options, checks (made after the lookup, as Redis makes
//! them), and the entries gone from the stream dropped from the group.

use bytes::Bytes;
use elsa_lattice::stream::{Stream, StreamId};
use elsa_lattice::{Crdt, KeyState};

use super::groups::ERR_AUTOCLAIM_COUNT;
use super::groups::{c_name, lookup, no_group, write};
use super::{entry_reply, id_bulk, parse, stream, ERR_START};
use crate::notify::STREAM;
use crate::ops::{notify, parse_i64, KeyView, OpReply, ERR_SYNTAX};

/// XCLAIM key group consumer min-idle id… [IDLE ms] [TIME ms] [RETRYCOUNT n]
/// [FORCE] [JUSTID] [LASTID id]: parsed after the lookup, as Redis does.
pub fn xclaim(key: &[u8], view: &mut impl KeyView, args: &[Bytes]) -> OpReply {
    let (group, consumer) = (&args[2][..], &args[3][..]);
    let s = match lookup(view, key) {
        Err(e) => return e,
        Ok(None) => return no_group(key, group),
        Ok(Some(s)) => s,
    };
    let x = stream(&s);
    let Some(g) = x.group(group) else {
        return no_group(key, group);
    };
    let Some(min_idle) = parse_i64(&args[4]) else {
        return OpReply::ErrorText("ERR Invalid min-idle-time argument for XCLAIM".into());
    };
    let min_idle = min_idle.max(0);
    let mut ids = Vec::new();
    let mut j = 5;
    while j < args.len() {
        match parse::id(&args[j], 0, true) {
            Ok(id) => ids.push(id),
            Err(_) => break,
        }
        j += 1;
    }
    let now = view.now_ms() as i64;
    let (mut force, mut justid) = (false, false);
    let mut retry: Option<i64> = None;
    let mut at: Option<i64> = None;
    let mut last = StreamId::MIN;
    let opt_int = |a: &[u8], what: &str| {
        parse_i64(a).ok_or_else(|| {
            OpReply::ErrorText(format!("ERR Invalid {what} option argument for XCLAIM"))
        })
    };
    while j < args.len() {
        let more = args.len() - 1 - j;
        let o = &args[j][..];
        let is = |w: &str| o.eq_ignore_ascii_case(w.as_bytes());
        if is("force") {
            force = true;
        } else if is("justid") {
            justid = true;
        } else if is("idle") && more > 0 {
            j += 1;
            match opt_int(&args[j], "IDLE") {
                Ok(n) => at = Some(now - n),
                Err(e) => return e,
            }
        } else if is("time") && more > 0 {
            j += 1;
            match opt_int(&args[j], "TIME") {
                Ok(n) => at = Some(n),
                Err(e) => return e,
            }
        } else if is("retrycount") && more > 0 {
            j += 1;
            match opt_int(&args[j], "RETRYCOUNT") {
                Ok(n) => retry = Some(n),
                Err(e) => return e,
            }
        } else if is("lastid") && more > 0 {
            j += 1;
            match parse::id(&args[j], 0, true) {
                Ok(id) => last = id,
                Err(e) => return OpReply::Error(e),
            }
        } else {
            return OpReply::ErrorText(format!("ERR Unrecognized XCLAIM option '{}'", c_name(o)));
        }
        j += 1;
    }
    let at = match at {
        Some(t) if (0..=now).contains(&t) => t,
        _ => now,
    } as u64;
    let (mut claimed, mut gone, mut out) = (Vec::new(), Vec::new(), Vec::new());
    for id in ids {
        let pending = g.pending_entry(id);
        let entry = x.entry(id).map(|e| (id, e));
        let Some(entry) = entry else {
            if pending.is_some() {
                gone.push(id);
            }
            continue;
        };
        let count = match pending {
            Some(d) => {
                if min_idle > 0 && now - (d.at_ms as i64) < min_idle {
                    continue;
                }
                d.count
            }
            // Redis's new NACK counts one delivery already.
            None if force => 1,
            None => continue,
        };
        let count = match retry {
            Some(n) if n >= 0 => n as u64,
            _ if justid => count,
            _ => count + 1,
        };
        if claimed.iter().any(|(c, _)| *c == id) {
            claimed.retain(|(c, _)| *c != id);
        }
        claimed.push((id, count));
        out.push(if justid {
            id_bulk(id)
        } else {
            entry_reply(entry)
        });
    }
    let (read_last, read) = g.last_delivered();
    let advance = (last > read_last).then_some((last, read));
    let (_, dot) = view.stamp();
    let mut delta = if claimed.is_empty() {
        None
    } else {
        x.deliver_counted(group, consumer, &claimed, at, advance, now as u64, dot)
    };
    if let (true, Some(adv)) = (claimed.is_empty(), advance) {
        // A LASTID alone creates no consumer.
        delta = x.advance_group(group, adv);
    }
    let delta = dropping_gone(x, group, delta, &gone, dot);
    let new_consumer = !claimed.is_empty() && g.consumer(consumer).is_none();
    drop(s);
    commit(view, key, delta, new_consumer);
    OpReply::Array(out)
}

/// A claim's `delta` with the pending entries gone from the stream
/// (`gone`) dropped from the group, as Redis drops them.
fn dropping_gone(
    x: &Stream,
    group: &[u8],
    delta: Option<Stream>,
    gone: &[StreamId],
    dot: elsa_lattice::Version,
) -> Option<Stream> {
    let acked = if gone.is_empty() {
        None
    } else {
        x.ack(group, gone, dot)
    };
    match (delta, acked) {
        (Some(mut d), Some(a)) => {
            d.merge(a);
            Some(d)
        }
        (d, a) => d.or(a),
    }
}

/// Writes a claim's delta, and raises `xgroup-createconsumer` when the
/// claim made its consumer.
fn commit(view: &mut impl KeyView, key: &[u8], delta: Option<Stream>, new_consumer: bool) {
    if let Some(d) = delta {
        write(view, key, KeyState::default(), d);
    }
    if new_consumer {
        notify(view, STREAM, "xgroup-createconsumer", key);
    }
}

/// XAUTOCLAIM key group consumer min-idle start [COUNT n] [JUSTID]
/// (`opts` parsed before the lookup, as Redis does).
pub fn xautoclaim(key: &[u8], view: &mut impl KeyView, args: &[Bytes], a: &AutoClaim) -> OpReply {
    let (group, consumer) = (&args[2][..], &args[3][..]);
    let s = match lookup(view, key) {
        Err(e) => return e,
        Ok(None) => return no_group(key, group),
        Ok(Some(s)) => s,
    };
    let x = stream(&s);
    let Some(g) = x.group(group) else {
        return no_group(key, group);
    };
    let now = view.now_ms() as i64;
    let mut count = a.count;
    let mut attempts = a.count.saturating_mul(10);
    // As far as the attempts can reach, and one more for the cursor.
    let reach = usize::try_from(attempts.saturating_add(1)).unwrap_or(usize::MAX);
    let pel: Vec<(StreamId, &elsa_lattice::stream::Delivery)> =
        g.pending_in(a.start, StreamId::MAX).take(reach).collect();
    let (mut claimed, mut gone, mut out) = (Vec::new(), Vec::new(), Vec::new());
    let mut i = 0;
    while attempts > 0 && count > 0 && i < pel.len() {
        attempts -= 1;
        let (id, d) = pel[i];
        i += 1;
        let Some(entry) = x.entry(id).map(|e| (id, e)) else {
            gone.push(id);
            count -= 1;
            continue;
        };
        if a.min_idle > 0 && now - (d.at_ms as i64) < a.min_idle {
            continue;
        }
        claimed.push((id, if a.justid { d.count } else { d.count + 1 }));
        out.push(if a.justid {
            id_bulk(id)
        } else {
            entry_reply(entry)
        });
        count -= 1;
    }
    let next = pel.get(i).map_or(StreamId::MIN, |(id, _)| *id);
    let (_, dot) = view.stamp();
    let delta = if claimed.is_empty() {
        None
    } else {
        x.deliver_counted(group, consumer, &claimed, now as u64, None, now as u64, dot)
    };
    let delta = dropping_gone(x, group, delta, &gone, dot);
    let new_consumer = !claimed.is_empty() && g.consumer(consumer).is_none();
    drop(s);
    commit(view, key, delta, new_consumer);
    OpReply::Array(vec![
        id_bulk(next),
        OpReply::Array(out),
        OpReply::Array(gone.into_iter().map(id_bulk).collect()),
    ])
}

/// XAUTOCLAIM's arguments past the consumer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AutoClaim {
    /// min-idle-time (0 and below: none).
    pub min_idle: i64,
    /// From (inclusive).
    pub start: StreamId,
    /// COUNT (100 by default).
    pub count: u64,
    /// JUSTID.
    pub justid: bool,
}

impl AutoClaim {
    /// Parses XAUTOCLAIM's arguments in Redis's order.
    pub fn parse(args: &[Bytes]) -> Result<AutoClaim, String> {
        let min_idle = parse_i64(&args[4])
            .ok_or("ERR Invalid min-idle-time argument for XAUTOCLAIM")?
            .max(0);
        let (mut start, ex) = parse::bound(&args[5], 0)?;
        if ex {
            start = start.next().ok_or(ERR_START)?;
        }
        let (mut count, mut justid) = (100, false);
        let mut j = 6;
        while j < args.len() {
            let more = args.len() - 1 - j;
            if args[j].eq_ignore_ascii_case(b"count") && more > 0 {
                let max = i64::MAX / 16;
                count = match parse_i64(&args[j + 1]) {
                    Some(n) if (1..=max).contains(&n) => n as u64,
                    _ => return Err(ERR_AUTOCLAIM_COUNT.into()),
                };
                j += 1;
            } else if args[j].eq_ignore_ascii_case(b"justid") {
                justid = true;
            } else {
                return Err(ERR_SYNTAX.into());
            }
            j += 1;
        }
        Ok(AutoClaim {
            min_idle,
            start,
            count,
            justid,
        })
    }
}
