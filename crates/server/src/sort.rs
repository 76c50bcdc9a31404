//! SORT and SORT_RO, as Redis 7.0's `sort.c`: a list, set or sorted set's
//! elements sorted by themselves or by the keys a BY pattern names
//! (numbers, or bytes with ALPHA), ASC/DESC, LIMIT, GET patterns (`#`, a
//! string key, a hash field `key->field`), STORE into a list.
//!
//! The keys a pattern names are any keys, on any shard or node: the whole
//! command runs as one snapshot-isolated transaction (as a script does),
//! reading the source, every BY and GET key and writing the STORE key in
//! it, retried when it loses to a concurrent commit — so it sees and
//! writes one consistent state, as Redis's single thread does.

use bytes::Bytes;
use elsa_shard::notify::Event;
use elsa_shard::OpReply;
use elsa_txn::{Txn, TxnError};

use crate::cmd::{self, is, Kind};
use crate::conn::{run_in_txn, Answer, Conn, InTxn};

/// SORT's arguments, checked.
struct SortArgs {
    key: Bytes,
    by: Option<Bytes>,
    /// BY a pattern without `*`: nothing is sorted.
    dontsort: bool,
    gets: Vec<Bytes>,
    desc: bool,
    alpha: bool,
    limit: Option<(i64, i64)>,
    store: Option<Bytes>,
}

impl InTxn for SortArgs {
    async fn attempt(&self, c: &Conn, txn: &mut Txn) -> Result<Answer, TxnError> {
        c.sort_in(txn, self).await
    }
}

/// Parses SORT's options in Redis's order (`sortCommandGeneric`).
fn parse(args: &[Bytes], readonly: bool, allkeys: bool) -> Result<SortArgs, String> {
    let mut s = SortArgs {
        key: args[1].clone(),
        by: None,
        dontsort: false,
        gets: Vec::new(),
        desc: false,
        alpha: false,
        limit: None,
        store: None,
    };
    let mut j = 2;
    while j < args.len() {
        let a = &args[j];
        let left = args.len() - j - 1;
        if is(a, "asc") {
            s.desc = false;
        } else if is(a, "desc") {
            s.desc = true;
        } else if is(a, "alpha") {
            s.alpha = true;
        } else if is(a, "limit") && left >= 2 {
            let n = |b: &Bytes| {
                elsa_shard::ops::parse_i64(b)
                    .ok_or_else(|| elsa_shard::ops::ERR_NOT_INTEGER.to_string())
            };
            s.limit = Some((n(&args[j + 1])?, n(&args[j + 2])?));
            j += 2;
        } else if !readonly && is(a, "store") && left >= 1 {
            s.store = Some(args[j + 1].clone());
            j += 1;
        } else if is(a, "by") && left >= 1 {
            let p = &args[j + 1];
            s.dontsort = !c_str(p).contains(&b'*');
            if !s.dontsort && !allkeys {
                return Err(
                    "ERR BY option of SORT denied due to insufficient ACL permissions.".into(),
                );
            }
            s.by = Some(p.clone());
            j += 1;
        } else if is(a, "get") && left >= 1 {
            if !allkeys {
                return Err(
                    "ERR GET option of SORT denied due to insufficient ACL permissions.".into(),
                );
            }
            s.gets.push(args[j + 1].clone());
            j += 1;
        } else {
            return Err(elsa_shard::ops::ERR_SYNTAX.into());
        }
        j += 1;
    }
    Ok(s)
}

/// The bytes up to the first NUL (Redis reads patterns as C strings).
fn c_str(b: &[u8]) -> &[u8] {
    &b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())]
}

/// What a pattern names for `elem` (`lookupKeyByPattern`): the element
/// itself (`#`), or a key and maybe a hash field; `None` without `*`.
enum Lookup {
    Itself,
    Key(Bytes, Option<Bytes>),
}

fn lookup_of(pattern: &[u8], elem: &[u8]) -> Option<Lookup> {
    if pattern == b"#" {
        return Some(Lookup::Itself);
    }
    let c = c_str(pattern);
    let star = c.iter().position(|&b| b == b'*')?;
    let after = &c[star + 1..];
    let field = after
        .windows(2)
        .position(|w| w == b"->")
        .filter(|&at| at + 2 < after.len())
        .map(|at| star + 1 + at);
    let (key_end, field) = match field {
        Some(at) => (at, Some(Bytes::copy_from_slice(&pattern[at + 2..]))),
        None => (pattern.len(), None),
    };
    let mut key = Vec::with_capacity(key_end + elem.len());
    key.extend_from_slice(&pattern[..star]);
    key.extend_from_slice(elem);
    key.extend_from_slice(&pattern[star + 1..key_end]);
    Some(Lookup::Key(Bytes::from(key), field))
}

