//! The metrics port (`metrics-port`, 0 = off): HTTP/1.1 on the node's bind
//! address serving `GET /metrics` (Prometheus, [`metrics`]), `GET /` (the
//! status page, `status.html`, embedded) and `GET /status.json`
//! ([`status`]). Unauthenticated and read-only: it shows figures, never
//! keys or values, and should stay on a private address.
//!
//! It runs on its own thread (`elsa-http`) with a current-thread runtime,
//! never on a shard worker: a scrape asks every shard for its counters by
//! message (as INFO does) and reads the replication service's view, so
//! scrapes cost the shards one message each and nothing on the command
//! path changes. hyper 1.x serves the connections: a maintained HTTP/1
//! implementation with header-read timeouts and size limits, where the
//! three routes need no framework on top.

mod metrics;
mod status;
mod view;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, Ipv6Addr, TcpListener as StdListener};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};

use crate::state::{Shared, StartError};

/// The status page: plain HTML, CSS and JS, no build step, no CDN.
const STATUS_HTML: &str = include_str!("status.html");

/// Connections served at once; more are closed at accept (a scraper and a
/// few browsers need a handful).
const MAX_CONNECTIONS: usize = 64;

/// Connections one client (an IPv4 address, or an IPv6 /64) may hold at
/// once; more are closed at accept, so no single client can take every
/// slot. A browser's status page uses one or two, a scraper one.
const MAX_PER_CLIENT: usize = 8;

/// How long a client has to send a whole request head, counted from the
/// connection (or from the end of the previous answer, so it is also the
/// keep-alive idle timeout). Real clients send theirs in one packet.
const HEAD_TIMEOUT: Duration = Duration::from_secs(3);

/// Longest request head (request line and headers); longer ones get 431.
const MAX_HEAD: usize = 64 * 1024;

/// After this long a connection is asked to close once its current answer
/// is sent (a browser polling the status page simply opens a new one)...
const MAX_LIFETIME: Duration = Duration::from_secs(60);

/// ...and this long after that it is closed regardless: a client that
/// pipelines requests but never reads the answers holds its slot no longer.
const CLOSE_GRACE: Duration = Duration::from_secs(10);

/// Binds the metrics port when one is set: at startup, so a taken port
/// stops the node with a clear error rather than a silent lack of metrics.
pub(crate) fn bind(config: &crate::config::Config) -> Result<Option<StdListener>, StartError> {
    if config.metrics_port == 0 {
        return Ok(None);
    }
    let addr = std::net::SocketAddr::new(config.addr.ip(), config.metrics_port);
    let err = |e| StartError::Listen(addr.to_string(), e);
    // SO_REUSEADDR as the client ports: a node that restarts in place
    // (`node::restart_in_place`) must bind again while its old scrape
    // connections sit in TIME_WAIT.
    let sock = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )
    .map_err(err)?;
    sock.set_reuse_address(true).map_err(err)?;
    sock.bind(&addr.into()).map_err(err)?;
    sock.listen(128).map_err(err)?;
    sock.set_nonblocking(true).map_err(err)?;
    Ok(Some(sock.into()))
}

/// Serves `listener` on the `elsa-http` thread for the life of the process.
pub(crate) fn start(
    listener: StdListener,
    shared: Arc<Shared>,
    node: Arc<elsa_txn::NodeContext>,
) -> Result<(), StartError> {
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    std::thread::Builder::new()
        .name("elsa-http".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => return tracing::error!("metrics port: cannot build runtime: {e}"),
            };
            let local = tokio::task::LocalSet::new();
            local.block_on(&rt, serve(listener, shared, node));
        })
        .map_err(StartError::Thread)?;
    tracing::info!("metrics and status page on http://{addr}/");
    Ok(())
}

/// What every request handler needs.
struct Ctx {
    shared: Arc<Shared>,
    coord: elsa_txn::Coordinator,
}

async fn serve(listener: StdListener, shared: Arc<Shared>, node: Arc<elsa_txn::NodeContext>) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => return tracing::error!("metrics port: {e}"),
    };
    // The coordinator holds no shard of its own here: every shard is
    // asked by message, as from the acceptor thread.
    let ctx = Rc::new(Ctx {
        shared,
        coord: elsa_txn::Coordinator::new(node, None),
    });
    let slots = Rc::new(Slots::default());
    let last_warn: Cell<Option<Instant>> = Cell::new(None);
    loop {
        let (stream, from) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!("metrics port: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(slot) = Slots::take(&slots, client_of(from.ip())) else {
            // Dropped: closed at once. One line per 10 s at most.
            if last_warn
                .get()
                .is_none_or(|t| t.elapsed() >= Duration::from_secs(10))
            {
                last_warn.set(Some(Instant::now()));
                tracing::warn!(
                    "metrics port: closed a connection from {}: {} open, {} from that client \
                     (limits {MAX_CONNECTIONS}, {MAX_PER_CLIENT} per client)",
                    from.ip(),
                    slots.total.get(),
                    slots.of(client_of(from.ip()))
                );
            }
            continue;
        };
        let ctx = ctx.clone();
        tokio::task::spawn_local(async move {
            let _slot = slot;
            let service = hyper::service::service_fn(|req| {
                let ctx = ctx.clone();
                async move { Ok::<_, Infallible>(route(&ctx, req).await) }
            });
            // Malformed requests get hyper's 400 and a closed connection;
            // a head over MAX_HEAD gets 431; a client that does not finish
            // its head in HEAD_TIMEOUT is dropped.
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .max_header_size(MAX_HEAD)
                .max_buf_size(MAX_HEAD)
                .serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = tokio::time::sleep(MAX_LIFETIME) => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(CLOSE_GRACE, conn).await;
                }
            }
        });
    }
}

