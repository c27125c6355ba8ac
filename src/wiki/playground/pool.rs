//! Supervised worker processes: a bounded queue of runs served by `netcl worker` processes (JSON lines over
//! stdin/stdout). A run past its wall time, a cancelled run and a crashed worker all end the same way: the
//! process is killed, the run is answered with a structured error, and a fresh worker takes its place. The
//! supervisor has its own thread and runtime, so the server's accept loops never wait on a child process.
//!
//! A run's events go through a bounded buffer. When the client reads slower than the script reports, progress
//! events are coalesced (the newest is kept); a client that reads nothing for [`PoolSettings::stall_timeout`]
//! loses its run, whose worker is stopped and restarted. The final answer is handed over by a task of its own,
//! so a worker slot never waits on a client. Workers start with a cleared environment and OS limits (address
//! space, open files; the worker itself adds no-new-processes and a CPU budget per job), and a worker found
//! dead while idle is replaced before the next run is given to it.
//!
//! Runs go to lanes, one per device: the default lane (the server's device, [`PoolSettings::workers`] workers)
//! and, for a run that names another device, that device's lane of [`DEVICE_LANE_WORKERS`] worker, started with
//! its first run and kept for the next. The caller resolves device names to indices, so there are at most as
//! many lanes as the server has devices, and every lane shares the one admission limit (workers + queue).

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};

use crate::script::worker::{WorkerReply, WorkerRequest};
use crate::script::{Limits, RunInputs};
use crate::wiki::error::{Result, WikiError};

/// Extra time the worker's own script limit gets over the server's wall time, so the server's kill decides.
const WORKER_GRACE_MS: u64 = 2_000;
/// Workers of a lane for a device other than the server's own.
pub const DEVICE_LANE_WORKERS: usize = 1;
/// Events buffered for a slow reader; past them progress is coalesced to the newest.
const EVENT_BUFFER: usize = 32;
/// Environment variables a worker keeps (all others are cleared): what the device drivers and the engine read.
const KEPT_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "TMPDIR",
    "LANG",
    "LC_ALL",
    "XDG_CACHE_HOME",
    "LD_LIBRARY_PATH",
];
/// Prefixes of further variables a worker keeps.
const KEPT_ENV_PREFIXES: &[&str] = &[
    "NETCL_", "POCL_", "OCL_", "CUDA_", "NVIDIA_", "ROCR_", "HIP_",
];

/// How the pool runs.
#[derive(Debug, Clone)]
pub struct PoolSettings {
    /// Worker processes.
    pub workers: usize,
    /// Runs that may wait beyond those running.
    pub queue: usize,
    /// Wall time of one run.
    pub timeout: Duration,
    /// Compile time a run may spend beyond `timeout` (the worker reports it with its activity).
    pub compile_allowance: Duration,
    /// Program and arguments of a worker.
    pub command: Vec<String>,
    /// `NETCL_DEVICE` for the default lane's workers.
    pub device: Option<String>,
    /// Start the workers with the pool rather than with the first run, so the first reader does not wait
    /// for a device to open.
    pub eager: bool,
    /// How long a client may read none of its run's events before the run is stopped.
    pub stall_timeout: Duration,
    /// A worker's address-space limit in bytes (`RLIMIT_AS`); 0 leaves it unlimited.
    pub address_space_bytes: u64,
    /// Files a worker may hold open (`RLIMIT_NOFILE`); 0 leaves the inherited limit.
    pub open_files: u64,
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

/// What a queued run holds until a worker takes it: the way to its client and its queue place.
struct Queued {
    events: mpsc::Sender<RunEvent>,
    /// The queue place; given back before the answer is sent, so a client that runs again at once is admitted.
    permit: OwnedSemaphorePermit,
    enqueued: Instant,
}

/// The part of a run that cancelling reaches.
#[derive(Debug)]
struct Control {
    cancel: watch::Sender<bool>,
    /// `Some` while the run waits in the queue; a worker takes it out, and so does a cancel, which answers.
    queued: Mutex<Option<Queued>>,
}

impl std::fmt::Debug for Queued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queued").finish_non_exhaustive()
    }
}

impl Control {
    fn take_queued(&self) -> Option<Queued> {
        match self.queued.lock() {
            Ok(mut q) => q.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        }
    }
}

struct Job {
    id: String,
    code: String,
    limits: Limits,
    inputs: RunInputs,
    control: Arc<Control>,
}

