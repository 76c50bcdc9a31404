//! Targets: which system a URL points at (Elsa, Redis or PostgreSQL), how
//! to open a connection to it, and which errors mean "retry the
//! transaction" versus "the connection is gone".

use std::fmt;

use postgres::error::SqlState;

use crate::BenchError;

/// The system behind a URL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum System {
    /// An Elsa node (a RESP server whose `INFO server` has `elsa_version:`).
    Elsa,
    /// Any other RESP server, taken to be Redis.
    Redis,
    /// PostgreSQL.
    Postgres,
}

impl System {
    /// Lower-case name used in summaries and result files.
    pub fn name(self) -> &'static str {
        match self {
            System::Elsa => "elsa",
            System::Redis => "redis",
            System::Postgres => "postgres",
        }
    }

    /// Speaks RESP (Elsa or Redis).
    pub fn is_resp(self) -> bool {
        !matches!(self, System::Postgres)
    }
}

impl fmt::Display for System {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A benchmark target: a URL and what answers there.
#[derive(Clone, Debug)]
pub struct Target {
    /// As given by the user.
    pub url: String,
    /// Detected at start.
    pub system: System,
    /// Certificates for a `rediss://` URL.
    pub tls: TlsFiles,
}

/// `--cacert`, `--cert`, `--key`, read once.
#[derive(Clone, Debug, Default)]
pub struct TlsFiles {
    pub cacert: Option<Vec<u8>>,
    pub cert_key: Option<(Vec<u8>, Vec<u8>)>,
}

impl TlsFiles {
    /// Reads the files the flags name.
    pub fn read(common: &crate::Common) -> Result<TlsFiles, BenchError> {
        let read = |p: &std::path::PathBuf| {
            std::fs::read(p)
                .map_err(|e| BenchError::Config(format!("cannot read {}: {e}", p.display())))
        };
        Ok(TlsFiles {
            cacert: common.cacert.as_ref().map(read).transpose()?,
            cert_key: match (&common.cert, &common.key) {
                (Some(c), Some(k)) => Some((read(c)?, read(k)?)),
                _ => None,
            },
        })
    }
}

impl Target {
    /// Connects once to find out what `url` is: `postgres://` and
    /// `postgresql://` are PostgreSQL; `redis://` is Elsa if `INFO server`
    /// reports `elsa_version:`, Redis otherwise.
    pub fn detect(url: &str, tls: &TlsFiles) -> Result<Target, BenchError> {
        let lower = url.to_ascii_lowercase();
        if lower.starts_with("postgres://") || lower.starts_with("postgresql://") {
            let t = Target {
                url: url.to_string(),
                system: System::Postgres,
                tls: TlsFiles::default(),
            };
            t.postgres()?;
            return Ok(t);
        }
        if !(lower.starts_with("redis://")
            || lower.starts_with("rediss://")
            || lower.starts_with("redis+unix://"))
        {
            return Err(BenchError::Config(format!(
                "target {url:?}: use redis://HOST:PORT (Elsa or Redis) or postgres://USER@HOST:PORT/DB"
            )));
        }
        let probe = Target {
            url: url.to_string(),
            system: System::Redis,
            tls: tls.clone(),
        };
        let mut con = probe.redis()?;
        let info: String = redis::cmd("INFO").arg("server").query(&mut con)?;
        let system = if info.contains("elsa_version:") {
            System::Elsa
        } else {
            System::Redis
        };
        Ok(Target { system, ..probe })
    }

    /// A new RESP connection.
    pub fn redis(&self) -> Result<redis::Connection, BenchError> {
        let client = if self.url.to_ascii_lowercase().starts_with("rediss://") {
            let certs =
                redis::TlsCertificates {
                    client_tls: self.tls.cert_key.as_ref().map(|(cert, key)| {
                        redis::ClientTlsConfig {
                            client_cert: cert.clone(),
                            client_key: key.clone(),
                        }
                    }),
                    root_cert: self.tls.cacert.clone(),
                };
            redis::Client::build_with_tls(self.url.as_str(), certs)?
        } else {
            redis::Client::open(self.url.as_str())?
        };
        Ok(client.get_connection()?)
    }

