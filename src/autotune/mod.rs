//! The autotuner: measured selection between kernel candidates, a persistent per-device cache, a shipped
//! tuning database, and the decision log.
//!
//! An op asks [`tune`] with a typed [`TuneKey`] (its name, its shape class as named fields, and a checksum of
//! the kernel sources its candidates run), its candidates and a bench closure that runs one candidate once and
//! returns its time. The answer comes, in order, from: a forced label (`NETCL_AUTOTUNE_FORCE`); the only
//! eligible candidate; the cache of earlier measurements (memory, then the JSON file); otherwise, by the mode
//! of [`TuneConfig`] (read once, see [`config`]):
//! - `sync`: every candidate is measured now (one warm-up, then the minimum of `NETCL_AUTOTUNE_REPS` runs)
//!   and the fastest is stored;
//! - `background` (the default): the first call answers at once with the tuning database's winner for this
//!   device class or the heuristic first choice; later calls of the same shape (once the host has waited for
//!   the device since the shape was first met) measure one candidate each, within a time budget per logging
//!   scope, and switch to the winner once every candidate is timed; a table winner of exactly this device
//!   class is kept; a choice nested in a candidate (a Winograd tile's product) is measured one candidate per
//!   call too, and the outer candidate is timed once its nested choices are settled;
//! - `off`: the database or heuristic choice, never measured.
//!
//! A process that runs work under a time limit (the wiki's playground workers) defers measurement instead
//! ([`defer_measurement`]): in `background` mode its calls never measure, and it measures later, when idle,
//! by running the same work again inside [`measure_while_idle`], which measures every candidate it meets and
//! stops between candidates as soon as [`interrupt_idle`] is called (new work arrived).
//!
//! The persistent key contains the kernel sources' and the candidate set's checksum, so an edited kernel or a
//! changed candidate list is measured again. Measurement is exclusive per device across threads and
//! processes ([`gate`]), and every measured candidate is written as soon as it is measured, so a killed run
//! keeps its measurements and the next one resumes.

mod cache;
pub mod config;
pub mod db;
mod gate;
pub mod key;
mod log;

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use serde::Serialize;
use serde_json::Value;

pub use cache::META_KEY;
pub use config::{Mode, TuneConfig, config, prefer_mode, reload_config};
pub use db::{DeviceClass, TuningTable};
pub use key::{TuneKey, bucket, shape_key};
pub use log::{CandidateTime, Decision, Source, decisions_since, label, last_seq, record};

use crate::device::activity::{self, Activity};
use crate::device::{Device, timing};
use crate::error::{Error, Result};

/// A cache entry as listed by `netcl tune list` and the wiki.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CacheEntry {
    /// The full key.
    pub key: String,
    /// The device part (`name|driver`).
    pub device: String,
    /// The kernel part.
    pub kernel: String,
    /// The shape part.
    pub shape_key: String,
    /// The cached winner.
    pub winner: Value,
    /// Candidate times, where they were recorded.
    pub candidates: Option<Vec<CandidateTime>>,
}

/// The cache file as read now.
#[derive(Debug, Clone, Serialize)]
pub struct CacheSnapshot {
    /// The file path.
    pub path: PathBuf,
    /// `ok`, `missing`, or a description of what was wrong with the file.
    pub status: String,
    /// Every entry, sorted by key.
    pub entries: Vec<CacheEntry>,
}

/// Whether autotuning measures at all (mode `sync` or `background`).
pub fn is_enabled() -> bool {
    config().mode != Mode::Off
}

/// Whether autotuning is in background mode (new shapes answered at once, measured on later calls).
pub fn background() -> bool {
    config().mode == Mode::Background
}

/// Whether this thread is measuring autotune candidates now (device launches then keep their events).
pub fn measuring() -> bool {
    timing::measuring()
}

/// The cache file path in use now (from the configuration).
pub fn cache_path() -> PathBuf {
    config().cache_path.clone()
}

/// A candidate whose first timed run exceeds this multiple of the best minimum measured before it is timed only
/// once: noise does not make a kernel three times faster, and slow candidates dominate the cost of tuning.
const SLOW_CUTOFF: f64 = 3.0;

