//! `netcl bench`: named cases timed on a device, one JSON object per line.
//!
//! Keys match the peer script's (`case`, `impl`, `ms`, `median_ms`, `first_call_ms`, `gflops` or `gbps`,
//! `rel_err`), so runs compare line by line; `device` and `decisions` are added. Times are wall-clock around
//! the op plus a device synchronisation, like the peer's, after two warm-up calls. On OpenCL the same number
//! of further calls is timed by the kernels' profiling events (the start of the first kernel to the end of
//! the last): `device_ms`, `device_median_ms` and `device_gflops` or `device_gbps`, which leave out the
//! host's launch and synchronisation overhead that dominates small calls. Those calls are separate because a
//! launch that keeps its event is slower to enqueue. `host_median_ms` is how long the call takes to
//! return before the synchronisation: the engine's own share of that overhead.
//!
//! Cases ending in `_large` use tensors of hundreds of megabytes so the device's memory system, not launch
//! overhead, bounds them; `copy_large` measures the device's copy bandwidth as the yardstick for them. Their
//! reference check is skipped at full size (the built-in device is single-threaded) and said so in `note`.

mod cases_attention;
mod cases_conv;
mod cases_core;
mod cases_gemm;
mod cases_half;
mod cases_models;
mod cases_reduce;
mod cases_tc;

use std::time::Instant;

use serde::Serialize;

use crate::autotune::{self, Decision};
use crate::device::Device;
use crate::device::Launch;
use crate::device::timing::{record_launches, take_launch_profile};
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
    /// The process's precision policy (`NETCL_PRECISION`); the `_tf32` and `_fp16` cases set their own.
    pub precision: String,
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
    /// Minimum device time per call in milliseconds (OpenCL profiling events), when the device records it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_ms: Option<f64>,
    /// Median device time per call in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_median_ms: Option<f64>,
    /// GFLOP/s at the minimum device time, for compute cases.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_gflops: Option<f64>,
    /// GB/s at the minimum device time, for memory-bound cases.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_gbps: Option<f64>,
    /// Median time for the host to return from the call (enqueueing its work, before the synchronisation), in
    /// milliseconds: the share of a small call that is the engine's own overhead.
    pub host_median_ms: f64,
    /// Why a field is missing (for example a reference check skipped for a large case).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Programs compiled from source during the first call (a cached binary loaded is not counted).
    pub first_call_builds: u64,
    /// Milliseconds the first call spent compiling or loading programs, summed over threads.
    pub first_call_compile_ms: f64,
    /// Autotune decisions taken by the first call.
    pub decisions: Vec<Decision>,
    /// Where a call's device time goes, kernel by kernel (`--profile`), when the device records it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<Profile>,
}

/// Where a call's device time goes, averaged over the device-timed calls (`netcl bench --profile`).
#[derive(Debug, Clone, Serialize)]
pub struct Profile {
    /// Kernel launches per call.
    pub launches: f64,
    /// Device time per call from the first kernel's start to the last one's end, in milliseconds.
    pub span_ms: f64,
    /// The kernels' own device time per call, summed, in milliseconds.
    pub busy_ms: f64,
    /// `span_ms − busy_ms`: time per call the device spent between kernels, waiting for the host to launch
    /// the next one or to read a result back (kernels that overlap would make it negative; an in-order queue
    /// runs them one at a time).
    pub idle_ms: f64,
    /// Launches that timed tuning candidates (per call), left out of everything above.
    pub tuning_launches: f64,
    /// Each kernel function's launches and device time per call, and its share of `busy_ms`; largest first.
    pub kernels: Vec<KernelShare>,
}

/// One kernel function's part of a [`Profile`].
#[derive(Debug, Clone, Serialize)]
pub struct KernelShare {
    /// The kernel function's name.
    pub kernel: String,
    /// Launches per call.
    pub launches: f64,
    /// Device time per call, in milliseconds.
    pub ms: f64,
    /// Share of the kernels' device time (0 to 1).
    pub share: f64,
}

/// Sums the calls' (span, launches) into a [`Profile`] per call.
fn profile_of(calls: &[(f64, Vec<Launch>)]) -> Option<Profile> {
    if calls.is_empty() {
        return None;
    }
    let n = calls.len() as f64;
    let mut by: Vec<(String, f64, f64)> = Vec::new();
    let (mut launches, mut busy, mut span, mut tuning) = (0f64, 0f64, 0f64, 0f64);
    for (s, list) in calls {
        span += s;
        for l in list {
            if l.tuning {
                tuning += 1.0;
                continue;
            }
            launches += 1.0;
            busy += l.ms;
            match by.iter_mut().find(|e| e.0 == l.kernel) {
                Some(e) => {
                    e.1 += 1.0;
                    e.2 += l.ms;
                }
                None => by.push((l.kernel.clone(), 1.0, l.ms)),
            }
        }
    }
    by.sort_by(|a, b| b.2.total_cmp(&a.2));
    let kernels = by
        .into_iter()
        .map(|(kernel, count, ms)| KernelShare {
            kernel,
            launches: round4(count / n),
            ms: round4(ms / n),
            share: if busy > 0.0 { round4(ms / busy) } else { 0.0 },
        })
        .collect();
    Some(Profile {
        launches: round4(launches / n),
        span_ms: round4(span / n),
        busy_ms: round4(busy / n),
        idle_ms: round4((span - busy) / n),
        tuning_launches: round4(tuning / n),
        kernels,
    })
}

