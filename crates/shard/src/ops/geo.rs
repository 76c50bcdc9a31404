//! The GEO commands, on sorted sets as Redis 7.0 keeps them (`geo.c`): a
//! member's score is its position's 52-bit geohash ([`crate::geohash`]).
//! GEOADD is a ZADD of those scores (its writes merge as any sorted set's
//! across regions); GEOPOS, GEODIST, GEOHASH, GEORADIUS,
//! GEORADIUSBYMEMBER (and their `_RO` forms), GEOSEARCH and
//! GEOSEARCHSTORE read the scores back.
//!
//! Arguments are parsed as `georadiusGeneric` parses them, with its error
//! texts and in its order. Redis checks the key's type before it reads a
//! search's arguments, looks a FROMMEMBER's (or GEORADIUSBYMEMBER's)
//! member up where it reads it, and skips GEORADIUSBYMEMBER's radius when
//! the key is missing; so a search's refusals and member look-ups are kept
//! in order ([`Check`]) and answered where the op reads the key, which
//! gives Redis's answer to a command with several faults.

use bytes::Bytes;
use elsa_lattice::zset::ScoreBound;
use elsa_lattice::ZSet;

use super::zparse::{parse_double, AddFlags, ZCmd, ERR_NOT_FLOAT};
use super::{parse_i64, OpReply, ERR_NOT_INTEGER, ERR_SYNTAX};
use crate::geohash::{self, Shape};

/// A GEO command other than GEOADD, parsed.
#[derive(Clone, Debug, PartialEq)]
pub enum GeoCmd {
    /// GEOPOS members.
    Pos(Vec<Bytes>),
    /// GEODIST a b, in meters divided by `unit`.
    Dist { a: Bytes, b: Bytes, unit: f64 },
    /// GEOHASH members.
    Hash(Vec<Bytes>),
    /// GEORADIUS*, GEOSEARCH, GEOSEARCHSTORE.
    Search(Search),
}

/// Where a search is centred.
#[derive(Clone, Debug, PartialEq)]
pub enum Center {
    /// A member's position (GEORADIUSBYMEMBER, FROMMEMBER).
    Member(Bytes),
    /// Longitude, latitude (GEORADIUS, FROMLONLAT).
    Point(f64, f64),
}

/// How results are ordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sort {
    None,
    Asc,
    Desc,
}

/// What a search answers before it runs, in the order Redis meets them
/// (after the key's type).
#[derive(Clone, Debug, PartialEq)]
pub enum Check {
    /// A member the centre is taken from: refused when the key holds a
    /// sorted set without it.
    Member(Bytes),
    /// An argument refused.
    Refused(String),
    /// GEORADIUSBYMEMBER's radius refused: Redis reads it only when the
    /// key exists.
    RefusedIfKey(String),
}

/// A search's arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct Search {
    pub center: Center,
    /// Sizes in meters.
    pub shape: Shape,
    /// Meters per unit of the reply's distances.
    pub unit: f64,
    pub sort: Sort,
    /// At most this many results (0: all).
    pub count: u64,
    /// Stop at the first `count` found (not the nearest).
    pub any: bool,
    pub withdist: bool,
    pub withhash: bool,
    pub withcoord: bool,
    /// STORE / STOREDIST / GEOSEARCHSTORE's destination.
    pub store: Option<Bytes>,
    /// Store distances (in `unit`) as scores, not geohashes.
    pub storedist: bool,
    /// GEOSEARCHSTORE (not GEORADIUS… STORE): its keyspace event's name.
    pub searchstore: bool,
    /// Refusals and member look-ups, in Redis's order (a refused search
    /// ends with its refusal and is not run).
    pub checks: Vec<Check>,
}

/// A FROMMEMBER (or GEORADIUSBYMEMBER) member not in the sorted set.
pub const ERR_DECODE_MEMBER: &str = "ERR could not decode requested zset member";

fn is(a: &[u8], w: &str) -> bool {
    a.eq_ignore_ascii_case(w.as_bytes())
}

