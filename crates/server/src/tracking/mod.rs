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
//! NOLOOP: a NOLOOP connection registers the keys of its write (or
//! script) before it runs, and the change installed on them is not sent
//! to it (`Tables::writing`); a redirect whose connection has gone earns
//! its RESP3 owner `tracking-redir-broken` instead (`Client::deliver`);
//! `tracking-table-max-keys` ([`MAX_KEYS`]) bounds the keys remembered.
//!
//! One mutex guards the tables: reads are remembered only by tracking
//! connections, and a change costs two atomic loads when nobody on the
//! node tracks anything and no key is remembered.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use elsa_shard::db;

use crate::pubsub::{Msg, Subscriber};

mod commands;

/// The channel RESP2 clients receive redirected invalidations on.
pub const CHANNEL: &[u8] = b"__redis__:invalidate";

/// `tracking-table-max-keys`: past this many remembered keys (0: no
/// limit), keys are forgotten, their clients told as if they changed.
pub static MAX_KEYS: AtomicU64 = AtomicU64::new(1_000_000);

/// Where one tracking connection's invalidations go.
struct Client {
    /// Its own queue (RESP3) or its redirect's; None: nowhere (a RESP2
    /// client without REDIRECT, to which Redis sends nothing either).
    target: Option<Arc<Subscriber>>,
    /// BCAST prefixes (empty with BCAST: every key); None: default mode.
    bcast: Option<Vec<Bytes>>,
    /// REDIRECT to another connection (0: none): once it is gone, the
    /// client's own queue (`own`, RESP3 only) is told
    /// `tracking-redir-broken` instead, as Redis does.
    redirect: u64,
    own: Option<Arc<Subscriber>>,
    /// The redirect was found gone (CLIENT TRACKINGINFO's
    /// `broken_redirect`).
    broken: bool,
}

impl Client {
    /// Queues an invalidation for this client, or, its redirect gone, the
    /// `tracking-redir-broken` notice.
    fn deliver(&mut self, msg: impl FnOnce(&Subscriber)) {
        if self.redirect_gone() {
            return;
        }
        if let Some(q) = &self.target {
            msg(q);
        }
    }

    /// True (and its owner told) when the redirect's connection has gone.
    fn redirect_gone(&mut self) -> bool {
        if self.redirect == 0 || self.target.as_ref().is_some_and(|q| !q.gone()) {
            return false;
        }
        self.broken = true;
        if let Some(own) = &self.own {
            let push = format!(
                ">2\r\n$21\r\ntracking-redir-broken\r\n:{}\r\n",
                self.redirect
            );
            own.push(Msg::Raw(Bytes::from(push)));
        }
        true
    }
}

#[derive(Default)]
struct Tables {
    /// Default mode: stored key → the connections that may cache it.
    keys: HashMap<Bytes, Vec<u64>>,
    clients: HashMap<u64, Client>,
    /// NOLOOP: stored key → the NOLOOP connections whose command (or open
    /// MULTI, transaction) writes it now; their own change is not sent
    /// back to them. Redis compares the change's client with the tracking
    /// one; here changes are installed by shards, which do not know the
    /// connection, so the connection names its keys before it runs.
    writing: HashMap<Bytes, Vec<u64>>,
    /// The same, per connection.
    writes_of: HashMap<u64, Vec<Bytes>>,
}

/// The node's tracking tables.
#[derive(Default)]
pub struct Tracking {
    /// Connections with tracking on, and keys remembered (a connection
    /// that turned tracking off leaves its keys, as in Redis, and a change
    /// still forgets them): both zero make a change cost nothing.
    on: AtomicUsize,
    remembered: AtomicUsize,
    tables: Mutex<Tables>,
}

