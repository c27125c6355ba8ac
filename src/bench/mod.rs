//! `netcl bench`: named cases timed on a device, one JSON object per line.
//!
//! Keys match the peer script's (`case`, `impl`, `ms`, `median_ms`, `first_call_ms`, `gflops` or `gbps`,
//! `rel_err`), so runs compare line by line; `device` and `decisions` are added. Times are wall-clock around
//! the op plus a device synchronisation, like the peer's, after two warm-up calls.

mod cases_conv;
mod cases_core;
mod cases_reduce;

use std::time::Instant;

use serde::Serialize;

use crate::autotune::{self, Decision};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// What one case measures per call.
pub enum Work {
    /// Floating-point operations per call (reported as GFLOP/s).
    Flops(f64),
    /// Bytes moved per call (reported as GB/s).
    Bytes(f64),
}

/// A prepared case: each call runs the op once and returns its outputs.
pub type Runner = Box<dyn FnMut() -> Result<Vec<Tensor>>>;

/// One benchmark case: builds its inputs on a device and returns the closure to time.
pub struct Case {
    /// The case name (matches the peer script's where it has the case).
    pub name: &'static str,
    /// The work per call.
    pub work: fn(small: bool) -> Work,
    /// Prepares inputs on `device` and returns a runner producing the output tensors.
    pub setup: fn(device: &Device, small: bool) -> Result<Runner>,
}

/// One result line.
#[derive(Debug, Clone, Serialize)]
pub struct BenchLine {
    /// The case name.
    pub case: String,
    /// Always `netcl`.
    #[serde(rename = "impl")]
    pub implementation: String,
    /// The device name.
    pub device: String,
    /// Minimum time per call in milliseconds.
    pub ms: f64,
    /// Median time per call in milliseconds.
    pub median_ms: f64,
    /// The first call (kernel builds and autotuning included) in milliseconds.
    pub first_call_ms: f64,
    /// GFLOP/s at the minimum time, for compute cases.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gflops: Option<f64>,
    /// GB/s at the minimum time, for memory-bound cases.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gbps: Option<f64>,
    /// max|out − ref| / max|ref| against the built-in device, when checked.
    pub rel_err: Option<f64>,
    /// Autotune decisions taken by the first call.
    pub decisions: Vec<Decision>,
}

/// Every case, in the order `netcl bench` runs them.
pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    v.extend(cases_core::cases());
    v.extend(cases_conv::cases());
    v.extend(cases_reduce::cases());
    v
}

/// Options of a run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// CPU-sized shapes (batch /4, matmul 1024), as the peer's `--small`.
    pub small: bool,
    /// Timed repetitions after two warm-ups.
    pub reps: usize,
    /// Compare against the built-in device.
    pub check: bool,
}

/// Runs one case on `device`.
pub fn run_case(case: &Case, device: &Device, opts: &BenchOptions) -> Result<BenchLine> {
    let seq = autotune::last_seq();
    let mut run = (case.setup)(device, opts.small)?;
    let t0 = Instant::now();
    let out = run()?;
    device.synchronize()?;
    let first_call_ms = t0.elapsed().as_secs_f64() * 1e3;
    let decisions = autotune::decisions_since(seq);
    let rel_err = if opts.check && device.is_opencl() {
        let cpu = Device::builtin();
        let mut reference = (case.setup)(&cpu, opts.small)?;
        let want = reference()?;
        Some(rel_error(&out, &want)?)
    } else {
        None
    };
    drop(out);
    run()?;
    device.synchronize()?;
    let mut times = Vec::with_capacity(opts.reps);
    for _ in 0..opts.reps.max(1) {
        let t = Instant::now();
        let o = run()?;
        device.synchronize()?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        drop(o);
    }
    times.sort_by(f64::total_cmp);
    let ms = times[0];
    let median_ms = times[times.len() / 2];
    let (gflops, gbps) = match (case.work)(opts.small) {
        Work::Flops(f) => (Some(round1(f / ms / 1e6)), None),
        Work::Bytes(b) => (None, Some(round1(b / ms / 1e6))),
    };
    Ok(BenchLine {
        case: case.name.to_owned(),
        implementation: "netcl".into(),
        device: device.name().to_owned(),
        ms: round4(ms),
        median_ms: round4(median_ms),
        first_call_ms: round1(first_call_ms),
        gflops,
        gbps,
        rel_err,
        decisions,
    })
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}
fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

/// max|a − b| / max|b| over all outputs.
pub fn rel_error(got: &[Tensor], want: &[Tensor]) -> Result<f64> {
    if got.len() != want.len() {
        return Err(Error::Invalid("outputs differ in count".into()));
    }
    let (mut num, mut den) = (0f64, 0f64);
    for (g, w) in got.iter().zip(want) {
        let (g, w) = (g.to_f32_vec()?, w.to_f32_vec()?);
        if g.len() != w.len() {
            return Err(Error::Shape("output sizes differ".into()));
        }
        for (a, b) in g.iter().zip(&w) {
            num = num.max((*a as f64 - *b as f64).abs());
            den = den.max((*b as f64).abs());
        }
    }
    Ok(num / (den + 1e-12))
}