thread_local! {
    /// Keys whose answer this thread has logged in the current scope; see [`begin_scope`].
    static LOGGED: RefCell<HashSet<String>> = RefCell::new(HashSet::new());
    /// Answers this thread has already verified and logged in the current scope; see [`answered`].
    static HOT: RefCell<Hot> = RefCell::new(Hot::default());
    /// Milliseconds of background measurement spent in the current scope.
    static BG_SPENT: Cell<f64> = const { Cell::new(0.0) };
    /// When the current scope began (the thread's first question when no scope was begun).
    static SCOPE_START: Cell<Option<Instant>> = const { Cell::new(None) };
    /// Set while this thread times a candidate of a background measurement inside a caller's call (one
    /// candidate per call). A nested decision that is not settled then measures one candidate of its own, not
    /// all of them, and marks the candidate being timed as [`NESTED_UNSETTLED`].
    static IN_LIMITED: Cell<bool> = const { Cell::new(false) };
    /// Set when the candidate being timed ran a nested choice that is not settled yet: its time is thrown
    /// away, and it is timed again on a later call, once its nested choices are measured.
    static NESTED_UNSETTLED: Cell<bool> = const { Cell::new(false) };
}

/// The share of a scope's running time that background measurement may take beyond the budget, so a long
/// training loop keeps tuning while a short snippet pays at most the budget.
const BACKGROUND_SHARE: f64 = 0.1;

/// Whether background measurement may go on in this thread's scope: the time spent so far is below the
/// budget plus [`BACKGROUND_SHARE`] of the scope's running time.
fn background_allowed(budget_ms: f64) -> bool {
    let start = SCOPE_START.with(|s| {
        let v = s.get().unwrap_or_else(Instant::now);
        s.set(Some(v));
        v
    });
    let allowed = budget_ms + BACKGROUND_SHARE * start.elapsed().as_secs_f64() * 1e3;
    BG_SPENT.with(Cell::get) < allowed
}

/// Bumped whenever a process memo drops or replaces a winner, which makes every thread's [`HOT`] answers stale.
static GENERATION: AtomicU64 = AtomicU64::new(0);

fn invalidate_hot() {
    GENERATION.fetch_add(1, Ordering::SeqCst);
}

/// Persistent keys this process has answered, each with the count of host waits ([`timing::host_waits`]) when
/// it was first answered. Background mode measures a key only once the host has waited for the device since:
/// a call that meets a shape twice (a network with repeated layers) does not measure it in that same call.
fn seen() -> &'static Mutex<HashMap<String, u64>> {
    static S: OnceLock<Mutex<HashMap<String, u64>>> = OnceLock::new();
    S.get_or_init(|| Mutex::new(HashMap::new()))
}

/// One kept answer: the device's tune id, the question, the answer in the asker's type.
type KeptAnswer = (String, TuneKey, Box<dyn Any>);

/// Per-thread answers to repeated questions, kept as the caller's type, so an op asking the same question
/// again (every step of a training loop) neither builds its candidate list nor serialises the winner.
#[derive(Default)]
struct Hot {
    /// [`GENERATION`] and the configuration's generation when these answers were kept.
    generation: (u64, u64),
    /// By [`TuneKey::memo_hash`]: the device's tune id, the question, and the answer.
    answers: HashMap<u64, Vec<KeptAnswer>>,
}

impl Hot {
    /// Drops every answer unless they were kept at `generation`; true when they were.
    fn still_valid(&mut self, generation: (u64, u64)) -> bool {
        if self.generation == generation {
            return true;
        }
        self.answers.clear();
        self.generation = generation;
        false
    }
}

/// Whether `background` mode defers every measurement to idle time (see [`defer_measurement`]).
static DEFERRED: AtomicBool = AtomicBool::new(false);
/// Whether the process is inside [`measure_while_idle`].
static IDLE_MEASURING: AtomicBool = AtomicBool::new(false);
/// Set by [`interrupt_idle`]: the idle measurement stops at its next candidate or script operation.
static IDLE_INTERRUPT: AtomicBool = AtomicBool::new(false);

/// Makes `background` mode answer every new shape at once and measure nothing during calls: measurement
/// happens only inside [`measure_while_idle`]. The wiki's playground workers turn this on, so a run under a
/// time limit never spends it timing candidates.
pub fn defer_measurement(on: bool) {
    DEFERRED.store(on, Ordering::SeqCst);
}

/// Marks a job running on `device` for as long as it lives (a shared hold on a lock file beside the cache), so
/// idle measurement passes of every process on the device stop while it runs. Job runners (the playground
/// workers) hold one around each job.
pub struct JobScope {
    _lock: Option<crate::fsio::FileLock>,
}

