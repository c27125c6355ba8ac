//! Measured selection between kernel candidates, a persistent per-device cache, and the decision log.
//!
//! [`tune`] times each candidate (one warm-up, then the minimum of `NETCL_AUTOTUNE_REPS` runs, default 5,
//! timed by the caller's bench closure, which uses OpenCL profiling events), keeps the fastest, and stores it
//! under netcl's key `"{device}|{driver}::{kernel}::{shape_key}"` in memory and in a JSON file
//! (`NETCL_AUTOTUNE_CACHE`, else `$XDG_CACHE_HOME/netcl/autotune.json`, else `~/.cache/netcl/autotune.json`).
//!
//! The file is one flat JSON object of key → winner, as netcl writes it, plus one reserved key holding the
//! candidate times. Writes take a lock file, merge what other processes wrote, and replace the file
//! atomically. A corrupt file is reported, set aside and rebuilt; it is never fatal. A cached winner that is
//! no longer among the candidates is dropped and the shape measured again. `NETCL_AUTOTUNE=0` measures
//! nothing and uses the default candidate.
//!
//! Every choice (measured, cached, default, forced, or the only eligible candidate) is appended to the
//! decision log, which callers, the CLI and the wiki read with [`decisions_since`].

use std::any::Any;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::device::{Device, timing};
use crate::error::{Error, Result};
use crate::fsio::{FileLock, write_atomic};

/// The reserved top-level key of the cache file that holds candidate times.
pub const META_KEY: &str = "__netcl_meta__";

/// One candidate's measurement.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CandidateTime {
    /// The candidate as stored in the cache (a string, a number or a list).
    pub candidate: Value,
    /// A short readable form of the candidate.
    pub label: String,
    /// The minimum time in milliseconds, if it ran.
    pub ms: Option<f64>,
    /// The median time in milliseconds, if it ran.
    pub median_ms: Option<f64>,
    /// Why it was disqualified, if it failed.
    pub error: Option<String>,
}

/// Where a decision came from.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Every candidate was timed just now.
    Measured,
    /// The winner came from the in-memory or on-disk cache.
    Cache,
    /// Autotuning is off (`NETCL_AUTOTUNE=0`) or every candidate failed: the default was used.
    Default,
    /// An environment switch or an explicit argument forced the choice.
    Forced,
    /// Only one candidate was eligible for this shape.
    Only,
}

/// One entry of the decision log.
#[derive(Debug, Clone, Serialize)]
pub struct Decision {
    /// Monotonic sequence number within this process.
    pub seq: u64,
    /// The kernel or op name of the key (e.g. `sum_all`, `conv2d_pointwise_fwd_select`).
    pub kernel: String,
    /// The full cache key.
    pub key: String,
    /// The device's name.
    pub device: String,
    /// The shape part of the key.
    pub shape_key: String,
    /// Every candidate with its time (times are present for `measured`, and for `cache` when recorded).
    pub candidates: Vec<CandidateTime>,
    /// The chosen candidate.
    pub winner: Value,
    /// A readable form of the winner.
    pub winner_label: String,
    /// Where the choice came from.
    pub source: Source,
    /// Time spent choosing, including measurement, in milliseconds.
    pub tune_ms: f64,
    /// Why, in words, when the choice was not measured.
    pub note: Option<String>,
    /// 0 for a decision taken directly by an op; 1 or more for one taken while measuring another decision's
    /// candidates (its time is part of the outer decision's `tune_ms`).
    pub depth: u32,
}

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

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Meta {
    candidates: Vec<CandidateTime>,
    measured_at: u64,
}

#[derive(Default)]
struct FileCache {
    winners: BTreeMap<String, Value>,
    meta: BTreeMap<String, Meta>,
    /// The candidate index each winner was last found at (a hint, verified on use), so repeated calls
    /// serialise one candidate instead of all of them; with the candidate's JSON once a call verified it.
    resolved: HashMap<String, (usize, Option<String>)>,
}

/// Whether autotuning measures (`NETCL_AUTOTUNE` unset or not `0`/`false`/`off`).
pub fn is_enabled() -> bool {
    !matches!(
        std::env::var("NETCL_AUTOTUNE")
            .map(|v| v.trim().to_ascii_lowercase())
            .as_deref(),
        Ok("0" | "false" | "off" | "no")
    )
}

