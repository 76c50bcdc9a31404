//! A node: N worker threads, each owning one shard and serving the client
//! connections handed to it, plus one acceptor that deals out connections
//! and handles SIGINT/SIGTERM.

use std::cell::RefCell;
use std::net::TcpListener as StdListener;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use elsa_lattice::Hlc;
use elsa_shard::AdminMsg;
use elsa_shard::{KeyHasher, Shard, ShardMsg};
use elsa_txn::router::{LocalShard, Placement};
use elsa_txn::{Coordinator, NodeContext};
use tokio::sync::{mpsc, Notify};

use crate::config::Config;
use crate::conn::Conn;
use crate::state::{Shared, StartError};

/// Each worker's queue of connections, for a connection that moves to
/// the worker serving its keys (`crate::conn`, *Moving to the keys'
/// worker*). Weak: the acceptor's senders alone keep the workers running,
/// so dropping them still ends every worker at shutdown.
type Queues = Arc<std::sync::OnceLock<Vec<mpsc::WeakUnboundedSender<Incoming>>>>;

/// What reaches a worker: a socket just accepted, with the TLS
/// configuration it must be served with (none on the plaintext port) and
/// whether it came in on this worker's own port (then it stays here), or
/// a connection another worker hands over to be served here
/// (`crate::conn::Parcel`).
pub(crate) enum Incoming {
    Accepted(std::net::TcpStream, Option<Arc<rustls::ServerConfig>>, bool),
    Moved(Box<crate::conn::Parcel>),
}

fn listen(addr: std::net::SocketAddr) -> Result<StdListener, StartError> {
    let err = |e| StartError::Listen(addr.to_string(), e);
    let domain = socket2::Domain::for_address(addr);
    let sock = socket2::Socket::new(domain, socket2::Type::STREAM, None).map_err(err)?;
    sock.set_reuse_address(true).map_err(err)?;
    sock.bind(&addr.into()).map_err(err)?;
    sock.listen(511).map_err(err)?;
    sock.set_nonblocking(true).map_err(err)?;
    Ok(sock.into())
}

