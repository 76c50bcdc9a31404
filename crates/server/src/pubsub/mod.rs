//! Pub/sub on one node: who is subscribed to which channels and patterns,
//! and delivery of a published message into each subscriber's queue.
//!
//! One [`Registry`] per node, shared by every worker thread (a connection
//! lives on one worker, its publisher on any other) and by the replication
//! service thread, which delivers messages published on other nodes
//! (`elsa_cluster::Cluster::on_publish`). It is a plain mutex around three
//! maps: pub/sub is not on the key-value data path, and a publish holds it
//! only to find the receivers and queue a message for each (no I/O, no
//! await), which also makes a subscription change and a delivery ordered:
//! once UNSUBSCRIBE has left the registry, no later message reaches that
//! connection, and every earlier one is already in its queue.
//!
//! Channels are not per database, as in Redis. Sharded channels
//! (SSUBSCRIBE/SPUBLISH) are a separate name space, as in Redis, but in
//! Elsa they reach the same nodes as plain ones (the whole region): a
//! region has no slot owners for channels. The connection's side (the
//! commands and draining the queue) is [`commands`]; the queue and the
//! output limit are [`queue`].

pub(crate) mod commands;
mod queue;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use indexmap::IndexSet;

pub use queue::{Limit, Msg, Subscriber};

/// Plain channels (SUBSCRIBE/PUBLISH) or sharded ones (SSUBSCRIBE/SPUBLISH).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Space {
    /// SUBSCRIBE, PUBLISH (and patterns).
    Plain,
    /// SSUBSCRIBE, SPUBLISH (no patterns).
    Shard,
}

/// Subscribers by channel, in the order they subscribed (Redis delivers in
/// that order too).
type Table = HashMap<Bytes, Vec<Arc<Subscriber>>>;

#[derive(Default)]
struct Tables {
    channels: Table,
    shard_channels: Table,
    patterns: Table,
}

impl Tables {
    fn space(&mut self, space: Space) -> &mut Table {
        match space {
            Space::Plain => &mut self.channels,
            Space::Shard => &mut self.shard_channels,
        }
    }
}

/// The node's subscriptions.
#[derive(Default)]
pub struct Registry {
    tables: Mutex<Tables>,
}

fn add(table: &mut Table, name: &Bytes, sub: &Arc<Subscriber>) {
    table.entry(name.clone()).or_default().push(sub.clone());
}

fn remove(table: &mut Table, name: &[u8], id: u64) {
    if let Some(subs) = table.get_mut(name) {
        subs.retain(|s| s.id != id);
        if subs.is_empty() {
            // A channel nobody listens to takes no memory (Redis: so that
            // PUBSUB cannot be abused to pile up millions of channels).
            table.remove(name);
        }
    }
}

impl Registry {
    /// A registry that also delivers what the other nodes of `cluster`
    /// publish (`elsa_cluster::Cluster::publish` sends them).
    pub fn attached(cluster: Option<&elsa_cluster::Cluster>) -> Arc<Registry> {
        let registry = Arc::new(Registry::default());
        if let Some(c) = cluster {
            let r = registry.clone();
            c.on_publish(Box::new(move |p| {
                let space = if p.sharded {
                    Space::Shard
                } else {
                    Space::Plain
                };
                r.publish(space, &p.channel, &p.message);
            }));
        }
        registry
    }