impl JobScope {
    /// Marks a job on `device` as running until the scope is dropped.
    pub fn start(device: &Device) -> JobScope {
        let path = gate::jobs_lock_path(&cache_path(), device.tune_id());
        let lock = crate::fsio::FileLock::acquire_shared(&path)
            .map_err(|e| tracing::warn!("job lock {}: {e}", path.display()))
            .ok();
        JobScope { _lock: lock }
    }
}

/// Whether some process holds a [`JobScope`] on the device whose jobs lock file is `path`.
fn jobs_running(path: &std::path::Path) -> bool {
    matches!(crate::fsio::FileLock::try_acquire(path), Ok(None))
}

/// The jobs lock file of the device an idle pass runs on, while one runs.
static IDLE_JOBS_LOCK: Mutex<Option<PathBuf>> = Mutex::new(None);
/// When the idle pass last probed for running jobs (milliseconds since [`idle_epoch`]).
static IDLE_PROBED_MS: AtomicU64 = AtomicU64::new(0);

fn idle_epoch() -> &'static Instant {
    static E: OnceLock<Instant> = OnceLock::new();
    E.get_or_init(Instant::now)
}

/// Whether a job is running on `device` in any process (a [`JobScope`] is held).
pub fn job_running(device: &Device) -> bool {
    jobs_running(&gate::jobs_lock_path(&cache_path(), device.tune_id()))
}

/// Runs `work` on `device` measuring every candidate of every decision it meets that is not measured yet (as
/// `sync` mode would, but without waiting for another thread or process that is measuring on the device),
/// until [`interrupt_idle`] is called or a job starts on the device ([`JobScope`]); measured candidates are
/// stored one by one, so an interrupted pass keeps what it timed. Returns `work`'s result and whether the pass
/// was interrupted. In `off` mode nothing is measured.
pub fn measure_while_idle<R>(device: &Device, work: impl FnOnce() -> R) -> (R, bool) {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            IDLE_MEASURING.store(false, Ordering::SeqCst);
            if let Ok(mut p) = IDLE_JOBS_LOCK.lock() {
                *p = None;
            }
        }
    }
    if let Ok(mut p) = IDLE_JOBS_LOCK.lock() {
        *p = Some(gate::jobs_lock_path(&cache_path(), device.tune_id()));
    }
    IDLE_PROBED_MS.store(0, Ordering::SeqCst);
    IDLE_MEASURING.store(true, Ordering::SeqCst);
    let _reset = Reset;
    let r = work();
    let interrupted = idle_interrupted();
    (r, interrupted)
}

/// Asks a running [`measure_while_idle`] to stop as soon as it can (between candidates, or at the script's next
/// operation check). Has no effect outside one.
pub fn interrupt_idle() {
    IDLE_INTERRUPT.store(true, Ordering::SeqCst);
}

/// Clears an earlier [`interrupt_idle`]; called before an idle pass starts.
pub fn clear_idle_interrupt() {
    IDLE_INTERRUPT.store(false, Ordering::SeqCst);
}

/// Whether an idle measurement pass is running and should stop: it was interrupted, or a job runs on its device
/// (probed at most every 20 ms; once seen, the pass stays interrupted).
pub fn idle_interrupted() -> bool {
    if !IDLE_MEASURING.load(Ordering::SeqCst) {
        return false;
    }
    if IDLE_INTERRUPT.load(Ordering::SeqCst) {
        return true;
    }
    let now = idle_epoch().elapsed().as_millis() as u64 + 1;
    let last = IDLE_PROBED_MS.load(Ordering::SeqCst);
    if last != 0 && now < last + 20 {
        return false;
    }
    IDLE_PROBED_MS.store(now, Ordering::SeqCst);
    let path = IDLE_JOBS_LOCK.lock().ok().and_then(|p| p.clone());
    if path.is_some_and(|p| jobs_running(&p)) {
        IDLE_INTERRUPT.store(true, Ordering::SeqCst);
        return true;
    }
    false
}

fn generations() -> (u64, u64) {
    (GENERATION.load(Ordering::SeqCst), config::generation())
}

