//! Supervised worker processes: a bounded queue of runs served by `netcl worker` processes (JSON lines over
//! stdin/stdout). A run past its wall time, a cancelled run and a crashed worker all end the same way: the
//! process is killed, the run is answered with a structured error, and a fresh worker takes its place. The
//! supervisor has its own thread and runtime, so the server's accept loops never wait on a child process.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};

use crate::script::Limits;
use crate::{Error, Result};

/// Extra time the worker's own script limit gets over the server's wall time, so the server's kill decides.
const WORKER_GRACE_MS: u64 = 2_000;
/// Progress events buffered for a slow reader before further ones are dropped.
const EVENT_BUFFER: usize = 256;

/// How the pool runs.
#[derive(Debug, Clone)]
pub struct PoolSettings {
    /// Worker processes.
    pub workers: usize,
    /// Runs that may wait beyond those running.
    pub queue: usize,
    /// Wall time of one run.
    pub timeout: Duration,
    /// Program and arguments of a worker.
    pub command: Vec<String>,
    /// `NETCL_DEVICE` for the workers.
    pub device: Option<String>,
    /// Start the workers with the pool rather than with the first run, so the first reader does not wait
    /// for a device to open.
    pub eager: bool,
}

/// What a run reports as it goes.
#[derive(Debug, Clone)]
pub enum RunEvent {
    /// A worker took the run after it waited `queue_ms`.
    Started { queue_ms: f64 },
    /// A value the script passed to `progress(…)`.
    Progress(Value),
    /// The final answer: a run result, or a structured error in the same shape.
    Result(Value),
}

/// Why a run was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Every worker and queue place is taken.
    Busy,
    /// The pool is shutting down.
    Closed,
}

/// An admitted run: its id and the stream of its events. Dropping it cancels the run.
#[derive(Debug)]
pub struct Ticket {
    pub id: String,
    pub events: mpsc::Receiver<RunEvent>,
    pool: Arc<Shared>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Ok(mut jobs) = self.pool.cancels.lock() {
            jobs.remove(&self.id);
        }
    }
}

struct Job {
    id: String,
    code: String,
    limits: Limits,
    enqueued: Instant,
    events: mpsc::Sender<RunEvent>,
    cancel: watch::Receiver<bool>,
    /// The queue place; given back before the answer is sent, so a client that runs again at once is admitted.
    permit: Option<OwnedSemaphorePermit>,
}

#[derive(Debug)]
struct Shared {
    settings: PoolSettings,
    admission: Arc<Semaphore>,
    queue: tokio::sync::Mutex<mpsc::UnboundedReceiver<Job>>,
    cancels: Mutex<HashMap<String, watch::Sender<bool>>>,
    pids: Mutex<HashMap<usize, u32>>,
    restarts: AtomicU64,
}

/// The worker pool. Dropping it (or [`Pool::shutdown`]) stops every worker.
pub struct Pool {
    shared: Arc<Shared>,
    sender: Mutex<Option<mpsc::UnboundedSender<Job>>>,
    stop: watch::Sender<bool>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    ids: IdSource,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("settings", &self.shared.settings)
            .finish()
    }
}

