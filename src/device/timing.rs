//! The timing scope of a thread: whether its kernel launches are timed, and the launches it records.
//!
//! Backends ask [`timed`] before each launch: a launch is timed (an event kept with profiling) only while the
//! tuner measures candidates or while the caller records launches, because on some drivers a launch with an
//! event costs twice the host time of one without. Per thread, so concurrent runs (the playground's jobs,
//! parallel tests) each see only their own launches.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use crate::error::Result;

/// One recorded kernel launch.
#[derive(Debug, Clone, Serialize)]
pub struct Launch {
    /// The kernel function name.
    pub kernel: String,
    /// The global work size.
    pub global: Vec<usize>,
    /// The local work size, if one was given.
    pub local: Option<Vec<usize>>,
    /// Device time from start to end, in milliseconds.
    pub ms: f64,
    /// Whether the launch timed a tuning candidate rather than doing the caller's work.
    pub tuning: bool,
}

/// A backend's handle on one launch's completion and device time.
pub(crate) trait LaunchEvent: Send {
    /// Waits for the launch and returns its device start and end, in nanoseconds of the device clock.
    fn span_ns(&self) -> Result<(u64, u64)>;
}

struct Recorded {
    kernel: String,
    global: Vec<usize>,
    local: Option<Vec<usize>>,
    tuning: bool,
    event: Box<dyn LaunchEvent>,
}

thread_local! {
    static MEASURING: Cell<u32> = const { Cell::new(0) };
    static RECORDING: RefCell<Option<Vec<Recorded>>> = const { RefCell::new(None) };
}

/// While alive, this thread's launches are timed as tuning measurements.
pub(crate) struct Measuring(());

impl Measuring {
    /// Starts a measuring span (spans nest).
    pub(crate) fn start() -> Measuring {
        MEASURING.with(|m| m.set(m.get() + 1));
        Measuring(())
    }
}

impl Drop for Measuring {
    fn drop(&mut self) {
        MEASURING.with(|m| m.set(m.get().saturating_sub(1)));
    }
}

/// Whether this thread is measuring tuning candidates now.
pub fn measuring() -> bool {
    MEASURING.with(|m| m.get() > 0)
}

/// How many measuring spans of this thread are open (0 outside tuning).
pub(crate) fn measuring_depth() -> u32 {
    MEASURING.with(Cell::get)
}

/// Whether this thread's launches are recorded now.
pub(crate) fn recording() -> bool {
    RECORDING.with(|rec| rec.borrow().is_some())
}

/// Adds a launch to this thread's record, when recording is on.
pub(crate) fn record(
    kernel: &str,
    global: &[usize],
    local: Option<&[usize]>,
    event: Box<dyn LaunchEvent>,
) {
    let tuning = measuring();
    RECORDING.with(|rec| {
        if let Some(list) = rec.borrow_mut().as_mut() {
            list.push(Recorded {
                kernel: kernel.to_owned(),
                global: global.to_vec(),
                local: local.map(<[usize]>::to_vec),
                tuning,
                event,
            });
        }
    });
}

thread_local! {
    static HOST_READS: Cell<u64> = const { Cell::new(0) };
}

/// Counts one device→host read made by this thread (called by the OpenCL backend's read; the built-in
/// device's memory is the host's).
pub(crate) fn count_host_read() {
    HOST_READS.with(|c| c.set(c.get() + 1));
    count_host_wait();
}

/// Times the host has waited for a device outside tuning measurements, in every thread: each read back and
/// each `synchronize`. The autotuner's background mode takes one wait as the end of a caller's call.
static HOST_WAITS: AtomicU64 = AtomicU64::new(0);

/// Counts one wait of the host for a device (a read back or a `synchronize`), unless the autotuner is
/// measuring on this thread.
pub(crate) fn count_host_wait() {
    if !measuring() {
        HOST_WAITS.fetch_add(1, Ordering::Relaxed);
    }
}

/// How many times the host has waited for a device outside tuning measurements so far (see
/// [`count_host_wait`]).
pub fn host_waits() -> u64 {
    HOST_WAITS.load(Ordering::Relaxed)
}

/// How many device→host reads from OpenCL devices this thread has made so far (every tensor read back, every
/// value the host needed): a loop that should stay on the device can check that this does not grow.
pub fn host_reads() -> u64 {
    HOST_READS.with(Cell::get)
}

/// Turns recording of this thread's kernel launches on or off (off discards what was recorded).
pub fn record_launches(on: bool) {
    RECORDING.with(|rec| {
        let mut rec = rec.borrow_mut();
        *rec = if on {
            Some(rec.take().unwrap_or_default())
        } else {
            None
        };
    });
}

fn take_recorded() -> Vec<Recorded> {
    RECORDING.with(|rec| {
        rec.borrow_mut()
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    })
}

/// Returns and clears this thread's recorded launches, waiting for each to finish to read its device time.
pub fn take_launches() -> Vec<Launch> {
    take_recorded()
        .into_iter()
        .map(|r| Launch {
            ms: r
                .event
                .span_ns()
                .map(|(s, e)| e.saturating_sub(s) as f64 / 1e6)
                .unwrap_or(0.0),
            kernel: r.kernel,
            global: r.global,
            local: r.local,
            tuning: r.tuning,
        })
        .collect()
}

/// Returns and clears this thread's recorded launches as one span of device time: from the start of the first
/// launch to the end of the last, in milliseconds, after waiting for them (`None` when nothing was launched).
pub fn take_launch_span_ms() -> Result<Option<f64>> {
    Ok(take_launch_profile()?.0)
}

/// Returns and clears this thread's recorded launches with their device times, in launch order, and their
/// span as [`take_launch_span_ms`] gives it, after waiting for them.
pub fn take_launch_profile() -> Result<(Option<f64>, Vec<Launch>)> {
    let list = take_recorded();
    let (mut start, mut end) = (u64::MAX, 0u64);
    let mut out = Vec::with_capacity(list.len());
    for r in list {
        let (s, e) = r.event.span_ns()?;
        start = start.min(s);
        end = end.max(e);
        out.push(Launch {
            ms: e.saturating_sub(s) as f64 / 1e6,
            kernel: r.kernel,
            global: r.global,
            local: r.local,
            tuning: r.tuning,
        });
    }
    let span = (!out.is_empty()).then(|| end.saturating_sub(start) as f64 / 1e6);
    Ok((span, out))
}
