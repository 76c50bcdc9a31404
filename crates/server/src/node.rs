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
use elsa_shard::{KeyHasher, Shard, ShardMsg};
use elsa_txn::{Coordinator, NodeContext};
use tokio::sync::mpsc;

use crate::config::Config;
use crate::conn::Conn;

/// Tombstones older than this are collected (no open transaction or WATCH
/// is expected to still need them for validation).
const TOMBSTONE_TTL_MS: u64 = 10 * 60 * 1000;

/// State every connection of the node shares.
pub struct Shared {
    /// The resolved configuration.
    pub config: Config,
    /// When the node started.
    pub started: Instant,
    /// Connected clients now.
    pub clients: AtomicUsize,
    /// Connections accepted since start.
    pub total_connections: AtomicU64,
    /// Commands processed since start.
    pub total_commands: AtomicU64,
    /// Connections refused by `maxclients`.
    pub rejected: AtomicU64,
    /// Next CLIENT ID.
    pub next_client_id: AtomicU64,
}

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("cannot create data dir {0}: {1}")]
    DataDir(String, std::io::Error),
    #[error("cannot listen on {0}: {1}")]
    Listen(String, std::io::Error),
    #[error("cannot start worker thread: {0}")]
    Thread(std::io::Error),
    #[error("runtime: {0}")]
    Runtime(std::io::Error),
}

fn listen(config: &Config) -> Result<StdListener, StartError> {
    let err = |e| StartError::Listen(config.addr.to_string(), e);
    let domain = socket2::Domain::for_address(config.addr);
    let sock = socket2::Socket::new(domain, socket2::Type::STREAM, None).map_err(err)?;
    sock.set_reuse_address(true).map_err(err)?;
    sock.bind(&config.addr.into()).map_err(err)?;
    sock.listen(511).map_err(err)?;
    sock.set_nonblocking(true).map_err(err)?;
    Ok(sock.into())
}

/// Runs a node until SIGINT or SIGTERM.
pub fn run(config: Config) -> Result<(), StartError> {
    std::fs::create_dir_all(&config.data_dir)
        .map_err(|e| StartError::DataDir(config.data_dir.display().to_string(), e))?;
    let listener = listen(&config)?;
    let workers = config.workers;
    let hlc = Arc::new(Hlc::default());
    let hasher = KeyHasher::default();
    let mut inboxes = Vec::with_capacity(workers);
    let mut inbox_rxs = Vec::with_capacity(workers);
    for _ in 0..workers {
        let (tx, rx) = mpsc::unbounded_channel::<ShardMsg>();
        inboxes.push(tx);
        inbox_rxs.push(rx);
    }
    let node = Arc::new(NodeContext::new(
        config.node_id,
        hlc.clone(),
        hasher,
        inboxes,
    ));
    let shared = Arc::new(Shared {
        config: config.clone(),
        started: Instant::now(),
        clients: AtomicUsize::new(0),
        total_connections: AtomicU64::new(0),
        total_commands: AtomicU64::new(0),
        rejected: AtomicU64::new(0),
        next_client_id: AtomicU64::new(1),
    });

    let mut conn_txs = Vec::with_capacity(workers);
    let mut threads = Vec::with_capacity(workers);
    for (index, inbox) in inbox_rxs.into_iter().enumerate() {
        let (conn_tx, conn_rx) = mpsc::unbounded_channel::<std::net::TcpStream>();
        conn_txs.push(conn_tx);
        let node = node.clone();
        let shared = shared.clone();
        let hlc = hlc.clone();
        let t = std::thread::Builder::new()
            .name(format!("elsa-shard-{index}"))
            .spawn(move || {
                let shard = Shard::new(index, node.node_id, hasher, hlc);
                worker(index, shard, inbox, conn_rx, node, shared)
            })
            .map_err(StartError::Thread)?;
        threads.push(t);
    }

    tracing::info!(
        "Elsa {} ready: listening on {}, {} workers (one shard each), data dir {}, node id {}, default isolation {}",
        env!("CARGO_PKG_VERSION"),
        config.addr,
        workers,
        config.data_dir.display(),
        config.node_id,
        config.default_isolation.name()
    );

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(StartError::Runtime)?;
    rt.block_on(accept_loop(listener, conn_txs, shared))?;
    // Dropping the connection senders ends every worker loop.
    for t in threads {
        let _ = t.join();
    }
    tracing::info!("Elsa stopped cleanly");
    Ok(())
}