impl Pool {
    /// Starts the supervisor thread; workers start with the first run and stay up between runs.
    pub fn start(settings: PoolSettings) -> Result<Pool> {
        let (sender, receiver) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            admission: Arc::new(Semaphore::new(settings.workers + settings.queue)),
            settings,
            queue: tokio::sync::Mutex::new(receiver),
            cancels: Mutex::new(HashMap::new()),
            pids: Mutex::new(HashMap::new()),
            restarts: AtomicU64::new(0),
        });
        let (stop, stop_rx) = watch::channel(false);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::Wiki(format!("starting the playground runtime: {e}")))?;
        let supervised = Arc::clone(&shared);
        // Workers are forked from this thread, which lives as long as the pool: their parent-death signal
        // (Linux) is tied to it.
        let thread = std::thread::Builder::new()
            .name("playground".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let mut slots = tokio::task::JoinSet::new();
                    for slot in 0..supervised.settings.workers {
                        slots.spawn(run_slot(slot, Arc::clone(&supervised), stop_rx.clone()));
                    }
                    while slots.join_next().await.is_some() {}
                });
            })
            .map_err(|e| Error::Wiki(format!("starting the playground thread: {e}")))?;
        Ok(Pool {
            shared,
            sender: Mutex::new(Some(sender)),
            stop,
            thread: Mutex::new(Some(thread)),
            ids: IdSource::default(),
        })
    }

    /// Admits a run, or says why not. The run starts as soon as a worker is free.
    pub fn submit(&self, code: String, limits: Limits) -> std::result::Result<Ticket, Refusal> {
        let permit = Arc::clone(&self.shared.admission)
            .try_acquire_owned()
            .map_err(|_| Refusal::Busy)?;
        let id = self.ids.next();
        let (events, receiver) = mpsc::channel(EVENT_BUFFER);
        let (cancel_tx, cancel) = watch::channel(false);
        if let Ok(mut cancels) = self.shared.cancels.lock() {
            cancels.insert(id.clone(), cancel_tx);
        }
        let ticket = Ticket {
            id: id.clone(),
            events: receiver,
            pool: Arc::clone(&self.shared),
        };
        let job = Job {
            id,
            code,
            limits,
            enqueued: Instant::now(),
            events,
            cancel,
            permit: Some(permit),
        };
        let sent = match self.sender.lock() {
            Ok(sender) => sender.as_ref().is_some_and(|s| s.send(job).is_ok()),
            Err(_) => false,
        };
        if sent {
            Ok(ticket)
        } else {
            Err(Refusal::Closed)
        }
    }

    /// Cancels the run `id` (its worker is killed and restarted); false when no such run is pending.
    pub fn cancel(&self, id: &str) -> bool {
        match self.shared.cancels.lock() {
            Ok(cancels) => cancels.get(id).is_some_and(|c| c.send(true).is_ok()),
            Err(_) => false,
        }
    }

    /// Runs waiting for a worker or running now.
    pub fn in_flight(&self) -> usize {
        self.shared.settings.workers + self.shared.settings.queue
            - self.shared.admission.available_permits()
    }

    /// Process ids of the workers running now.
    pub fn worker_pids(&self) -> Vec<u32> {
        match self.shared.pids.lock() {
            Ok(p) => p.values().copied().collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Workers started to replace a killed or crashed one.
    pub fn restarts(&self) -> u64 {
        self.shared.restarts.load(Ordering::Relaxed)
    }

    /// The settings the pool runs with.
    pub fn settings(&self) -> &PoolSettings {
        &self.shared.settings
    }

    /// Stops every worker and waits for the supervisor to finish.
    pub fn shutdown(&self) {
        if let Ok(mut sender) = self.sender.lock() {
            sender.take();
        }
        let _ = self.stop.send(true);
        let handle = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(handle) = handle {
            let _ = handle.join();
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // No join here: a pool may be dropped on an async thread. The supervisor kills its workers on the signal.
        let _ = self.stop.send(true);
        if let Ok(mut sender) = self.sender.lock() {
            sender.take();
        }
    }
}

/// Unguessable run ids: a counter mixed through two randomly keyed hashers.
#[derive(Default)]
struct IdSource {
    counter: AtomicU64,
    keys: (
        std::collections::hash_map::RandomState,
        std::collections::hash_map::RandomState,
    ),
}

impl IdSource {
    fn next(&self) -> String {
        use std::hash::BuildHasher;
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        format!(
            "{:016x}{:016x}",
            self.keys.0.hash_one(n),
            self.keys.1.hash_one(n)
        )
    }
}

/// A running worker process.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Worker {
    fn spawn(settings: &PoolSettings) -> std::io::Result<Worker> {
        let (program, args) = settings
            .command
            .split_first()
            .ok_or_else(|| std::io::Error::other("empty worker command"))?;
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        if let Some(device) = &settings.device {
            command.env("NETCL_DEVICE", device);
        }
        #[cfg(target_os = "linux")]
        // SAFETY: prctl is async-signal-safe and touches only the child being started.
        unsafe {
            command.pre_exec(|| {
                // The worker dies with the server even when the server is killed without a chance to clean up.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = command.spawn()?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| std::io::Error::other("worker without stdin"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| std::io::Error::other("worker without stdout"))?;
        Ok(Worker {
            child,
            stdin,
            stdout: BufReader::new(stdout).lines(),
        })
    }

    async fn kill(mut self) -> String {
        let _ = self.child.start_kill();
        match self.child.wait().await {
            Ok(status) => status.to_string(),
            Err(e) => e.to_string(),
        }
    }
}

/// How one run on a worker ended.
enum Outcome {
    Done(Value),
    TimedOut,
    Cancelled,
    Crashed(String),
    Shutdown,
}

async fn run_slot(slot: usize, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut worker = if shared.settings.eager {
        start(slot, &shared).ok()
    } else {
        None
    };
    loop {
        let job = tokio::select! {
            job = async { shared.queue.lock().await.recv().await } => job,
            _ = stop.changed() => None,
        };
        let Some(mut job) = job else { break };
        let queue_ms = job.enqueued.elapsed().as_secs_f64() * 1e3;
        if job.events.is_closed() {
            continue;
        }
        if *job.cancel.borrow() {
            answer(
                &mut job,
                queue_ms,
                "cancelled",
                "the run was stopped before it started",
                false,
            )
            .await;
            continue;
        }
        let mut w = match worker.take() {
            Some(w) => w,
            None => match start(slot, &shared) {
                Ok(w) => w,
                Err(e) => {
                    answer(
                        &mut job,
                        queue_ms,
                        "worker_unavailable",
                        &format!("no worker could be started: {e}"),
                        false,
                    )
                    .await;
                    continue;
                }
            },
        };
        let _ = job.events.try_send(RunEvent::Started { queue_ms });
        let outcome = run_job(&mut w, &mut job, &shared.settings, &mut stop).await;
        match outcome {
            Outcome::Done(mut result) => {
                if let Some(t) = result.get_mut("timings").and_then(Value::as_object_mut) {
                    t.insert("queue_ms".into(), json!(queue_ms));
                }
                if let Some(o) = result.as_object_mut() {
                    o.insert("id".into(), json!(job.id));
                    o.insert("worker_restarted".into(), json!(false));
                }
                worker = Some(w);
                job.permit.take();
                let _ = job.events.send(RunEvent::Result(result)).await;
            }
            Outcome::Shutdown => {
                w.kill().await;
                forget_pid(&shared, slot);
                answer(
                    &mut job,
                    queue_ms,
                    "shutdown",
                    "the server is shutting down",
                    true,
                )
                .await;
                break;
            }
            other => {
                let status = w.kill().await;
                forget_pid(&shared, slot);
                let (kind, message) = match other {
                    Outcome::TimedOut => (
                        "timeout",
                        format!(
                            "the run exceeded its wall-time limit of {} ms; its worker was stopped and restarted",
                            shared.settings.timeout.as_millis()
                        ),
                    ),
                    Outcome::Cancelled => (
                        "cancelled",
                        "the run was stopped; its worker was restarted".to_string(),
                    ),
                    Outcome::Crashed(why) => (
                        "worker_crashed",
                        format!(
                            "the worker stopped during the run ({why}; {status}) and was restarted"
                        ),
                    ),
                    _ => ("internal", String::new()),
                };
                tracing::warn!(slot, kind, "playground worker replaced");
                shared.restarts.fetch_add(1, Ordering::Relaxed);
                // Start the replacement now, so the next run finds the device open.
                worker = start(slot, &shared).ok();
                answer(&mut job, queue_ms, kind, &message, true).await;
            }
        }
    }
    if let Some(w) = worker {
        w.kill().await;
    }
    forget_pid(&shared, slot);
}

fn start(slot: usize, shared: &Shared) -> std::io::Result<Worker> {
    let w = Worker::spawn(&shared.settings)?;
    if let (Some(pid), Ok(mut pids)) = (w.child.id(), shared.pids.lock()) {
        pids.insert(slot, pid);
    }
    Ok(w)
}

fn forget_pid(shared: &Shared, slot: usize) {
    if let Ok(mut pids) = shared.pids.lock() {
        pids.remove(&slot);
    }
}

async fn run_job(
    w: &mut Worker,
    job: &mut Job,
    settings: &PoolSettings,
    stop: &mut watch::Receiver<bool>,
) -> Outcome {
    let mut limits = job.limits.clone();
    limits.timeout_ms = settings.timeout.as_millis() as u64 + WORKER_GRACE_MS;
    let request = json!({"id": job.id, "code": job.code, "limits": limits});
    let mut line = request.to_string();
    line.push('\n');
    if let Err(e) = w.stdin.write_all(line.as_bytes()).await {
        return Outcome::Crashed(format!("writing the request failed: {e}"));
    }
    if let Err(e) = w.stdin.flush().await {
        return Outcome::Crashed(format!("writing the request failed: {e}"));
    }
    let deadline = tokio::time::Instant::now() + settings.timeout;
    loop {
        tokio::select! {
            line = w.stdout.next_line() => match line {
                Ok(Some(line)) => {
                    let Ok(message) = serde_json::from_str::<Value>(&line) else { continue };
                    if message["id"].as_str() != Some(job.id.as_str()) {
                        continue;
                    }
                    match message["event"].as_str() {
                        Some("progress") => {
                            let _ = job.events.try_send(RunEvent::Progress(message["data"].clone()));
                        }
                        Some("result") => return Outcome::Done(message["result"].clone()),
                        _ => {}
                    }
                }
                Ok(None) => return Outcome::Crashed("its output closed".into()),
                Err(e) => return Outcome::Crashed(format!("reading its output failed: {e}")),
            },
            _ = tokio::time::sleep_until(deadline) => return Outcome::TimedOut,
            _ = job.events.closed() => return Outcome::Cancelled,
            changed = job.cancel.changed() => {
                if changed.is_err() || *job.cancel.borrow() {
                    return Outcome::Cancelled;
                }
            }
            _ = stop.changed() => return Outcome::Shutdown,
        }
    }
}

/// Answers `job` with a structured error in the shape of a run result.
async fn answer(job: &mut Job, queue_ms: f64, kind: &str, message: &str, restarted: bool) {
    job.permit.take();
    let _ = job
        .events
        .send(RunEvent::Result(error_result(
            &job.id, queue_ms, kind, message, restarted,
        )))
        .await;
}

/// A run result that holds only an error.
pub fn error_result(id: &str, queue_ms: f64, kind: &str, message: &str, restarted: bool) -> Value {
    json!({
        "id": id,
        "ok": false,
        "device": null,
        "outputs": [],
        "value": null,
        "decisions": [],
        "launches": [],
        "timings": {"queue_ms": queue_ms, "parse_ms": 0.0, "build_ms": 0.0, "tune_ms": 0.0, "run_ms": 0.0, "device_ms": 0.0, "total_ms": 0.0},
        "error": {"kind": kind, "message": message, "line": null, "column": null},
        "truncated": false,
        "worker_restarted": restarted,
    })
}
