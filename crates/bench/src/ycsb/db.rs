//! How a YCSB record operation runs on each system: the RESP commands for
//! Elsa and Redis, the JDBC binding's prepared statements for PostgreSQL.

use postgres::types::ToSql;

use super::Workload;
use crate::target::redis_fatal;
use crate::BenchError;

/// Prepared statements of YCSB's JDBC binding, per connection.
pub(super) struct PgStatements {
    read_all: postgres::Statement,
    read_one: Vec<postgres::Statement>,
    update_one: Vec<postgres::Statement>,
    update_all: postgres::Statement,
    insert: postgres::Statement,
    scan_all: postgres::Statement,
    scan_one: Vec<postgres::Statement>,
}

impl PgStatements {
    pub(super) fn prepare(
        c: &mut postgres::Client,
        wl: &Workload,
    ) -> Result<PgStatements, postgres::Error> {
        let t = &wl.table;
        let fields: Vec<String> = (0..wl.fieldcount).map(|i| wl.field(i)).collect();
        let mut read_one = Vec::new();
        let mut update_one = Vec::new();
        let mut scan_one = Vec::new();
        for f in &fields {
            read_one.push(c.prepare(&format!("SELECT {f} FROM {t} WHERE YCSB_KEY = $1"))?);
            update_one.push(c.prepare(&format!("UPDATE {t} SET {f} = $1 WHERE YCSB_KEY = $2"))?);
            scan_one.push(c.prepare(&format!(
                "SELECT {f} FROM {t} WHERE YCSB_KEY >= $1 ORDER BY YCSB_KEY LIMIT $2"
            ))?);
        }
        let sets: Vec<String> = fields
            .iter()
            .enumerate()
            .map(|(i, f)| format!("{f} = ${}", i + 1))
            .collect();
        let params: Vec<String> = (1..=fields.len() + 1).map(|i| format!("${i}")).collect();
        Ok(PgStatements {
            read_all: c.prepare(&format!("SELECT * FROM {t} WHERE YCSB_KEY = $1"))?,
            read_one,
            update_one,
            update_all: c.prepare(&format!(
                "UPDATE {t} SET {} WHERE YCSB_KEY = ${}",
                sets.join(", "),
                fields.len() + 1
            ))?,
            insert: c.prepare(&format!(
                "INSERT INTO {t} (YCSB_KEY, {}) VALUES ({})",
                fields.join(", "),
                params.join(", ")
            ))?,
            scan_all: c.prepare(&format!(
                "SELECT * FROM {t} WHERE YCSB_KEY >= $1 ORDER BY YCSB_KEY LIMIT $2"
            ))?,
            scan_one,
        })
    }
}

pub(super) enum Conn {
    Resp(redis::Connection),
    Pg(Box<postgres::Client>, Box<PgStatements>),
}

/// An operation's fate: done, or failed in a way that leaves the
/// connection usable (counted as `Return=ERROR`).
pub(super) type OpResult = Result<bool, String>;

pub(super) fn resp<T>(r: redis::RedisResult<T>) -> Result<Result<T, String>, BenchError> {
    match r {
        Ok(v) => Ok(Ok(v)),
        Err(e) if redis_fatal(&e) => Err(e.into()),
        Err(e) => Ok(Err(e.to_string())),
    }
}

pub(super) fn pg<T>(
    c: &postgres::Client,
    r: Result<T, postgres::Error>,
) -> Result<Result<T, String>, BenchError> {
    match r {
        Ok(v) => Ok(Ok(v)),
        Err(e) if c.is_closed() => Err(e.into()),
        Err(e) => Ok(Err(crate::target::pg_message(&e))),
    }
}

pub(super) fn db_read(
    conn: &mut Conn,
    wl: &Workload,
    key: &str,
    field: Option<usize>,
) -> Result<OpResult, BenchError> {
    match conn {
        Conn::Resp(c) if wl.hash_layout => match field {
            None => {
                let r: redis::RedisResult<Vec<(Vec<u8>, Vec<u8>)>> =
                    redis::cmd("HGETALL").arg(key).query(c);
                Ok(resp(r)?.map(|v| v.len() == wl.fieldcount))
            }
            Some(i) => {
                let r: redis::RedisResult<Vec<Option<Vec<u8>>>> =
                    redis::cmd("HMGET").arg(key).arg(wl.field(i)).query(c);
                Ok(resp(r)?.map(|v| v.iter().all(Option::is_some)))
            }
        },
        Conn::Resp(c) => match field {
            None => {
                let keys: Vec<String> = (0..wl.fieldcount).map(|i| wl.field_key(key, i)).collect();
                let r: redis::RedisResult<Vec<Option<Vec<u8>>>> =
                    redis::cmd("MGET").arg(&keys).query(c);
                Ok(resp(r)?.map(|v| v.iter().all(Option::is_some)))
            }
            Some(i) => {
                let r: redis::RedisResult<Option<Vec<u8>>> =
                    redis::cmd("GET").arg(wl.field_key(key, i)).query(c);
                Ok(resp(r)?.map(|v| v.is_some()))
            }
        },
        Conn::Pg(c, s) => {
            let stmt = match field {
                None => &s.read_all,
                Some(i) => &s.read_one[i],
            };
            let r = c.query_opt(stmt, &[&key]);
            Ok(pg(c, r)?.map(|row| row.is_some()))
        }
    }
}