/// `extractLongLatOrReply`: a position inside the indexable area.
fn long_lat(lon: &[u8], lat: &[u8]) -> Result<(f64, f64), String> {
    let x = parse_double(lon).ok_or(ERR_NOT_FLOAT)?;
    let y = parse_double(lat).ok_or(ERR_NOT_FLOAT)?;
    if !(geohash::LONG_MIN..=geohash::LONG_MAX).contains(&x)
        || !(geohash::LAT_MIN..=geohash::LAT_MAX).contains(&y)
    {
        return Err(format!("ERR invalid longitude,latitude pair {x:.6},{y:.6}"));
    }
    Ok((x, y))
}

/// `extractUnitOrReply`: meters per unit.
fn unit(u: &[u8]) -> Result<f64, String> {
    Ok(if is(u, "m") {
        1.0
    } else if is(u, "km") {
        1000.0
    } else if is(u, "ft") {
        0.3048
    } else if is(u, "mi") {
        1609.34
    } else {
        return Err("ERR unsupported unit provided. please use M, KM, FT, MI".into());
    })
}

/// `extractDistanceOrReply`: a radius and its unit, the radius in meters.
fn distance(r: &[u8], u: &[u8]) -> Result<(Shape, f64), String> {
    let d = parse_double(r).ok_or("ERR need numeric radius")?;
    if d < 0.0 {
        return Err("ERR radius cannot be negative".into());
    }
    let to_m = unit(u)?;
    Ok((Shape::Circle { radius: d * to_m }, to_m))
}

/// `extractBoxOrReply`: width, height and their unit, in meters.
fn boxed(w: &[u8], h: &[u8], u: &[u8]) -> Result<(Shape, f64), String> {
    let w = parse_double(w).ok_or("ERR need numeric width")?;
    let h = parse_double(h).ok_or("ERR need numeric height")?;
    if h < 0.0 || w < 0.0 {
        return Err("ERR height or width cannot be negative".into());
    }
    let to_m = unit(u)?;
    Ok((
        Shape::Box {
            width: w * to_m,
            height: h * to_m,
        },
        to_m,
    ))
}

/// GEOADD key [NX|XX] [CH] lon lat member …, as the ZADD Redis makes of
/// it (`geoaddCommand`).
pub fn add(args: &[Bytes]) -> Result<ZCmd, String> {
    let mut flags = AddFlags::default();
    let mut at = 2;
    while at < args.len() {
        let a = &args[at];
        if is(a, "nx") {
            flags.nx = true;
        } else if is(a, "xx") {
            flags.xx = true;
        } else if is(a, "ch") {
            flags.ch = true;
        } else {
            break;
        }
        at += 1;
    }
    let rest = &args[at..];
    if !rest.len().is_multiple_of(3) || (flags.nx && flags.xx) {
        return Err(ERR_SYNTAX.into());
    }
    let mut pairs = Vec::with_capacity(rest.len() / 3);
    for t in rest.chunks(3) {
        let (x, y) = long_lat(&t[0], &t[1])?;
        let score = geohash::score(x, y).ok_or(ERR_SYNTAX)?;
        pairs.push((score, t[2].clone()));
    }
    if pairs.is_empty() {
        // ZADD of no pair.
        return Err(ERR_SYNTAX.into());
    }
    Ok(ZCmd::Add { flags, pairs })
}

/// Every GEO command but GEOADD (`name` lowercase).
pub fn parse(name: &str, args: &[Bytes]) -> Result<GeoCmd, String> {
    Ok(match name {
        "geopos" => GeoCmd::Pos(args[2..].to_vec()),
        "geohash" => GeoCmd::Hash(args[2..].to_vec()),
        "geodist" => {
            let unit = match args.len() {
                4 => 1.0,
                5 => unit(&args[4])?,
                _ => return Err(ERR_SYNTAX.into()),
            };
            GeoCmd::Dist {
                a: args[2].clone(),
                b: args[3].clone(),
                unit,
            }
        }
        _ => GeoCmd::Search(search(name, args)),
    })
}