/// Starts a new logging scope on this thread: each cached decision is logged once per scope, not on every call
/// (a training loop asks the same questions thousands of times). A playground run is one scope; the background
/// measurement budget is per scope too.
pub fn begin_scope() {
    LOGGED.with(|l| l.borrow_mut().clear());
    HOT.with(|h| h.borrow_mut().answers.clear());
    BG_SPENT.with(|b| b.set(0.0));
    SCOPE_START.with(|s| s.set(Some(Instant::now())));
}

/// The answer this thread got for (`device`, `key`) earlier in this logging scope, when nothing can have
/// changed it since: no forced label, measurement on, the same configuration, and no winner of the process
/// memo replaced or dropped. Without allocating on a hit.
///
/// Callers whose candidate list is costly to build ask this first and build the list only when it answers
/// `None`; [`tune`] asks it too.
pub fn answered<C: Clone + 'static>(device: &Device, key: &TuneKey) -> Option<C> {
    let cfg = config();
    if cfg.mode == Mode::Off
        || cfg.problem.is_some()
        || cfg.forced_label(key.kernel()).is_some()
        || IDLE_MEASURING.load(Ordering::SeqCst)
    {
        return None;
    }
    let generation = generations();
    HOT.with(|h| {
        let mut h = h.borrow_mut();
        if !h.still_valid(generation) {
            return None;
        }
        let tune_id = device.tune_id();
        h.answers
            .get(&key.memo_hash(tune_id))?
            .iter()
            .find(|(id, k, _)| id == tune_id && k.same_question(key))?
            .2
            .downcast_ref::<C>()
            .cloned()
    })
}

/// Keeps `answer` for [`answered`]; `generation` is as it was before the answer was verified.
fn keep_answer<C: Clone + 'static>(
    device: &Device,
    key: &TuneKey,
    answer: &C,
    generation: (u64, u64),
) {
    let tune_id = device.tune_id();
    HOT.with(|h| {
        let mut h = h.borrow_mut();
        h.still_valid(generation);
        let same = h.answers.entry(key.memo_hash(tune_id)).or_default();
        same.retain(|(id, k, _)| !(id == tune_id && k.same_question(key)));
        same.push((tune_id.to_owned(), key.clone(), Box::new(answer.clone())));
    });
}

/// Records a choice that was not made by [`tune`] (forced by a switch or an argument, or the only eligible
/// candidate).
pub fn record_choice<C: Serialize>(
    device: &Device,
    key: &TuneKey,
    winner: &C,
    source: Source,
    note: &str,
) {
    record(unmeasured(device, key, winner, source, note.to_owned()));
}

/// A decision made without measuring: `winner` for `key`, from `source`, with `note`.
pub(crate) fn unmeasured<C: Serialize>(
    device: &Device,
    key: &TuneKey,
    winner: &C,
    source: Source,
    note: String,
) -> Decision {
    let w = serde_json::to_value(winner).unwrap_or(Value::Null);
    Decision {
        seq: 0,
        kernel: key.kernel().to_owned(),
        key: key.persistent(device.tune_id(), 0),
        device: device.name().to_owned(),
        shape_key: key.shape_key().to_owned(),
        candidates: Vec::new(),
        winner_label: label(&w),
        winner: w,
        source,
        tune_ms: 0.0,
        note: Some(note),
        depth: timing::measuring_depth(),
    }
}

/// Records, once per scope, that `ran` ran in place of `chosen` (the choice for `key`) because the chosen
/// kernel's programs are still being built by helper processes.
pub fn record_interim<C: Serialize, R: Serialize>(
    device: &Device,
    key: &TuneKey,
    chosen: &C,
    ran: &R,
) {
    let chosen = label(&serde_json::to_value(chosen).unwrap_or(Value::Null));
    record_once(unmeasured(
        device,
        key,
        ran,
        Source::Interim,
        format!(
            "{chosen} is being built by a helper process; the quick kernel runs until it is ready"
        ),
    ));
}

/// Logs `d` unless this thread logged the same key from the same source in this scope; true when it did.
pub(crate) fn record_once(d: Decision) -> bool {
    let tag = format!("{:?}|{}", d.source, d.key);
    let new = LOGGED.with(|l| l.borrow_mut().insert(tag));
    if new {
        record(d);
    }
    new
}

