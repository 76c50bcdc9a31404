//! Client-side caching: `CLIENT TRACKING`, `CLIENT CACHING`,
//! `CLIENT GETREDIR`, `CLIENT TRACKINGINFO`, and the invalidation messages
//! they promise, as Redis 7.0 sends them.
//!
//! A tracking connection (default mode) may cache what it reads: the keys
//! of its read-only commands are remembered here, and the first change to
//! one sends it one `invalidate` message naming the key, after which the
//! key is forgotten until read again. In BCAST mode nothing is remembered:
//! every change to a key under one of its prefixes (any key, with none) is
//! sent. Messages go into the connection's queue (the one pub/sub fills),
//! as a RESP3 push — or, with `REDIRECT id`, into that client's queue, a
//! RESP2 client receiving them as messages of `__redis__:invalidate`.
//!
//! Where changes come from: every shard of the node tells the [`Tracking`]
//! (a [`elsa_shard::ChangeHook`]) of each change it installs — commits
//! made here, lattices replicated or merged from other nodes and regions,
//! expired values collected, FLUSHALL/FLUSHDB (which invalidate every key:
//! a null message, as Redis sends). So a key is invalidated wherever the
//! change came from, as long as this node holds it. In a region of several
//! nodes a node holds only the keys it replicates: caching is exact on one
//! node and for the keys a node replicates (`docs/commands.md`).
//!
//! One mutex guards the tables: reads are remembered only by tracking
//! connections, and a change costs one atomic load when nobody on the node
//! tracks anything.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use elsa_shard::db;

use crate::pubsub::{Msg, Subscriber};

mod commands;

/// The channel RESP2 clients receive redirected invalidations on.
pub const CHANNEL: &[u8] = b"__redis__:invalidate";

/// Where one tracking connection's invalidations go.
struct Client {
    /// Its own queue (RESP3) or its redirect's; None: nowhere (a RESP2
    /// client without REDIRECT, to which Redis sends nothing either).
    target: Option<Arc<Subscriber>>,
    /// BCAST prefixes (empty with BCAST: every key); None: default mode.
    bcast: Option<Vec<Bytes>>,
}

#[derive(Default)]
struct Tables {
    /// Default mode: stored key → the connections that may cache it.
    keys: HashMap<Bytes, Vec<u64>>,
    clients: HashMap<u64, Client>,
}

/// The node's tracking tables.
#[derive(Default)]
pub struct Tracking {
    /// Connections with tracking on: zero makes a change cost nothing.
    on: AtomicUsize,
    tables: Mutex<Tables>,
}

impl Tracking {
    fn lock(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn enable(&self, id: u64, client: Client) {
        if self.lock().clients.insert(id, client).is_none() {
            self.on.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn disable(&self, id: u64) {
        let mut t = self.lock();
        if t.clients.remove(&id).is_some() {
            self.on.fetch_sub(1, Ordering::Relaxed);
            // Its remembered keys go when next invalidated (a scan of the
            // key table here would cost every other client a pause).
        }
    }

    /// Remembers that connection `id` read these keys (as stored).
    fn remember<'a>(&self, id: u64, keys: impl Iterator<Item = &'a Bytes>) {
        let mut t = self.lock();
        for key in keys {
            let ids = t.keys.entry(key.clone()).or_default();
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    }

    /// FLUSHALL / FLUSHDB ran: one null invalidation to every tracking
    /// client (every shard's flush already emptied the key table).
    pub(crate) fn flushed_by_command(&self) {
        if self.on.load(Ordering::Relaxed) == 0 {
            return;
        }
        for c in self.lock().clients.values() {
            Tracking::send(&c.target, None);
        }
    }

    fn send(target: &Option<Arc<Subscriber>>, keys: Option<Vec<Bytes>>) {
        if let Some(q) = target {
            q.push(Msg::Invalidate(keys));
        }
    }
}

impl elsa_shard::ChangeHook for Tracking {
    fn changed(&self, key: &[u8]) {
        if self.on.load(Ordering::Relaxed) == 0 || key.starts_with(elsa_shard::INTERNAL_PREFIX) {
            return; // nobody tracks, or a transaction record: no client key
        }
        let mut t = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        let name = Bytes::copy_from_slice(db::user_key(key));
        if let Some(ids) = t.keys.remove(key) {
            for id in ids {
                if let Some(c) = t.clients.get(&id).filter(|c| c.bcast.is_none()) {
                    Tracking::send(&c.target, Some(vec![name.clone()]));
                }
            }
        }
        for c in t.clients.values() {
            let (Some(prefixes), Some(q)) = (&c.bcast, &c.target) else {
                continue;
            };
            if prefixes.is_empty() {
                q.push_broadcast(&Bytes::new(), &name);
            }
            for p in prefixes.iter().filter(|p| name.starts_with(p)) {
                q.push_broadcast(p, &name);
            }
        }
    }

    fn flushed(&self, _db: Option<u8>) {
        // As Redis: any flush forgets every remembered key (the clients are
        // told once, by the command: `Tracking::flushed_by_command`).
        self.lock().keys.clear();
    }
}

/// One connection's tracking options (`CLIENT TRACKING ON …`).
#[derive(Clone, Debug, Default)]
pub(crate) struct Options {
    redirect: u64,
    bcast: bool,
    /// BCAST prefixes, every `ON` adding its own (none: the empty one),
    /// listed in order as Redis's radix tree lists them.
    prefixes: std::collections::BTreeSet<Bytes>,
    optin: bool,
    optout: bool,
    noloop: bool,
    /// `CLIENT CACHING yes|no` for the next command.
    caching: bool,
}

impl Options {
    /// BCAST mode (CLIENT LIST's flag `B`).
    pub(crate) fn is_bcast(&self) -> bool {
        self.bcast
    }

    /// The client invalidations go to (CLIENT LIST's `redir`), 0 for none.
    pub(crate) fn redirect_id(&self) -> u64 {
        self.redirect
    }
}

/// Turns tracking off when a connection ends.
pub(crate) struct Guard {
    pub tracking: Arc<Tracking>,
    pub id: u64,
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.tracking.disable(self.id);
    }
}