/// `georadiusGeneric`'s arguments; a refusal ends them (see [`Check`]).
fn search(name: &str, args: &[Bytes]) -> Search {
    let mut s = Search {
        center: Center::Point(0.0, 0.0),
        shape: Shape::Circle { radius: 0.0 },
        unit: 1.0,
        sort: Sort::None,
        count: 0,
        any: false,
        withdist: false,
        withhash: false,
        withcoord: false,
        store: None,
        storedist: false,
        searchstore: name == "geosearchstore",
        checks: Vec::new(),
    };
    if let Err(e) = read_search(name, args, &mut s) {
        s.checks.push(Check::Refused(e));
    }
    s
}

/// Reads a search's arguments into `s`, in Redis's order: the first
/// refusal.
fn read_search(name: &str, args: &[Bytes], s: &mut Search) -> Result<(), String> {
    let ro = name.ends_with("_ro");
    let geosearch = name.starts_with("geosearch");
    let base = match name {
        "georadius" | "georadius_ro" => {
            let (x, y) = long_lat(&args[2], &args[3])?;
            s.center = Center::Point(x, y);
            (s.shape, s.unit) = distance(&args[4], &args[5])?;
            6
        }
        "georadiusbymember" | "georadiusbymember_ro" => {
            s.center = Center::Member(args[2].clone());
            s.checks.push(Check::Member(args[2].clone()));
            match distance(&args[3], &args[4]) {
                Ok(d) => (s.shape, s.unit) = d,
                Err(e) => s.checks.push(Check::RefusedIfKey(e)),
            }
            5
        }
        "geosearchstore" => {
            s.store = Some(args[1].clone());
            3
        }
        _ => 2,
    };
    let (mut frommember, mut fromloc, mut byradius, mut bybox) = (false, false, false, false);
    let rest = &args[base.min(args.len())..];
    let mut i = 0;
    while i < rest.len() {
        let a = &rest[i];
        let left = rest.len() - i - 1;
        if is(a, "withdist") {
            s.withdist = true;
        } else if is(a, "withhash") {
            s.withhash = true;
        } else if is(a, "withcoord") {
            s.withcoord = true;
        } else if is(a, "any") {
            s.any = true;
        } else if is(a, "asc") {
            s.sort = Sort::Asc;
        } else if is(a, "desc") {
            s.sort = Sort::Desc;
        } else if is(a, "count") && left >= 1 {
            let n = parse_i64(&rest[i + 1]).ok_or(ERR_NOT_INTEGER)?;
            if n <= 0 {
                return Err("ERR COUNT must be > 0".into());
            }
            s.count = n as u64;
            i += 1;
        } else if (is(a, "store") || is(a, "storedist")) && left >= 1 && !ro && !geosearch {
            s.store = Some(rest[i + 1].clone());
            s.storedist = is(a, "storedist");
            i += 1;
        } else if is(a, "storedist") && name == "geosearchstore" {
            s.storedist = true;
        } else if is(a, "frommember") && left >= 1 && geosearch && !fromloc {
            s.center = Center::Member(rest[i + 1].clone());
            s.checks.push(Check::Member(rest[i + 1].clone()));
            frommember = true;
            i += 1;
        } else if is(a, "fromlonlat") && left >= 2 && geosearch && !frommember {
            let (x, y) = long_lat(&rest[i + 1], &rest[i + 2])?;
            s.center = Center::Point(x, y);
            fromloc = true;
            i += 2;
        } else if is(a, "byradius") && left >= 2 && geosearch && !bybox {
            (s.shape, s.unit) = distance(&rest[i + 1], &rest[i + 2])?;
            byradius = true;
            i += 2;
        } else if is(a, "bybox") && left >= 3 && geosearch && !byradius {
            (s.shape, s.unit) = boxed(&rest[i + 1], &rest[i + 2], &rest[i + 3])?;
            bybox = true;
            i += 3;
        } else {
            return Err(ERR_SYNTAX.into());
        }
        i += 1;
    }
    if s.store.is_some() && (s.withdist || s.withhash || s.withcoord) {
        return Err(format!(
            "ERR {} is not compatible with WITHDIST, WITHHASH and WITHCOORD options",
            if name == "geosearchstore" {
                "GEOSEARCHSTORE"
            } else {
                "STORE option in GEORADIUS"
            }
        ));
    }
    // Redis names the command as it was typed.
    let typed = String::from_utf8_lossy(&args[0]);
    if geosearch && !(frommember || fromloc) {
        return Err(format!(
            "ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for {typed}"
        ));
    }
    if geosearch && !(byradius || bybox) {
        return Err(format!(
            "ERR exactly one of BYRADIUS and BYBOX can be specified for {typed}"
        ));
    }
    if s.any && s.count == 0 {
        return Err("ERR the ANY argument requires COUNT argument".into());
    }
    if s.count != 0 && s.sort == Sort::None && !s.any {
        s.sort = Sort::Asc;
    }
    Ok(())
}