fn reps() -> usize {
    std::env::var("NETCL_AUTOTUNE_REPS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|&n| (1..=100).contains(&n))
        .unwrap_or(5)
}

/// Whether this thread is measuring autotune candidates now (device launches then keep their events).
pub fn measuring() -> bool {
    timing::measuring()
}

/// A candidate whose first timed run exceeds this multiple of the best minimum measured before it is timed only
/// once: noise does not make a kernel three times faster, and slow candidates dominate the cost of tuning.
const SLOW_CUTOFF: f64 = 3.0;

/// The cache file path in use now: `NETCL_AUTOTUNE_CACHE` (read on every call), else `netcl/autotune.json`
/// under `XDG_CACHE_HOME`, `~/.cache` or the temporary directory (read once per process).
pub fn cache_path() -> PathBuf {
    if let Some(p) = std::env::var_os("NETCL_AUTOTUNE_CACHE").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    static DEFAULT: OnceLock<PathBuf> = OnceLock::new();
    DEFAULT
        .get_or_init(|| {
            let base = std::env::var_os("XDG_CACHE_HOME")
                .filter(|p| !p.is_empty())
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
                .unwrap_or_else(std::env::temp_dir);
            base.join("netcl").join("autotune.json")
        })
        .clone()
}

fn memo() -> &'static Mutex<HashMap<PathBuf, FileCache>> {
    static M: OnceLock<Mutex<HashMap<PathBuf, FileCache>>> = OnceLock::new();
    M.get_or_init(|| Mutex::new(HashMap::new()))
}

struct Log {
    entries: VecDeque<Decision>,
}

const LOG_CAPACITY: usize = 4096;
static SEQ: AtomicU64 = AtomicU64::new(0);

fn log() -> &'static Mutex<Log> {
    static L: OnceLock<Mutex<Log>> = OnceLock::new();
    L.get_or_init(|| {
        Mutex::new(Log {
            entries: VecDeque::new(),
        })
    })
}

/// The sequence number of the newest decision (0 before the first).
pub fn last_seq() -> u64 {
    SEQ.load(Ordering::SeqCst)
}

/// Every logged decision with a sequence number above `seq`, oldest first (the log keeps the last 4096).
pub fn decisions_since(seq: u64) -> Vec<Decision> {
    log()
        .lock()
        .map(|l| l.entries.iter().filter(|d| d.seq > seq).cloned().collect())
        .unwrap_or_default()
}

/// Appends a decision to the log and returns its sequence number.
pub fn record(mut d: Decision) -> u64 {
    let seq = SEQ.fetch_add(1, Ordering::SeqCst) + 1;
    d.seq = seq;
    tracing::debug!(kernel = %d.kernel, shape = %d.shape_key, winner = %d.winner_label, source = ?d.source, "autotune decision");
    if let Ok(mut l) = log().lock() {
        if l.entries.len() == LOG_CAPACITY {
            l.entries.pop_front();
        }
        l.entries.push_back(d);
    }
    seq
}

/// A readable label for a candidate value: strings as they are, anything else as compact JSON.
pub fn label(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// netcl's shape-key format: a Python tuple of the values, e.g. `(2, 8, 256, 16, 1, 0)`.
pub fn shape_key(parts: &[i64]) -> String {
    let mut s = String::with_capacity(2 + parts.len() * 8);
    s.push('(');
    for (i, &p) in parts.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        push_int(&mut s, p);
    }
    if parts.len() == 1 {
        s.push(',');
    }
    s.push(')');
    s
}

/// Appends `v` in decimal (as `{v}` would, without the formatting machinery: keys are built on every call).
fn push_int(s: &mut String, v: i64) {
    if v < 0 {
        s.push('-');
    }
    let mut n = v.unsigned_abs();
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in &digits[at..] {
        s.push(d as char);
    }
}

/// The power of two at or above `n` (netcl's bucketing of batch and spatial sizes).
pub fn bucket(n: usize) -> i64 {
    n.max(1).next_power_of_two() as i64
}