/// Runs a node until SIGINT or SIGTERM.
pub fn run(config: Config) -> Result<(), StartError> {
    crate::cmd::set_databases(config.databases);
    let acl = Arc::new(crate::acl::Acl::new(config.acl.clone()).map_err(StartError::Acl)?);
    // `port 0` turns plaintext off, `tls-port 0` (the default) TLS.
    let tls = crate::tls::Tls::new(config.tls.clone()).map_err(StartError::Tls)?;
    let plain_listener = match config.addr.port() {
        0 => None,
        _ => Some(listen(config.addr)?),
    };
    let tls_listener = match config.tls.port {
        0 => None,
        port => Some(listen(std::net::SocketAddr::new(config.addr.ip(), port))?),
    };
    if plain_listener.is_none() && tls_listener.is_none() {
        return Err(StartError::NoListener);
    }
    let metrics_listener = crate::http::bind(&config)?;
    let workers = config.workers;
    let worker_listeners = worker_listeners(&config)?;
    let hlc = Arc::new(Hlc::default());
    let hasher = KeyHasher::default();
    // In a region whose keys have other replicas, what this node committed
    // and its replicas never confirmed is left out (issue 12: a write
    // logged by a primary that died before shipping it came back after the
    // region had moved on — a list element in the middle of the list — and
    // a transaction record the region had settled aborted put its
    // transaction back).
    let drop_unconfirmed = config.cluster.peer_port != 0 && config.cluster.replication_factor > 1;
    let crate::recovery::Recovered {
        mut shards,
        persistence,
        units: recovered_units,
        tail,
    } = crate::recovery::recover(&config, hasher, &hlc, drop_unconfirmed)?;
    let mut inboxes = Vec::with_capacity(workers);
    let mut inbox_rxs = Vec::with_capacity(workers);
    for _ in 0..workers {
        let (tx, rx) = mpsc::unbounded_channel::<ShardMsg>();
        inboxes.push(tx);
        inbox_rxs.push(rx);
    }
    let fresh = persistence.recovery.files == 0;
    let functions =
        crate::script::library::Functions::open(&config.data_dir, hlc.clone(), config.node_id)
            .map_err(StartError::Functions)?;
    let functions = Arc::new(functions);
    let cluster = start_cluster(&config, &inboxes, &hlc, hasher, fresh)?;
    if let Some(c) = &cluster {
        functions.attach(c);
    }
    if let Some(c) = &cluster {
        c.set_boot_tail(tail);
        c.on_lost_batch(Box::new(|| {
            restart_in_place(
                "a batch of this node's writes was not confirmed by its region's replicas (it was paused, cut off or declared dead meanwhile); restarting to leave them out",
            )
        }));
        // Commits are shipped to the keys' other replicas in the region.
        let replicator = Arc::new(elsa_cluster::RegionReplicator(c.clone()));
        for shard in &mut shards {
            shard.attach_replicator(replicator.clone());
        }
    } else {
        for shard in &mut shards {
            shard.run_alone();
        }
    }
    let tracking = Arc::new(crate::tracking::Tracking::default());
    let notifier = Arc::new(elsa_shard::notify::Notifier::default());
    notifier.set_flags(config.notify_keyspace_events);
    for shard in &mut shards {
        shard.set_change_hook(tracking.clone());
        shard.set_notifier(notifier.clone());
    }
    let memory = Arc::new(crate::memory::Memory::from_settings(&config.memory));
    config.encodings.apply();
    for shard in &mut shards {
        shard.set_memory_limit(memory.limit.clone());
    }
    let placement: Arc<dyn Placement> = match &cluster {
        Some(c) => Arc::new(elsa_cluster::Router(c.clone())),
        None => Arc::new(elsa_cluster::Standalone::new(
            config.node_id,
            workers as u16,
            config.cluster.vnodes,
        )),
    };
    let mut node = NodeContext::new(config.node_id, hlc.clone(), hasher, inboxes, placement);
    node.notifier = notifier.clone();
    if cluster.is_none() {
        // Alone, every commit is stamped by this node's clock, as are
        // snapshots: SI transactions read as of their start, from values
        // the shards keep while one is open (`elsa_shard::history`).
        let snapshots = Arc::new(elsa_shard::history::Snapshots::default());
        for shard in &mut shards {
            shard.keep_history(snapshots.clone());
        }
        node.snapshots = Some(snapshots);
    }
    let node = Arc::new(node);
    let pubsub = crate::pubsub::Registry::attached(cluster.as_deref());
    node.notifier
        .set_sink(pubsub.keyspace_sink(cluster.clone()));
    let shared = Arc::new(Shared {
        config: config.clone(),
        started: Instant::now(),
        clients: AtomicUsize::new(0),
        total_connections: AtomicU64::new(0),
        total_commands: AtomicU64::new(0),
        rejected: AtomicU64::new(0),
        clients_moved: AtomicU64::new(0),
        next_client_id: AtomicU64::new(1),
        persistence: Arc::new(persistence),
        pubsub: pubsub.clone(),
        notifier,
        tracking,
        cluster,
        pushes: tokio::sync::Notify::new(),
        scripts: crate::script::Scripts::new(&config, functions.clone()),
        acl,
        tls,
        cmdstats: Default::default(),
        slowlog: crate::slowlog::SlowLog::new(
            config.introspection.slowlog_log_slower_than,
            config.introspection.slowlog_max_len,
        ),
        latency: crate::latency::Latency::new(config.introspection.latency_monitor_threshold),
        runtime: crate::runtime::Runtime::new(&config),
        rates: Default::default(),
        memory: memory.clone(),
        conns: Arc::default(),
    });
    crate::rates::start_sampler(Arc::downgrade(&shared), |s| {
        let net = s.cmdstats.net_raw();
        let counters = crate::rates::Counters {
            commands: s.total_commands.load(Ordering::Relaxed),
            input: net.input,
            output: net.output,
        };
        (&s.rates, counters)
    });
    let streams = shared
        .cluster
        .clone()
        .map(|c| Box::new(move || c.gossip_streams_bytes() as u64) as Box<dyn Fn() -> u64 + Send>);
    memory
        .start_sampler(workers, streams)
        .map_err(StartError::Thread)?;

    let queues: Queues = Arc::default();
    let mut conn_txs = Vec::with_capacity(workers);
    let mut threads = Vec::with_capacity(workers);
    for ((index, inbox), shard) in inbox_rxs.into_iter().enumerate().zip(shards) {
        let (conn_tx, conn_rx) = mpsc::unbounded_channel::<Incoming>();
        conn_txs.push(conn_tx);
        let node = node.clone();
        let shared = shared.clone();
        let queues = queues.clone();
        let t = std::thread::Builder::new()
            .name(format!("elsa-shard-{index}"))
            .spawn(move || {
                crate::memory::own_arena();
                worker(index, shard, inbox, conn_rx, node, shared, queues)
            })
            .map_err(StartError::Thread)?;
        threads.push(t);
    }

    let _ = queues.set(
        conn_txs
            .iter()
            .map(mpsc::UnboundedSender::downgrade)
            .collect(),
    );
    if let Some(l) = metrics_listener {
        crate::http::start(l, shared.clone(), node.clone())?;
    }
    if config.tls.port != 0 {
        tracing::info!(
            "TLS clients on port {} (tls-auth-clients {})",
            config.tls.port,
            config.tls.auth_clients
        );
    }
    tracing::info!(
        "Elsa {} ready: listening on {}, {} workers (one shard each), data dir {}, appendfsync {}, node id {}, default isolation {}",
        env!("CARGO_PKG_VERSION"),
        match config.addr.port() {
            0 => format!("{} (TLS only)", std::net::SocketAddr::new(config.addr.ip(), config.tls.port)),
            _ => config.addr.to_string(),
        },
        workers,
        config.data_dir.display(),
        config.appendfsync.name(),
        config.node_id,
        config.default_isolation.name()
    );

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(StartError::Runtime)?;
    let coord = Coordinator::new(node, None);
    // The coordinator is !Send (it may hold a thread's own shard), so its
    // tasks run on a LocalSet even here, where it holds none.
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async {
        let snapshots = tokio::task::spawn_local(periodic_snapshots(coord.clone(), shared.clone()));
        let resolver = tokio::task::spawn_local(resolve_orphans(coord.clone()));
        let units = shared
            .cluster
            .as_ref()
            .and_then(|c| {
                let rx = c.take_remote_units()?;
                c.hand_units(recovered_units);
                Some(rx)
            })
            .map(|rx| {
                tokio::task::spawn_local(elsa_txn::unit::install_remote_units(coord.clone(), rx))
            });
        let served = accept_loop(
            Listeners {
                plain: plain_listener,
                tls: tls_listener,
                workers: worker_listeners,
            },
            &conn_txs,
            shared.clone(),
        )
        .await;
        snapshots.abort();
        if let Some(u) = units {
            u.abort();
        }
        // A clean shutdown leaves a snapshot, so the next start replays
        // little or nothing (unless SHUTDOWN took it, or said NOSAVE). The
        // resolver runs on meanwhile: a snapshot waits for the keys'
        // holds to go, and an orphaned transaction's go only when the
        // resolver finishes it (stopped first, a SIGTERM hung there:
        // `tests/cluster/shutdown.rs`).
        // What this node committed reaches the other regions before it
        // goes (see `Cluster::drain_streams`): the shards flush their
        // last epoch meanwhile.
        if let Some(c) = &shared.cluster {
            let epoch = Duration::from_millis(shared.config.merge_epoch_ms);
            let before = std::time::Instant::now() + 2 * epoch;
            tokio::time::sleep(2 * epoch).await;
            let left = c.drain_streams(before, DRAIN_LIMIT).await;
            if left > 0 {
                tracing::warn!(
                    "{left} gossip frames to other regions not acknowledged after {DRAIN_LIMIT:?}; they reach them by anti-entropy"
                );
            }
        }
        if shared.conns.shutdown.wants_snapshot() {
            let _ = shared.persistence.snapshot(&coord).await;
        }
        resolver.abort();
        served
    })?;
    // Dropping the connection senders ends every worker loop.
    drop(conn_txs);
    for t in threads {
        let _ = t.join();
    }
    tracing::info!("Elsa stopped cleanly");
    Ok(())
}