/// Every case, in the order `netcl bench` runs them.
pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    v.extend(cases_core::cases());
    v.extend(cases_conv::cases());
    v.extend(cases_tc::cases());
    v.extend(cases_gemm::cases());
    v.extend(cases_reduce::cases());
    v.extend(cases_half::cases());
    v.extend(cases_attention::cases());
    v.extend(cases_models::cases());
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
    /// Add each case's kernel-by-kernel [`Profile`] (from the device-timed calls).
    pub profile: bool,
}

/// Runs one case on `device`.
pub fn run_case(case: &Case, device: &Device, opts: &BenchOptions) -> Result<BenchLine> {
    // Benchmarks time tuned kernels: winners are measured before the first call returns, unless
    // NETCL_AUTOTUNE names a mode.
    let cfg = autotune::config();
    if !cfg.mode_from_env && cfg.mode != autotune::Mode::Sync {
        autotune::prefer_mode(autotune::Mode::Sync);
    }
    let seq = autotune::last_seq();
    let mut run = (case.setup)(device, opts.small)?;
    let (builds0, compile0) = (
        crate::program::program_stats().source_builds,
        crate::program::compile_ms_total(),
    );
    let t0 = Instant::now();
    let out = run()?;
    device.synchronize()?;
    let first_call_ms = t0.elapsed().as_secs_f64() * 1e3;
    let first_call_builds = crate::program::program_stats().source_builds - builds0;
    let first_call_compile_ms = crate::program::compile_ms_total() - compile0;
    let decisions = autotune::decisions_since(seq);
    // The built-in device is single-threaded: at full size the `_large` cases would take minutes to check.
    let skip_check = opts.check && device.is_opencl() && is_large(case.name) && !opts.small;
    let rel_err = if opts.check && device.is_opencl() && !skip_check {
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
    let mut dev_times = Vec::with_capacity(opts.reps);
    let mut host_times = Vec::with_capacity(opts.reps);
    let mut profiled = Vec::new();
    // Wall times first, as a user's call runs: launches keep no events then.
    for _ in 0..opts.reps.max(1) {
        let t = Instant::now();
        let o = run()?;
        host_times.push(t.elapsed().as_secs_f64() * 1e3);
        device.synchronize()?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        drop(o);
    }
    // Then device times from the launches' profiling events, in calls of their own (asking for events makes
    // each launch slower to enqueue on some drivers).
    for _ in 0..opts.reps.max(1) {
        record_launches(true);
        let o = run();
        let synced = device.synchronize();
        let launches = take_launch_profile();
        record_launches(false);
        let o = o?;
        synced?;
        let (span, list) = launches?;
        if let Some(d) = span {
            dev_times.push(d);
            if opts.profile {
                profiled.push((d, list));
            }
        }
        drop(o);
    }
    times.sort_by(f64::total_cmp);
    dev_times.sort_by(f64::total_cmp);
    host_times.sort_by(f64::total_cmp);
    let ms = times[0];
    let median_ms = times[times.len() / 2];
    // Device time only when every call launched kernels (a call that only copies or allocates records none).
    let dev_ms = (dev_times.len() == times.len()).then(|| dev_times[0]);
    let dev_median = (dev_times.len() == times.len()).then(|| dev_times[dev_times.len() / 2]);
    let rate = |per: f64, t: Option<f64>| t.filter(|&t| t > 0.0).map(|t| round1(per / t / 1e6));
    let (gflops, gbps, device_gflops, device_gbps) = match (case.work)(opts.small) {
        Work::Flops(f) => (rate(f, Some(ms)), None, rate(f, dev_ms), None),
        Work::Bytes(b) => (None, rate(b, Some(ms)), None, rate(b, dev_ms)),
    };
    let note = skip_check.then(|| {
        "reference check skipped: a _large case at full size takes minutes on the single-threaded built-in device (checked at --small size)".to_owned()
    });
    Ok(BenchLine {
        case: case.name.to_owned(),
        implementation: "netcl".into(),
        device: device.name().to_owned(),
        precision: crate::precision::current()?.name().to_owned(),
        ms: round4(ms),
        median_ms: round4(median_ms),
        first_call_ms: round1(first_call_ms),
        gflops,
        gbps,
        rel_err,
        device_ms: dev_ms.map(round4),
        device_median_ms: dev_median.map(round4),
        device_gflops,
        device_gbps,
        host_median_ms: round4(host_times[host_times.len() / 2]),
        note,
        first_call_builds,
        first_call_compile_ms: round1(first_call_compile_ms),
        decisions,
        profile: profile_of(&profiled),
    })
}

/// Whether `name` is one of the large-tensor cases.
fn is_large(name: &str) -> bool {
    // Full-size attention is tens of GFLOP, minutes in the reference's f64 loops.
    // So is a whole model at 224×224 or 112×112 (hundreds of GFLOP a step).
    name.ends_with("_large")
        || name.ends_with("_large_f16")
        || name.starts_with("attention_fwd")
        || name.starts_with("resnet18_")
        || name.starts_with("mobilenet_v2_")
        // 137 GFLOP a call and more; the batched products 13–17 GFLOP.
        || name.starts_with("matmul_4096")
        || name == "matmul_8192"
        || name == "matmul_odd_4097"
        || name.starts_with("bmm_")
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
