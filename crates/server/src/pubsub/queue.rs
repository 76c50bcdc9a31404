//! One subscriber's queue: messages published to it (from any worker
//! thread, or from the replication service thread for messages of other
//! nodes) wait here until its connection task drains them into its output
//! buffer, and the `client-output-buffer-limit pubsub` that bounds them.
//!
//! Why a queue and not the output buffer itself: the output buffer belongs
//! to the connection's task on its own thread; publishers elsewhere must not
//! touch it. Messages are kept as shared `Bytes` (a publish to many
//! subscribers copies nothing) and encoded when drained, in the protocol the
//! connection speaks then.
//!
//! The limit counts what waits here plus what the connection has drained
//! and not yet sent (it reports that after every drain), so a subscriber
//! that stops reading is cut off wherever its backlog sits, as Redis cuts
//! off a client whose output buffer passes the limit.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::Notify;

use crate::resp::ReplyWriter;

/// `client-output-buffer-limit pubsub <hard> <soft> <soft-seconds>`: a
/// subscriber with more than `hard` bytes waiting, or more than `soft` for
/// `soft_secs` seconds on end, is disconnected. 0 turns a limit off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    /// Bytes past which the subscriber is disconnected at once.
    pub hard: usize,
    /// Bytes it may stay over only for `soft_secs`.
    pub soft: usize,
    /// How long it may stay over `soft`.
    pub soft_secs: u64,
}

impl std::str::FromStr for Limit {
    type Err = String;

    /// Redis's spelling: `32mb 8mb 60` (memory units as in redis.conf:
    /// k = 1000, kb = 1024, m, mb, g, gb; none = bytes).
    fn from_str(s: &str) -> Result<Limit, String> {
        let parts: Vec<&str> = s.split_whitespace().collect();
        let [hard, soft, secs] = parts[..] else {
            return Err(format!("'{s}' (expected \"<hard> <soft> <soft-seconds>\")"));
        };
        Ok(Limit {
            hard: memory(hard).ok_or_else(|| format!("'{hard}' is not a size"))?,
            soft: memory(soft).ok_or_else(|| format!("'{soft}' is not a size"))?,
            soft_secs: secs
                .parse()
                .map_err(|_| format!("'{secs}' is not a number of seconds"))?,
        })
    }
}

impl std::fmt::Display for Limit {
    /// As Redis's CONFIG GET shows it: bytes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} {}", self.hard, self.soft, self.soft_secs)
    }
}

/// A redis.conf memory size: `1gb`, `64k`, `100` (`crate::memory`'s
/// parser, Redis's `memtoull`).
fn memory(s: &str) -> Option<usize> {
    crate::config::parse_memory(s).and_then(|n| usize::try_from(n).ok())
}

/// One message for one subscriber.
#[derive(Clone, Debug)]
pub enum Msg {
    /// `message channel payload` (SUBSCRIBE).
    Message { channel: Bytes, payload: Bytes },
    /// `smessage channel payload` (SSUBSCRIBE).
    SMessage { channel: Bytes, payload: Bytes },
    /// `pmessage pattern channel payload` (PSUBSCRIBE).
    PMessage {
        pattern: Bytes,
        channel: Bytes,
        payload: Bytes,
    },
    /// A client-side caching invalidation (`crate::tracking`): these keys,
    /// or every key (None).
    Invalidate(Option<Vec<Bytes>>),
    /// A BCAST invalidation: the keys under `prefix` changed since the
    /// connection last drained its queue, one message per prefix, as Redis
    /// sends them once per event-loop turn (`Subscriber::push_broadcast`).
    Broadcast { prefix: Bytes, keys: Vec<Bytes> },
    /// Bytes already encoded, sent as they are (a MONITOR line,
    /// `crate::clients::monitor`).
    Raw(Bytes),
}

impl Msg {
    /// About what it takes encoded (what the limit counts).
    fn size(&self) -> usize {
        // Headers and the kind: a few dozen bytes, as Redis counts them.
        const FRAME: usize = 40;
        match self {
            Msg::Message { channel, payload } | Msg::SMessage { channel, payload } => {
                FRAME + channel.len() + payload.len()
            }
            Msg::PMessage {
                pattern,
                channel,
                payload,
            } => FRAME + pattern.len() + channel.len() + payload.len(),
            Msg::Raw(b) => b.len(),
            Msg::Invalidate(keys) => {
                FRAME
                    + keys
                        .as_ref()
                        .map_or(0, |k| k.iter().map(|k| k.len() + 8).sum())
            }
            Msg::Broadcast { keys, .. } => FRAME + keys.iter().map(|k| k.len() + 8).sum::<usize>(),
        }
    }