/// How long a clean stop waits for the other regions to acknowledge what
/// this node committed (see `Cluster::drain_streams`).
const DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// Replaces this process by a fresh run of the same program with the same
/// arguments and environment (same PID): as after `kill -9` and a restart,
/// recovery rebuilds the state from the log, leaving out what the region's
/// replicas never confirmed. (Undoing those writes in memory would need an
/// inverse for every lattice; a restart has one path, the tested one.)
fn restart_in_place(why: &str) -> ! {
    use std::os::unix::process::CommandExt;
    tracing::error!("restarting in place: {why}");
    let err = std::process::Command::new("/proc/self/exe")
        .args(std::env::args_os().skip(1))
        .exec();
    tracing::error!("cannot restart in place ({err}); exiting");
    std::process::exit(1)
}

/// Starts the replication service when the node has a peer port.
fn start_cluster(
    config: &Config,
    inboxes: &[mpsc::UnboundedSender<ShardMsg>],
    hlc: &Arc<Hlc>,
    hasher: KeyHasher,
    fresh: bool,
) -> Result<Option<Arc<elsa_cluster::Cluster>>, StartError> {
    let c = &config.cluster;
    if c.peer_port == 0 {
        return Ok(None);
    }
    let peer = std::net::SocketAddr::new(config.addr.ip(), c.peer_port);
    let auth = match &c.secret {
        Some(s) => Some(Arc::new(
            elsa_cluster::peer_auth::PeerAuth::new(s.bytes())
                .map_err(|e| StartError::Peer(peer.to_string(), std::io::Error::other(e)))?,
        )),
        None if peer.ip().is_loopback() => {
            tracing::info!(
                "peers on loopback without a cluster secret: plaintext links (development)"
            );
            None
        }
        None => {
            tracing::warn!(
                "peer-insecure: peers on {peer} are neither authenticated nor encrypted; \
                 anyone who reaches this port can read and write every key"
            );
            None
        }
    };
    let settings = elsa_cluster::Settings {
        node: config.node_id,
        region: c.region.clone(),
        client: config.addr,
        peer,
        shards: config.workers as u16,
        seeds: c.seeds.clone(),
        vnodes: c.vnodes,
        replication_factor: c.replication_factor,
        routing: c.routing,
        replication: c.replication,
        ownership: c.ownership,
        state_dir: Some(config.data_dir.clone()),
        merge_epoch: Duration::from_millis(config.merge_epoch_ms),
        anti_entropy: Duration::from_millis(c.anti_entropy_ms),
        wan_delay: Duration::from_millis(c.wan_delay_ms),
        wan_loss_percent: c.wan_loss,
        fault_injection: c.fault_injection,
        region_nodes: c.region_nodes,
        fresh,
        pubsub_across_regions: c.pubsub_across_regions,
        max_clock_drift: Duration::from_millis(c.max_clock_drift_ms),
        auth,
    };
    let cluster = elsa_cluster::Cluster::start(settings, inboxes.to_vec(), hlc.clone(), hasher)
        .map_err(|e| StartError::Peer(peer.to_string(), e))?;
    tracing::info!(
        "region {}: peers on {peer}, seeds [{}], replication {}, routing {}, {} replicas per region",
        c.region,
        c.seeds.join(", "),
        c.replication.name(),
        c.routing.name(),
        c.replication_factor
    );
    Ok(Some(cluster))
}

