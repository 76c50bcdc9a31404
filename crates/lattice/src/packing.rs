//! How each collection's entry packs (see `crate::packed`): a set
//! member's presence, a hash field, a sorted-set member. The common entry
//! — one add that also wrote the value or score — is a tag, the dot as
//! origin and varint timestamp, and the value's bytes (or the score);
//! anything else is tag 1 and the log's encoding (`crate::codec`).

use bytes::Bytes;

use crate::counter::Counter;
use crate::ormap::Field;
use crate::packed::{get_varint, get_version, put_varint, put_version, Pack, MAX_ELEM};
use crate::zset::{FTallies, Member, Score};
use crate::{Elem, Presence, Ts, Version};

/// A set member's presence, packed (see `crate::packed`): one add and no
/// remove (the common case) as its tag 0, origin and timestamp; anything
/// else as tag 1 and the log's encoding.
impl Pack for Presence {
    fn packable(&self) -> bool {
        true
    }

    fn pack(&self, base: Ts, out: &mut Vec<u8>) {
        match (&self.adds.0[..], &self.removed) {
            ([(origin, ts)], None) => {
                out.push(0);
                put_version(out, Version::new(*ts, *origin), base);
            }
            _ => {
                out.push(1);
                crate::codec::put_presence(out, self);
            }
        }
    }

    fn unpack(b: &[u8], base: Ts) -> Presence {
        let mut at = 1;
        match b[0] {
            0 => Presence::added(get_version(b, &mut at, base)),
            _ => crate::codec::get_presence(&mut Bytes::copy_from_slice(&b[1..]))
                .expect("a presence this crate packed"),
        }
    }

    fn live(&self) -> bool {
        self.is_live()
    }

    fn stamp(&self) -> Ts {
        self.adds
            .newest()
            .commit_ts
            .max(self.removed_at().commit_ts)
    }
}

/// A hash field, packed (see `crate::packed`): one add whose write also
/// set the plain value (an `HSET`) as tag 0, origin, timestamp, how long
/// before it its transaction started, and the value's bytes; anything else
/// (removes, increments, two regions' adds) as tag 1 and the log's
/// encoding.
impl Pack for Field {
    fn packable(&self) -> bool {
        self.value.base_value().is_none_or(|v| v.len() <= MAX_ELEM)
    }

    fn pack(&self, base: Ts, out: &mut Vec<u8>) {
        let v = self.value.base_version();
        let simple = match (&self.presence.adds.0[..], &self.presence.removed) {
            ([(origin, ts)], None) => {
                *origin == v.origin
                    && *ts == v.commit_ts
                    && self.value.is_plain()
                    && self.value.base_start_ts() <= v.commit_ts
            }
            _ => false,
        };
        match self.value.base_value() {
            Some(value) if simple => {
                out.push(0);
                put_version(out, v, base);
                put_varint(out, v.commit_ts - self.value.base_start_ts());
                out.extend_from_slice(value);
            }
            _ => {
                out.push(1);
                crate::codec::put_presence(out, &self.presence);
                crate::codec::put_counter(out, &self.value);
            }
        }
    }

    fn unpack(b: &[u8], base: Ts) -> Field {
        let mut at = 1;
        if b[0] == 0 {
            let v = get_version(b, &mut at, base);
            let start_ts = v.commit_ts - get_varint(b, &mut at);
            return Field {
                presence: Presence::added(v),
                value: Counter::from_parts(
                    Some(Elem::new(&b[at..])),
                    None,
                    start_ts,
                    v,
                    Default::default(),
                    Default::default(),
                ),
            };
        }
        let mut rest = Bytes::copy_from_slice(&b[1..]);
        Field {
            presence: crate::codec::get_presence(&mut rest).expect("a field this crate packed"),
            value: crate::codec::get_counter(&mut rest).expect("a field this crate packed"),
        }
    }

    fn live(&self) -> bool {
        self.is_live()
    }

    fn stamp(&self) -> Ts {
        self.presence
            .adds
            .newest()
            .commit_ts
            .max(self.value.newest().commit_ts)
    }
}

/// A sorted-set member, packed (see `crate::packed`): one add whose write
/// also set the score (a `ZADD`) as tag 0 (the score's 8 bytes) or 2 (an
/// integral score as a zigzag varint), origin and timestamp; anything else
/// (removes, increments, two regions' adds) as tag 1 and the log's
/// encoding.
impl Pack for Member {
    fn packable(&self) -> bool {
        true
    }

    fn pack(&self, base: Ts, out: &mut Vec<u8>) {
        let v = self.score.version();
        let simple = match (&self.presence.adds.0[..], &self.presence.removed) {
            ([(origin, ts)], None) => {
                *origin == v.origin && *ts == v.commit_ts && self.score.is_plain()
            }
            _ => false,
        };
        if !simple {
            out.push(1);
            crate::codec::put_presence(out, &self.presence);
            crate::codec::put_score(out, &self.score);
            return;
        }
        let x = self.score.base();
        // Integral and exactly an i64 (not -0, whose bits differ from 0).
        let int = (x.fract() == 0.0 && x.abs() < 9.0e15 && x.to_bits() != (-0.0f64).to_bits())
            .then_some(x as i64);
        out.push(if int.is_some() { 2 } else { 0 });
        put_version(out, v, base);
        match int {
            Some(i) => put_varint(out, ((i << 1) ^ (i >> 63)) as u64),
            None => out.extend_from_slice(&x.to_bits().to_le_bytes()),
        }
    }

    fn unpack(b: &[u8], base: Ts) -> Member {
        let mut at = 1;
        if b[0] == 1 {
            let mut rest = Bytes::copy_from_slice(&b[1..]);
            return Member {
                presence: crate::codec::get_presence(&mut rest)
                    .expect("a member this crate packed"),
                score: crate::codec::get_score(&mut rest).expect("a member this crate packed"),
            };
        }
        let v = get_version(b, &mut at, base);
        let x = if b[0] == 2 {
            let z = get_varint(b, &mut at);
            (((z >> 1) as i64) ^ -((z & 1) as i64)) as f64
        } else {
            f64::from_bits(u64::from_le_bytes(
                b[at..at + 8].try_into().expect("8 bytes"),
            ))
        };
        Member {
            presence: Presence::added(v),
            score: Score::from_parts(x, v, FTallies::default(), FTallies::default()),
        }
    }

    fn live(&self) -> bool {
        self.is_live()
    }

    fn stamp(&self) -> Ts {
        self.presence
            .adds
            .newest()
            .commit_ts
            .max(self.score.newest().commit_ts)
    }
}
