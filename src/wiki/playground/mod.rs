//! The playground's server side: `POST /api/run` (one JSON answer), `POST /api/run/stream` (server-sent events:
//! progress as the script reports it, then the result) and `POST /api/run/{id}/cancel`.
//!
//! A request passes, in order: validation (JSON body, code size) → auth (a bearer token, where configured) →
//! the client's rate limit → admission to the bounded queue → a supervised worker ([`pool`]). Every answer is
//! JSON with a structured error; runs that started answer 200 with `ok` and `error` in the result.

pub mod api;
pub mod pool;
pub mod rate;

use std::time::Duration;

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
    trust_forwarded: bool,
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
            trust_forwarded: config.playground_trust_forwarded,
        })
    }

    /// The worker pool.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The limits every run gets unless its request asks for less.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Stops every worker and waits for them.
    pub fn shutdown(&self) {
        self.pool.shutdown();
    }
}