/// The answer of `s`'s checks on `z` (the key's sorted set, `None` when
/// it is missing), if one refuses the search.
pub fn refusal(s: &Search, z: Option<&ZSet>) -> Option<OpReply> {
    for c in &s.checks {
        match c {
            Check::Member(m) => {
                if z.is_some_and(|z| z.score(m).is_none()) {
                    return Some(OpReply::Error(ERR_DECODE_MEMBER));
                }
            }
            Check::RefusedIfKey(e) if z.is_some() => return Some(OpReply::ErrorText(e.clone())),
            Check::RefusedIfKey(_) => {}
            Check::Refused(e) => return Some(OpReply::ErrorText(e.clone())),
        }
    }
    None
}

/// A distance as Redis prints it (`fixedpoint_d2string`, 4 decimals).
fn distance_text(d: f64) -> Bytes {
    let v = (d * 10_000.0).round_ties_even() as i64;
    let sign = if v < 0 { "-" } else { "" };
    let v = v.unsigned_abs();
    Bytes::from(format!("{sign}{}.{:04}", v / 10_000, v % 10_000))
}

/// GEOPOS, GEODIST, GEOHASH on `z` (empty when the key is missing).
pub fn answer(cmd: &GeoCmd, z: &ZSet) -> OpReply {
    let pos = |m: &[u8]| z.score(m).and_then(geohash::position);
    match cmd {
        GeoCmd::Pos(members) => OpReply::Array(
            members
                .iter()
                .map(|m| match pos(m) {
                    Some((x, y)) => OpReply::Array(vec![OpReply::Coord(x), OpReply::Coord(y)]),
                    None => OpReply::NilArray,
                })
                .collect(),
        ),
        GeoCmd::Hash(members) => OpReply::Array(
            members
                .iter()
                .map(|m| {
                    z.score(m)
                        .and_then(geohash::hash_string)
                        .map_or(OpReply::Nil, |h| OpReply::Bulk(Bytes::from(h)))
                })
                .collect(),
        ),
        GeoCmd::Dist { a, b, unit } => match (pos(a), pos(b)) {
            (Some(p), Some(q)) => {
                OpReply::Bulk(distance_text(geohash::distance(p.0, p.1, q.0, q.1) / unit))
            }
            _ => OpReply::Nil,
        },
        GeoCmd::Search(_) => OpReply::Error(ERR_SYNTAX),
    }
}

/// One point a search found.
pub struct Found {
    pub member: Bytes,
    /// From the centre, in the search's unit.
    pub dist: f64,
    pub score: f64,
    pub pos: (f64, f64),
}

/// The points of `z` a search finds, in the order it answers them (at
/// most `count`), or Redis's error.
pub fn search_points(s: &Search, z: &ZSet) -> Result<Vec<Found>, &'static str> {
    let center = match &s.center {
        Center::Point(x, y) => (*x, *y),
        Center::Member(m) => z
            .score(m)
            .and_then(geohash::position)
            .ok_or(ERR_DECODE_MEMBER)?,
    };
    let limit = if s.any { s.count as usize } else { 0 };
    let o = z.ordered();
    let mut found: Vec<Found> = Vec::new();
    'boxes: for (min, max) in geohash::search_ranges(s.shape, center) {
        if limit != 0 && found.len() >= limit {
            break;
        }
        let from = o.score_start(ScoreBound {
            score: min as f64,
            exclusive: false,
        });
        let to = o.score_end(ScoreBound {
            score: max as f64,
            exclusive: true,
        });
        for (score, m) in o.range(from, to) {
            if let Some(pos) = geohash::position(score) {
                if let Some(d) = geohash::within(s.shape, center, pos) {
                    found.push(Found {
                        member: Bytes::copy_from_slice(m),
                        dist: d,
                        score,
                        pos,
                    });
                }
            }
            if limit != 0 && found.len() >= limit {
                break 'boxes;
            }
        }
    }
    match s.sort {
        Sort::None => {}
        Sort::Asc => found.sort_by(|a, b| a.dist.total_cmp(&b.dist)),
        Sort::Desc => found.sort_by(|a, b| b.dist.total_cmp(&a.dist)),
    }
    if s.count != 0 {
        found.truncate(s.count as usize);
    }
    for f in &mut found {
        f.dist /= s.unit;
    }
    Ok(found)
}

