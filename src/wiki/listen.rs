//! Serving on every core: one single-threaded runtime per core, each accepting on its own socket bound with
//! `SO_REUSEPORT`, so the kernel spreads connections over the threads and a request never hops between them.
//! Page answers are a lookup and a copy; cross-thread wake-ups would cost more than the answer itself.

use std::net::SocketAddr;
use std::sync::mpsc;

use axum::Router;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::watch;

use crate::{Error, Result};

/// Pending connections each socket queues.
const BACKLOG: u32 = 1024;

fn bind(addr: SocketAddr, shared: bool) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    #[cfg(unix)]
    socket.set_reuseport(shared)?;
    #[cfg(not(unix))]
    let _ = shared;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// Runs one accept loop on the current thread until `stop` changes; reports the bound address through `ready`.
fn run_thread(
    addr: SocketAddr,
    shared: bool,
    app: Router,
    ready: mpsc::Sender<Result<SocketAddr>>,
    mut stop: watch::Receiver<bool>,
) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Wiki(format!("starting a runtime: {e}")))?;
    runtime.block_on(async move {
        let listener = match bind(addr, shared) {
            Ok(l) => l,
            Err(e) => {
                let _ = ready.send(Err(Error::Wiki(format!("binding {addr}: {e}"))));
                return Ok(());
            }
        };
        let _ = ready.send(
            listener
                .local_addr()
                .map_err(|e| Error::Wiki(e.to_string())),
        );
        // The peer address is what the playground's rate limit counts by.
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(async move {
            let _ = stop.changed().await;
        })
        .await
        .map_err(|e| Error::Wiki(format!("server: {e}")))
    })
}

/// Serves `app` on `addr` with `threads` accept loops (one when the platform cannot share a port) until Ctrl-C
/// or SIGTERM;
/// `on_ready` gets the bound address once every loop listens. Returns when all loops have stopped.
pub fn serve_on_threads(
    addr: SocketAddr,
    threads: usize,
    app: Router,
    on_ready: impl FnOnce(SocketAddr),
) -> Result<()> {
    let threads = if cfg!(unix) { threads.max(1) } else { 1 };
    let shared = threads > 1;
    let (tx, rx) = mpsc::channel();
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut handles = Vec::with_capacity(threads);
    let spawn = |addr: SocketAddr, tx: mpsc::Sender<Result<SocketAddr>>, app: Router, i: usize| {
        let stop = stop_rx.clone();
        std::thread::Builder::new()
            .name(format!("wiki-http-{i}"))
            .spawn(move || run_thread(addr, shared, app, tx, stop))
            .map_err(|e| Error::Wiki(format!("starting a server thread: {e}")))
    };
    // The first loop binds (possibly port 0); the others bind to the address it got.
    handles.push(spawn(addr, tx.clone(), app.clone(), 0)?);
    let bound = rx
        .recv()
        .map_err(|_| Error::Wiki("the first server thread stopped".into()))??;
    for i in 1..threads {
        handles.push(spawn(bound, tx.clone(), app.clone(), i)?);
    }
    for _ in 1..threads {
        rx.recv()
            .map_err(|_| Error::Wiki("a server thread stopped".into()))??;
    }
    on_ready(bound);
    // The stop signal is awaited here, once, and passed on to every loop so each finishes its open requests.
    let signals = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Wiki(format!("starting a runtime: {e}")))?;
    signals.block_on(stop_signal());
    let _ = stop_tx.send(true);
    let mut result = Ok(());
    for handle in handles {
        match handle.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => result = Err(e),
            Err(_) => result = Err(Error::Wiki("a server thread panicked".into())),
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