    /// Encodes it: a `>` push in RESP3, an array in RESP2, as Redis.
    pub fn write(&self, w: &mut ReplyWriter<'_>) {
        match self {
            Msg::Message { channel, payload } | Msg::SMessage { channel, payload } => {
                w.push(3);
                w.bulk(if matches!(self, Msg::Message { .. }) {
                    b"message"
                } else {
                    b"smessage"
                });
                w.bulk(channel);
                w.bulk(payload);
            }
            Msg::PMessage {
                pattern,
                channel,
                payload,
            } => {
                w.push(4);
                w.bulk(b"pmessage");
                w.bulk(pattern);
                w.bulk(channel);
                w.bulk(payload);
            }
            Msg::Raw(b) => w.out.extend_from_slice(b),
            Msg::Invalidate(_) | Msg::Broadcast { .. } => {
                // RESP3: `>2 invalidate [keys]`; RESP2 (a redirect's
                // subscriber): a message of `__redis__:invalidate`.
                if w.resp3 {
                    w.push(2);
                    w.bulk(b"invalidate");
                } else {
                    w.push(3);
                    w.bulk(b"message");
                    w.bulk(crate::tracking::CHANNEL);
                }
                let keys = match self {
                    Msg::Invalidate(keys) => keys.as_deref(),
                    Msg::Broadcast { keys, .. } => Some(&keys[..]),
                    _ => None,
                };
                match keys {
                    Some(keys) => {
                        w.array(keys.len());
                        for k in keys {
                            w.bulk(k);
                        }
                    }
                    None => w.nil_array(),
                }
            }
        }
    }
}

/// The subscriber went over its limit: its connection must close.
#[derive(Debug)]
pub struct Overflow;

/// A subscribed connection, as publishers see it.
pub struct Subscriber {
    /// The connection's CLIENT ID.
    pub id: u64,
    /// Its address (for the log line when it is cut off).
    addr: String,
    limit: Limit,
    state: Mutex<State>,
    /// Rung on every message: the connection's `serve` loop waits on it.
    wake: Notify,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Msg>,
    /// Bytes of `queue`.
    queued: usize,
    /// Bytes the connection has drained and not sent yet.
    unsent: usize,
    /// Since when it has been over the soft limit.
    over_soft_since: Option<Instant>,
    /// Over the limit: takes nothing more, its connection closes.
    closed: bool,
    /// Its connection ended.
    gone: bool,
}