async fn accept_loop(
    listener: StdListener,
    conn_txs: Vec<mpsc::UnboundedSender<std::net::TcpStream>>,
    shared: Arc<Shared>,
) -> Result<(), StartError> {
    use tokio::signal::unix::{signal, SignalKind};
    let listener = tokio::net::TcpListener::from_std(listener)
        .map_err(|e| StartError::Listen(shared.config.addr.to_string(), e))?;
    let mut sigint = signal(SignalKind::interrupt()).map_err(StartError::Runtime)?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(StartError::Runtime)?;
    let mut next = 0usize;
    loop {
        tokio::select! {
            _ = sigint.recv() => { tracing::info!("SIGINT received, shutting down"); break; }
            _ = sigterm.recv() => { tracing::info!("SIGTERM received, shutting down"); break; }
            accepted = listener.accept() => {
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
                if shared.clients.load(Ordering::Relaxed) >= shared.config.maxclients {
                    shared.rejected.fetch_add(1, Ordering::Relaxed);
                    use tokio::io::AsyncWriteExt;
                    let mut stream = stream;
                    let _ = stream.write_all(b"-ERR max number of clients reached\r\n").await;
                    continue;
                }
                let Ok(std_stream) = stream.into_std() else { continue };
                // Round-robin; a worker that is gone has shut down.
                let _ = conn_txs[next % conn_txs.len()].send(std_stream);
                next = next.wrapping_add(1);
            }
        }
    }
    Ok(())
}

/// One worker thread: its shard's inbox, its merge-epoch timer, and the
/// connections dealt to it, all on one single-threaded runtime.
fn worker(
    index: usize,
    shard: Shard,
    mut inbox: mpsc::UnboundedReceiver<ShardMsg>,
    mut conns: mpsc::UnboundedReceiver<std::net::TcpStream>,
    node: Arc<NodeContext>,
    shared: Arc<Shared>,
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
    let epoch = Duration::from_millis(shared.config.merge_epoch_ms);
    local.block_on(&rt, async move {
        let s = shard.clone();
        tokio::task::spawn_local(async move {
            while let Some(msg) = inbox.recv().await {
                s.borrow_mut().handle(msg);
            }
        });
        let s = shard.clone();
        let hlc = node.hlc.clone();
        tokio::task::spawn_local(async move {
            let mut tick = tokio::time::interval(epoch);
            let mut last_gc = Instant::now();
            loop {
                tick.tick().await;
                // No peers yet: the epoch's lattices are flushed and dropped
                // (replication will ship them from here).
                let _ = s.borrow_mut().flush_gossip();
                if last_gc.elapsed() >= Duration::from_secs(1) {
                    last_gc = Instant::now();
                    let now_ms = elsa_shard::unix_ms();
                    let horizon = (now_ms.saturating_sub(TOMBSTONE_TTL_MS)) << 16;
                    let _ = hlc.peek();
                    s.borrow_mut().collect_garbage(now_ms, horizon);
                }
            }
        });
        let coord = Coordinator::new(node, Some((index, shard)));
        while let Some(std_stream) = conns.recv().await {
            let _ = std_stream.set_nonblocking(true);
            let Ok(stream) = tokio::net::TcpStream::from_std(std_stream) else {
                continue;
            };
            let conn = Conn::new(stream, coord.clone(), shared.clone());
            let shared = shared.clone();
            shared.clients.fetch_add(1, Ordering::Relaxed);
            tokio::task::spawn_local(async move {
                conn.serve().await;
                shared.clients.fetch_sub(1, Ordering::Relaxed);
            });
        }
    });
}
