//! `netcl worker`: runs playground jobs for a server, one JSON object per line over stdin/stdout.
//!
//! The protocol is two types, one each way: [`WorkerRequest`] on stdin (`{"id": …, "code": "…", "limits":
//! {…}, "inputs": {"files": […], "data_dir": …}}`, limits and inputs optional) and [`WorkerReply`] on stdout: `{"event": "progress", "id": …, "data": …}` for each
//! `progress(…)` call of the script, then `{"event": "result", "id": …, "result": RunResult}`; a line that is
//! not a request gets `{"event": "error", "id": null, "message": …}`. The device stays open between jobs, so
//! kernel builds and autotune decisions are reused. The worker exits when stdin closes.
//!
//! Once its device is open the worker lowers its own resource limits (no new processes; a CPU-time budget per
//! job), and a watchdog thread ends the process when a job runs past its time limit even inside one long
//! device call, which the script's own between-operations check cannot interrupt.

use std::io::{BufRead, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{Limits, RunInputs, run_with_inputs};
use crate::device::Device;
use crate::error::{Error, Result};

/// Exit status of a process stopped by its watchdog.
pub const WATCHDOG_EXIT: i32 = 124;

/// A job for the worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerRequest {
    /// Echoed in every reply to this job.
    pub id: serde_json::Value,
    /// The script.
    pub code: String,
    /// The job's limits; the defaults when absent.
    #[serde(default)]
    pub limits: Option<Limits>,
    /// Files uploaded with the run, and the data folder it may read.
    #[serde(default)]
    pub inputs: RunInputs,
}

/// One line the worker writes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum WorkerReply {
    /// A value the script passed to `progress(…)`.
    Progress {
        id: serde_json::Value,
        data: serde_json::Value,
    },
    /// The job's result (a `RunResult`).
    Result {
        id: serde_json::Value,
        result: serde_json::Value,
    },
    /// A line that was not a request.
    Error {
        id: Option<serde_json::Value>,
        message: String,
    },
}

fn emit(reply: &WorkerReply) {
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer(&mut out, reply);
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}

/// Ends the process with [`WATCHDOG_EXIT`] and `message` on stderr when an armed deadline passes.
///
/// The deadline is a millisecond offset from the watchdog's start; 0 means disarmed.
#[derive(Debug, Clone)]
pub struct Watchdog {
    start: Instant,
    deadline_ms: Arc<AtomicU64>,
    limit_ms: Arc<AtomicU64>,
}

impl Watchdog {
    /// Starts the watchdog thread; `message` gets the limit in milliseconds and says what happened.
    pub fn start(message: fn(u64) -> String) -> Result<Watchdog> {
        let watchdog = Watchdog {
            start: Instant::now(),
            deadline_ms: Arc::new(AtomicU64::new(0)),
            limit_ms: Arc::new(AtomicU64::new(0)),
        };
        let seen = watchdog.clone();
        std::thread::Builder::new()
            .name("watchdog".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(Duration::from_millis(20));
                    let deadline = seen.deadline_ms.load(Ordering::Acquire);
                    let now = seen.start.elapsed().as_millis() as u64;
                    if deadline != 0 && now >= deadline {
                        eprintln!("{}", message(seen.limit_ms.load(Ordering::Acquire)));
                        let _ = std::io::stderr().flush();
                        std::process::exit(WATCHDOG_EXIT);
                    }
                }
            })
            .map_err(|e| Error::io("<watchdog thread>", e))?;
        Ok(watchdog)
    }

    /// Arms the watchdog for a limit of `limit_ms`: the process ends `limit_ms + grace_ms` from now unless
    /// [`Watchdog::disarm`] comes first.
    pub fn arm(&self, limit_ms: u64, grace_ms: u64) {
        self.limit_ms.store(limit_ms, Ordering::Release);
        let now = self.start.elapsed().as_millis() as u64;
        self.deadline_ms.store(
            now.saturating_add(limit_ms).saturating_add(grace_ms).max(1),
            Ordering::Release,
        );
    }

    /// Disarms the watchdog.
    pub fn disarm(&self) {
        self.deadline_ms.store(0, Ordering::Release);
    }
}

/// Extra time the watchdog gives a job past its own time limit, so the script's own check answers first
/// when it can.
pub const WATCHDOG_GRACE_MS: u64 = 1_000;

/// The process's CPU time (all threads) so far.
#[cfg(unix)]
fn cpu_seconds() -> u64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0;
    }
    (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec).max(0) as u64
        + u64::from(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec > 1_000_000)
}

/// Sets the soft limit of `resource`, keeping the hard limit where it is (or lowering it to `hard`).
#[cfg(unix)]
fn set_limit(resource: libc::__rlimit_resource_t, soft: u64, hard: Option<u64>) -> bool {
    // SAFETY: plain system calls on this process's own limits.
    unsafe {
        let mut current: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(resource, &mut current) != 0 {
            return false;
        }
        let max = hard.map_or(current.rlim_max, |h| h.min(current.rlim_max));
        let limit = libc::rlimit {
            rlim_cur: soft.min(max),
            rlim_max: max,
        };
        libc::setrlimit(resource, &limit) == 0
    }
}

/// Limits the worker sets on itself once its device is open: no new processes (threads the driver already
/// started keep running) and no privilege gain through exec.
#[cfg(target_os = "linux")]
fn restrict_self() {
    // SAFETY: prctl with constant arguments on this process.
    unsafe {
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    }
    if std::env::var_os("NETCL_WORKER_ALLOW_FORK").is_none() {
        set_limit(libc::RLIMIT_NPROC, 0, Some(0));
    }
}

#[cfg(not(target_os = "linux"))]
fn restrict_self() {}

/// Serves jobs from stdin until it closes.
pub fn serve(device: &Device) -> Result<()> {
    // The watchdog thread starts before the limits: for a user other than root, RLIMIT_NPROC counts threads
    // too, so no thread could start after it is set to 0.
    let watchdog = Watchdog::start(|ms| {
        format!(
            "netcl worker: a job exceeded its time limit of {ms} ms inside a device call; stopping"
        )
    })?;
    restrict_self();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let line = line.map_err(|e| Error::io("<stdin>", e))?;
        if line.trim().is_empty() {
            continue;
        }
        let req: WorkerRequest = match serde_json::from_str(&line) {
            Ok(r) => r,
            Err(e) => {
                emit(&WorkerReply::Error {
                    id: None,
                    message: format!("bad request: {e}"),
                });
                continue;
            }
        };
        let id = req.id.clone();
        let progress_id = id.clone();
        let limits = req.limits.unwrap_or_default();
        // CPU time for this job: its wall time on every core, plus a second; past it the kernel ends the
        // process (SIGXCPU).
        #[cfg(unix)]
        set_limit(
            libc::RLIMIT_CPU,
            cpu_seconds() + (limits.timeout_ms / 1000 + 1) * threads + 1,
            None,
        );
        watchdog.arm(limits.timeout_ms, WATCHDOG_GRACE_MS);
        let result = run_with_inputs(
            device,
            &req.code,
            &limits,
            req.inputs,
            Box::new(move |data| {
                emit(&WorkerReply::Progress {
                    id: progress_id.clone(),
                    data: data.clone(),
                })
            }),
        );
        watchdog.disarm();
        let result = serde_json::to_value(&result).unwrap_or(serde_json::Value::Null);
        emit(&WorkerReply::Result { id, result });
    }
    Ok(())
}