pub(super) fn db_write(
    conn: &mut Conn,
    wl: &Workload,
    key: &str,
    values: &[(usize, String)],
    insert: bool,
) -> Result<OpResult, BenchError> {
    match conn {
        Conn::Resp(c) if wl.hash_layout => {
            let mut cmd = redis::cmd("HSET");
            cmd.arg(key);
            for (i, v) in values {
                cmd.arg(wl.field(*i)).arg(v);
            }
            let r: redis::RedisResult<i64> = cmd.query(c);
            let ok = resp(r)?.map(|_| true);
            if !insert || ok != Ok(true) {
                return Ok(ok);
            }
            // YCSB's Redis binding indexes every inserted record in one
            // sorted set, scored by the key's Java hash code (a second
            // command, as the binding sends it).
            let r: redis::RedisResult<i64> = redis::cmd("ZADD")
                .arg(INDEX_KEY)
                .arg(java_hash(key))
                .arg(key)
                .query(c);
            Ok(resp(r)?.map(|_| true))
        }
        Conn::Resp(c) => {
            let r: redis::RedisResult<()> = if let [(i, v)] = values {
                redis::cmd("SET").arg(wl.field_key(key, *i)).arg(v).query(c)
            } else {
                let mut cmd = redis::cmd("MSET");
                for (i, v) in values {
                    cmd.arg(wl.field_key(key, *i)).arg(v);
                }
                cmd.query(c)
            };
            Ok(resp(r)?.map(|()| true))
        }
        Conn::Pg(c, s) => {
            let r = if insert {
                let mut params: Vec<&(dyn ToSql + Sync)> = vec![&key];
                params.extend(values.iter().map(|(_, v)| v as &(dyn ToSql + Sync)));
                c.execute(&s.insert, &params)
            } else if let [(i, v)] = values {
                c.execute(&s.update_one[*i], &[v, &key])
            } else {
                let mut params: Vec<&(dyn ToSql + Sync)> = values
                    .iter()
                    .map(|(_, v)| v as &(dyn ToSql + Sync))
                    .collect();
                params.push(&key);
                c.execute(&s.update_all, &params)
            };
            Ok(pg(c, r)?.map(|n| n == 1))
        }
    }
}

/// YCSB's Redis binding's index of records (a sorted set).
const INDEX_KEY: &str = "_indices";

/// Java's `String.hashCode`, YCSB's score of a key in the index.
fn java_hash(key: &str) -> i32 {
    key.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

pub(super) fn db_scan(
    conn: &mut Conn,
    wl: &Workload,
    start: u64,
    len: u64,
    limit: u64,
    field: Option<usize>,
) -> Result<OpResult, BenchError> {
    match conn {
        Conn::Resp(c) if wl.hash_layout => {
            // YCSB's Redis binding: the keys from the index (`ZRANGEBYSCORE
            // _indices hash(startkey) +inf LIMIT 0 len`), then each record.
            let _ = limit;
            let r: redis::RedisResult<Vec<String>> = redis::cmd("ZRANGEBYSCORE")
                .arg(INDEX_KEY)
                .arg(java_hash(&wl.key(start)))
                .arg("+inf")
                .arg("LIMIT")
                .arg(0)
                .arg(len)
                .query(c);
            let keys = match resp(r)? {
                Ok(keys) => keys,
                Err(e) => return Ok(Err(e)),
            };
            if keys.is_empty() {
                return Ok(Ok(false));
            }
            let mut pipe = redis::pipe();
            for k in &keys {
                match field {
                    None => pipe.cmd("HGETALL").arg(k),
                    Some(i) => pipe.cmd("HMGET").arg(k).arg(wl.field(i)),
                };
            }
            let r: redis::RedisResult<Vec<redis::Value>> = pipe.query(c);
            Ok(resp(r)?.map(|v| {
                v.iter().any(|x| match x {
                    redis::Value::Array(a) => a.iter().any(|e| *e != redis::Value::Nil),
                    redis::Value::Map(m) => !m.is_empty(),
                    _ => false,
                })
            }))
        }
        Conn::Resp(c) => {
            let end = start.saturating_add(len).min(limit.max(start + 1));
            let fields: Vec<usize> = match field {
                None => (0..wl.fieldcount).collect(),
                Some(i) => vec![i],
            };
            let mut keys = Vec::with_capacity(((end - start) as usize) * fields.len());
            for n in start..end {
                let key = wl.key(n);
                keys.extend(fields.iter().map(|&i| wl.field_key(&key, i)));
            }
            let r: redis::RedisResult<Vec<Option<Vec<u8>>>> =
                redis::cmd("MGET").arg(&keys).query(c);
            Ok(resp(r)?.map(|v| v.iter().any(Option::is_some)))
        }
        Conn::Pg(c, s) => {
            let stmt = match field {
                None => &s.scan_all,
                Some(i) => &s.scan_one[i],
            };
            let key = wl.key(start);
            let r = c.query(stmt, &[&key, &(len as i64)]);
            Ok(pg(c, r)?.map(|rows| !rows.is_empty()))
        }
    }
}

#[cfg(test)]
mod java_hash_tests {
    #[test]
    fn java_hash_is_string_hashcode() {
        assert_eq!(super::java_hash("user1"), 111_578_566);
        assert_eq!(super::java_hash("user6284781860667377211"), -594_971_599);
        assert_eq!(super::java_hash(""), 0);
    }
}