/// The first choice without measurement: the database's winner for this device class, another device's
/// winner of the same type, or the op's own default for this device type and shape class.
fn first_choice(
    device: &Device,
    key: &TuneKey,
    values: &[Value],
    default_idx: usize,
) -> (usize, Source, String) {
    let class = DeviceClass::of(device.info());
    let hint = db::lookup(&db::tables(), &class, key.kernel(), key.shape_key(), values);
    let at = |w: &Value| values.iter().position(|v| v == w).unwrap_or(default_idx);
    match hint {
        Some(db::Hint::Exact { winner, table }) => (
            at(&winner),
            Source::Database,
            format!("tuning table of {table}"),
        ),
        Some(db::Hint::SameType { winner, table }) => (
            at(&winner),
            Source::Heuristic,
            format!("the winner on {table}, a {} of another class", class.kind),
        ),
        None => (
            default_idx,
            Source::Heuristic,
            format!("the op's first choice on a {} device", class.kind),
        ),
    }
}

/// How far a measurement got.
enum Outcome {
    /// Every candidate is timed (now or by an earlier holder of the gate): the winner's index and the times.
    Done {
        win: usize,
        times: Vec<CandidateTime>,
        fresh: bool,
    },
    /// Some candidates are still to be timed.
    Partial { done: usize },
    /// Every candidate failed.
    Failed { times: Vec<CandidateTime> },
    /// Another thread or process is measuring on this device (background mode does not wait).
    Busy,
}

/// Chooses among `candidates` for (`device`, `key`), by measurement, the cache, the database or the heuristic
/// according to the configuration (see the module docs).
///
/// `bench` runs one candidate once and returns its time in milliseconds (device time from profiling events
/// on OpenCL). An error disqualifies the candidate. `default` indexes the op's first choice for this device
/// type and shape class, used when nothing better is known and when every candidate fails.
pub fn tune<C: Serialize + Clone + 'static>(
    device: &Device,
    key: &TuneKey,
    candidates: &[C],
    default: usize,
    bench: impl FnMut(&C) -> Result<f64>,
) -> Result<C> {
    tune_gated(device, key, candidates, default, true, bench)
}

