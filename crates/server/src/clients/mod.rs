//! The node's registry of client connections: what CLIENT LIST, CLIENT
//! KILL, CLIENT UNBLOCK, INFO clients and MONITOR see of every connection
//! of every worker (plaintext and TLS alike).
//!
//! Each connection registers an [`Client`] entry when its task starts and
//! removes it when the task ends ([`Handle`]'s drop). The registry's map is
//! locked only then and by the few commands that walk it (CLIENT LIST,
//! KILL, UNBLOCK, INFO clients) — never per command. What changes per
//! command is published by the owning task once per batch of requests into
//! the entry's own small lock ([`State`]), which only that task and the
//! walkers take; what must be seen at once from elsewhere (blocked, killed,
//! unblocked) is in atomics.
//!
//! - [`list`]: the CLIENT LIST / CLIENT INFO line, Redis 7.0's fields.
//! - [`command`]: CLIENT LIST, INFO, KILL, PAUSE, UNPAUSE, REPLY,
//!   NO-EVICT, UNBLOCK.
//! - [`monitor`]: MONITOR and the lines its clients receive.
//! - [`info`]: INFO's `# Clients` section.
//! - [`pause`]: CLIENT PAUSE's node-wide state.
//! - [`shutdown`]: SHUTDOWN and the request the acceptor waits for.

pub(crate) mod command;
pub(crate) mod info;
pub(crate) mod list;
pub(crate) mod local;
pub(crate) mod monitor;
pub(crate) mod pause;
pub(crate) mod shutdown;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::Notify;

/// Every connection of the node, by CLIENT ID (so listed in the order they
/// connected, as Redis lists them).
#[derive(Default)]
pub struct Registry {
    map: Mutex<BTreeMap<u64, Arc<Client>>>,
    /// Connections inside a blocking command now (INFO's `blocked_clients`).
    blocked: AtomicUsize,
    /// Of those, the ones whose command has a timeout (INFO's
    /// `clients_in_timeout_table`).
    blocked_with_timeout: AtomicUsize,
    /// MONITOR's clients.
    pub(crate) monitors: monitor::Monitors,
    /// CLIENT PAUSE.
    pub(crate) pause: pause::Pause,
    /// SHUTDOWN's request to the acceptor.
    pub shutdown: shutdown::Signal,
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Arc<Client>>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a connection; the entry leaves the registry when the handle
    /// is dropped.
    pub(crate) fn register(self: &Arc<Self>, client: Client) -> Handle {
        let client = Arc::new(client);
        self.lock().insert(client.id, client.clone());
        Handle {
            registry: self.clone(),
            client,
        }
    }

    /// Every entry, in id order (the map's lock is held only to copy them).
    pub(crate) fn all(&self) -> Vec<Arc<Client>> {
        self.lock().values().cloned().collect()
    }

    /// One entry by id.
    pub(crate) fn get(&self, id: u64) -> Option<Arc<Client>> {
        self.lock().get(&id).cloned()
    }

    /// Connections blocked in BLPOP and its relatives now.
    pub fn blocked(&self) -> usize {
        self.blocked.load(Ordering::Relaxed)
    }

    /// Of those, the ones waiting with a timeout.
    pub fn blocked_with_timeout(&self) -> usize {
        self.blocked_with_timeout.load(Ordering::Relaxed)
    }
}

/// Flags of a connection as CLIENT LIST shows them (Redis's letters).
pub(crate) mod flag {
    pub const PUBSUB: u16 = 1; // P
    pub const MULTI: u16 = 1 << 1; // x
    pub const TRACKING: u16 = 1 << 2; // t
    pub const BCAST: u16 = 1 << 3; // B
    pub const CLOSE_AFTER_REPLY: u16 = 1 << 4; // c
    pub const NO_EVICT: u16 = 1 << 5; // e
}

/// Why a blocked client was woken by CLIENT UNBLOCK.
pub(crate) mod unblock {
    pub const NONE: u8 = 0;
    pub const TIMEOUT: u8 = 1;
    pub const ERROR: u8 = 2;
}

/// One connection, as others see it.
pub struct Client {
    pub id: u64,
    /// `ip:port` of the peer.
    pub addr: String,
    /// `ip:port` the connection came to.
    pub laddr: String,
    pub fd: i64,
    pub created: Instant,
    /// CLIENT KILL chose it: its task closes the connection.
    killed: AtomicBool,
    /// CLIENT UNBLOCK's request ([`unblock`]).
    unblock: AtomicU8,
    /// Inside a blocking command now (flag `b`).
    blocked: AtomicBool,
    /// Blocked in a way CLIENT UNBLOCK ends (BLPOP & co., not a pause).
    unblockable: AtomicBool,
    /// In MONITOR mode (flag `O`).
    pub(crate) monitor: AtomicBool,
    /// Rung by KILL and UNBLOCK: the connection's task waits on it while
    /// idle or blocked, so a killed idle connection closes at once.
    wake: Notify,
    state: Mutex<State>,
}