/// Who counts as one client for [`MAX_PER_CLIENT`]: an IPv4 address
/// (IPv4-mapped IPv6 ones included), or an IPv6 address's /64 — what one
/// host is usually given, so a host cannot multiply itself by its
/// addresses.
fn client_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

/// Connections open, in all and per client.
#[derive(Default)]
struct Slots {
    total: Cell<usize>,
    per_client: RefCell<HashMap<IpAddr, usize>>,
}

impl Slots {
    fn of(&self, client: IpAddr) -> usize {
        self.per_client.borrow().get(&client).copied().unwrap_or(0)
    }

    /// A slot for `client`, or None when the port or the client is full.
    fn take(slots: &Rc<Slots>, client: IpAddr) -> Option<Slot> {
        if slots.total.get() >= MAX_CONNECTIONS {
            return None;
        }
        let mut per = slots.per_client.borrow_mut();
        let n = per.entry(client).or_insert(0);
        if *n >= MAX_PER_CLIENT {
            return None;
        }
        *n += 1;
        slots.total.set(slots.total.get() + 1);
        Some(Slot {
            slots: slots.clone(),
            client,
        })
    }
}

/// One connection's place in [`Slots`], given back when it ends.
struct Slot {
    slots: Rc<Slots>,
    client: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let s = &self.slots;
        s.total.set(s.total.get().saturating_sub(1));
        let mut per = s.per_client.borrow_mut();
        if let Some(n) = per.get_mut(&self.client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                per.remove(&self.client);
            }
        }
    }
}

fn respond(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

async fn route(ctx: &Ctx, req: Request<Incoming>) -> Response<Full<Bytes>> {
    const TEXT: &str = "text/plain; charset=utf-8";
    let path = req.uri().path();
    if !matches!(path, "/" | "/index.html" | "/metrics" | "/status.json") {
        return respond(StatusCode::NOT_FOUND, TEXT, "not found\n");
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = respond(StatusCode::METHOD_NOT_ALLOWED, TEXT, "method not allowed\n");
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    match path {
        "/metrics" => match view::read(&ctx.shared, &ctx.coord).await {
            Ok(v) => respond(StatusCode::OK, metrics::CONTENT_TYPE, metrics::render(v)),
            Err(e) => respond(StatusCode::SERVICE_UNAVAILABLE, TEXT, format!("{e}\n")),
        },
        "/status.json" => match view::read(&ctx.shared, &ctx.coord).await {
            Ok(v) => respond(
                StatusCode::OK,
                "application/json",
                status::render(&v).to_string(),
            ),
            Err(e) => respond(StatusCode::SERVICE_UNAVAILABLE, TEXT, format!("{e}\n")),
        },
        _ => respond(StatusCode::OK, "text/html; charset=utf-8", STATUS_HTML),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_is_an_ipv4_address_or_an_ipv6_64() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(client_of(ip("10.1.2.3")), ip("10.1.2.3"));
        assert_eq!(client_of(ip("::ffff:10.1.2.3")), ip("10.1.2.3"));
        assert_eq!(client_of(ip("2001:db8:1:2:aaaa::1")), ip("2001:db8:1:2::"));
        assert_eq!(
            client_of(ip("2001:db8:1:2:ffff::9")),
            client_of(ip("2001:db8:1:2::1"))
        );
        assert_ne!(
            client_of(ip("2001:db8:1:3::1")),
            client_of(ip("2001:db8:1:2::1"))
        );
    }

    #[test]
    fn slots_are_shared_out_per_client_and_given_back() {
        let slots = Rc::new(Slots::default());
        let (a, b) = (
            client_of([10, 0, 0, 1].into()),
            client_of([10, 0, 0, 2].into()),
        );
        let held: Vec<Slot> = (0..MAX_PER_CLIENT)
            .map(|_| Slots::take(&slots, a).expect("within a's share"))
            .collect();
        assert!(Slots::take(&slots, a).is_none(), "a is at its share");
        let other = Slots::take(&slots, b).expect("b is not held up by a");
        drop(held);
        assert_eq!(slots.of(a), 0);
        assert_eq!(slots.total.get(), 1);
        drop(other);
        assert!(slots.per_client.borrow().is_empty());
        // The port's limit holds over all clients.
        let all: Vec<Slot> = (0..MAX_CONNECTIONS)
            .map(|i| {
                let c = IpAddr::from([10, 0, (i / 200) as u8, (i % 200) as u8]);
                Slots::take(&slots, c).expect("room")
            })
            .collect();
        assert!(Slots::take(&slots, IpAddr::from([10, 9, 9, 9])).is_none());
        drop(all);
        assert_eq!(slots.total.get(), 0);
    }
}