/// Records a choice that was not measured (forced by a switch, or the only eligible candidate).
pub fn record_choice<C: Serialize>(
    device: &Device,
    kernel: &str,
    shape_key: &str,
    winner: &C,
    source: Source,
    note: &str,
) {
    let w = serde_json::to_value(winner).unwrap_or(Value::Null);
    record(Decision {
        seq: 0,
        kernel: kernel.to_owned(),
        key: full_key(device, kernel, shape_key),
        device: device.name().to_owned(),
        shape_key: shape_key.to_owned(),
        candidates: Vec::new(),
        winner_label: label(&w),
        winner: w,
        source,
        tune_ms: 0.0,
        note: Some(note.to_owned()),
        depth: timing::measuring_depth(),
    });
}

thread_local! {
    /// How deep this thread is in nested measurements (an op's candidate that tunes its own sub-kernels).
    /// Keys whose cached answer this thread has logged in the current scope; see [`begin_scope`].
    static LOGGED: RefCell<HashSet<String>> = RefCell::new(HashSet::new());
    /// Answers this thread has already verified and logged in the current scope; see [`answered`].
    static HOT: RefCell<Hot> = RefCell::new(Hot::default());
    /// Scratch space for building a full key without allocating.
    static KEY: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Bumped whenever a process memo drops or replaces a winner, which makes every thread's [`HOT`] answers stale.
static GENERATION: AtomicU64 = AtomicU64::new(0);

fn invalidate_hot() {
    GENERATION.fetch_add(1, Ordering::SeqCst);
}

/// Per-thread answers to repeated questions: the winner itself, kept as the caller's type, so that an op asking
/// the same question again (every step of a training loop) neither builds its candidate list nor serialises
/// the winner to check it.
#[derive(Default)]
struct Hot {
    /// [`GENERATION`] when these answers were kept.
    generation: u64,
    /// `NETCL_AUTOTUNE_CACHE` when these answers were kept: they belong to that file.
    cache_env: Option<OsString>,
    answers: HashMap<String, Box<dyn Any>>,
}

impl Hot {
    /// Drops every answer unless they were kept at `generation` for the cache file `cache_env`, and records
    /// those as the state the answers now belong to. True when the answers were kept.
    fn still_valid(&mut self, generation: u64, cache_env: Option<OsString>) -> bool {
        if self.generation == generation && self.cache_env == cache_env {
            return true;
        }
        self.answers.clear();
        self.generation = generation;
        self.cache_env = cache_env;
        false
    }
}

/// Starts a new logging scope on this thread: each cached decision is logged once per scope, not on every call
/// (a training loop asks the same questions thousands of times). A playground run is one scope.
pub fn begin_scope() {
    LOGGED.with(|l| l.borrow_mut().clear());
    HOT.with(|h| h.borrow_mut().answers.clear());
}

fn full_key(device: &Device, kernel: &str, shape_key: &str) -> String {
    let mut k = String::new();
    push_full_key(&mut k, device, kernel, shape_key);
    k
}

fn push_full_key(k: &mut String, device: &Device, kernel: &str, shape_key: &str) {
    let id = device.tune_id();
    k.reserve(id.len() + kernel.len() + shape_key.len() + 4);
    k.push_str(id);
    k.push_str("::");
    k.push_str(kernel);
    k.push_str("::");
    k.push_str(shape_key);
}

/// The answer this thread got for (`device`, `kernel`, `shape_key`) earlier in this logging scope, when nothing
/// can have changed it since: no forced label and autotuning on (as the environment says now), the same cache
/// file, and no winner of the process memo replaced or dropped. Without allocating on a hit.
///
/// Callers whose candidate list is costly to build ask this first and build the list only when it answers
/// `None`; [`tune`] asks it too.
pub fn answered<C: Clone + 'static>(device: &Device, kernel: &str, shape_key: &str) -> Option<C> {
    if std::env::var_os("NETCL_AUTOTUNE_FORCE").is_some() || !is_enabled() {
        return None;
    }
    let cache_env = std::env::var_os("NETCL_AUTOTUNE_CACHE");
    HOT.with(|h| {
        let mut h = h.borrow_mut();
        if !h.still_valid(GENERATION.load(Ordering::SeqCst), cache_env) {
            return None;
        }
        KEY.with(|k| {
            let mut k = k.borrow_mut();
            k.clear();
            push_full_key(&mut k, device, kernel, shape_key);
            h.answers.get(k.as_str())?.downcast_ref::<C>().cloned()
        })
    })
}

