//! The pub/sub commands as a connection serves them (SUBSCRIBE, PUBLISH,
//! PUBSUB … and their sharded and pattern relatives), subscribe mode
//! (what a RESP2 subscriber may still run, and its PING), and draining the
//! connection's queue into its output buffer.
//!
//! Replies follow Redis 7.0 (`pubsub.c`): one confirmation per channel, a
//! push in RESP3 and an array in RESP2, carrying the connection's count of
//! channels and patterns (shard channels for the S- commands).

use std::sync::Arc;

use bytes::Bytes;

use super::{Space, Subscriber};
use crate::cmd::{self, is, Control, Kind, Spec};
use crate::conn::Conn;
use crate::resp::ReplyWriter;

/// PUBSUB HELP's lines, between Redis's header and footer.
const HELP: &[&str] = &[
    "CHANNELS [<pattern>]",
    "    Return the currently active channels matching a <pattern> (default: '*').",
    "NUMPAT",
    "    Return number of subscriptions to patterns.",
    "NUMSUB [<channel> ...]",
    "    Return the number of subscribers for the specified channels, excluding",
    "    pattern subscriptions(default: no channels).",
    "SHARDCHANNELS [<pattern>]",
    "    Return the currently active shard level channels matching a <pattern> (default: '*').",
    "SHARDNUMSUB [<shardchannel> ...]",
    "    Return the number of subscribers for the specified shard level channel(s)",
];

/// The commands that answer with subscription confirmations.
pub(crate) fn confirms(c: Control) -> bool {
    matches!(
        c,
        Control::Subscribe
            | Control::Unsubscribe
            | Control::Psubscribe
            | Control::Punsubscribe
            | Control::Ssubscribe
            | Control::Sunsubscribe
    )
}

/// True for the commands this module serves.
pub(crate) fn is_pubsub(c: Control) -> bool {
    confirms(c) || matches!(c, Control::Publish | Control::Spublish | Control::Pubsub)
}

/// Resolves when a message was queued for `queue`; never without one.
pub(crate) async fn pushed(queue: Option<Arc<Subscriber>>) {
    match queue {
        Some(q) => q.woken().await,
        None => std::future::pending().await,
    }
}

/// A subscription confirmation: `[kind, channel or nil, count]`.
fn confirm(w: &mut ReplyWriter<'_>, kind: &[u8], name: Option<&[u8]>, count: usize) {
    w.push(3);
    w.bulk(kind);
    match name {
        Some(n) => w.bulk(n),
        None => w.nil(),
    }
    w.int(count as i64);
}

impl Conn {
    /// Serves a pub/sub command.
    pub(crate) fn pubsub(&mut self, c: Control, args: &[Bytes]) {
        match c {
            Control::Subscribe => self.subscribe(Some(Space::Plain), args),
            Control::Ssubscribe => self.subscribe(Some(Space::Shard), args),
            Control::Psubscribe => self.subscribe(None, args),
            Control::Unsubscribe => self.unsubscribe(Some(Space::Plain), args),
            Control::Sunsubscribe => self.unsubscribe(Some(Space::Shard), args),
            Control::Punsubscribe => self.unsubscribe(None, args),
            Control::Publish => self.publish(Space::Plain, args),
            Control::Spublish => self.publish(Space::Shard, args),
            Control::Pubsub => self.introspect(args),
            _ => {}
        }
    }

    /// Moves the messages queued for this connection into its output
    /// buffer. False when it went over `client-output-buffer-limit pubsub`:
    /// the connection is closing and its output is dropped, as Redis
    /// drops such a client.
    pub(crate) fn drain_pushes(&mut self) -> bool {
        if self.subs.me.is_none() {
            return true;
        }
        // A subscriber's user deleted, or its channels taken away: closed.
        if !self.acl_current() {
            self.s.closing = true;
            self.out.clear();
            return false;
        }
        let Some(q) = &self.subs.me else {
            return true;
        };
        let mut w = ReplyWriter {
            out: &mut self.out,
            resp3: self.s.resp3,
        };
        if q.drain(&mut w).is_ok() {
            return true;
        }
        self.s.closing = true;
        self.out.clear();
        false
    }

    /// This connection's queue, made at its first subscription.
    pub(crate) fn own_queue(&self) -> Arc<Subscriber> {
        match &self.subs.me {
            Some(q) => q.clone(),
            None => Arc::new(Subscriber::new(
                self.s.id,
                self.s.addr.clone(),
                self.shared.runtime.pubsub_output(),
            )),
        }
    }

    /// SUBSCRIBE / SSUBSCRIBE (a space) or PSUBSCRIBE (none).
    fn subscribe(&mut self, space: Option<Space>, args: &[Bytes]) {
        // What was queued before goes out before the confirmations; what
        // arrives once subscribed, after them.
        if !self.drain_pushes() {
            return;
        }
        let q = self.own_queue();
        for name in &args[1..] {
            let (kind, count): (&[u8], usize) = match space {
                Some(space) => {
                    self.subs.subscribe(&q, space, name);
                    let kind = if space == Space::Plain {
                        &b"subscribe"[..]
                    } else {
                        b"ssubscribe"
                    };
                    (kind, self.subs.count(space))
                }
                None => {
                    self.subs.psubscribe(&q, name);
                    (b"psubscribe", self.subs.count(Space::Plain))
                }
            };
            confirm(&mut self.w(), kind, Some(name), count);
        }
    }

