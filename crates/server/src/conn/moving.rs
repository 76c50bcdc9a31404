//! A connection moving to the worker whose shard its commands go to
//! (see *Moving to the keys' worker* at [`Conn::serve`]): counting its
//! lone commands' shards, telling when it may leave, and packing it up on
//! one worker and unpacking it on the other. A child of `conn`, so it
//! reaches the connection's private state without widening it.

use std::sync::Arc;

use bytes::BytesMut;
use elsa_txn::Coordinator;

use super::{Conn, Session};
use crate::resp::Partial;
use crate::state::Shared;
use crate::tls::ClientStream;

/// How many lone commands in a row went to another worker's shard, and
/// which; `stays` for a connection that never moves.
pub(super) struct Home {
    pub(super) worker: usize,
    run: u32,
    /// `worker-move-after`: the run that moves the connection.
    after: u32,
    stays: bool,
}

impl Home {
    /// Counting from nothing, moving after `after` lone commands in a row
    /// (the `worker-move-after` setting; 0 = never).
    pub(super) fn new(after: u32) -> Home {
        Home {
            worker: 0,
            run: 0,
            after,
            stays: after == 0,
        }
    }

    /// True once the run is long enough to move; the run starts afresh
    /// (so a connection that cannot move now is counted again).
    pub(super) fn due(&mut self) -> bool {
        if self.run < self.after || self.stays {
            return false;
        }
        self.run = 0;
        true
    }
}

/// A connection on its way to another worker of this node: its socket,
/// taken off this worker's reactor, and everything it remembers. What
/// belongs to the worker (the coordinator with its shard, the statistics
/// block) is the new worker's own on arrival.
pub(crate) struct Parcel {
    /// The worker it moves to.
    pub to: usize,
    stream: std::net::TcpStream,
    inbuf: BytesMut,
    partial: Option<Partial>,
    s: Session,
    list_written: bool,
    subs: crate::pubsub::Subscriptions,
    tracking: crate::tracking::Guard,
    over_soft_since: Option<std::time::Instant>,
    client: crate::clients::Handle,
    cl: crate::clients::local::Local,
}

impl Conn {
    /// Keeps the connection on its worker whatever keys it uses (one that
    /// came in on the worker's own port: see [`Conn::serve`]).
    pub(crate) fn stay(&mut self) {
        self.home.stays = true;
    }

    /// Counts a lone command toward moving (see [`Conn::serve`]).
    pub(super) fn note_home(&mut self, hash: u64) {
        if self.home.stays {
            return;
        }
        match self.coord.other_worker(hash) {
            Some(w) if w == self.home.worker => self.home.run = self.home.run.saturating_add(1),
            Some(w) => {
                self.home.worker = w;
                self.home.run = 1;
            }
            None => self.home.run = 0,
        }
    }

    /// True when nothing of the connection is in flight on this worker,
    /// so it may move (see [`Conn::serve`]).
    pub(super) fn may_move(&self) -> bool {
        matches!(self.stream, ClientStream::Plain(_))
            && self.out.is_empty()
            && self.s.multi.is_none()
            && self.s.txn.is_none()
            && self.s.watches.keys.is_empty()
            && self.s.watches.open.is_none()
            && self.s.tracking.is_none()
            && self.subs.queue().is_none()
            && !self.cl.quiet()
            && self.cl.blocking_cmd.is_none()
    }

    /// The connection as it leaves for worker `to`; None (the connection
    /// closes, with a log line) if its socket cannot leave this worker's
    /// reactor.
    pub(super) fn into_parcel(self, to: usize) -> Option<Parcel> {
        let ClientStream::Plain(stream) = self.stream else {
            return None; // (`may_move` refused TLS)
        };
        let stream = match stream.into_std() {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(
                    client = self.s.id,
                    "closing connection: cannot move it to worker {to}: {e}"
                );
                return None;
            }
        };
        Some(Parcel {
            to,
            stream,
            inbuf: self.inbuf,
            partial: self.partial,
            s: self.s,
            list_written: self.list_written,
            subs: self.subs,
            tracking: self._tracking,
            over_soft_since: self.over_soft_since,
            client: self.client,
            cl: self.cl,
        })
    }

    /// A connection moved here from another worker (see [`Conn::serve`]);
    /// None (with a log line) if its socket cannot join this worker's
    /// reactor.
    pub(crate) fn from_parcel(p: Parcel, coord: Coordinator, shared: Arc<Shared>) -> Option<Conn> {
        let stream = match tokio::net::TcpStream::from_std(p.stream) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(
                    client = p.s.id,
                    "closing connection: cannot serve it on worker {}: {e}",
                    p.to
                );
                return None;
            }
        };
        let local = shared.cmdstats.local();
        let home = Home::new(shared.config.worker_move_after);
        Some(Conn {
            stream: ClientStream::Plain(stream),
            inbuf: p.inbuf,
            partial: p.partial,
            out: BytesMut::with_capacity(16 * 1024),
            coord,
            shared,
            s: p.s,
            list_written: p.list_written,
            subs: p.subs,
            _tracking: p.tracking,
            input_closed: false,
            over_soft_since: p.over_soft_since,
            stat: crate::intro::ConnStat::new(&local),
            client: p.client,
            cl: p.cl,
            home,
        })
    }
}