/// What the owning task publishes about its connection (once per batch,
/// and before its own CLIENT LIST / INFO).
pub(crate) struct State {
    pub name: Option<Bytes>,
    pub lib_name: Option<Bytes>,
    pub lib_ver: Option<Bytes>,
    pub db: u8,
    pub sub: usize,
    pub psub: usize,
    pub ssub: usize,
    /// Commands queued in MULTI, -1 outside.
    pub multi: i64,
    pub multi_mem: usize,
    pub flags: u16,
    pub qbuf: usize,
    pub qbuf_free: usize,
    pub argv_mem: usize,
    /// Output: bytes waiting to be sent, the buffer's size, its peak.
    pub obl: usize,
    pub rbs: usize,
    pub rbp: usize,
    /// The last command's name and first argument (CLIENT LIST's `cmd`
    /// names a container's subcommand, `client|list`); resolved only when
    /// listed, so publishing it costs two reference counts.
    pub cmd: Option<(Bytes, Option<Bytes>)>,
    pub user: Arc<crate::acl::User>,
    pub redir: i64,
    pub resp: u8,
    /// Elsa's interactive transaction's isolation, or `none`.
    pub txn: &'static str,
    pub last_interaction: Instant,
}

impl Client {
    /// A new connection's entry.
    pub(crate) fn new(
        id: u64,
        addr: String,
        laddr: String,
        fd: i64,
        user: Arc<crate::acl::User>,
    ) -> Client {
        let now = Instant::now();
        Client {
            id,
            addr,
            laddr,
            fd,
            created: now,
            killed: AtomicBool::new(false),
            unblock: AtomicU8::new(unblock::NONE),
            blocked: AtomicBool::new(false),
            unblockable: AtomicBool::new(false),
            monitor: AtomicBool::new(false),
            wake: Notify::new(),
            state: Mutex::new(State {
                name: None,
                lib_name: None,
                lib_ver: None,
                db: 0,
                sub: 0,
                psub: 0,
                ssub: 0,
                multi: -1,
                multi_mem: 0,
                flags: 0,
                qbuf: 0,
                qbuf_free: 0,
                argv_mem: 0,
                obl: 0,
                rbs: 0,
                rbp: 0,
                cmd: None,
                user,
                redir: -1,
                resp: 2,
                txn: "none",
                last_interaction: now,
            }),
        }
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marks it killed and wakes its task.
    pub(crate) fn kill(&self) {
        self.killed.store(true, Ordering::Relaxed);
        self.wake.notify_one();
    }

    /// CLIENT KILL chose it.
    pub(crate) fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Relaxed)
    }

    /// Inside a blocking command now.
    pub(crate) fn is_blocked(&self) -> bool {
        self.blocked.load(Ordering::Relaxed)
    }

    /// Asks a blocked client to stop waiting (`unblock::TIMEOUT` or
    /// `ERROR`); false when it is not blocked.
    pub(crate) fn unblock(&self, how: u8) -> bool {
        if !self.is_blocked() || !self.unblockable.load(Ordering::Relaxed) {
            return false;
        }
        self.unblock.store(how, Ordering::Relaxed);
        self.wake.notify_one();
        true
    }

    /// CLIENT UNBLOCK's request since the last call, if any.
    pub(crate) fn take_unblock(&self) -> u8 {
        self.unblock.swap(unblock::NONE, Ordering::Relaxed)
    }

    /// Waits until KILL or UNBLOCK rings (at once if one rang meanwhile).
    pub(crate) async fn woken(&self) {
        self.wake.notified().await;
    }
}

/// A connection's entry while it is connected: removes it on drop.
pub struct Handle {
    pub(crate) registry: Arc<Registry>,
    pub(crate) client: Arc<Client>,
}

impl Handle {
    /// Counts the connection as blocked until the guard is dropped
    /// (`unblockable`: CLIENT UNBLOCK may end the wait).
    pub(crate) fn block(&self, with_timeout: bool, unblockable: bool) -> BlockedGuard {
        self.client.blocked.store(true, Ordering::Relaxed);
        self.client
            .unblockable
            .store(unblockable, Ordering::Relaxed);
        self.client.unblock.store(unblock::NONE, Ordering::Relaxed);
        self.registry.blocked.fetch_add(1, Ordering::Relaxed);
        if with_timeout {
            self.registry
                .blocked_with_timeout
                .fetch_add(1, Ordering::Relaxed);
        }
        BlockedGuard {
            registry: self.registry.clone(),
            client: self.client.clone(),
            with_timeout,
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.registry.lock().remove(&self.client.id);
        if self.client.monitor.load(Ordering::Relaxed) {
            self.registry.monitors.remove(self.client.id);
        }
    }
}

/// A connection inside a blocking command (see [`Handle::block`]).
pub(crate) struct BlockedGuard {
    registry: Arc<Registry>,
    client: Arc<Client>,
    with_timeout: bool,
}

impl Drop for BlockedGuard {
    fn drop(&mut self) {
        let r = &self.registry;
        self.client.blocked.store(false, Ordering::Relaxed);
        r.blocked.fetch_sub(1, Ordering::Relaxed);
        if self.with_timeout {
            r.blocked_with_timeout.fetch_sub(1, Ordering::Relaxed);
        }
    }
}
