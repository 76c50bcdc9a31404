//! SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT], with Redis 7.0's
//! arguments and errors (`shutdownCommand` in db.c), and the request it
//! hands the acceptor, which then stops as on SIGTERM: no more accepts,
//! every worker's log flushed and closed, exit 0.
//!
//! What the flags mean for Elsa: every acknowledged write is already in
//! the log (Elsa always logs), so no flag can lose one. SAVE (and no flag,
//! as SIGTERM) also takes a snapshot first, so the next start replays
//! little; NOSAVE skips it (the next start replays the log). NOW and
//! FORCE are accepted: Elsa's shutdown waits for no lagging replica, and
//! FORCE makes a failed snapshot no obstacle. A shutdown never stays "in
//! progress" for a client to ABORT: ABORT answers Redis's error for none.

use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use tokio::sync::Notify;

use crate::cmd::is;
use crate::conn::Conn;

/// A SHUTDOWN's request to the acceptor.
#[derive(Default)]
pub struct Signal {
    requested: Notify,
    /// The command took the snapshot (or was told not to): the acceptor
    /// takes none.
    snapshot_done: AtomicBool,
}

impl Signal {
    /// Asks the node to stop.
    pub fn request(&self, snapshot_done: bool) {
        self.snapshot_done.store(snapshot_done, Ordering::Relaxed);
        self.requested.notify_one();
    }

    /// Waits for a SHUTDOWN (at once if one came meanwhile).
    pub async fn requested(&self) {
        self.requested.notified().await;
    }

    /// False when a SHUTDOWN already took (or skipped) the final snapshot.
    pub fn wants_snapshot(&self) -> bool {
        !self.snapshot_done.load(Ordering::Relaxed)
    }
}

#[derive(Default)]
struct Flags {
    nosave: bool,
    save: bool,
    force: bool,
    abort: bool,
    now: bool,
}

fn parse(args: &[Bytes]) -> Result<Flags, &'static str> {
    let mut f = Flags::default();
    for a in &args[1..] {
        if is(a, "nosave") {
            f.nosave = true;
        } else if is(a, "save") {
            f.save = true;
        } else if is(a, "now") {
            f.now = true;
        } else if is(a, "force") {
            f.force = true;
        } else if is(a, "abort") {
            f.abort = true;
        } else {
            return Err("ERR syntax error");
        }
    }
    let other = f.nosave || f.save || f.now || f.force;
    if (f.abort && other) || (f.nosave && f.save) {
        return Err("ERR syntax error");
    }
    Ok(f)
}

impl Conn {
    /// SHUTDOWN: on success no reply; the connection closes and the
    /// process exits 0.
    pub(crate) async fn shutdown(&mut self, args: &[Bytes]) {
        let f = match parse(args) {
            Ok(f) => f,
            Err(e) => return self.w().error(e),
        };
        if f.abort {
            return self.w().error("ERR No shutdown in progress.");
        }
        if !f.nosave {
            tracing::info!("User requested shutdown...; saving the final snapshot");
            let p = self.shared.persistence.clone();
            if let Err(e) = p.snapshot_when_free(&self.coord).await {
                if !f.force {
                    tracing::warn!("Error trying to save the DB, can't exit: {e}");
                    return self.w().error("ERR Errors trying to SHUTDOWN. Check logs.");
                }
                tracing::warn!("Error trying to save the DB, exiting anyway (FORCE): {e}");
            }
        } else {
            tracing::info!(
                "User requested shutdown... (NOSAVE: no final snapshot; the log has every write)"
            );
        }
        let _ = f.now; // no replica to wait for: NOW changes nothing here
        self.shared.conns.shutdown.request(true);
        self.s.closing = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Vec<Bytes> {
        s.split(' ')
            .map(|w| Bytes::copy_from_slice(w.as_bytes()))
            .collect()
    }

    #[test]
    fn flags_parse_as_redis() {
        assert!(parse(&a("shutdown")).is_ok());
        assert!(parse(&a("shutdown NOSAVE NOW FORCE")).is_ok());
        assert!(parse(&a("shutdown abort")).is_ok_and(|f| f.abort));
        assert!(parse(&a("shutdown abort now")).is_err());
        assert!(parse(&a("shutdown save nosave")).is_err());
        assert!(parse(&a("shutdown later")).is_err());
    }
}