/// Keeps `answer` for [`answered`]; `generation` is [`GENERATION`] as it was before the answer was verified.
fn keep_answer<C: Clone + 'static>(key: &str, answer: &C, generation: u64) {
    let cache_env = std::env::var_os("NETCL_AUTOTUNE_CACHE");
    HOT.with(|h| {
        let mut h = h.borrow_mut();
        h.still_valid(generation, cache_env);
        h.answers.insert(key.to_owned(), Box::new(answer.clone()));
    });
}

/// The candidate label `NETCL_AUTOTUNE_FORCE` names for `kernel`, if any. The variable holds
/// `kernel=label` entries separated by `;` (labels of GEMM candidates contain commas), e.g.
/// `wino_input=tiles;conv2d_fwd_algo=winograd`.
fn forced_label(kernel: &str) -> Option<String> {
    let v = std::env::var("NETCL_AUTOTUNE_FORCE").ok()?;
    v.split(';').find_map(|entry| {
        let (k, l) = entry.split_once('=')?;
        (k.trim() == kernel).then(|| l.trim().to_owned())
    })
}

/// Chooses among `candidates` for (`device`, `kernel`, `shape_key`) by measurement, with caching.
///
/// `NETCL_AUTOTUNE_FORCE` (see [`forced_label`]) overrides the choice for the kernels it names; naming a
/// label that is not a candidate is an error.
///
/// `bench` runs one candidate once and returns its time in milliseconds (device time from profiling events
/// on OpenCL). An error disqualifies the candidate. `default` indexes the candidate used when autotuning is
/// off or every candidate fails.
pub fn tune<C: Serialize + Clone + 'static>(
    device: &Device,
    kernel: &str,
    shape_key: &str,
    candidates: &[C],
    default: usize,
    mut bench: impl FnMut(&C) -> Result<f64>,
) -> Result<C> {
    let Some(default_c) = candidates.get(default).or(candidates.first()) else {
        return Err(Error::Invalid(format!(
            "autotune `{kernel}`: no candidates"
        )));
    };
    if candidates.len() > 1
        && let Some(c) = answered::<C>(device, kernel, shape_key)
    {
        return Ok(c);
    }
    let started = Instant::now();
    let key = full_key(device, kernel, shape_key);
    let forced = forced_label(kernel);
    // Fast path for a decision already resolved and logged in this scope: no serialisation of every
    // candidate, no copy of the cached candidate times. The answer is then kept for [`answered`].
    if forced.is_none() && candidates.len() > 1 && is_enabled() {
        let generation = GENERATION.load(Ordering::SeqCst);
        let path = cache_path();
        if let Some(idx) = resolved_hit(&path, &key, candidates)
            && LOGGED.with(|l| l.borrow().contains(&key))
        {
            keep_answer(&key, &candidates[idx], generation);
            return Ok(candidates[idx].clone());
        }
    }
    let values: Vec<Value> = candidates
        .iter()
        .map(|c| serde_json::to_value(c).unwrap_or(Value::Null))
        .collect();
    let decision =
        |winner: usize, source: Source, cands: Vec<CandidateTime>, note: Option<String>| Decision {
            seq: 0,
            kernel: kernel.to_owned(),
            key: key.clone(),
            device: device.name().to_owned(),
            shape_key: shape_key.to_owned(),
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
    if let Some(want) = forced {
        let labels: Vec<String> = values.iter().map(label).collect();
        let Some(idx) = labels.iter().position(|l| *l == want) else {
            return Err(Error::Invalid(format!(
                "NETCL_AUTOTUNE_FORCE names `{want}` for `{kernel}`, which is not a candidate for shape {shape_key}; the candidates are {labels:?}"
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
        return Ok(default_c.clone());
    }
    if !is_enabled() {
        record(decision(
            default_idx,
            Source::Default,
            Vec::new(),
            Some("NETCL_AUTOTUNE=0: no measurement".into()),
        ));
        return Ok(default_c.clone());
    }
    let path = cache_path();
    if let Some((idx, cands)) = lookup(&path, &key, &values) {
        if LOGGED.with(|l| l.borrow_mut().insert(key.clone())) {
            record(decision(idx, Source::Cache, cands, None));
        }
        return Ok(candidates[idx].clone());
    }
    let n = reps();
    let measuring_span = timing::Measuring::start();
    // The default first (the likely winner on this kind of device), so that slow candidates meet the cutoff.
    let order =
        std::iter::once(default_idx).chain((0..candidates.len()).filter(|&i| i != default_idx));
    let mut slots: Vec<Option<CandidateTime>> = vec![None; candidates.len()];
    for i in order {
        let (c, v) = (&candidates[i], &values[i]);
        let best = slots
            .iter()
            .flatten()
            .filter_map(|t: &CandidateTime| t.ms)
            .reduce(f64::min);
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
        slots[i] = Some(match run() {
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
        });
    }
    drop(measuring_span);
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
        record(decision(
            default_idx,
            Source::Default,
            times,
            Some("every candidate failed; default used, nothing cached".into()),
        ));
        return Ok(default_c.clone());
    };
    store(
        &path,
        &key,
        values[win].clone(),
        Meta {
            candidates: times.clone(),
            measured_at: now_secs(),
        },
    );
    record(decision(win, Source::Measured, times, None));
    Ok(candidates[win].clone())
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Finds a valid cached winner; drops the entry when it is no longer a candidate.
/// The cached winner's index when a previous lookup resolved it and it still names `candidates[idx]`.
fn resolved_hit<C: Serialize>(path: &Path, key: &str, candidates: &[C]) -> Option<usize> {
    thread_local! {
        static JSON: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    }
    let mut m = memo().lock().ok()?;
    let fc = m.get_mut(path)?;
    let idx = fc.resolved.get(key)?.0;
    let c = candidates.get(idx)?;
    JSON.with(|buf| {
        let mut buf = buf.borrow_mut();
        buf.clear();
        serde_json::to_writer(&mut *buf, c).ok()?;
        if let Some(j) = &fc.resolved.get(key)?.1 {
            // The candidate's own JSON, compared without building a value.
            return (j.as_bytes() == buf.as_slice()).then_some(idx);
        }
        let v: Value = serde_json::from_slice(&buf).ok()?;
        if fc.winners.get(key) != Some(&v) {
            return None;
        }
        let j = String::from_utf8(buf.clone()).ok()?;
        fc.resolved.insert(key.to_owned(), (idx, Some(j)));
        Some(idx)
    })
}

fn lookup(path: &Path, key: &str, values: &[Value]) -> Option<(usize, Vec<CandidateTime>)> {
    let mut m = memo().lock().ok()?;
    let fc = m
        .entry(path.to_owned())
        .or_insert_with(|| read_file(path).0);
    let cached = fc.winners.get(key)?;
    match values.iter().position(|v| v == cached) {
        Some(i) => {
            fc.resolved.insert(key.to_owned(), (i, None));
            Some((
                i,
                fc.meta
                    .get(key)
                    .map(|mt| mt.candidates.clone())
                    .unwrap_or_default(),
            ))
        }
        None => {
            tracing::info!(
                "autotune: cached winner {cached} for {key} is no longer a candidate; measuring again"
            );
            fc.winners.remove(key);
            fc.meta.remove(key);
            fc.resolved.remove(key);
            invalidate_hot();
            None
        }
    }
}

/// Reads the cache file; returns the entries and a status line.
fn read_file(path: &Path) -> (FileCache, String) {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return (FileCache::default(), "missing".into());
        }
        Err(e) => return (FileCache::default(), format!("unreadable: {e}")),
    };
    match parse(&text) {
        Ok(fc) => (fc, "ok".into()),
        Err(msg) => {
            let aside = path.with_extension(format!("json.corrupt-{}", now_secs()));
            let moved = fs::rename(path, &aside).is_ok();
            tracing::warn!(
                "autotune cache {} is corrupt ({msg}); {}; it will be rebuilt",
                path.display(),
                if moved {
                    format!("moved to {}", aside.display())
                } else {
                    "left in place".into()
                }
            );
            (FileCache::default(), format!("corrupt ({msg}); rebuilt"))
        }
    }
}

fn parse(text: &str) -> std::result::Result<FileCache, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let Value::Object(obj) = v else {
        return Err("the top level is not a JSON object".into());
    };
    let mut fc = FileCache::default();
    for (k, v) in obj {
        if k == META_KEY {
            if let Ok(meta) = serde_json::from_value::<BTreeMap<String, Meta>>(v) {
                fc.meta = meta;
            }
        } else {
            fc.winners.insert(k, v);
        }
    }
    Ok(fc)
}

fn render(fc: &FileCache) -> Vec<u8> {
    let mut obj = serde_json::Map::new();
    for (k, v) in &fc.winners {
        obj.insert(k.clone(), v.clone());
    }
    let meta: BTreeMap<&String, &Meta> = fc
        .meta
        .iter()
        .filter(|(k, _)| fc.winners.contains_key(*k))
        .collect();
    obj.insert(
        META_KEY.into(),
        serde_json::to_value(meta).unwrap_or(Value::Null),
    );
    let mut out = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b" ");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
    if Value::Object(obj).serialize(&mut ser).is_err() {
        return b"{}".to_vec();
    }
    out.push(b'\n');
    out
}

/// Stores a winner in memory and merges it into the file under the lock.
fn store(path: &Path, key: &str, winner: Value, meta: Meta) {
    if let Ok(mut m) = memo().lock() {
        let fc = m.entry(path.to_owned()).or_default();
        fc.resolved.remove(key);
        fc.winners.insert(key.to_owned(), winner.clone());
        fc.meta.insert(key.to_owned(), meta.clone());
    }
    invalidate_hot();
    let r = (|| -> std::io::Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir)?;
        }
        let _lock = FileLock::acquire(&path.with_extension("json.lock"))?;
        let (mut fc, _) = read_file(path);
        fc.winners.insert(key.to_owned(), winner);
        fc.meta.insert(key.to_owned(), meta);
        write_atomic(path, &render(&fc))
    })();
    if let Err(e) = r {
        tracing::warn!("autotune cache {} not written: {e}", path.display());
    }
}