/// How long a transaction may hold keys before its coordinator is presumed
/// gone and the transaction is finished from its record.
const ORPHAN_AFTER: Duration = Duration::from_secs(3);

/// Every second, finds transactions holding keys on this node's shards
/// longer than [`ORPHAN_AFTER`] — their coordinator died or went silent,
/// or this node took over a dead participant's keys, which it held too —
/// and finishes each as its record says (`elsa_txn::record`).
async fn resolve_orphans(coord: Coordinator) {
    let in_flight: Rc<RefCell<std::collections::HashSet<(usize, u64)>>> = Rc::default();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        for s in 0..coord.node.shards() {
            let asked = coord
                .ask(coord.node.local(s), |reply| {
                    ShardMsg::Admin(AdminMsg::StaleHolds {
                        older_than: ORPHAN_AFTER,
                        reply,
                    })
                })
                .await;
            let Ok(stale) = asked else { continue };
            for (txn, keys) in stale {
                if !in_flight.borrow_mut().insert((s, txn)) {
                    continue;
                }
                let (coord, in_flight) = (coord.clone(), in_flight.clone());
                tokio::task::spawn_local(async move {
                    if let Err(e) = coord.resolve_orphan(coord.node.local(s), txn, keys).await {
                        tracing::warn!("transaction {txn:#x}: not resolved yet: {e}");
                    }
                    in_flight.borrow_mut().remove(&(s, txn));
                });
            }
        }
    }
}

