//! Serving: one listening socket (never shared with another process: a port in use is an error), accepted
//! from by one single-threaded runtime per core, so a page answer never hops between threads.
//!
//! Every connection is served by hyper with the limits a hostile client needs: a complete request head within
//! [`ConnLimits::header_timeout`] (which also closes idle kept-alive connections), a write that makes no
//! progress for [`ConnLimits::write_timeout`] closes the connection (a client that stopped reading), at most
//! [`ConnLimits::max_connections`] served at once, and a shutdown that lets open requests finish for
//! [`ConnLimits::shutdown_grace`] and then closes what is left.
//!
//! Stopping is a drain: on SIGTERM or Ctrl-C the server is told at once (it fails its readiness probe), keeps
//! accepting for [`ConnLimits::drain_delay`] while load balancers take it out of rotation, then stops accepting
//! and gives open requests — runs among them — the grace period. A second signal ends the delay early. The request body's deadline and the other
//! per-request limits are `tower-http` layers on the router (see `server::router`).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::mpsc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tower::ServiceExt;

use super::config::Config;
use crate::wiki::error::{Result, WikiError};

/// File descriptors kept free of connections for the server's own files, pipes and workers.
const RESERVED_FDS: u64 = 64;

/// Per-connection limits of a server.
#[derive(Debug, Clone)]
pub struct ConnLimits {
    /// Time to send a complete request head, from the connection's start or the previous answer's end.
    pub header_timeout: Duration,
    /// Time a write to the client may make no progress.
    pub write_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
    /// Time open requests get to finish once the server is asked to stop.
    pub shutdown_grace: Duration,
    /// Time the server keeps accepting after the stop signal, answering readiness probes with 503.
    pub drain_delay: Duration,
}

impl ConnLimits {
    /// The limits `config` sets, with the connection limit lowered to fit the open-file limit.
    pub fn from_config(config: &Config) -> ConnLimits {
        ConnLimits {
            header_timeout: Duration::from_millis(config.header_timeout_ms),
            write_timeout: Duration::from_millis(config.write_timeout_ms),
            max_connections: config.max_connections.min(fd_budget()).max(1),
            shutdown_grace: Duration::from_millis(config.shutdown_grace_ms),
            drain_delay: Duration::from_millis(config.drain_delay_ms),
        }
    }
}

/// Connections the open-file limit leaves room for.
fn fd_budget() -> usize {
    #[cfg(unix)]
    {
        // SAFETY: getrlimit only writes the struct it is given.
        let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0
            && limit.rlim_cur != libc::RLIM_INFINITY
        {
            return limit.rlim_cur.saturating_sub(RESERVED_FDS).max(1) as usize;
        }
    }
    usize::MAX
}

/// Binds `addr` for listening. Fails with a clear message when another process listens there: the socket is
/// not shared (no `SO_REUSEPORT`).
pub fn bind(addr: SocketAddr) -> Result<std::net::TcpListener> {
    // std's listener sets SO_REUSEADDR on Unix (a restart while old connections linger in TIME_WAIT), never
    // SO_REUSEPORT: a second server on the same port fails here.
    std::net::TcpListener::bind(addr).map_err(|e| {
        if e.kind() == io::ErrorKind::AddrInUse {
            WikiError::Site(format!(
                "{addr} is already in use (another server listens there); choose another address with --bind"
            ))
        } else {
            WikiError::Site(format!("binding {addr}: {e}"))
        }
    })
}

/// Serves `app` on `listener` on the current runtime until `stop` resolves, then shuts down within the grace
/// period. `connections` bounds the connections of every loop sharing it.
pub async fn serve_listener(
    listener: TcpListener,
    app: Router,
    limits: ConnLimits,
    connections: Arc<Semaphore>,
    stop: impl Future<Output = ()>,
) {
    let (closing_tx, closing) = watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    tokio::pin!(stop);
    loop {
        while tasks.try_join_next().is_some() {}
        let permit = tokio::select! {
            permit = Arc::clone(&connections).acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = &mut stop => break,
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = &mut stop => break,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors or a connection reset before it was taken: wait a moment, go on.
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let limits = limits.clone();
        let mut closing = closing.clone();
        tasks.spawn(async move {
            let _permit = permit;
            let io = TokioIo::new(WriteGuard::new(stream, limits.write_timeout));
            let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
                let mut request = request.map(Body::new);
                // The peer address is what the playground's rate limit counts by.
                request.extensions_mut().insert(ConnectInfo(peer));
                app.clone().oneshot(request)
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .max_buf_size(64 * 1024);
            let connection = builder.serve_connection(io, service);
            tokio::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => return,
                _ = closing.changed() => {}
            }
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        });
    }
    drop(listener);
    let _ = closing_tx.send(true);
    let drained = tokio::time::timeout(limits.shutdown_grace, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            open = tasks.len(),
            "connections still open after the shutdown grace period; closing them"
        );
        tasks.shutdown().await;
    }
}