impl Subscriber {
    /// A subscriber for connection `id`.
    pub fn new(id: u64, addr: String, limit: Limit) -> Subscriber {
        Subscriber {
            id,
            addr,
            limit,
            state: Mutex::new(State::default()),
            wake: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// False once the subscriber is being disconnected (it takes nothing
    /// more): what a publish would count it as.
    pub fn open(&self) -> bool {
        !self.lock().closed
    }

    /// Its connection ended (or is closing over its limit): a tracking
    /// redirect to it is broken.
    pub fn gone(&self) -> bool {
        let st = self.lock();
        st.gone || st.closed
    }

    /// The connection ended.
    pub fn end(&self) {
        let mut st = self.lock();
        st.gone = true;
        st.queue = VecDeque::new();
        st.queued = 0;
    }

    /// Queues a message and wakes the connection; false when the
    /// subscriber is being disconnected (it takes nothing more).
    pub fn push(&self, msg: Msg) -> bool {
        let mut st = self.lock();
        if st.closed || st.gone {
            return false;
        }
        st.queued += msg.size();
        st.queue.push_back(msg);
        let over = self.over_limit(&mut st);
        drop(st);
        // One stored permit covers any number of messages until the
        // connection drains: no lost wake-up, no growing count.
        self.wake.notify_one();
        !over
    }

    /// Queues `key` for a BCAST client under `prefix`: into the message
    /// for that prefix still waiting in the queue if there is one (a key
    /// once), else a new one — so the keys one command or transaction
    /// changes reach the client as one message per prefix, as Redis's.
    pub fn push_broadcast(&self, prefix: &Bytes, key: &Bytes) -> bool {
        let mut st = self.lock();
        if st.closed {
            return false;
        }
        let waiting = st.queue.iter_mut().rev().find_map(|m| match m {
            Msg::Broadcast { prefix: p, keys } if p == prefix => Some(keys),
            _ => None,
        });
        let added = match waiting {
            Some(keys) if keys.contains(key) => 0,
            Some(keys) => {
                keys.push(key.clone());
                key.len() + 8
            }
            None => {
                let m = Msg::Broadcast {
                    prefix: prefix.clone(),
                    keys: vec![key.clone()],
                };
                let size = m.size();
                st.queue.push_back(m);
                size
            }
        };
        st.queued += added;
        let over = self.over_limit(&mut st);
        drop(st);
        self.wake.notify_one();
        !over
    }

    /// Moves every queued message into the connection's output; then
    /// `unsent` (its output not yet sent) is what counts with the queue.
    pub fn drain(&self, w: &mut ReplyWriter<'_>) -> Result<(), Overflow> {
        let mut st = self.lock();
        if st.closed {
            return Err(Overflow);
        }
        for m in st.queue.drain(..) {
            m.write(w);
        }
        st.queued = 0;
        st.unsent = w.out.len();
        if self.over_limit(&mut st) {
            return Err(Overflow);
        }
        Ok(())
    }

    /// Waits until a message was queued (returns at once if one was queued
    /// since the last wait).
    pub async fn woken(&self) {
        self.wake.notified().await;
    }

    /// Checks the limit; past it, marks the subscriber closed, frees its
    /// queue and logs why, as Redis does. True when closed.
    fn over_limit(&self, st: &mut State) -> bool {
        if st.closed {
            return true;
        }
        let total = st.queued + st.unsent;
        let l = self.limit;
        let which = if l.hard > 0 && total > l.hard {
            Some("hard")
        } else if l.soft > 0 && total > l.soft {
            // As Redis: the first time over only starts the clock; cut off
            // once it has been over for more than `soft_secs`.
            match st.over_soft_since {
                None => {
                    st.over_soft_since = Some(Instant::now());
                    None
                }
                Some(since) => {
                    (since.elapsed() > Duration::from_secs(l.soft_secs)).then_some("soft")
                }
            }
        } else {
            st.over_soft_since = None;
            None
        };
        let Some(which) = which else {
            return false;
        };
        tracing::warn!(
            client = self.id,
            addr = %self.addr,
            bytes = total,
            "closing subscriber: over the {which} client-output-buffer-limit pubsub ({l}); it is not reading its messages"
        );
        st.closed = true;
        st.queue = VecDeque::new();
        st.queued = 0;
        self.wake.notify_one();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    #[test]
    fn limits_parse_as_redis_writes_them() {
        let l: Limit = "32mb 8mb 60".parse().unwrap();
        assert_eq!((l.hard, l.soft, l.soft_secs), (32 << 20, 8 << 20, 60));
        let l: Limit = "1000 2k 0".parse().unwrap();
        assert_eq!((l.hard, l.soft), (1000, 2000));
        assert!("32mb 8mb".parse::<Limit>().is_err());
        assert!("32zb 8mb 60".parse::<Limit>().is_err());
    }

    fn msg(n: usize) -> Msg {
        Msg::Message {
            channel: Bytes::from_static(b"c"),
            payload: Bytes::from(vec![b'x'; n]),
        }
    }

    #[test]
    fn the_hard_limit_counts_queued_and_unsent_bytes() {
        let limit = Limit {
            hard: 1000,
            soft: 0,
            soft_secs: 0,
        };
        let s = Subscriber::new(1, "a".into(), limit);
        assert!(s.push(msg(400)));
        let mut out = BytesMut::new();
        let mut w = ReplyWriter {
            out: &mut out,
            resp3: false,
        };
        s.drain(&mut w).unwrap();
        // 400 bytes unsent in the output, 400 more queued: under.
        assert!(s.push(msg(400)));
        // Over: closed, the queue freed, nothing more taken.
        assert!(!s.push(msg(400)));
        assert!(!s.push(msg(1)));
        assert!(s.drain(&mut w).is_err());
    }

    #[test]
    fn the_soft_limit_needs_its_seconds() {
        let limit = Limit {
            hard: 0,
            soft: 100,
            soft_secs: 0,
        };
        let s = Subscriber::new(1, "a".into(), limit);
        assert!(s.push(msg(200)), "the first time over starts the clock");
        std::thread::sleep(Duration::from_millis(10));
        assert!(!s.push(msg(1)), "over soft for more than 0 s: cut");
        let limit = Limit {
            hard: 0,
            soft: 100,
            soft_secs: 60,
        };
        let s = Subscriber::new(1, "a".into(), limit);
        assert!(s.push(msg(200)), "over soft, but not for 60 s yet");
    }
}
