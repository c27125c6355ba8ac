//! The decision log: every choice the tuner makes (measured, cached, from the database, heuristic, forced, the
//! only candidate, or the default after every candidate failed), readable by callers, the CLI and the wiki.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use serde::{Deserialize, Serialize};
use serde_json::Value;

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
    /// Every candidate was timed (the last of them just now).
    Measured,
    /// The winner came from the in-memory or on-disk cache of earlier measurements.
    Cache,
    /// The shipped tuning database has a winner for this device class and shape.
    Database,
    /// No measurement yet: the op's first choice for this device type and shape class (or another device's
    /// winner of the same type).
    Heuristic,
    /// Every candidate failed: the default was used.
    Default,
    /// An environment switch or an explicit argument forced the choice.
    Forced,
    /// Only one candidate was eligible for this shape.
    Only,
    /// The choice's programs are still being built by a helper process: a quick generic kernel ran instead.
    Interim,
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

const LOG_CAPACITY: usize = 4096;
static SEQ: AtomicU64 = AtomicU64::new(0);

fn log() -> &'static Mutex<VecDeque<Decision>> {
    static L: OnceLock<Mutex<VecDeque<Decision>>> = OnceLock::new();
    L.get_or_init(|| Mutex::new(VecDeque::new()))
}

/// The sequence number of the newest decision (0 before the first).
pub fn last_seq() -> u64 {
    SEQ.load(Ordering::SeqCst)
}

/// Every logged decision with a sequence number above `seq`, oldest first (the log keeps the last 4096).
pub fn decisions_since(seq: u64) -> Vec<Decision> {
    log()
        .lock()
        .map(|l| l.iter().filter(|d| d.seq > seq).cloned().collect())
        .unwrap_or_default()
}

/// Appends a decision to the log and returns its sequence number.
pub fn record(mut d: Decision) -> u64 {
    let seq = SEQ.fetch_add(1, Ordering::SeqCst) + 1;
    d.seq = seq;
    tracing::debug!(kernel = %d.kernel, shape = %d.shape_key, winner = %d.winner_label, source = ?d.source, "autotune decision");
    if let Ok(mut l) = log().lock() {
        if l.len() == LOG_CAPACITY {
            l.pop_front();
        }
        l.push_back(d);
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