/// A TCP stream whose writes fail once they have made no progress for `timeout`: hyper then drops the
/// connection, and with it the answer being sent (an event stream's run is cancelled).
struct WriteGuard {
    stream: TcpStream,
    timeout: Duration,
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl WriteGuard {
    fn new(stream: TcpStream, timeout: Duration) -> WriteGuard {
        WriteGuard {
            stream,
            timeout,
            stalled: None,
        }
    }

    /// Called when a write is pending: starts the stall clock, or fails the write when it ran out.
    fn check_stall(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let timeout = self.timeout;
        let sleep = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client read nothing within the write timeout",
            )),
            Poll::Pending => Poll::Pending,
        }
    }

    fn progressed<T>(
        &mut self,
        poll: Poll<io::Result<T>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<T>> {
        match poll {
            Poll::Pending => match self.check_stall(cx) {
                Poll::Ready(e) => Poll::Ready(Err(e)),
                Poll::Pending => Poll::Pending,
            },
            ready => {
                self.stalled = None;
                ready
            }
        }
    }
}

impl AsyncRead for WriteGuard {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for WriteGuard {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.progressed(poll, cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.progressed(poll, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.stream).poll_flush(cx);
        self.progressed(poll, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Runs one accept loop on the current thread until `stop` changes; reports readiness through `ready`.
fn run_thread(
    listener: std::net::TcpListener,
    app: Router,
    limits: ConnLimits,
    connections: Arc<Semaphore>,
    ready: mpsc::Sender<Result<()>>,
    mut stop: watch::Receiver<bool>,
) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| WikiError::Site(format!("starting a runtime: {e}")))?;
    runtime.block_on(async move {
        let listener = match listener
            .set_nonblocking(true)
            .and_then(|()| TcpListener::from_std(listener))
        {
            Ok(l) => l,
            Err(e) => {
                let _ = ready.send(Err(WikiError::Site(format!("listening: {e}"))));
                return;
            }
        };
        let _ = ready.send(Ok(()));
        serve_listener(listener, app, limits, connections, async move {
            let _ = stop.changed().await;
        })
        .await;
    });
    Ok(())
}

/// Serves `app` on `addr` with `threads` accept loops over one socket until Ctrl-C or SIGTERM; `on_ready`
/// gets the bound address once every loop listens, `on_drain` is called at the signal (before the drain
/// delay). Returns when all loops have stopped.
pub fn serve_on_threads(
    addr: SocketAddr,
    threads: usize,
    app: Router,
    limits: ConnLimits,
    on_ready: impl FnOnce(SocketAddr),
    on_drain: impl FnOnce(),
) -> Result<()> {
    let threads = threads.max(1);
    let listener = bind(addr)?;
    let bound = listener
        .local_addr()
        .map_err(|e| WikiError::Site(format!("binding {addr}: {e}")))?;
    let connections = Arc::new(Semaphore::new(limits.max_connections));
    let (tx, rx) = mpsc::channel();
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut handles = Vec::with_capacity(threads);
    for i in 0..threads {
        let listener = listener
            .try_clone()
            .map_err(|e| WikiError::Site(format!("sharing the listening socket: {e}")))?;
        let (app, limits, connections, tx, stop) = (
            app.clone(),
            limits.clone(),
            Arc::clone(&connections),
            tx.clone(),
            stop_rx.clone(),
        );
        handles.push(
            std::thread::Builder::new()
                .name(format!("wiki-http-{i}"))
                .spawn(move || run_thread(listener, app, limits, connections, tx, stop))
                .map_err(|e| WikiError::Site(format!("starting a server thread: {e}")))?,
        );
    }
    drop(listener);
    for _ in 0..threads {
        rx.recv()
            .map_err(|_| WikiError::Site("a server thread stopped".into()))??;
    }
    on_ready(bound);
    // The stop signal is awaited here, once, and passed on to every loop so each finishes its open requests.
    let signals = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| WikiError::Site(format!("starting a runtime: {e}")))?;
    signals.block_on(stop_signal());
    on_drain();
    if !limits.drain_delay.is_zero() {
        tracing::info!(
            delay_ms = limits.drain_delay.as_millis() as u64,
            "draining: still accepting while load balancers take this server out"
        );
        signals.block_on(async {
            tokio::select! {
                _ = tokio::time::sleep(limits.drain_delay) => {}
                _ = stop_signal() => {}
            }
        });
    }
    tracing::info!(
        grace_ms = limits.shutdown_grace.as_millis() as u64,
        "stopped accepting; open requests get the grace period"
    );
    let _ = stop_tx.send(true);
    let mut result = Ok(());
    for handle in handles {
        match handle.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => result = Err(e),
            Err(_) => result = Err(WikiError::Site("a server thread panicked".into())),
        }
    }
    result
}

/// Resolves on Ctrl-C, or on SIGTERM where there is one (how service managers stop a server).
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// The number of accept loops: one per available core.
pub fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}