#[derive(Debug)]
struct Shared {
    settings: PoolSettings,
    admission: Arc<Semaphore>,
    cancels: Mutex<HashMap<String, Arc<Control>>>,
    pids: Mutex<HashMap<usize, u32>>,
    restarts: AtomicU64,
}

/// The runs for one device and the workers that take them.
#[derive(Debug)]
struct Lane {
    /// `NETCL_DEVICE` for its workers (`None`: the environment's).
    device: Option<String>,
    /// Start its workers before their first run.
    eager: bool,
    queue: tokio::sync::Mutex<mpsc::UnboundedReceiver<Job>>,
}

/// A worker slot the supervisor is to start.
struct SlotStart {
    slot: usize,
    lane: Arc<Lane>,
}

/// The lanes' senders, by device index (`None`: the default lane); gone once the pool shuts down.
type Senders = HashMap<Option<usize>, mpsc::UnboundedSender<Job>>;

/// The worker pool. Dropping it (or [`Pool::shutdown`]) stops every worker.
pub struct Pool {
    shared: Arc<Shared>,
    senders: Mutex<Option<Senders>>,
    starts: mpsc::UnboundedSender<SlotStart>,
    next_slot: AtomicU64,
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
        let default_lane = Arc::new(Lane {
            device: settings.device.clone(),
            eager: settings.eager,
            queue: tokio::sync::Mutex::new(receiver),
        });
        let workers = settings.workers;
        let shared = Arc::new(Shared {
            admission: Arc::new(Semaphore::new(settings.workers + settings.queue)),
            settings,
            cancels: Mutex::new(HashMap::new()),
            pids: Mutex::new(HashMap::new()),
            restarts: AtomicU64::new(0),
        });
        let (starts, mut start_rx) = mpsc::unbounded_channel::<SlotStart>();
        for slot in 0..workers {
            let lane = Arc::clone(&default_lane);
            // The receiver is held below, so this cannot fail.
            let _ = starts.send(SlotStart { slot, lane });
        }
        let (stop, stop_rx) = watch::channel(false);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| WikiError::Site(format!("starting the playground runtime: {e}")))?;
        let supervised = Arc::clone(&shared);
        // Workers are forked from this thread, which lives as long as the pool: their parent-death signal
        // (Linux) is tied to it.
        let thread = std::thread::Builder::new()
            .name("playground".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let mut slots = tokio::task::JoinSet::new();
                    let mut stopping = stop_rx.clone();
                    loop {
                        tokio::select! {
                            start = start_rx.recv() => match start {
                                Some(SlotStart { slot, lane }) => {
                                    slots.spawn(run_slot(slot, Arc::clone(&supervised), lane, stop_rx.clone()));
                                }
                                None => break,
                            },
                            _ = stopping.changed() => break,
                            // Reap finished slots so the set does not grow.
                            Some(_) = slots.join_next(), if !slots.is_empty() => {}
                        }
                    }
                    while slots.join_next().await.is_some() {}
                });
            })
            .map_err(|e| WikiError::Site(format!("starting the playground thread: {e}")))?;
        Ok(Pool {
            shared,
            senders: Mutex::new(Some(HashMap::from([(None, sender)]))),
            starts,
            next_slot: AtomicU64::new(workers as u64),
            stop,
            thread: Mutex::new(Some(thread)),
            ids: IdSource::default(),
        })
    }

    /// Admits a run for the default device, or says why not. The run starts as soon as a worker is free.
    pub fn submit(&self, code: String, limits: Limits) -> std::result::Result<Ticket, Refusal> {
        self.submit_to(code, limits, None)
    }

    /// Admits a run for the device at `device` (an index into the server's device list, already checked by
    /// the caller; `None`: the default lane). A device's lane and its worker start with its first run.
    pub fn submit_to(
        &self,
        code: String,
        limits: Limits,
        device: Option<usize>,
    ) -> std::result::Result<Ticket, Refusal> {
        self.submit_with(code, limits, device, RunInputs::default())
    }

    /// Like [`Pool::submit_to`], with the files the run may read (uploads, the data folder).
    pub fn submit_with(
        &self,
        code: String,
        limits: Limits,
        device: Option<usize>,
        inputs: RunInputs,
    ) -> std::result::Result<Ticket, Refusal> {
        let permit = Arc::clone(&self.shared.admission)
            .try_acquire_owned()
            .map_err(|_| Refusal::Busy)?;
        let id = self.ids.next();
        let (events, receiver) = mpsc::channel(EVENT_BUFFER);
        let control = Arc::new(Control {
            cancel: watch::channel(false).0,
            queued: Mutex::new(Some(Queued {
                events,
                permit,
                enqueued: Instant::now(),
            })),
        });
        if let Ok(mut cancels) = self.shared.cancels.lock() {
            cancels.insert(id.clone(), Arc::clone(&control));
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
            inputs,
            control,
        };
        let sent = match self.senders.lock() {
            Ok(mut senders) => match senders.as_mut() {
                Some(senders) => self
                    .lane_sender(senders, device)
                    .is_some_and(|s| s.send(job).is_ok()),
                None => false,
            },
            Err(_) => false,
        };
        if sent {
            Ok(ticket)
        } else {
            Err(Refusal::Closed)
        }
    }

    /// The sender of `device`'s lane, starting the lane when this is its first run.
    fn lane_sender<'s>(
        &self,
        senders: &'s mut Senders,
        device: Option<usize>,
    ) -> Option<&'s mpsc::UnboundedSender<Job>> {
        use std::collections::hash_map::Entry;
        match senders.entry(device) {
            Entry::Occupied(e) => Some(e.into_mut()),
            Entry::Vacant(e) => {
                let (sender, receiver) = mpsc::unbounded_channel();
                let lane = Arc::new(Lane {
                    device: device.map(|d| d.to_string()),
                    eager: false,
                    queue: tokio::sync::Mutex::new(receiver),
                });
                for _ in 0..DEVICE_LANE_WORKERS {
                    let slot = self.next_slot.fetch_add(1, Ordering::Relaxed) as usize;
                    let lane = Arc::clone(&lane);
                    self.starts.send(SlotStart { slot, lane }).ok()?;
                }
                Some(e.insert(sender))
            }
        }
    }

    /// Device indices whose own lane has started (the default lane is not among them).
    pub fn device_lanes(&self) -> Vec<usize> {
        let mut lanes: Vec<usize> = match self.senders.lock() {
            Ok(s) => s.iter().flat_map(|s| s.keys().flatten().copied()).collect(),
            Err(_) => Vec::new(),
        };
        lanes.sort_unstable();
        lanes
    }

    /// Cancels the run `id`; false when no such run is pending. A queued run is answered at once and gives
    /// its queue place back; a running one has its worker killed and restarted.
    pub fn cancel(&self, id: &str) -> bool {
        let control = match self.shared.cancels.lock() {
            Ok(cancels) => cancels.get(id).cloned(),
            Err(_) => None,
        };
        let Some(control) = control else {
            return false;
        };
        if let Some(queued) = control.take_queued() {
            let queue_ms = queued.enqueued.elapsed().as_secs_f64() * 1e3;
            drop(queued.permit);
            // The channel is new and holds nothing yet, so the answer fits.
            let _ = queued.events.try_send(RunEvent::Result(error_result(
                id,
                queue_ms,
                "cancelled",
                "the run was stopped before it started",
                false,
            )));
            return true;
        }
        control.cancel.send_replace(true);
        true
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
        if let Ok(mut senders) = self.senders.lock() {
            senders.take();
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
        if let Ok(mut senders) = self.senders.lock() {
            senders.take();
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

/// Whether a worker keeps the environment variable `name`.
fn kept_env(name: &str) -> bool {
    KEPT_ENV.contains(&name) || KEPT_ENV_PREFIXES.iter().any(|p| name.starts_with(p))
}

impl Worker {
    fn spawn(settings: &PoolSettings, device: Option<&str>) -> std::io::Result<Worker> {
        let (program, args) = settings
            .command
            .split_first()
            .ok_or_else(|| std::io::Error::other("empty worker command"))?;
        let mut command = Command::new(program);
        command
            .args(args)
            .env_clear()
            .envs(std::env::vars_os().filter(|(k, _)| k.to_str().is_some_and(kept_env)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        if let Some(device) = device {
            command.env("NETCL_DEVICE", device);
        }
        #[cfg(target_os = "linux")]
        {
            let address_space = settings.address_space_bytes;
            let open_files = settings.open_files;
            // SAFETY: prctl and setrlimit are async-signal-safe and touch only the child being started.
            unsafe {
                command.pre_exec(move || {
                    // The worker dies with the server even when the server is killed without a chance to
                    // clean up.
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    let limit = |resource, value: u64| {
                        let r = libc::rlimit {
                            rlim_cur: value,
                            rlim_max: value,
                        };
                        if libc::setrlimit(resource, &r) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        Ok(())
                    };
                    if address_space > 0 {
                        limit(libc::RLIMIT_AS, address_space)?;
                    }
                    if open_files > 0 {
                        limit(libc::RLIMIT_NOFILE, open_files)?;
                    }
                    Ok(())
                });
            }
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

    /// Whether the process is still running (a worker that died while idle is not).
    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
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
    /// The result, and the newest progress event the client has not had yet.
    Done(Value, Option<Value>),
    /// The request could not be written: the worker was gone before it saw the run.
    Undelivered(String),
    /// Over the time limit; the engine's last reported activity (building kernels, measuring), if any.
    TimedOut(Option<Value>),
    Cancelled,
    Stalled,
    Crashed(String),
    Shutdown,
}

async fn run_slot(
    slot: usize,
    shared: Arc<Shared>,
    lane: Arc<Lane>,
    mut stop: watch::Receiver<bool>,
) {
    let mut worker = if lane.eager {
        start(slot, &shared, &lane).ok()
    } else {
        None
    };
    loop {
        let job = tokio::select! {
            job = async { lane.queue.lock().await.recv().await } => job,
            _ = stop.changed() => None,
        };
        let Some(job) = job else { break };
        // A run cancelled while it waited was answered by the cancel.
        let Some(queued) = job.control.take_queued() else {
            continue;
        };
        let mut cancel = job.control.cancel.subscribe();
        let Queued {
            events,
            permit,
            enqueued,
        } = queued;
        let mut permit = Some(permit);
        let queue_ms = enqueued.elapsed().as_secs_f64() * 1e3;
        if events.is_closed() {
            continue;
        }
        if *cancel.borrow() {
            permit.take();
            deliver(
                events,
                error_result(
                    &job.id,
                    queue_ms,
                    "cancelled",
                    "the run was stopped before it started",
                    false,
                ),
                None,
                shared.settings.stall_timeout,
            );
            continue;
        }
        let _ = events.try_send(RunEvent::Started { queue_ms });
        // One transparent retry: a worker found dead (before the run, or by a request it could not take) is
        // replaced and the run goes to the fresh one.
        let mut outcome = Outcome::Undelivered("no worker".into());
        let mut replaced = false;
        for attempt in 0..2 {
            let found = match worker.take() {
                Some(mut w) => {
                    if w.alive() {
                        Ok(w)
                    } else {
                        Err(Some(w))
                    }
                }
                None => Err(None),
            };
            let mut w = match found {
                Ok(w) => w,
                Err(found) => {
                    if let Some(dead) = found {
                        let status = dead.kill().await;
                        tracing::warn!(slot, %status, "an idle playground worker had stopped; replacing it");
                        forget_pid(&shared, slot);
                        shared.restarts.fetch_add(1, Ordering::Relaxed);
                    }
                    match start(slot, &shared, &lane) {
                        Ok(w) => w,
                        Err(e) => {
                            outcome =
                                Outcome::Undelivered(format!("no worker could be started: {e}"));
                            break;
                        }
                    }
                }
            };
            outcome = run_job(
                &mut w,
                &job,
                &events,
                &mut cancel,
                &shared.settings,
                &mut stop,
            )
            .await;
            if let Outcome::Undelivered(why) = &outcome {
                let status = w.kill().await;
                forget_pid(&shared, slot);
                shared.restarts.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(slot, attempt, %why, %status, "a playground worker could not take a run");
                replaced = true;
                continue;
            }
            worker = Some(w);
            break;
        }
        match outcome {
            Outcome::Done(mut result, pending) => {
                if let Some(t) = result.get_mut("timings").and_then(Value::as_object_mut) {
                    t.insert("queue_ms".into(), json!(queue_ms));
                }
                if let Some(o) = result.as_object_mut() {
                    o.insert("id".into(), json!(job.id));
                    o.insert("worker_restarted".into(), json!(replaced));
                }
                permit.take();
                deliver(events, result, pending, shared.settings.stall_timeout);
            }
            Outcome::Undelivered(why) => {
                permit.take();
                let kind = if why.starts_with("no worker could be started") {
                    "worker_unavailable"
                } else {
                    "worker_crashed"
                };
                deliver(
                    events,
                    error_result(&job.id, queue_ms, kind, &why, true),
                    None,
                    shared.settings.stall_timeout,
                );
            }
            Outcome::Shutdown => {
                if let Some(w) = worker.take() {
                    w.kill().await;
                }
                forget_pid(&shared, slot);
                permit.take();
                deliver(
                    events,
                    error_result(
                        &job.id,
                        queue_ms,
                        "shutdown",
                        "the server is shutting down",
                        true,
                    ),
                    None,
                    shared.settings.stall_timeout,
                );
                break;
            }
            other => {
                let status = match worker.take() {
                    Some(w) => w.kill().await,
                    None => String::new(),
                };
                forget_pid(&shared, slot);
                let (kind, message) = match other {
                    Outcome::TimedOut(busy) => (
                        "timeout",
                        timeout_message(shared.settings.timeout.as_millis(), busy.as_ref()),
                    ),
                    Outcome::Cancelled => (
                        "cancelled",
                        "the run was stopped; its worker was restarted".to_string(),
                    ),
                    Outcome::Stalled => (
                        "stalled",
                        format!(
                            "the client read none of the run's events for {} ms; the run was stopped and its worker restarted",
                            shared.settings.stall_timeout.as_millis()
                        ),
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
                permit.take();
                shared.restarts.fetch_add(1, Ordering::Relaxed);
                // Start the replacement now, so the next run finds the device open.
                worker = start(slot, &shared, &lane).ok();
                deliver(
                    events,
                    error_result(&job.id, queue_ms, kind, &message, true),
                    None,
                    shared.settings.stall_timeout,
                );
            }
        }
    }
    if let Some(w) = worker {
        w.kill().await;
    }
    forget_pid(&shared, slot);
}

/// Hands the final answer (after the newest progress the client has not had) to the client from a task of
/// its own, so the slot goes on at once; a client that does not take it within `deadline` does not get it.
fn deliver(
    events: mpsc::Sender<RunEvent>,
    result: Value,
    pending: Option<Value>,
    deadline: Duration,
) {
    tokio::spawn(async move {
        let _ = tokio::time::timeout(deadline, async move {
            if let Some(p) = pending {
                events.send(RunEvent::Progress(p)).await?;
            }
            events.send(RunEvent::Result(result)).await
        })
        .await;
    });
}

fn start(slot: usize, shared: &Shared, lane: &Lane) -> std::io::Result<Worker> {
    let w = Worker::spawn(&shared.settings, lane.device.as_deref())?;
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
    job: &Job,
    events: &mpsc::Sender<RunEvent>,
    cancel: &mut watch::Receiver<bool>,
    settings: &PoolSettings,
    stop: &mut watch::Receiver<bool>,
) -> Outcome {
    let mut limits = job.limits.clone();
    limits.timeout_ms = settings.timeout.as_millis() as u64 + WORKER_GRACE_MS;
    limits.compile_allowance_ms = settings.compile_allowance.as_millis() as u64;
    let request = WorkerRequest {
        id: Value::String(job.id.clone()),
        code: job.code.clone(),
        limits: Some(limits),
        inputs: job.inputs.clone(),
    };
    let mut line = match serde_json::to_string(&request) {
        Ok(l) => l,
        Err(e) => return Outcome::Crashed(format!("encoding the request failed: {e}")),
    };
    line.push('\n');
    if let Err(e) = w.stdin.write_all(line.as_bytes()).await {
        return Outcome::Undelivered(format!("writing the request failed: {e}"));
    }
    if let Err(e) = w.stdin.flush().await {
        return Outcome::Undelivered(format!("writing the request failed: {e}"));
    }
    let started = tokio::time::Instant::now();
    let mut deadline = started + settings.timeout;
    // The newest progress event that did not fit the client's buffer, and since when the buffer is full.
    let mut pending: Option<Value> = None;
    let mut stalled_since: Option<tokio::time::Instant> = None;
    // The engine's newest activity report (a progress value with a `netcl` field), for the timeout message.
    let mut busy: Option<Value> = None;
    loop {
        let stall_deadline = stalled_since.map(|t| t + settings.stall_timeout);
        tokio::select! {
            line = w.stdout.next_line() => match line {
                Ok(Some(line)) => {
                    let Ok(reply) = serde_json::from_str::<WorkerReply>(&line) else { continue };
                    match reply {
                        WorkerReply::Progress { id, data } if id.as_str() == Some(job.id.as_str()) => {
                            if data.get("netcl").is_some() {
                                // Compile time so far does not count, up to the allowance. While the engine
                                // compiles, the rest of the allowance is open: the worker's own check, which
                                // knows when the compile ended, stops a run that overstays it.
                                let compiled = data["compile_ms"].as_f64().unwrap_or(0.0).max(0.0);
                                let compiling = matches!(
                                    data["netcl"].as_str(),
                                    Some("building" | "preparing")
                                );
                                let extension = if compiling {
                                    settings.compile_allowance
                                } else {
                                    Duration::from_millis(compiled as u64).min(settings.compile_allowance)
                                };
                                deadline = started + settings.timeout + extension;
                                busy = Some(data.clone());
                            }
                            if pending.is_some() {
                                pending = Some(data);
                                continue;
                            }
                            match events.try_send(RunEvent::Progress(data)) {
                                Ok(()) => stalled_since = None,
                                Err(TrySendError::Full(RunEvent::Progress(data))) => {
                                    pending = Some(data);
                                    stalled_since.get_or_insert_with(tokio::time::Instant::now);
                                }
                                Err(TrySendError::Full(_)) => {}
                                Err(TrySendError::Closed(_)) => return Outcome::Cancelled,
                            }
                        }
                        WorkerReply::Result { id, result } if id.as_str() == Some(job.id.as_str()) => {
                            return Outcome::Done(result, pending);
                        }
                        _ => {}
                    }
                }
                Ok(None) => return Outcome::Crashed("its output closed".into()),
                Err(e) => return Outcome::Crashed(format!("reading its output failed: {e}")),
            },
            permit = events.reserve(), if pending.is_some() => match permit {
                Ok(permit) => {
                    if let Some(p) = pending.take() {
                        permit.send(RunEvent::Progress(p));
                    }
                    stalled_since = None;
                }
                Err(_) => return Outcome::Cancelled,
            },
            _ = sleep_until_opt(stall_deadline), if stall_deadline.is_some() => return Outcome::Stalled,
            _ = tokio::time::sleep_until(deadline) => return Outcome::TimedOut(busy),
            _ = events.closed() => return Outcome::Cancelled,
            changed = cancel.changed() => {
                if changed.is_err() || *cancel.borrow() {
                    return Outcome::Cancelled;
                }
            }
            _ = stop.changed() => return Outcome::Shutdown,
        }
    }
}

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The message of a run stopped at its time limit: what the engine was doing when it was stopped, and that
/// its work is kept (programs built stay in the driver's and netcl's caches; each measured candidate is
/// written as it is measured), so running it again goes further.
fn timeout_message(limit_ms: u128, busy: Option<&Value>) -> String {
    let doing = busy.and_then(|b| match b.get("netcl").and_then(Value::as_str) {
        Some("building") => Some(format!(
            "while building kernels for its first run ({} built, the last `{}`)",
            b["built"],
            b["kernel"].as_str().unwrap_or("?")
        )),
        Some("preparing") => Some(format!(
            "while the driver compiled kernel `{}` for its work-group size",
            b["kernel"].as_str().unwrap_or("?")
        )),
        Some("measuring") => Some(format!(
            "while measuring tuning candidates ({} of {} for `{}`)",
            b["index"],
            b["of"],
            b["op"].as_str().unwrap_or("?")
        )),
        _ => None,
    });
    match doing {
        Some(d) => format!(
            "the run exceeded its wall-time limit of {limit_ms} ms {d}; its worker was stopped and restarted. \
             What it built and measured is kept, so running it again continues from there"
        ),
        None => format!(
            "the run exceeded its wall-time limit of {limit_ms} ms; its worker was stopped and restarted"
        ),
    }
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

#[cfg(test)]
mod tests {
    use super::timeout_message;
    use serde_json::json;

    #[test]
    fn a_timeout_says_what_the_engine_was_doing_and_that_its_work_is_kept() {
        let b = json!({"netcl": "building", "family": "gemm", "kernel": "gemm_packed", "built": 4, "batch": 1});
        let m = timeout_message(10_000, Some(&b));
        assert!(m.contains("10000 ms while building kernels"), "{m}");
        assert!(m.contains("4 built, the last `gemm_packed`"), "{m}");
        assert!(m.contains("running it again continues"), "{m}");
        let t =
            json!({"netcl": "measuring", "op": "reduce", "candidate": "col", "index": 2, "of": 6});
        assert!(
            timeout_message(500, Some(&t))
                .contains("measuring tuning candidates (2 of 6 for `reduce`)")
        );
        let plain = timeout_message(500, None);
        assert!(
            plain.contains("500 ms;") && !plain.contains("continues"),
            "{plain}"
        );
    }
}
