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
use crate::autotune;
use crate::device::Device;
use crate::error::{Error, Result};

/// The wall-time limit of one idle measurement pass (a finished job run again to time its candidates).
pub const IDLE_PASS_MS: u64 = 120_000;

/// How often a worker with idle work looks whether it may start (no request waiting, no job on the device).
const IDLE_POLL: Duration = Duration::from_millis(250);

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
    /// Compile time that extends the deadline, at most (milliseconds).
    allowance_ms: Arc<AtomicU64>,
    /// The process's compile clock when the watchdog was armed (the bits of an f64 of milliseconds).
    compile0: Arc<AtomicU64>,
}

impl Watchdog {
    /// Starts the watchdog thread; `message` gets the limit in milliseconds and says what happened.
    pub fn start(message: fn(u64) -> String) -> Result<Watchdog> {
        let watchdog = Watchdog {
            start: Instant::now(),
            deadline_ms: Arc::new(AtomicU64::new(0)),
            limit_ms: Arc::new(AtomicU64::new(0)),
            allowance_ms: Arc::new(AtomicU64::new(0)),
            compile0: Arc::new(AtomicU64::new(0)),
        };
        let seen = watchdog.clone();
        std::thread::Builder::new()
            .name("watchdog".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(Duration::from_millis(20));
                    let deadline = seen.deadline_ms.load(Ordering::Acquire);
                    let now = seen.start.elapsed().as_millis() as u64;
                    if deadline != 0 && now >= deadline + seen.compile_extension_ms() {
                        eprintln!("{}", message(seen.limit_ms.load(Ordering::Acquire)));
                        let _ = std::io::stderr().flush();
                        std::process::exit(WATCHDOG_EXIT);
                    }
                }
            })
            .map_err(|e| Error::io("<watchdog thread>", e))?;
        Ok(watchdog)
    }

    /// Milliseconds of compile time since the watchdog was armed, up to its allowance (the process's: a worker
    /// runs one job at a time).
    fn compile_extension_ms(&self) -> u64 {
        let compiled = crate::backend::opencl::program::compile_ms_total()
            - f64::from_bits(self.compile0.load(Ordering::Acquire));
        (compiled.max(0.0) as u64).min(self.allowance_ms.load(Ordering::Acquire))
    }

    /// Arms the watchdog for `limits`: [`Watchdog::arm`] with the time limit, extended by compile time up to
    /// the limits' compile allowance.
    pub fn arm_for(&self, limits: &Limits, grace_ms: u64) {
        self.compile0.store(
            crate::backend::opencl::program::compile_ms_total().to_bits(),
            Ordering::Release,
        );
        self.allowance_ms
            .store(limits.compile_allowance_ms, Ordering::Release);
        self.arm(limits.timeout_ms, grace_ms);
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
    // Requests are read on their own thread, so new work can interrupt an idle measurement pass.
    let (requests, incoming) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            autotune::interrupt_idle();
            if requests.send(line).is_err() {
                break;
            }
        }
        // Stdin closed: the server is going away, so an idle pass stops too.
        autotune::interrupt_idle();
    });
    restrict_self();
    autotune::defer_measurement(true);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let cpu_budget = |limit_ms: u64| {
        // CPU time for a job: its wall time on every core, plus a second; past it the kernel ends the process
        // (SIGXCPU).
        #[cfg(unix)]
        set_limit(
            libc::RLIMIT_CPU,
            cpu_seconds() + (limit_ms / 1000 + 1) * threads + 1,
            None,
        );
    };
    // The last finished job whose answers were not all measured: replayed, with its output discarded, while no
    // request waits, so the next run of the same kind answers from measurements.
    let mut idle_work: Option<(String, Limits, RunInputs)> = None;
    loop {
        let line = if idle_work.is_some() {
            match incoming.recv_timeout(IDLE_POLL) {
                Ok(line) => line,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    // Only while no job runs on the device, in this worker or another.
                    if autotune::job_running(device) {
                        continue;
                    }
                    let Some((code, limits, inputs)) = idle_work.take() else {
                        continue;
                    };
                    autotune::clear_idle_interrupt();
                    let pass = Limits {
                        timeout_ms: IDLE_PASS_MS,
                        ..limits.clone()
                    };
                    cpu_budget(pass.timeout_ms + pass.compile_allowance_ms);
                    watchdog.arm_for(&pass, WATCHDOG_GRACE_MS);
                    let (_, interrupted) = autotune::measure_while_idle(device, || {
                        run_with_inputs(device, &code, &pass, inputs.clone(), Box::new(|_| {}))
                    });
                    watchdog.disarm();
                    if interrupted {
                        idle_work = Some((code, limits, inputs));
                    }
                    continue;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            }
        } else {
            match incoming.recv() {
                Ok(line) => line,
                Err(_) => break,
            }
        };
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
        cpu_budget(limits.timeout_ms + limits.compile_allowance_ms);
        watchdog.arm_for(&limits, WATCHDOG_GRACE_MS);
        let job = autotune::JobScope::start(device);
        let inputs = req.inputs.clone();
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
        drop(job);
        watchdog.disarm();
        let unmeasured = result.decisions.iter().any(|d| {
            matches!(
                d.source,
                autotune::Source::Database
                    | autotune::Source::Heuristic
                    | autotune::Source::Interim
            )
        });
        if result.ok && unmeasured {
            idle_work = Some((req.code, limits, inputs));
        }
        let result = serde_json::to_value(&result).unwrap_or(serde_json::Value::Null);
        emit(&WorkerReply::Result { id, result });
    }
    Ok(())
}