    /// A new PostgreSQL connection (no TLS: benchmarks run on loopback).
    pub fn postgres(&self) -> Result<postgres::Client, BenchError> {
        Ok(postgres::Client::connect(&self.url, postgres::NoTls)?)
    }
}

/// The RESP error means the connection is unusable (not just one failed
/// command), so the run must stop rather than count errors forever.
pub fn redis_fatal(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout()
}

/// The RESP error is a lost transaction that the client should retry:
/// Elsa's `-CONFLICT` reply (from COMMIT or EXEC).
pub fn redis_conflict(e: &redis::RedisError) -> bool {
    e.code() == Some("CONFLICT")
}

/// The PostgreSQL error is a serialization failure or deadlock: the
/// transaction was rolled back and should be retried.
pub fn pg_conflict(e: &postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED
    )
}

/// A PostgreSQL error with the server's message and SQLSTATE (the
/// client's own `Display` says only "db error").
pub fn pg_message(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!(
            "{}: {} (SQLSTATE {})",
            db.severity(),
            db.message(),
            db.code().code()
        ),
        None => e.to_string(),
    }
}

/// Isolation level (or transaction form) for YCSB-T and batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    /// Read committed.
    Rc,
    /// Repeatable read (on PostgreSQL this is snapshot isolation).
    Rr,
    /// Snapshot isolation (PostgreSQL: REPEATABLE READ).
    Si,
    /// PostgreSQL SERIALIZABLE.
    Serializable,
    /// Redis optimistic locking: WATCH, reads, MULTI, writes, EXEC.
    Watch,
}

impl Isolation {
    /// Parses `rc|rr|si|serializable|watch` (any case).
    pub fn parse(s: &str) -> Result<Isolation, BenchError> {
        match s.to_ascii_lowercase().as_str() {
            "rc" | "read-committed" => Ok(Isolation::Rc),
            "rr" | "repeatable-read" => Ok(Isolation::Rr),
            "si" | "snapshot" => Ok(Isolation::Si),
            "serializable" | "ser" => Ok(Isolation::Serializable),
            "watch" => Ok(Isolation::Watch),
            _ => Err(BenchError::Config(format!(
                "isolation {s:?}: use rc, rr, si, serializable (PostgreSQL) or watch (Redis form)"
            ))),
        }
    }

    /// The name shown in summaries and result files.
    pub fn name(self) -> &'static str {
        match self {
            Isolation::Rc => "RC",
            Isolation::Rr => "RR",
            Isolation::Si => "SI",
            Isolation::Serializable => "SERIALIZABLE",
            Isolation::Watch => "WATCH",
        }
    }

    /// The level a system runs when none is asked for: Elsa and PostgreSQL
    /// at snapshot isolation (the paper's setting), Redis with WATCH (its
    /// only optimistic form).
    pub fn default_for(system: System) -> Isolation {
        match system {
            System::Redis => Isolation::Watch,
            System::Elsa | System::Postgres => Isolation::Si,
        }
    }

    /// Checks the level exists on `system`.
    pub fn check(self, system: System) -> Result<(), BenchError> {
        let ok = match system {
            System::Redis => self == Isolation::Watch,
            System::Elsa => self != Isolation::Serializable,
            System::Postgres => self != Isolation::Watch,
        };
        if ok {
            Ok(())
        } else {
            Err(BenchError::Config(format!(
                "isolation {} is not available on {system} (Redis: watch; Elsa: rc, rr, si, watch; PostgreSQL: rc, rr, si, serializable)",
                self.name()
            )))
        }
    }

    /// PostgreSQL's level for this one: RR and SI both map to REPEATABLE
    /// READ, which PostgreSQL implements as snapshot isolation.
    pub fn pg_level(self) -> postgres::IsolationLevel {
        match self {
            Isolation::Rc => postgres::IsolationLevel::ReadCommitted,
            Isolation::Serializable => postgres::IsolationLevel::Serializable,
            _ => postgres::IsolationLevel::RepeatableRead,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn isolation_names_and_availability() {
        assert_eq!(Isolation::parse("SI").ok(), Some(Isolation::Si));
        assert_eq!(Isolation::parse("watch").ok(), Some(Isolation::Watch));
        assert!(Isolation::parse("snapshot-ish").is_err());
        assert!(Isolation::Rc.check(System::Redis).is_err());
        assert!(Isolation::Watch.check(System::Elsa).is_ok());
        assert!(Isolation::Watch.check(System::Postgres).is_err());
        assert!(Isolation::Serializable.check(System::Postgres).is_ok());
        assert_eq!(Isolation::default_for(System::Redis), Isolation::Watch);
        assert!(Target::detect("http://example", &TlsFiles::default()).is_err());
    }
}
