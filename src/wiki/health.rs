//! Whether this server should get traffic. `/healthz` is liveness: the process answers. `/readyz` is
//! readiness: the server is not draining, and its device is open — with the playground on, a check run
//! finished on a worker (which opened the device and ran an op on it); with it off, the server's own device
//! selection succeeded. A drain (SIGTERM) makes `/readyz` fail at once while open runs finish.
//!
//! The check runs on a thread of its own ([`spawn_checks`]): at start every [`RETRY`] until it passes, then
//! every [`RECHECK`], so a worker that can no longer start (a lost device) turns the server unready. A check
//! that only waited (every worker busy) changes nothing: a busy server is still a working one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Response, StatusCode};
use serde_json::{Value, json};

use super::engine::EngineInfo;
use super::metrics::Gauges;
use super::playground::Playground;
use super::playground::pool::{Refusal, RunEvent};
use super::respond::json_response;
use crate::script::Limits;

/// What the health checks read of a server: its health record, its playground, its engine and its device
/// selection. The server's state implements it, so this module needs nothing of the server's.
pub trait Monitored: Send + Sync + 'static {
    /// The drain flag and the last readiness check.
    fn health(&self) -> &Health;
    /// The playground, when it is on.
    fn playground(&self) -> Option<&Arc<Playground>>;
    /// Where the server's engine data comes from.
    fn engine(&self) -> &Arc<dyn EngineInfo>;
    /// The device selection the server was started with.
    fn device_selection(&self) -> Option<String>;
}

/// The check run: one small op on the device.
pub const CHECK_CODE: &str = "sum_all(ones([16]))";
/// Time between checks while the server is not ready.
pub const RETRY: Duration = Duration::from_secs(2);
/// Time between checks once it is.
pub const RECHECK: Duration = Duration::from_secs(30);

/// What the last readiness check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// No check has finished yet.
    Starting,
    /// The last check passed on this device.
    Ready { device: String },
    /// The last check failed, for this reason.
    Failed(String),
}

/// The server's health: its drain flag and the last readiness check.
#[derive(Debug)]
pub struct Health {
    draining: AtomicBool,
    readiness: Mutex<Readiness>,
}

impl Default for Health {
    fn default() -> Health {
        Health {
            draining: AtomicBool::new(false),
            readiness: Mutex::new(Readiness::Starting),
        }
    }
}

impl Health {
    /// Starts the drain: from now on `/readyz` answers 503.
    pub fn start_drain(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// Whether the server is draining.
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// What the last check found.
    pub fn readiness(&self) -> Readiness {
        match self.readiness.lock() {
            Ok(r) => r.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn set(&self, readiness: Readiness) {
        match self.readiness.lock() {
            Ok(mut r) => *r = readiness,
            Err(poisoned) => *poisoned.into_inner() = readiness,
        }
    }

    /// Whether the server should get traffic now.
    pub fn ready(&self) -> bool {
        !self.draining() && matches!(self.readiness(), Readiness::Ready { .. })
    }
}

/// `GET /readyz`: 200 with the device when ready, else 503 with the reason, as JSON.
pub fn readyz(state: &impl Monitored) -> Response<Body> {
    let health = state.health();
    let gauges = gauges(state);
    let workers = json!({"configured": gauges.workers, "running": gauges.workers_running});
    if health.draining() {
        return json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"ready": false, "reason": "draining: the server is stopping; open runs are finishing",
                    "workers": workers}),
        );
    }
    match health.readiness() {
        Readiness::Ready { device } => json_response(
            StatusCode::OK,
            &json!({"ready": true, "device": device, "playground": state.playground().is_some(),
                    "workers": workers, "runs_in_flight": gauges.runs_in_flight}),
        ),
        Readiness::Starting => json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"ready": false, "reason": "starting: the device check has not finished yet",
                    "workers": workers}),
        ),
        Readiness::Failed(reason) => json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"ready": false, "reason": reason, "workers": workers}),
        ),
    }
}

/// The gauges `/metrics` shows: readiness, drain and the playground's run queue.
pub fn gauges(state: &impl Monitored) -> Gauges {
    let health = state.health();
    let mut g = Gauges {
        ready: health.ready(),
        draining: health.draining(),
        ..Gauges::default()
    };
    if let Some(pg) = state.playground() {
        let pool = pg.pool();
        let settings = pool.settings();
        g.runs_in_flight = pool.in_flight();
        g.run_capacity = settings.workers + settings.queue;
        g.workers = settings.workers;
        g.workers_running = pool.worker_pids().len();
        g.worker_restarts = pool.restarts();
    }
    g
}