/// As [`tune`], but in background mode measures nothing while `ready` is false (the candidates' programs are
/// still being built elsewhere): the call gets the first choice, with a note saying why.
pub fn tune_gated<C: Serialize + Clone + 'static>(
    device: &Device,
    key: &TuneKey,
    candidates: &[C],
    default: usize,
    ready: bool,
    mut bench: impl FnMut(&C) -> Result<f64>,
) -> Result<C> {
    let cfg = config();
    if let Some(p) = &cfg.problem {
        return Err(Error::Invalid(p.clone()));
    }
    let kernel = key.kernel();
    if candidates.is_empty() {
        return Err(Error::Invalid(format!(
            "autotune `{kernel}`: no candidates"
        )));
    }
    if candidates.len() > 1
        && let Some(c) = answered::<C>(device, key)
    {
        return Ok(c);
    }
    let generation = generations();
    let started = Instant::now();
    let values: Vec<Value> = candidates
        .iter()
        .map(|c| serde_json::to_value(c).unwrap_or(Value::Null))
        .collect();
    let pkey = key.persistent(device.tune_id(), key::candidates_checksum(&values));
    let decision =
        |winner: usize, source: Source, cands: Vec<CandidateTime>, note: Option<String>| Decision {
            seq: 0,
            kernel: kernel.to_owned(),
            key: pkey.clone(),
            device: device.name().to_owned(),
            shape_key: key.shape_key().to_owned(),
            candidates: cands,
            winner: values[winner].clone(),
            winner_label: label(&values[winner]),
            source,
            tune_ms: started.elapsed().as_secs_f64() * 1e3,
            note,
            depth: timing::measuring_depth(),
        };
    let default_idx = if default < candidates.len() {
        default
    } else {
        0
    };
    if let Some(want) = cfg.forced_label(kernel) {
        let labels: Vec<String> = values.iter().map(label).collect();
        let Some(idx) = labels.iter().position(|l| l == want) else {
            return Err(Error::Invalid(format!(
                "NETCL_AUTOTUNE_FORCE names `{want}` for `{kernel}`, which is not a candidate for shape {}; the candidates are {labels:?}",
                key.shape_key()
            )));
        };
        record(decision(
            idx,
            Source::Forced,
            Vec::new(),
            Some("NETCL_AUTOTUNE_FORCE".into()),
        ));
        return Ok(candidates[idx].clone());
    }
    if candidates.len() == 1 {
        record(decision(
            0,
            Source::Only,
            Vec::new(),
            Some("one eligible candidate".into()),
        ));
        return Ok(candidates[0].clone());
    }
    let path = &cfg.cache_path;
    if cfg.mode != Mode::Off {
        let (cached, times) = cache::lookup(path, &pkey);
        if let Some(w) = cached {
            match values.iter().position(|v| *v == w) {
                Some(idx) => {
                    // Logged once per scope; from the next call on, answered without a lookup.
                    if !record_once(decision(idx, Source::Cache, times, None)) {
                        keep_answer(device, key, &candidates[idx], generation);
                    }
                    return Ok(candidates[idx].clone());
                }
                None => {
                    tracing::info!(
                        "autotune: cached winner {w} for {pkey} is no longer a candidate; measuring again"
                    );
                    cache::forget(path, &pkey);
                    invalidate_hot();
                }
            }
        }
    }
    let (first, first_source, first_note) = first_choice(device, key, &values, default_idx);
    let provisional = |note: String| {
        let _ = record_once(decision(first, first_source, Vec::new(), Some(note)));
        Ok(candidates[first].clone())
    };
    // A table winner of exactly this device class in background mode: kept, not measured in the caller's calls,
    // and kept for the thread's later calls too, as a cached winner is (they skip the lookup).
    let keep_table_winner = || {
        let note = format!("{first_note}; kept in background mode (measured on this device class)");
        if !record_once(decision(first, first_source, Vec::new(), Some(note))) {
            keep_answer(device, key, &candidates[first], generation);
        }
        Ok(candidates[first].clone())
    };
    let limit = match cfg.mode {
        Mode::Off => return provisional(format!("{first_note}; NETCL_AUTOTUNE=off")),
        Mode::Sync => None,
        // Inside a background measurement made in a caller's call, a nested choice not settled yet costs the
        // call one of its candidates at most, and none while helpers still build them (a table winner of this
        // class is taken as it is); the outer candidate's time is then thrown away, since it did not run its
        // best configuration.
        Mode::Background if timing::measuring() && IN_LIMITED.with(Cell::get) => {
            if first_source == Source::Database {
                return keep_table_winner();
            }
            let again = NESTED_UNSETTLED.with(|n| n.replace(true));
            if again || !ready {
                return provisional(format!(
                    "{first_note}; measured on later calls (nested in another measurement)"
                ));
            }
            Some(1)
        }
        // Inside any other measurement the nested choice is measured fully, so the outer candidate's time is
        // that of its best configuration.
        Mode::Background if timing::measuring() => None,
        Mode::Background if IDLE_MEASURING.load(Ordering::SeqCst) => {
            if idle_interrupted() {
                return provisional(format!("{first_note}; measured when the process is idle"));
            }
            None
        }
        Mode::Background if !ready => {
            return provisional(format!(
                "{first_note}; measured once helper processes have built the candidates"
            ));
        }
        Mode::Background if DEFERRED.load(Ordering::SeqCst) => {
            return provisional(format!("{first_note}; measured when the process is idle"));
        }
        // A table of exactly this device class holds a winner measured on the same hardware: the caller's
        // calls do not pay for measuring it again (sync mode, `netcl tune warm` and the idle pass still do).
        Mode::Background if first_source == Source::Database => return keep_table_winner(),
        Mode::Background => {
            let waits = timing::host_waits();
            let first_sight = seen()
                .lock()
                .map(|mut s| *s.entry(pkey.clone()).or_insert(waits) == waits)
                .unwrap_or(false);
            if first_sight || !background_allowed(cfg.budget_ms) {
                return provisional(format!("{first_note}; measured on later calls"));
            }
            Some(1)
        }
    };
    let outcome = measure(
        device, &cfg, kernel, &pkey, &values, candidates, first, limit, &mut bench,
    );
    // A nested measurement's time is part of the outer one's, which is counted once it ends.
    if limit.is_some() && !timing::measuring() {
        BG_SPENT.with(|b| b.set(b.get() + started.elapsed().as_secs_f64() * 1e3));
    }
    match outcome {
        Outcome::Done { win, times, fresh } => {
            let source = if fresh {
                Source::Measured
            } else {
                Source::Cache
            };
            let note = (!fresh).then(|| "measured by another thread or process".to_owned());
            if fresh {
                record(decision(win, source, times, note));
            } else {
                record_once(decision(win, source, times, note));
            }
            Ok(candidates[win].clone())
        }
        Outcome::Partial { done } => provisional(format!(
            "{first_note}; {done} of {} candidates measured so far",
            candidates.len()
        )),
        Outcome::Busy => provisional(format!(
            "{first_note}; the device is measuring another shape"
        )),
        Outcome::Failed { times } => {
            record(decision(
                default_idx,
                Source::Default,
                times,
                Some("every candidate failed; default used, nothing cached".into()),
            ));
            Ok(candidates[default_idx].clone())
        }
    }
}