/// `strtod` as SORT takes a weight: leading space allowed, the whole rest
/// a number (an empty string is 0), no overflow, not NaN.
fn weight(b: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(c_str(b)).ok()?;
    let t = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    if t.is_empty() {
        return Some(0.0);
    }
    let v = elsa_shard::ops::zparse::parse_double(t.as_bytes())?;
    (!v.is_nan()).then_some(v)
}

impl Conn {
    /// SORT / SORT_RO key [BY pattern] [LIMIT offset count] [GET pattern …]
    /// [ASC|DESC] [ALPHA] [STORE destination].
    pub(crate) async fn sort(&mut self, args: &[Bytes]) {
        let readonly = args[0].eq_ignore_ascii_case(b"sort_ro");
        let s = match parse(args, readonly, self.s.user.allkeys) {
            Ok(s) => s,
            Err(e) => return self.w().error(&e),
        };
        self.in_own_txn(&s).await;
    }

    /// Runs the data command `line` in `txn`: its (first) answer.
    pub(crate) async fn read_in(
        &self,
        txn: &mut Txn,
        line: Vec<Bytes>,
    ) -> Result<OpReply, TxnError> {
        let Some(spec) = cmd::lookup(&line[0]) else {
            return Ok(OpReply::Nil);
        };
        let Kind::Data(parse) = spec.kind else {
            return Ok(OpReply::Nil);
        };
        let dc = match self.data_cmd(parse, &line) {
            Ok(dc) => dc,
            Err(_) => return Ok(OpReply::Nil),
        };
        let mut replies = run_in_txn(&self.coord, txn, dc.ops).await?;
        Ok(if replies.is_empty() {
            OpReply::Nil
        } else {
            replies.swap_remove(0)
        })
    }

    /// The value a pattern names for `elem`, if any: a string key's
    /// value, a hash's field (another type, or nothing there: none).
    async fn by_pattern(
        &self,
        txn: &mut Txn,
        pattern: &[u8],
        elem: &Bytes,
    ) -> Result<Option<Bytes>, TxnError> {
        let word = |w: &'static str| Bytes::from_static(w.as_bytes());
        let line = match lookup_of(pattern, elem) {
            None => return Ok(None),
            Some(Lookup::Itself) => return Ok(Some(elem.clone())),
            Some(Lookup::Key(key, None)) => vec![word("get"), key],
            Some(Lookup::Key(key, Some(field))) => vec![word("hget"), key, field],
        };
        Ok(match self.read_in(txn, line).await? {
            OpReply::Bulk(b) => Some(b),
            _ => None,
        })
    }