/// A search's reply (no STORE).
pub fn search_reply(s: &Search, found: Vec<Found>) -> OpReply {
    let options = s.withdist || s.withhash || s.withcoord;
    OpReply::Array(
        found
            .into_iter()
            .map(|f| {
                if !options {
                    return OpReply::Bulk(f.member);
                }
                let mut item = vec![OpReply::Bulk(f.member)];
                if s.withdist {
                    item.push(OpReply::Bulk(distance_text(f.dist)));
                }
                if s.withhash {
                    item.push(OpReply::Int(f.score as i64));
                }
                if s.withcoord {
                    item.push(OpReply::Array(vec![
                        OpReply::Coord(f.pos.0),
                        OpReply::Coord(f.pos.1),
                    ]));
                }
                OpReply::Array(item)
            })
            .collect(),
    )
}

/// What a STORE writes: members with their geohash or distance.
pub fn stored(s: &Search, found: Vec<Found>) -> Vec<(Bytes, f64)> {
    found
        .into_iter()
        .map(|f| {
            let score = if s.storedist { f.dist } else { f.score };
            (f.member, score)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<Bytes> {
        line.split(' ')
            .map(|w| Bytes::copy_from_slice(w.as_bytes()))
            .collect()
    }

    #[test]
    fn distances_print_as_redis() {
        assert_eq!(distance_text(166274.1516), "166274.1516");
        assert_eq!(distance_text(0.0), "0.0000");
        assert_eq!(distance_text(0.00004), "0.0000");
        assert_eq!(distance_text(1.23456), "1.2346");
    }

    #[test]
    fn errors_are_redis_texts() {
        let err = |line: &str| {
            let a = args(line);
            let name = String::from_utf8_lossy(&a[0]).to_lowercase();
            let Ok(GeoCmd::Search(s)) = parse(&name, &a) else {
                panic!("{line}: not a search")
            };
            match refusal(&s, None) {
                Some(OpReply::ErrorText(e)) => e,
                other => panic!("{line}: {other:?}"),
            }
        };
        assert_eq!(
            add(&args("geoadd k 200 100 m")).unwrap_err(),
            "ERR invalid longitude,latitude pair 200.000000,100.000000"
        );
        assert_eq!(add(&args("geoadd k nx xx 1 1 m")).unwrap_err(), ERR_SYNTAX);
        assert_eq!(
            err("GEOSEARCH k BYRADIUS 1 km"),
            "ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for GEOSEARCH"
        );
        assert_eq!(
            err("geosearch k fromlonlat 1 1"),
            "ERR exactly one of BYRADIUS and BYBOX can be specified for geosearch"
        );
        assert_eq!(
            err("georadius k 1 1 1 km any"),
            "ERR the ANY argument requires COUNT argument"
        );
        assert_eq!(err("georadius_ro k 1 1 1 km store d"), ERR_SYNTAX);
        // A missing key: GEORADIUSBYMEMBER's radius is not read.
        let a = args("georadiusbymember k m -1 km");
        let Ok(GeoCmd::Search(s)) = parse("georadiusbymember", &a) else {
            panic!()
        };
        assert_eq!(refusal(&s, None), None);
        assert_eq!(
            refusal(&s, Some(&ZSet::default())),
            Some(OpReply::Error(ERR_DECODE_MEMBER))
        );
        assert_eq!(err("georadius k 1 1 1 km WITHDIST BADARG"), ERR_SYNTAX);
        assert_eq!(
            err("georadius k 1 1 1 parsec"),
            "ERR unsupported unit provided. please use M, KM, FT, MI"
        );
    }
}
