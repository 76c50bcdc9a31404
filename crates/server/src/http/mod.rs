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

use std::cell::Cell;
use std::convert::Infallible;
use std::net::TcpListener as StdListener;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};

use crate::node::{Shared, StartError};

/// The status page: plain HTML, CSS and JS, no build step, no CDN.
const STATUS_HTML: &str = include_str!("status.html");

/// Connections served at once; more are closed at accept (a scraper and a
/// few browsers need a handful).
const MAX_CONNECTIONS: usize = 64;

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
    let open = Rc::new(Cell::new(0usize));
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                tracing::warn!("metrics port: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if open.get() >= MAX_CONNECTIONS {
            continue; // dropped: closed at once
        }
        open.set(open.get() + 1);
        let (ctx, open) = (ctx.clone(), open.clone());
        tokio::task::spawn_local(async move {
            let service = hyper::service::service_fn(|req| {
                let ctx = ctx.clone();
                async move { Ok::<_, Infallible>(route(&ctx, req).await) }
            });
            // Malformed requests get hyper's 400 and a closed connection;
            // a client that never finishes its headers is dropped.
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .max_buf_size(64 * 1024)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            open.set(open.get() - 1);
        });
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