    /// The sort itself, inside `txn`.
    async fn sort_in(&self, txn: &mut Txn, s: &SortArgs) -> Result<Answer, TxnError> {
        let word = |w: &'static str| Bytes::from_static(w.as_bytes());
        let kind = match self.read_in(txn, vec![word("type"), s.key.clone()]).await? {
            OpReply::Status(t) => t,
            _ => "none",
        };
        let all = |b: &'static str| vec![word(b), s.key.clone(), word("0"), word("-1")];
        let mut elems: Vec<Bytes> = match kind {
            "none" => Vec::new(),
            "list" => bulks(self.read_in(txn, all("lrange")).await?),
            "zset" => bulks(self.read_in(txn, all("zrange")).await?),
            "set" => bulks(
                self.read_in(txn, vec![word("smembers"), s.key.clone()])
                    .await?,
            ),
            _ => return Ok(Answer::Refused(elsa_shard::ops::WRONGTYPE.into())),
        };
        let mut dontsort = s.dontsort;
        let (mut alpha, mut by) = (s.alpha, s.by.as_ref().filter(|_| !dontsort));
        if dontsort && kind == "set" {
            if s.store.is_some() {
                // Redis sorts a set it stores, so the result is one order.
                (dontsort, alpha, by) = (false, true, None);
            } else if elems
                .iter()
                .all(|e| elsa_shard::ops::parse_i64(e).is_some())
            {
                // Redis walks a set of integers in their order (an intset).
                elems.sort_by_key(|e| elsa_shard::ops::parse_i64(e));
            }
        }
        let len = elems.len() as i64;
        let (limit_start, limit_count) = s.limit.unwrap_or((0, -1));
        let mut start = limit_start.max(0).min(len);
        let count = limit_count.max(-1).min(len);
        let mut end = if count < 0 {
            len - 1
        } else {
            start + count - 1
        };
        if start >= len {
            start = len - 1;
            end = len - 2;
        }
        if end >= len {
            end = len - 1;
        }
        if dontsort && s.desc && kind != "set" {
            elems.reverse();
        }
        if !dontsort {
            // Weights (or the elements themselves).
            let mut keyed: Vec<(Bytes, Option<Bytes>, f64)> = Vec::with_capacity(elems.len());
            let mut not_number = false;
            for e in elems {
                let byval = match by {
                    Some(p) => self.by_pattern(txn, p, &e).await?,
                    None => Some(e.clone()),
                };
                let mut score = 0.0;
                if !alpha {
                    if let Some(v) = &byval {
                        match weight(v) {
                            Some(w) => score = w,
                            None => not_number = true,
                        }
                    }
                }
                keyed.push((e, byval, score));
            }
            if not_number {
                return Ok(Answer::Refused(
                    "ERR One or more scores can't be converted into double".into(),
                ));
            }
            let desc = s.desc;
            // With ALPHA and no STORE, Redis compares with `strcoll`: as C
            // strings, up to a NUL (in the C locale, bytes); with STORE,
            // the whole bytes.
            let text = |b: &Bytes| -> Bytes {
                if s.store.is_some() {
                    b.clone()
                } else {
                    b.slice(..c_str(b).len())
                }
            };
            keyed.sort_by(|a, b| {
                let cmp = if !alpha {
                    a.2.partial_cmp(&b.2)
                        .unwrap_or(std::cmp::Ordering::Equal)
                        .then_with(|| a.0.cmp(&b.0))
                } else if by.is_some() {
                    // A missing weight sorts first.
                    a.1.as_ref().map(text).cmp(&b.1.as_ref().map(text))
                } else {
                    text(&a.0).cmp(&text(&b.0))
                };
                if desc {
                    cmp.reverse()
                } else {
                    cmp
                }
            });
            elems = keyed.into_iter().map(|(e, _, _)| e).collect();
        }
        let picked: Vec<Bytes> = if end >= start && start >= 0 {
            elems[start as usize..=end as usize].to_vec()
        } else {
            Vec::new()
        };
        // The output: the elements, or what each GET names.
        let mut out: Vec<Option<Bytes>> = Vec::new();
        for e in &picked {
            if s.gets.is_empty() {
                out.push(Some(e.clone()));
            }
            for g in &s.gets {
                out.push(self.by_pattern(txn, g, e).await?);
            }
        }
        let Some(dest) = &s.store else {
            return Ok(Answer::Reply(OpReply::Array(
                out.into_iter()
                    .map(|v| v.map_or(OpReply::Nil, OpReply::Bulk))
                    .collect(),
            )));
        };
        // STORE: a new list (replacing whatever was there), or nothing.
        let n = out.len() as i64;
        let mark = txn.events_len();
        self.read_in(txn, vec![word("del"), dest.clone()]).await?;
        if !out.is_empty() {
            let mut line = vec![word("rpush"), dest.clone()];
            line.extend(out.into_iter().map(Option::unwrap_or_default));
            self.read_in(txn, line).await?;
            // Redis tells a stored result as `sortstore` (and `new` for
            // a key that was not there), not as the DEL and RPUSH above.
            txn.retell_events(mark, |told| {
                let replaced = told.iter().any(|e| e.name == "del");
                let mut retold: Vec<Event> = told
                    .into_iter()
                    .filter(|e| e.name == "new" && !replaced)
                    .collect();
                retold.push(Event {
                    class: elsa_shard::notify::LIST,
                    name: "sortstore",
                    key: self.db_key(dest),
                });
                retold
            });
        }
        Ok(Answer::Reply(OpReply::Int(n)))
    }
}

/// The bulk strings of an array or set reply.
fn bulks(r: OpReply) -> Vec<Bytes> {
    match r {
        OpReply::Array(items) => items
            .into_iter()
            .filter_map(|i| match i {
                OpReply::Bulk(b) => Some(b),
                _ => None,
            })
            .collect(),
        OpReply::Set(members) => members,
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_name_keys_and_fields_as_redis() {
        let key = |p: &str, e: &str| match lookup_of(p.as_bytes(), e.as_bytes()) {
            Some(Lookup::Key(k, f)) => Some((
                String::from_utf8(k.to_vec()).unwrap(),
                f.map(|f| String::from_utf8(f.to_vec()).unwrap()),
            )),
            _ => None,
        };
        assert_eq!(key("w_*", "3"), Some(("w_3".into(), None)));
        assert_eq!(key("w_*_x", "3"), Some(("w_3_x".into(), None)));
        assert_eq!(key("h_*->f", "3"), Some(("h_3".into(), Some("f".into()))));
        // `->` with nothing after it is part of the key.
        assert_eq!(key("h_*->", "3"), Some(("h_3->".into(), None)));
        assert_eq!(key("nosort", "3"), None);
        assert!(matches!(lookup_of(b"#", b"3"), Some(Lookup::Itself)));
    }

    #[test]
    fn weights_read_as_strtod() {
        assert_eq!(weight(b" 12"), Some(12.0));
        assert_eq!(weight(b""), Some(0.0));
        assert_eq!(weight(b"0x10"), Some(16.0));
        assert_eq!(weight(b"1e400"), None);
        assert_eq!(weight(b"nan"), None);
        assert_eq!(weight(b"12a"), None);
    }
}