/// Starts the readiness checks on a thread of their own; they stop once the server drains.
pub fn spawn_checks<S: Monitored>(state: Arc<S>) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("readiness".into())
        .spawn(move || {
            runtime.block_on(async move {
                while !state.health().draining() {
                    if let Some(found) = check(&state).await {
                        if let Readiness::Failed(reason) = &found {
                            tracing::warn!(%reason, "readiness check failed");
                        }
                        state.health().set(found);
                    }
                    let wait = if state.health().ready() {
                        RECHECK
                    } else {
                        RETRY
                    };
                    tokio::time::sleep(wait).await;
                }
            });
        })?;
    Ok(())
}

/// One check; `None` when it proved nothing either way (every worker busy, or the server stopping).
async fn check<S: Monitored>(state: &Arc<S>) -> Option<Readiness> {
    let Some(pg) = state.playground() else {
        return Some(device_check(state).await);
    };
    let mut ticket = match pg.pool().submit(CHECK_CODE.into(), Limits::default()) {
        Ok(t) => t,
        Err(Refusal::Busy) => return None,
        Err(Refusal::Closed) => {
            return Some(Readiness::Failed("the playground is shut down".into()));
        }
    };
    // A worker takes the check after the runs queued before it, each bounded by the run timeout.
    let settings = pg.pool().settings();
    let limit = settings.timeout * (settings.queue as u32 + 2).min(8) + Duration::from_secs(30);
    let answer = tokio::time::timeout(limit, async {
        while let Some(event) = ticket.events.recv().await {
            if let RunEvent::Result(result) = event {
                return Some(result);
            }
        }
        None
    })
    .await;
    let first = state.health().readiness() == Readiness::Starting;
    match answer {
        Ok(Some(result)) => judge(&result),
        Ok(None) => None,
        Err(_) if first => Some(Readiness::Failed(format!(
            "no worker answered the check run within {} s",
            limit.as_secs()
        ))),
        Err(_) => None,
    }
}

/// What a check run's result says.
fn judge(result: &Value) -> Option<Readiness> {
    if result["ok"].as_bool() == Some(true) {
        let device = result["device"]["name"]
            .as_str()
            .unwrap_or("unnamed device")
            .to_string();
        return Some(Readiness::Ready { device });
    }
    let kind = result["error"]["kind"].as_str().unwrap_or("unknown");
    let message = result["error"]["message"].as_str().unwrap_or("");
    match kind {
        // The server is stopping, or the check was stopped: nothing learnt about the workers.
        "shutdown" | "cancelled" | "stalled" => None,
        _ => Some(Readiness::Failed(format!(
            "the check run on a playground worker failed ({kind}): {message}"
        ))),
    }
}

/// Without the playground: the server's own device selection.
async fn device_check<S: Monitored>(state: &Arc<S>) -> Readiness {
    let engine = Arc::clone(state.engine());
    let selector = state.device_selection();
    let found = tokio::task::spawn_blocking(move || {
        let index = engine.selected(selector.as_deref())?;
        let name = engine
            .devices()?
            .into_iter()
            .find(|d| d.index == index)
            .map_or_else(|| format!("device {index}"), |d| d.name);
        Ok::<String, crate::Error>(name)
    })
    .await;
    match found {
        Ok(Ok(device)) => Readiness::Ready { device },
        Ok(Err(e)) => Readiness::Failed(format!("the device could not be opened: {e}")),
        Err(e) => Readiness::Failed(format!("the device check stopped: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_results_are_judged() {
        let ok = json!({"ok": true, "device": {"name": "pocl-cpu"}});
        assert_eq!(
            judge(&ok),
            Some(Readiness::Ready {
                device: "pocl-cpu".into()
            })
        );
        let crashed = json!({"ok": false, "error": {"kind": "worker_unavailable", "message": "no worker could be started"}});
        assert!(
            matches!(judge(&crashed), Some(Readiness::Failed(r)) if r.contains("worker_unavailable") && r.contains("no worker could be started"))
        );
        let stopping = json!({"ok": false, "error": {"kind": "shutdown", "message": ""}});
        assert_eq!(judge(&stopping), None);
        let h = Health::default();
        assert!(!h.ready());
        h.set(Readiness::Ready { device: "d".into() });
        assert!(h.ready());
        h.start_drain();
        assert!(!h.ready() && h.draining());
    }
}