impl Tracking {
    fn lock(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether connection `id`'s redirect was found gone.
    pub(crate) fn broken(&self, id: u64) -> bool {
        self.lock().clients.get(&id).is_some_and(|c| c.broken)
    }

    /// INFO's `tracking_total_keys`, `tracking_total_items` and
    /// `tracking_total_prefixes`.
    pub(crate) fn totals(&self) -> (usize, usize, usize) {
        let t = self.lock();
        let items = t.keys.values().map(Vec::len).sum();
        let prefixes: std::collections::HashSet<&Bytes> = t
            .clients
            .values()
            .filter_map(|c| c.bcast.as_ref())
            .flat_map(|p| {
                // BCAST with no prefix tracks the empty one.
                static EMPTY: Bytes = Bytes::new();
                p.iter().chain(p.is_empty().then_some(&EMPTY))
            })
            .collect();
        (t.keys.len(), items, prefixes.len())
    }

    /// Forgets remembered keys past `tracking-table-max-keys`, telling
    /// their clients as if the keys changed (Redis's
    /// `trackingLimitUsedSlots`; which keys go is arbitrary there too).
    pub(crate) fn limit(&self) {
        let max = MAX_KEYS.load(Ordering::Relaxed) as usize;
        if max == 0 {
            return;
        }
        let mut g = self.lock();
        let t = &mut *g;
        while t.keys.len() > max {
            let Some(key) = t.keys.keys().next().cloned() else {
                break;
            };
            let ids = t.keys.remove(&key).unwrap_or_default();
            let name = Bytes::copy_from_slice(db::user_key(&key));
            for id in ids {
                if let Some(c) = t.clients.get_mut(&id).filter(|c| c.bcast.is_none()) {
                    c.deliver(|q| {
                        q.push(Msg::Invalidate(Some(vec![name.clone()])));
                    });
                }
            }
        }
        self.remembered.store(t.keys.len(), Ordering::Relaxed);
    }

    fn enable(&self, id: u64, client: Client) {
        if self.lock().clients.insert(id, client).is_none() {
            self.on.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn disable(&self, id: u64) {
        let mut t = self.lock();
        t.writing_end(id);
        if t.clients.remove(&id).is_some() {
            self.on.fetch_sub(1, Ordering::Relaxed);
            // Its remembered keys go when next invalidated, as in Redis (a
            // scan of the key table here would cost every other client a
            // pause; and turned on again, the client is told of them).
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
        self.remembered.store(t.keys.len(), Ordering::Relaxed);
        let max = MAX_KEYS.load(Ordering::Relaxed) as usize;
        if max > 0 && t.keys.len() > max {
            drop(t);
            self.limit();
        }
    }

    /// Tells connection `id` alone that `key` (as stored) changed, unless
    /// it writes the key itself with NOLOOP.
    fn tell(&self, id: u64, key: &Bytes) {
        let mut t = self.lock();
        if t.writing.get(key).is_some_and(|w| w.contains(&id)) {
            return;
        }
        let name = Bytes::copy_from_slice(db::user_key(key));
        if let Some(c) = t.clients.get_mut(&id).filter(|c| c.bcast.is_none()) {
            c.deliver(|q| {
                q.push(Msg::Invalidate(Some(vec![name])));
            });
        }
    }

    /// NOLOOP connection `id` is about to write these keys (as stored).
    pub(crate) fn writing(&self, id: u64, keys: Vec<Bytes>) {
        let mut t = self.lock();
        for key in &keys {
            let ids = t.writing.entry(key.clone()).or_default();
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        t.writes_of.entry(id).or_default().extend(keys);
    }

    /// What NOLOOP connection `id` wrote is done (its command replied,
    /// its MULTI or transaction ended).
    pub(crate) fn writing_done(&self, id: u64) {
        self.lock().writing_end(id);
    }

    /// FLUSHALL / FLUSHDB ran: one null invalidation to every tracking
    /// client (every shard's flush already emptied the key table).
    pub(crate) fn flushed_by_command(&self) {
        if self.on.load(Ordering::Relaxed) == 0 {
            return;
        }
        for c in self.lock().clients.values_mut() {
            c.deliver(|q| {
                q.push(Msg::Invalidate(None));
            });
        }
    }
}

impl Tables {
    fn writing_end(&mut self, id: u64) {
        for key in self.writes_of.remove(&id).unwrap_or_default() {
            if let Some(ids) = self.writing.get_mut(&key) {
                ids.retain(|w| *w != id);
                if ids.is_empty() {
                    self.writing.remove(&key);
                }
            }
        }
    }
}

impl elsa_shard::ChangeHook for Tracking {
    fn changed(&self, key: &[u8]) {
        let idle =
            self.on.load(Ordering::Relaxed) == 0 && self.remembered.load(Ordering::Relaxed) == 0;
        if idle || key.starts_with(elsa_shard::INTERNAL_PREFIX) {
            return; // nothing tracked, or a transaction record: no client key
        }
        let mut g = self.lock();
        let t = &mut *g;
        let name = Bytes::copy_from_slice(db::user_key(key));
        // NOLOOP connections writing the key are not told of their change.
        let own: &[u64] = t.writing.get(key).map_or(&[], |w| &w[..]);
        // As Redis: the key is forgotten for every client, told or not.
        if let Some(ids) = t.keys.remove(key) {
            self.remembered.store(t.keys.len(), Ordering::Relaxed);
            for id in ids.iter().filter(|id| !own.contains(id)) {
                if let Some(c) = t.clients.get_mut(id).filter(|c| c.bcast.is_none()) {
                    c.deliver(|q| {
                        q.push(Msg::Invalidate(Some(vec![name.clone()])));
                    });
                }
            }
        }
        for (id, c) in t.clients.iter_mut() {
            let Some(prefixes) = &c.bcast else {
                continue;
            };
            let hit = prefixes.is_empty() || prefixes.iter().any(|p| name.starts_with(p));
            if !hit || own.contains(id) || c.redirect_gone() {
                continue;
            }
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
        self.remembered.store(0, Ordering::Relaxed);
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