    /// UNSUBSCRIBE / SUNSUBSCRIBE (a space) or PUNSUBSCRIBE (none); with
    /// no arguments, from everything of that kind (subscription order).
    fn unsubscribe(&mut self, space: Option<Space>, args: &[Bytes]) {
        let kind: &[u8] = match space {
            Some(Space::Plain) => b"unsubscribe",
            Some(Space::Shard) => b"sunsubscribe",
            None => b"punsubscribe",
        };
        let names = if args.len() > 1 {
            args[1..].to_vec()
        } else {
            self.subs.names(space)
        };
        let count_space = space.unwrap_or(Space::Plain);
        if names.is_empty() {
            // Subscribed to nothing of the kind: still one confirmation.
            if self.drain_pushes() {
                let count = self.subs.count(count_space);
                confirm(&mut self.w(), kind, None, count);
            }
            return;
        }
        for name in &names {
            match space {
                Some(space) => self.subs.unsubscribe(space, name),
                None => self.subs.punsubscribe(name),
            };
            // Out of the registry now: every message for it is queued
            // already and goes before the confirmation, none after.
            if !self.drain_pushes() {
                return;
            }
            let count = self.subs.count(count_space);
            confirm(&mut self.w(), kind, Some(name), count);
        }
    }

    /// Delivers a message to this node's subscribers and hands it to the
    /// other nodes; answers how many here received it.
    pub(crate) fn publish_now(&self, space: Space, channel: &Bytes, payload: &Bytes) -> usize {
        let receivers = self.shared.pubsub.publish(space, channel, payload);
        if let Some(cluster) = &self.shared.cluster {
            cluster.publish(channel, payload, space == Space::Shard);
        }
        receivers
    }

    /// PUBLISH / SPUBLISH: to this node's subscribers at once (the reply
    /// counts them, as Redis Cluster counts the publishing node's), and to
    /// the other nodes' through the replication service.
    fn publish(&mut self, space: Space, args: &[Bytes]) {
        let receivers = self.publish_now(space, &args[1], &args[2]);
        // A RESP3 subscriber publishing to itself sees its message before
        // the count, as in Redis.
        if self.drain_pushes() {
            self.w().int(receivers as i64);
        }
    }

    /// PUBSUB CHANNELS | NUMSUB | NUMPAT | SHARDCHANNELS | SHARDNUMSUB |
    /// HELP, about this node's subscribers (as Redis Cluster answers about
    /// the node asked). Unknown subcommands and wrong counts were refused
    /// by the command table already, except the ones Redis refuses here.
    fn introspect(&mut self, args: &[Bytes]) {
        let sub = &args[1];
        let n = args.len();
        let reg = self.shared.pubsub.clone();
        let mut w = self.w();
        if is(sub, "HELP") && n == 2 {
            w.array(HELP.len() + 3);
            w.simple(&format!(
                "{} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                String::from_utf8_lossy(&args[0]).to_uppercase()
            ));
            for line in HELP {
                w.simple(line);
            }
            w.simple("HELP");
            w.simple("    Prints this help.");
        } else if (is(sub, "CHANNELS") || is(sub, "SHARDCHANNELS")) && n <= 3 {
            let space = if is(sub, "CHANNELS") {
                Space::Plain
            } else {
                Space::Shard
            };
            let channels = reg.channels(space, args.get(2).map(|p| &p[..]));
            w.bulks(channels.iter().map(|c| &c[..]));
        } else if is(sub, "NUMSUB") || is(sub, "SHARDNUMSUB") {
            let space = if is(sub, "NUMSUB") {
                Space::Plain
            } else {
                Space::Shard
            };
            w.array((n - 2) * 2);
            for c in &args[2..] {
                w.bulk(c);
                w.int(reg.numsub(space, c) as i64);
            }
        } else if is(sub, "NUMPAT") && n == 2 {
            w.int(reg.numpat() as i64);
        } else {
            w.error(&format!(
                "ERR unknown subcommand or wrong number of arguments for '{}'. Try {} HELP.",
                String::from_utf8_lossy(&cmd::c_str(sub)[..cmd::c_str(sub).len().min(128)]),
                String::from_utf8_lossy(&args[0]).to_uppercase()
            ));
        }
    }

    /// Redis's refusal of a command in subscribe mode: a RESP2 connection
    /// subscribed to anything may run only these (RESP3 may run anything).
    pub(crate) fn pubsub_refusal(&self, spec: &Spec, args: &[Bytes]) -> Option<String> {
        if !self.subs.active() || self.s.resp3 {
            return None;
        }
        let allowed = matches!(
            spec.kind,
            Kind::Control(
                Control::Ping
                    | Control::Subscribe
                    | Control::Ssubscribe
                    | Control::Unsubscribe
                    | Control::Sunsubscribe
                    | Control::Psubscribe
                    | Control::Punsubscribe
                    | Control::Quit
                    | Control::Reset
            )
        );
        (!allowed).then(|| {
            format!(
                "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
                cmd::full_name(spec, args)
            )
        })
    }

    /// PING in subscribe mode (RESP2): `["pong", message or ""]`. False
    /// when it is an ordinary PING.
    pub(crate) fn pubsub_ping(&mut self, args: &[Bytes]) -> bool {
        if !self.subs.active() || self.s.resp3 || args.len() > 2 {
            return false;
        }
        let mut w = self.w();
        w.array(2);
        w.bulk(b"pong");
        w.bulk(args.get(1).map_or(&b""[..], |m| &m[..]));
        true
    }

    /// RESET: leaves every channel and pattern without confirmations;
    /// messages that arrived before go out before its reply.
    pub(crate) fn pubsub_reset(&mut self) {
        self.subs.clear();
        self.drain_pushes();
    }
}