/// Takes a snapshot every `snapshot-interval-sec` (CONFIG SET changes it,
/// or `save`; 0: never) if anything was logged since the last one.
async fn periodic_snapshots(coord: Coordinator, shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    let mut logged_at_last = 0;
    let mut last = std::time::Instant::now();
    loop {
        tick.tick().await;
        let secs = shared
            .runtime
            .snapshot_interval_sec
            .load(std::sync::atomic::Ordering::Relaxed);
        if secs == 0 || last.elapsed() < Duration::from_secs(secs) {
            continue;
        }
        last = std::time::Instant::now();
        let logged = logged_records(&coord).await;
        if logged != logged_at_last {
            logged_at_last = logged;
            let _ = shared.persistence.snapshot(&coord).await;
        }
    }
}

async fn logged_records(coord: &Coordinator) -> u64 {
    let mut total = 0;
    for s in 0..coord.node.shards() {
        if let Ok(stats) = coord
            .ask(coord.node.local(s), |r| ShardMsg::Admin(AdminMsg::Stats(r)))
            .await
        {
            total += stats.wal.map_or(0, |w| w.records);
        }
    }
    total
}

/// The client ports a node accepts on.
struct Listeners {
    /// `port` (None when 0).
    plain: Option<StdListener>,
    /// `tls-port` (None when 0).
    tls: Option<StdListener>,
    /// `worker-port-base + i`, for worker i (empty when off).
    workers: Vec<StdListener>,
}

/// Worker i's own client port, `worker-port-base + i`, for Redis Cluster
/// clients (`crate::cluster_cmd`), when the base is set.
fn worker_listeners(config: &Config) -> Result<Vec<StdListener>, StartError> {
    if config.worker_port_base == 0 {
        return Ok(Vec::new());
    }
    (0..config.workers)
        .map(|i| {
            let port = u16::try_from(i)
                .ok()
                .and_then(|i| config.worker_port_base.checked_add(i))
                .ok_or_else(|| {
                    StartError::Listen(
                        format!("worker-port-base {} + worker {i}", config.worker_port_base),
                        std::io::Error::other("past port 65535"),
                    )
                })?;
            listen(std::net::SocketAddr::new(config.addr.ip(), port))
        })
        .collect()
}