    /// Keyspace notifications' way out (`elsa_shard::notify`): each event
    /// published as Redis publishes it — `__keyspace@<db>__:<key>` with
    /// the event's name (`K`), then `__keyevent@<db>__:<event>` with the
    /// key (`E`) — to this node's subscribers and, as PUBLISH goes, to
    /// the other nodes' (`docs/pubsub.md`, "Keyspace notifications").
    pub fn keyspace_sink(
        self: &Arc<Self>,
        cluster: Option<Arc<elsa_cluster::Cluster>>,
    ) -> elsa_shard::notify::Sink {
        use elsa_shard::notify::{KEYEVENT, KEYSPACE};
        let registry = self.clone();
        Box::new(move |e, flags| {
            let db = elsa_shard::db::db_of(&e.key);
            let key = elsa_shard::db::user_key(&e.key);
            let send = |channel: Vec<u8>, payload: Bytes| {
                let channel = Bytes::from(channel);
                registry.publish(Space::Plain, &channel, &payload);
                if let Some(c) = &cluster {
                    c.publish(&channel, &payload, false);
                }
            };
            if flags & KEYSPACE != 0 {
                let mut channel = format!("__keyspace@{db}__:").into_bytes();
                channel.extend_from_slice(key);
                send(channel, Bytes::from_static(e.name.as_bytes()));
            }
            if flags & KEYEVENT != 0 {
                let channel = format!("__keyevent@{db}__:{}", e.name).into_bytes();
                send(channel, Bytes::copy_from_slice(key));
            }
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Delivers a message published on this node or another one to every
    /// local subscriber of the channel (and, for plain channels, of every
    /// matching pattern); returns how many received it.
    pub fn publish(&self, space: Space, channel: &Bytes, payload: &Bytes) -> usize {
        let mut t = self.lock();
        let mut receivers = 0;
        if let Some(subs) = t.space(space).get(&channel[..]) {
            for s in subs {
                let msg = match space {
                    Space::Plain => Msg::Message {
                        channel: channel.clone(),
                        payload: payload.clone(),
                    },
                    Space::Shard => Msg::SMessage {
                        channel: channel.clone(),
                        payload: payload.clone(),
                    },
                };
                receivers += usize::from(s.push(msg));
            }
        }
        if space == Space::Plain {
            for (pattern, subs) in &t.patterns {
                if !elsa_shard::glob::matches(pattern, channel) {
                    continue;
                }
                for s in subs {
                    receivers += usize::from(s.push(Msg::PMessage {
                        pattern: pattern.clone(),
                        channel: channel.clone(),
                        payload: payload.clone(),
                    }));
                }
            }
        }
        receivers
    }

    /// How many local subscribers a publish on `channel` would reach now
    /// (as [`Registry::publish`] counts them), without publishing: the
    /// reply of a PUBLISH inside a script, whose message goes out only once
    /// the script's transaction commits (`crate::effects`).
    pub fn receivers(&self, space: Space, channel: &[u8]) -> usize {
        let mut t = self.lock();
        let open = |subs: &Vec<Arc<Subscriber>>| subs.iter().filter(|s| s.open()).count();
        let mut n = t.space(space).get(channel).map_or(0, open);
        if space == Space::Plain {
            n += t
                .patterns
                .iter()
                .filter(|(p, _)| elsa_shard::glob::matches(p, channel))
                .map(|(_, subs)| open(subs))
                .sum::<usize>();
        }
        n
    }

    /// PUBSUB CHANNELS / SHARDCHANNELS: channels with a subscriber here,
    /// matching `pattern` if given.
    pub fn channels(&self, space: Space, pattern: Option<&[u8]>) -> Vec<Bytes> {
        let mut t = self.lock();
        t.space(space)
            .keys()
            .filter(|c| pattern.is_none_or(|p| elsa_shard::glob::matches(p, c)))
            .cloned()
            .collect()
    }

    /// PUBSUB NUMSUB / SHARDNUMSUB: subscribers of one channel here.
    pub fn numsub(&self, space: Space, channel: &[u8]) -> usize {
        self.lock().space(space).get(channel).map_or(0, Vec::len)
    }

    /// The queue of connection `id`, if it is subscribed to anything here
    /// (where CLIENT TRACKING … REDIRECT finds its redirect).
    pub fn subscriber(&self, id: u64) -> Option<Arc<Subscriber>> {
        let t = self.lock();
        let found = [&t.channels, &t.shard_channels, &t.patterns]
            .into_iter()
            .flat_map(|table| table.values().flatten())
            .find(|s| s.id == id)
            .cloned();
        found
    }

    /// PUBSUB NUMPAT: patterns with a subscriber here.
    pub fn numpat(&self) -> usize {
        self.lock().patterns.len()
    }
}

/// One connection's subscriptions (Redis's `c->pubsub_channels` and
/// friends), removed from the registry when the connection ends.
pub(crate) struct Subscriptions {
    registry: Arc<Registry>,
    /// Its queue, made at the first subscription and kept while connected.
    me: Option<Arc<Subscriber>>,
    channels: IndexSet<Bytes>,
    shard_channels: IndexSet<Bytes>,
    /// In subscription order (PUNSUBSCRIBE without arguments answers in
    /// that order, as Redis).
    patterns: IndexSet<Bytes>,
}

impl Subscriptions {
    /// No subscriptions yet.
    pub fn new(registry: Arc<Registry>) -> Subscriptions {
        Subscriptions {
            registry,
            me: None,
            channels: IndexSet::new(),
            shard_channels: IndexSet::new(),
            patterns: IndexSet::new(),
        }
    }

    /// Subscribed to anything: Redis's `CLIENT_PUBSUB` ("subscribe mode").
    pub fn active(&self) -> bool {
        !(self.channels.is_empty() && self.shard_channels.is_empty() && self.patterns.is_empty())
    }

    /// The count a (P)SUBSCRIBE/(P)UNSUBSCRIBE confirmation carries
    /// (channels and patterns), or an S(UN)SUBSCRIBE's (shard channels).
    pub fn count(&self, space: Space) -> usize {
        match space {
            Space::Plain => self.channels.len() + self.patterns.len(),
            Space::Shard => self.shard_channels.len(),
        }
    }

    /// How many channels, patterns and shard channels it is subscribed to
    /// (CLIENT LIST's `sub`, `psub`, `ssub`).
    pub fn counts(&self) -> (usize, usize, usize) {
        (
            self.channels.len(),
            self.patterns.len(),
            self.shard_channels.len(),
        )
    }

    /// This connection's queue, `made` if it has none yet (CLIENT TRACKING
    /// fills it too).
    pub fn ensure_queue(&mut self, made: Arc<Subscriber>) -> Arc<Subscriber> {
        self.me.get_or_insert(made).clone()
    }

    /// The queue publishers fill, if this connection ever subscribed.
    pub fn queue(&self) -> Option<&Arc<Subscriber>> {
        self.me.as_ref()
    }

    fn set(&mut self, space: Space) -> &mut IndexSet<Bytes> {
        match space {
            Space::Plain => &mut self.channels,
            Space::Shard => &mut self.shard_channels,
        }
    }

    /// Subscribes `sub` (this connection's queue) to a channel; false if
    /// it already was.
    pub fn subscribe(&mut self, sub: &Arc<Subscriber>, space: Space, channel: &Bytes) -> bool {
        self.me.get_or_insert_with(|| sub.clone());
        if !self.set(space).insert(channel.clone()) {
            return false;
        }
        add(self.registry.lock().space(space), channel, sub);
        true
    }

    /// Unsubscribes from a channel; false if it was not subscribed.
    pub fn unsubscribe(&mut self, space: Space, channel: &[u8]) -> bool {
        let Some(id) = self.me.as_ref().map(|s| s.id) else {
            return false;
        };
        if !self.set(space).shift_remove(channel) {
            return false;
        }
        remove(self.registry.lock().space(space), channel, id);
        true
    }

    /// Subscribes to a pattern; false if it already was.
    pub fn psubscribe(&mut self, sub: &Arc<Subscriber>, pattern: &Bytes) -> bool {
        self.me.get_or_insert_with(|| sub.clone());
        if !self.patterns.insert(pattern.clone()) {
            return false;
        }
        add(&mut self.registry.lock().patterns, pattern, sub);
        true
    }

    /// Unsubscribes from a pattern; false if it was not subscribed.
    pub fn punsubscribe(&mut self, pattern: &[u8]) -> bool {
        let Some(id) = self.me.as_ref().map(|s| s.id) else {
            return false;
        };
        if !self.patterns.shift_remove(pattern) {
            return false;
        }
        remove(&mut self.registry.lock().patterns, pattern, id);
        true
    }

    /// The channels of a space (or the patterns), in subscription order.
    pub fn names(&self, space: Option<Space>) -> Vec<Bytes> {
        match space {
            Some(Space::Plain) => self.channels.iter().cloned().collect(),
            Some(Space::Shard) => self.shard_channels.iter().cloned().collect(),
            None => self.patterns.iter().cloned().collect(),
        }
    }

    /// Leaves every channel and pattern (RESET, the connection's end).
    pub fn clear(&mut self) {
        let Some(id) = self.me.as_ref().map(|s| s.id) else {
            return;
        };
        let mut t = self.registry.lock();
        for c in self.channels.drain(..) {
            remove(&mut t.channels, &c, id);
        }
        for c in self.shard_channels.drain(..) {
            remove(&mut t.shard_channels, &c, id);
        }
        for p in self.patterns.drain(..) {
            remove(&mut t.patterns, &p, id);
        }
    }
}

impl Drop for Subscriptions {
    fn drop(&mut self) {
        self.clear();
        if let Some(me) = &self.me {
            me.end();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit() -> Limit {
        Limit {
            hard: 0,
            soft: 0,
            soft_secs: 0,
        }
    }

    #[test]
    fn publish_reaches_channels_and_patterns_and_stops_at_unsubscribe() {
        let reg = Arc::new(Registry::default());
        let a = Arc::new(Subscriber::new(1, "a".into(), limit()));
        let mut subs = Subscriptions::new(reg.clone());
        let news = Bytes::from_static(b"news");
        assert!(subs.subscribe(&a, Space::Plain, &news));
        assert!(!subs.subscribe(&a, Space::Plain, &news));
        assert!(subs.psubscribe(&a, &Bytes::from_static(b"n*")));
        assert_eq!(subs.count(Space::Plain), 2);
        let hi = Bytes::from_static(b"hi");
        assert_eq!(reg.publish(Space::Plain, &news, &hi), 2);
        assert_eq!(reg.publish(Space::Shard, &news, &hi), 0);
        assert_eq!(reg.numsub(Space::Plain, b"news"), 1);
        assert_eq!(reg.numpat(), 1);
        assert!(subs.unsubscribe(Space::Plain, b"news"));
        assert_eq!(reg.publish(Space::Plain, &news, &hi), 1);
        drop(subs);
        assert_eq!(reg.publish(Space::Plain, &news, &hi), 0);
        assert_eq!(reg.numpat(), 0);
        assert!(reg.channels(Space::Plain, None).is_empty());
    }
}