/// The cache file as it is now (re-read from disk, not the process memo).
pub fn cache_snapshot() -> Result<CacheSnapshot> {
    let path = cache_path();
    let (fc, status) = read_file(&path);
    let entries = fc
        .winners
        .iter()
        .map(|(k, v)| {
            let mut parts = k.splitn(3, "::");
            let device = parts.next().unwrap_or_default().to_owned();
            let kernel = parts.next().unwrap_or_default().to_owned();
            let shape_key = parts.next().unwrap_or_default().to_owned();
            CacheEntry {
                key: k.clone(),
                device,
                kernel,
                shape_key,
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

/// Deletes the cache file and forgets every cached decision of this process.
pub fn clear_cache() -> Result<()> {
    let path = cache_path();
    if let Ok(mut m) = memo().lock() {
        m.remove(&path);
    }
    invalidate_hot();
    match fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// Forgets this process's in-memory cache (the file is kept and read again on the next lookup).
pub fn clear_memory() {
    if let Ok(mut m) = memo().lock() {
        m.clear();
    }
    invalidate_hot();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_key_matches_python_tuple() {
        assert_eq!(shape_key(&[2, 8, 256, 16, 1, 0]), "(2, 8, 256, 16, 1, 0)");
        assert_eq!(shape_key(&[5]), "(5,)");
        assert_eq!(
            shape_key(&[0, -7, 10, i64::MIN, i64::MAX]),
            format!("(0, -7, 10, {}, {})", i64::MIN, i64::MAX)
        );
        assert_eq!(bucket(3), 4);
        assert_eq!(bucket(0), 1);
    }

    #[test]
    fn corrupt_text_is_rejected_by_parse() {
        assert!(parse("{not json").is_err());
        assert!(parse("[1,2]").is_err());
        let fc = parse(r#"{"a::b::(1,)": "x", "__netcl_meta__": {}}"#).map_err(|e| e.to_string());
        assert_eq!(fc.map(|f| f.winners.len()).ok(), Some(1));
    }
}
