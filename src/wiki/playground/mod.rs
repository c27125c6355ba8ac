//! The playground's server side: `POST /api/run` (one JSON answer), `POST /api/run/stream` (server-sent events:
//! progress as the script reports it, then the result) and `POST /api/run/{id}/cancel`.
//!
//! A request passes, in order: validation (JSON body, code size) → auth (a bearer token, where configured) →
//! the client's rate limit → admission to the bounded queue → a supervised worker ([`pool`]). Every answer is
//! JSON with a structured error; runs that started answer 200 with `ok` and `error` in the result.
//!
//! A run may name a device (`"device": 1` or `"device": "builtin"`); `GET /api/run/devices` lists the choices.
//! The pool runs it on a worker of that device ([`pool`]'s lanes).

pub mod api;
pub mod devices;
pub mod pool;
pub mod rate;

use std::sync::Arc;
use std::time::Duration;

use devices::PlaygroundDevices;
use pool::{Pool, PoolSettings};
use rate::{OpenRuns, RateLimiter};

use super::config::Config;
use crate::script::Limits;
use crate::wiki::error::{Result, WikiError};

/// The playground of one server: its workers, rate limits, token and run limits.
#[derive(Debug)]
pub struct Playground {
    pool: Pool,
    rate: RateLimiter,
    open: OpenRuns,
    token: Option<String>,
    limits: Limits,
    /// The folder `load_model(name)` reads from (the content's `data/` unless configured).
    data_dir: Option<std::path::PathBuf>,
    trust_forwarded: bool,
    /// The server's `--device`, which the default lane's workers get.
    selection: Option<String>,
    /// Listed with the first request that needs them: listing touches the OpenCL driver.
    devices: tokio::sync::OnceCell<std::result::Result<Arc<PlaygroundDevices>, String>>,
}

impl Playground {
    /// Sets up the playground `config` describes; `eager` starts the workers now.
    pub fn new(config: &Config, eager: bool) -> Result<Playground> {
        let command = match &config.playground_worker_command {
            Some(c) => c.clone(),
            None => {
                let exe = std::env::current_exe()
                    .map_err(|e| WikiError::Site(format!("locating the worker binary: {e}")))?;
                vec![exe.display().to_string(), "worker".into()]
            }
        };
        let pool = Pool::start(PoolSettings {
            workers: config.playground_workers,
            queue: config.playground_queue,
            timeout: Duration::from_millis(config.playground_timeout_ms),
            compile_allowance: Duration::from_millis(config.playground_compile_allowance_ms),
            command,
            device: config.device.clone(),
            eager,
            stall_timeout: Duration::from_millis(config.playground_stall_timeout_ms),
            address_space_bytes: config
                .playground_worker_address_space_mb
                .saturating_mul(1024 * 1024),
            open_files: config.playground_worker_open_files,
        })?;
        Ok(Playground {
            pool,
            rate: RateLimiter::new(config.playground_rate_per_minute, config.playground_burst),
            open: OpenRuns::new(config.playground_max_runs_per_client),
            token: config.playground_token.clone().filter(|t| !t.is_empty()),
            limits: config.playground_limits.clone(),
            data_dir: Some(config.playground_data_dir()),
            trust_forwarded: config.playground_trust_forwarded,
            selection: config.device.clone(),
            devices: tokio::sync::OnceCell::new(),
        })
    }

    /// The devices runs may name, listed once (devices do not come and go while the server runs).
    pub async fn devices(&self) -> std::result::Result<Arc<PlaygroundDevices>, String> {
        self.devices
            .get_or_init(|| async {
                let selection = self.selection.clone();
                tokio::task::spawn_blocking(move || PlaygroundDevices::load(selection.as_deref()))
                    .await
                    .map_err(|e| format!("listing the devices failed: {e}"))?
                    .map(Arc::new)
            })
            .await
            .clone()
    }

    /// The worker pool.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The limits every run gets unless its request asks for less.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// What a run reads besides its code when it brings no files: the data folder.
    pub fn inputs(&self) -> crate::script::RunInputs {
        crate::script::RunInputs {
            files: Vec::new(),
            data_dir: self.data_dir.clone(),
        }
    }

    /// Stops every worker and waits for them.
    pub fn shutdown(&self) {
        self.pool.shutdown();
    }
}