/// Times the candidates of `pkey` not timed yet (at most `limit` of them), the first choice first, holding
/// the device's gate; resumes from partial times in the cache and stores each time as soon as it is taken.
#[allow(clippy::too_many_arguments)]
fn measure<C>(
    device: &Device,
    cfg: &TuneConfig,
    op: &str,
    pkey: &str,
    values: &[Value],
    candidates: &[C],
    first: usize,
    limit: Option<usize>,
    bench: &mut impl FnMut(&C) -> Result<f64>,
) -> Outcome {
    let path = &cfg.cache_path;
    // An idle pass never waits for another measurer: new work may arrive meanwhile.
    let wait = limit.is_none() && !IDLE_MEASURING.load(Ordering::SeqCst);
    let Some(gate) = gate::enter(device.tune_id(), path, wait) else {
        return Outcome::Busy;
    };
    if gate.waited {
        cache::refresh(path, pkey);
    }
    let (cached, earlier) = cache::lookup(path, pkey);
    if let Some(w) = cached
        && let Some(win) = values.iter().position(|v| *v == w)
    {
        return Outcome::Done {
            win,
            times: earlier,
            fresh: false,
        };
    }
    let mut slots: Vec<Option<CandidateTime>> = values
        .iter()
        .map(|v| earlier.iter().find(|t| t.candidate == *v).cloned())
        .collect();
    let n = cfg.reps;
    let span = timing::Measuring::start();
    // Restored on return, so a nested measurement leaves the outer one's flags as they were.
    let outer_flags = (
        IN_LIMITED.with(|f| f.replace(limit.is_some())),
        NESTED_UNSETTLED.with(Cell::get),
    );
    let _restore = Restore(outer_flags);
    let order = std::iter::once(first).chain((0..candidates.len()).filter(|&i| i != first));
    let mut taken = 0;
    for i in order {
        if slots[i].is_some() {
            continue;
        }
        if limit.is_some_and(|l| taken >= l) || idle_interrupted() {
            break;
        }
        taken += 1;
        let (c, v) = (&candidates[i], &values[i]);
        activity::report(&Activity::Measuring {
            op,
            candidate: &label(v),
            index: slots.iter().flatten().count() + 1,
            of: candidates.len(),
        });
        let best = slots.iter().flatten().filter_map(|t| t.ms).reduce(f64::min);
        let mut run = || -> Result<(f64, f64)> {
            bench(c)?;
            let first = bench(c)?;
            // A candidate whose first timed run is more than SLOW_CUTOFF times the best minimum so far cannot
            // win: it is not timed again (its one time is its minimum and median).
            if best.is_some_and(|b| first > SLOW_CUTOFF * b) {
                return Ok((first, first));
            }
            let mut t = vec![first];
            for _ in 1..n {
                t.push(bench(c)?);
            }
            t.sort_by(f64::total_cmp);
            Ok((t[0], t[t.len() / 2]))
        };
        NESTED_UNSETTLED.with(|f| f.set(false));
        let result = run();
        if NESTED_UNSETTLED.with(Cell::get) {
            // A nested choice of this candidate is still being measured: its time says nothing yet.
            break;
        }
        let t = match result {
            Ok((min, med)) => CandidateTime {
                candidate: v.clone(),
                label: label(v),
                ms: Some(min),
                median_ms: Some(med),
                error: None,
            },
            Err(e) => CandidateTime {
                candidate: v.clone(),
                label: label(v),
                ms: None,
                median_ms: None,
                error: Some(e.to_string()),
            },
        };
        cache::store_candidate(path, pkey, &t);
        slots[i] = Some(t);
    }
    drop(span);
    let done = slots.iter().flatten().count();
    if done < candidates.len() {
        return Outcome::Partial { done };
    }
    let times: Vec<CandidateTime> = slots.into_iter().flatten().collect();
    let best = times
        .iter()
        .enumerate()
        .filter_map(|(i, t)| t.ms.map(|m| (i, m)))
        .fold(None, |acc: Option<(usize, f64)>, (i, m)| match acc {
            Some((_, bm)) if bm <= m => acc,
            _ => Some((i, m)),
        });
    let Some((win, _)) = best else {
        cache::drop_key(path, pkey);
        return Outcome::Failed { times };
    };
    cache::store_winner(path, pkey, &values[win], &times);
    invalidate_hot();
    drop(gate);
    Outcome::Done {
        win,
        times,
        fresh: true,
    }
}