/// Accepts on a listener, or never when there is none.
async fn accept_on(
    listener: &Option<tokio::net::TcpListener>,
) -> std::io::Result<(tokio::net::TcpStream, std::net::SocketAddr)> {
    match listener {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}

async fn accept_loop(
    listeners: Listeners,
    conn_txs: &[mpsc::UnboundedSender<Incoming>],
    shared: Arc<Shared>,
) -> Result<(), StartError> {
    use tokio::signal::unix::{signal, SignalKind};
    let tokio_listener = |l: Option<StdListener>| {
        l.map(tokio::net::TcpListener::from_std)
            .transpose()
            .map_err(|e| StartError::Listen(shared.config.addr.to_string(), e))
    };
    // A worker port serves TLS only on a node whose plaintext port is off.
    let workers_tls = listeners.plain.is_none();
    let plain = tokio_listener(listeners.plain)?;
    let tls = tokio_listener(listeners.tls)?;
    // Each worker port accepts in its own task, handing its connections
    // here, where they are admitted like any other but dealt to that
    // worker alone.
    let (to_worker_tx, mut to_worker) = mpsc::unbounded_channel();
    let mut worker_accepts = Vec::new();
    for (index, l) in listeners.workers.into_iter().enumerate() {
        let l = tokio::net::TcpListener::from_std(l)
            .map_err(|e| StartError::Listen(format!("worker port of worker {index}"), e))?;
        let tx = to_worker_tx.clone();
        worker_accepts.push(tokio::task::spawn_local(async move {
            loop {
                if tx.send((l.accept().await, index)).is_err() {
                    break;
                }
            }
        }));
    }
    drop(to_worker_tx);
    let mut sigint = signal(SignalKind::interrupt()).map_err(StartError::Runtime)?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(StartError::Runtime)?;
    let mut next = 0usize;
    loop {
        tokio::select! {
            _ = sigint.recv() => { tracing::info!("SIGINT received, shutting down"); break; }
            _ = sigterm.recv() => { tracing::info!("SIGTERM received, shutting down"); break; }
            _ = shared.conns.shutdown.requested() => { tracing::info!("SHUTDOWN received, shutting down"); break; }
            accepted = async {
                tokio::select! {
                    a = accept_on(&plain) => (a, None, None),
                    a = accept_on(&tls) => (a, Some(shared.tls.current()), None),
                    Some((a, index)) = to_worker.recv() => {
                        (a, workers_tls.then(|| shared.tls.current()), Some(index))
                    }
                }
            } => {
                let (accepted, on_tls_port, worker) = accepted;
                // Never plaintext on the TLS port, whatever happened to
                // its configuration.
                let tls_config = match on_tls_port {
                    None => None,
                    Some(Some(config)) => Some(config),
                    Some(None) => continue,
                };
                let (stream, _) = match accepted {
                    Ok(s) => s,
                    Err(e) => {
                        // EMFILE and friends: log, breathe, keep serving.
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                shared.total_connections.fetch_add(1, Ordering::Relaxed);
                if shared.clients.load(Ordering::Relaxed) >= shared.runtime.maxclients.load(Ordering::Relaxed) {
                    shared.rejected.fetch_add(1, Ordering::Relaxed);
                    use tokio::io::AsyncWriteExt;
                    let mut stream = stream;
                    let _ = stream.write_all(b"-ERR max number of clients reached\r\n").await;
                    continue;
                }
                let Ok(std_stream) = stream.into_std() else { continue };
                // Counted here, not when the worker picks it up: a burst of
                // connects must not all pass the check above before any is
                // counted. The worker uncounts it when it ends.
                shared.clients.fetch_add(1, Ordering::Relaxed);
                // A worker port's own worker, else round-robin; a worker
                // that is gone has shut down.
                let to = worker.unwrap_or_else(|| {
                    next = next.wrapping_add(1);
                    next - 1
                });
                let own_port = worker.is_some();
                if conn_txs[to % conn_txs.len()].send(Incoming::Accepted(std_stream, tls_config, own_port)).is_err() {
                    shared.clients.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    }
    for task in worker_accepts {
        task.abort();
    }
    Ok(())
}

/// One worker thread: its shard's inbox, its merge-epoch timer, and the
/// connections dealt to it, all on one single-threaded runtime.
fn worker(
    index: usize,
    shard: Shard,
    mut inbox: mpsc::UnboundedReceiver<ShardMsg>,
    mut conns: mpsc::UnboundedReceiver<Incoming>,
    node: Arc<NodeContext>,
    shared: Arc<Shared>,
    queues: Queues,
) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("worker {index}: cannot build runtime: {e}");
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    let shard = Rc::new(RefCell::new(shard));
    let flush = Rc::new(Notify::new());
    let epoch = Duration::from_millis(shared.config.merge_epoch_ms);
    local.block_on(&rt, async move {
        let s = shard.clone();
        let f = flush.clone();
        // The shard's inbox. Group commit happens here: everything queued is
        // handled, then one log flush answers all the commits it made durable.
        tokio::task::spawn_local(async move {
            loop {
                tokio::select! {
                    msg = inbox.recv() => match msg {
                        Some(msg) => s.borrow_mut().handle_from_inbox(msg),
                        None => break,
                    },
                    _ = f.notified() => {}
                }
                let mut handled = 0;
                while handled < 1024 {
                    match inbox.try_recv() {
                        Ok(msg) => s.borrow_mut().handle_from_inbox(msg),
                        Err(_) => break,
                    }
                    handled += 1;
                }
                if s.borrow().wal_pending() {
                    // Let this thread's other ready tasks (connections with
                    // requests in hand) run first, so their commits join
                    // this flush: bigger groups, fewer fsyncs.
                    tokio::task::yield_now().await;
                    while let Ok(msg) = inbox.try_recv() {
                        s.borrow_mut().handle(msg);
                    }
                }
                s.borrow_mut().flush_wal();
            }
        });
        let s = shard.clone();
        let cluster = shared.cluster.clone();
        let ttl_ms = shared.config.cluster.tombstone_ttl_sec * 1000;
        let open_reads = node.open_reads.clone();
        let hlc = node.hlc.clone();
        let node_ctx = node.clone();
        tokio::task::spawn_local(async move {
            let mut tick = tokio::time::interval(epoch);
            let per_second = (1000 / epoch.as_millis().max(1)).max(1) as usize;
            let gc_slice = elsa_shard::table::SEGMENTS.div_ceil(per_second);
            loop {
                tick.tick().await;
                let mut shard = s.borrow_mut();
                // Over maxmemory, a shard that sees no commands evicts too
                // (`crate::memory`); its deletes go out with this epoch.
                shard.evict_on_tick(elsa_shard::unix_ms());
                // What the epoch ships must be in the log first: the worker
                // yields between applying a batch and flushing its log (so
                // more commits join the group), and this task may run in
                // that gap. Shipped before it, a write lost to kill -9
                // here lived on in other regions and came back as theirs,
                // below the stream read horizon its followers had passed
                // (`tests/nemesis_streams.rs`, seed 12: an entry of region
                // a skipped by region a's follower).
                if shard.wal_pending() {
                    shard.flush_wal();
                }
                // The epoch's lattices go to the key's other replicas; with
                // no peers there is no one to tell.
                let gossip = shard.flush_gossip();
                if let Some(c) = &cluster {
                    c.ship_gossip(index, gossip);
                }
                shard.tick_wal();
                shard.expire_parked(elsa_txn::router::RETRY_FOR);
                shard.expire_waiting(elsa_shard::PREPARE_WAIT);
                shard.settle_parts(elsa_shard::PART_WAIT, node_ctx.installs_blocked_ago());
                // A sweep of the whole table each second, a slice per
                // epoch (see `Shard::collect_garbage_step`).
                let now_ms = elsa_shard::unix_ms();
                let horizon = match &cluster {
                    // Only tombstones every replica has confirmed, and
                    // old enough for any transaction on any node.
                    Some(c) => ((now_ms.saturating_sub(ttl_ms)) << 16).min(c.tombstone_horizon()),
                    // Alone: those no open transaction or WATCH here may
                    // still validate against.
                    None => open_reads.oldest().unwrap_or_else(|| hlc.peek()),
                };
                shard.collect_garbage_step(now_ms, horizon, gc_slice);
                shard.prune_history();
            }
        });
        let local_shard = LocalShard {
            index,
            shard: shard.clone(),
            flush,
        };
        let coord = Coordinator::new(node, Some(local_shard));
        while let Some(incoming) = conns.recv().await {
            let (std_stream, tls, own_port) = match incoming {
                Incoming::Accepted(stream, tls, own_port) => (stream, tls, own_port),
                Incoming::Moved(parcel) => {
                    let (coord, shared, queues) = (coord.clone(), shared.clone(), queues.clone());
                    tokio::task::spawn_local(async move {
                        if let Some(conn) = Conn::from_parcel(*parcel, coord, shared.clone()) {
                            serve_counted(conn, &shared, &queues).await;
                        } else {
                            shared.clients.fetch_sub(1, Ordering::Relaxed);
                        }
                    });
                    continue;
                }
            };
            let _ = std_stream.set_nonblocking(true);
            let Ok(stream) = tokio::net::TcpStream::from_std(std_stream) else {
                shared.clients.fetch_sub(1, Ordering::Relaxed);
                continue;
            };
            let coord = coord.clone();
            let shared = shared.clone();
            let queues = queues.clone();
            // (Counted by the acceptor.)
            tokio::task::spawn_local(async move {
                let stream = match tls {
                    None => Ok(crate::tls::ClientStream::Plain(stream)),
                    // The handshake runs here, in the connection's own
                    // task: a slow or silent client holds nothing else up.
                    Some(config) => {
                        let peer = stream
                            .peer_addr()
                            .map(|a| a.to_string())
                            .unwrap_or_default();
                        crate::tls::accept(stream, config).await.inspect_err(|e| {
                            tracing::info!(addr = %peer, "TLS handshake failed: {e}");
                        })
                    }
                };
                match stream {
                    Ok(stream) => {
                        let mut conn = Conn::new(stream, coord, shared.clone());
                        if own_port {
                            // A cluster client's choice: the slots it sends
                            // are this worker's.
                            conn.stay();
                        }
                        serve_counted(conn, &shared, &queues).await
                    }
                    Err(_) => {
                        shared.clients.fetch_sub(1, Ordering::Relaxed);
                    }
                }
            });
        }
        shard.borrow_mut().close_wal();
    });
}

/// Serves a connection until it ends, then uncounts it; or until it moves
/// to another worker, which counts it from then on (uncounted here if that
/// worker is gone: the node is shutting down).
async fn serve_counted(conn: Conn, shared: &Shared, queues: &Queues) {
    let Some(parcel) = conn.serve().await else {
        shared.clients.fetch_sub(1, Ordering::Relaxed);
        return;
    };
    let to = parcel.to;
    let sender = queues
        .get()
        .and_then(|w| w.get(to))
        .and_then(mpsc::WeakUnboundedSender::upgrade);
    if sender.is_none_or(|s| s.send(Incoming::Moved(Box::new(parcel))).is_err()) {
        shared.clients.fetch_sub(1, Ordering::Relaxed);
    } else {
        shared.clients_moved.fetch_add(1, Ordering::Relaxed);
    }
}