/// Puts back the nesting flags of [`measure`]'s caller when the measurement ends, however it ends.
struct Restore((bool, bool));

impl Drop for Restore {
    fn drop(&mut self) {
        IN_LIMITED.with(|f| f.set(self.0.0));
        NESTED_UNSETTLED.with(|f| f.set(self.0.1));
    }
}

/// The cache file as it is now (re-read from disk, not the process memo).
pub fn cache_snapshot() -> Result<CacheSnapshot> {
    let path = cache_path();
    let (fc, status) = cache::read_file(&path);
    let entries = fc
        .winners
        .iter()
        .map(|(k, v)| {
            let (device, kernel, _, shape_key) = key::split_key(k);
            CacheEntry {
                key: k.clone(),
                device: device.to_owned(),
                kernel: kernel.to_owned(),
                shape_key: shape_key.to_owned(),
                winner: v.clone(),
                candidates: fc.meta.get(k).map(|m| m.candidates.clone()),
            }
        })
        .collect();
    Ok(CacheSnapshot {
        path,
        status,
        entries,
    })
}

/// The keys of the cache file with some candidates measured and no winner yet (a run stopped mid-tuning),
/// each with the candidates measured so far.
pub fn partial_entries() -> Vec<(String, Vec<CandidateTime>)> {
    let (fc, _) = cache::read_file(&cache_path());
    fc.meta
        .into_iter()
        .filter(|(k, _)| !fc.winners.contains_key(k))
        .map(|(k, m)| (k, m.candidates))
        .collect()
}

/// The local cache's winners for `device` as a tuning table (`netcl tune export`): the newest winner of each
/// kernel and shape key.
pub fn export_table(device: &Device) -> Result<TuningTable> {
    let path = cache_path();
    let (fc, status) = cache::read_file(&path);
    if status != "ok" {
        return Err(Error::Invalid(format!(
            "the autotune cache {} cannot be exported: {status}",
            path.display()
        )));
    }
    let mut newest: HashMap<String, (u64, Value)> = HashMap::new();
    for (k, w) in &fc.winners {
        let (dev, kernel, _, shape) = key::split_key(k);
        if dev != device.tune_id() {
            continue;
        }
        let at = fc.meta.get(k).map(|m| m.measured_at).unwrap_or(0);
        let e = format!("{kernel}::{shape}");
        if newest.get(&e).is_none_or(|(t, _)| at >= *t) {
            newest.insert(e, (at, w.clone()));
        }
    }
    if newest.is_empty() {
        return Err(Error::Invalid(format!(
            "the autotune cache {} has no winners for {}; run some ops on it first (NETCL_AUTOTUNE=sync measures at once)",
            path.display(),
            device.name()
        )));
    }
    Ok(TuningTable {
        format: db::FORMAT.to_owned(),
        device: DeviceClass::of(device.info()),
        measured: format!(
            "netcl tune export of {} (driver {}), {} entries",
            device.name(),
            device.info().driver,
            newest.len()
        ),
        entries: newest.into_iter().map(|(k, (_, w))| (k, w)).collect(),
        programs: Vec::new(),
    })
}

/// Deletes the cache file and forgets every cached decision of this process.
pub fn clear_cache() -> Result<()> {
    let path = cache_path();
    if let Ok(mut m) = cache::memo().lock() {
        m.remove(&path);
    }
    if let Ok(mut s) = seen().lock() {
        s.clear();
    }
    invalidate_hot();
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// Forgets this process's in-memory cache and first sightings (the file is kept and read again on the next
/// lookup), as a new process would start.
pub fn clear_memory() {
    if let Ok(mut m) = cache::memo().lock() {
        m.clear();
    }
    if let Ok(mut s) = seen().lock() {
        s.clear();
    }
    invalidate_hot();
}
