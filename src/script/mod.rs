//! The playground language: Rhai with the engine bound in.
//!
//! Names and argument order follow the Rust API (`randn(shape, seed)`, `add(a, b)`, `sum_all(t)`, …), so a
//! snippet reads like the library. A run is bounded ([`Limits`]: code size, script operations, elements per
//! tensor and per run, output size, wall time) and returns a [`RunResult`]: printed output, tensor summaries
//! and images in order, the autotune decisions and kernel launches the run caused, timings, the device, or a
//! structured error with its line and column.

mod ampbind;
mod attnbind;
mod bindings;
pub mod files;
mod layerbind;
mod modelsize;
mod nnbind;
mod opsbind;
mod outsize;
pub mod render;
mod textbind;
pub mod worker;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;

use rhai::{Dynamic, Engine, EvalAltResult, Position};
use serde::{Deserialize, Serialize};

use crate::autotune::{self, Decision};
use crate::device::activity::{self, Activity};
use crate::device::{Device, Launch};
use crate::error::Error;
pub use files::{RunInputs, SavedFile, UploadedFile};
pub use render::{Output, TensorSummary};

/// Registers every playground function on `engine`, in an order where later bindings may refine earlier ones:
/// the language core, the ops, the models, then output (`show`, `plot`, `progress`).
fn register_all(engine: &mut Engine, ctx: &Shared) {
    bindings::register_core(engine, ctx);
    opsbind::register(engine, ctx);
    attnbind::register(engine, ctx);
    layerbind::register(engine, ctx);
    nnbind::register(engine, ctx);
    files::register(engine, ctx);
    textbind::register(engine, ctx);
    ampbind::register(engine, ctx);
    bindings::register_output(engine, ctx);
}

/// Where a run's progress values go (shared, so the engine's own activity reaches it while an op holds the
/// run's context).
pub(crate) type Progress = Rc<RefCell<Box<dyn FnMut(&serde_json::Value)>>>;

/// Bounds on one run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Limits {
    /// Largest accepted source, in bytes.
    pub max_code_bytes: usize,
    /// Script operations (Rhai's count: roughly one per expression node or loop iteration).
    pub max_operations: u64,
    /// Elements of any one tensor the script makes.
    pub max_tensor_elements: usize,
    /// Elements of all tensors the script makes, added up.
    pub max_run_elements: usize,
    /// Bytes of printed text and rendered output before the rest is cut with a notice.
    pub max_output_bytes: usize,
    /// Wall time of the run in milliseconds (checked between script operations), not counting compile time up
    /// to `compile_allowance_ms`.
    pub timeout_ms: u64,
    /// Compile time (kernel programs built, and on CPU drivers the first launch of a kernel at each work-group
    /// size) that does not count against `timeout_ms`, in milliseconds: a first run pays for building the
    /// engine's kernels, which later runs reuse, and that is not the script's own running time. Compile time
    /// beyond it counts.
    pub compile_allowance_ms: u64,
    /// Bytes of the files a run saves (`save_model`) added up, and of any one file it reads (`load_model`).
    pub max_file_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_code_bytes: 64 * 1024,
            max_operations: 50_000_000,
            max_tensor_elements: 1 << 24,
            max_run_elements: 1 << 27,
            max_output_bytes: 512 * 1024,
            timeout_ms: 10_000,
            compile_allowance_ms: 30_000,
            max_file_bytes: 4 << 20,
        }
    }
}

/// The device a run used.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DeviceSummary {
    /// The device name.
    pub name: String,
    /// `gpu`, `cpu`, `accelerator` or `builtin`.
    pub kind: String,
    /// The platform.
    pub platform: String,
    /// The driver version.
    pub driver: String,
}

/// Where the time of a run went, in milliseconds.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Timings {
    /// Waiting for a worker (filled in by the server; 0 when run directly).
    pub queue_ms: f64,
    /// Parsing the script.
    pub parse_ms: f64,
    /// Building OpenCL programs the run needed for the first time.
    pub build_ms: f64,
    /// Measuring autotune candidates.
    pub tune_ms: f64,
    /// Everything else of the run (ops, transfers, the script itself).
    pub run_ms: f64,
    /// Device time of the recorded kernel launches.
    pub device_ms: f64,
    /// The whole run.
    pub total_ms: f64,
}

/// A structured script error.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ScriptError {
    /// `syntax`, `runtime`, `timeout`, `limit`, or an engine error kind (`shape`, `dtype`, `invalid`, …).
    pub kind: String,
    /// The message.
    pub message: String,
    /// 1-based line, where known.
    pub line: Option<usize>,
    /// 1-based column, where known.
    pub column: Option<usize>,
}

/// Everything a run produced.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// Whether the script finished without error.
    pub ok: bool,
    /// The device it ran on.
    pub device: DeviceSummary,
    /// Printed text, tensor summaries and images, in order.
    pub outputs: Vec<Output>,
    /// The script's final value, when it is not `()`.
    pub value: Option<String>,
    /// Autotune decisions taken during the run.
    pub decisions: Vec<Decision>,
    /// The same decisions explained for a reader, one per decision, in the same order.
    pub explained: Vec<render::DecisionView>,
    /// Kernel launches with device times (OpenCL devices).
    pub launches: Vec<Launch>,
    /// Where the time went.
    pub timings: Timings,
    /// The error, when `ok` is false.
    pub error: Option<ScriptError>,
    /// Whether output was cut at `max_output_bytes`.
    pub truncated: bool,
    /// Files the run saved (`save_model`), offered to the reader as downloads.
    pub files: Vec<SavedFile>,
}

/// The mutable state of one run, shared by the bound functions.
pub(crate) struct Ctx {
    pub(crate) device: Device,
    pub(crate) limits: Limits,
    pub(crate) outputs: Vec<Output>,
    pub(crate) output_bytes: usize,
    pub(crate) truncated: bool,
    pub(crate) elements: usize,
    pub(crate) progress: Progress,
    /// The decision log's sequence number when the run started.
    pub(crate) seq0: u64,
    /// The uploads and the data folder the run may read.
    pub(crate) inputs: RunInputs,
    /// The files the run saved so far.
    pub(crate) saved: Vec<SavedFile>,
}

impl Ctx {
    /// Appends an output item unless the output budget is spent.
    pub(crate) fn push(&mut self, o: Output) {
        let size = serde_json::to_string(&o).map(|s| s.len()).unwrap_or(0);
        if self.output_bytes + size > self.limits.max_output_bytes {
            if !self.truncated {
                self.truncated = true;
                self.outputs.push(Output::Text {
                    text: format!(
                        "… output truncated at {} bytes (max_output_bytes)",
                        self.limits.max_output_bytes
                    ),
                });
            }
            return;
        }
        self.output_bytes += size;
        self.outputs.push(o);
    }
}

pub(crate) type Shared = Rc<RefCell<Ctx>>;

/// Converts an engine error into a script error that keeps its kind.
pub(crate) fn engine_err(e: Error) -> Box<EvalAltResult> {
    let mut m = rhai::Map::new();
    m.insert("kind".into(), Dynamic::from(e.kind().to_string()));
    // The kind is shown once, by the page: the message drops the Display prefix (`invalid argument: `).
    let message = match &e {
        Error::Device(s)
        | Error::Shape(s)
        | Error::DType(s)
        | Error::Invalid(s)
        | Error::Limit(s)
        | Error::Unsupported(s) => s.clone(),
        other => other.to_string(),
    };
    m.insert("message".into(), Dynamic::from(message));
    Box::new(EvalAltResult::ErrorRuntime(
        Dynamic::from_map(m),
        Position::NONE,
    ))
}

/// A script error of `kind` with `message`.
pub(crate) fn script_err(kind: &str, message: impl Into<String>) -> Box<EvalAltResult> {
    engine_err_kind(kind, message.into())
}

fn engine_err_kind(kind: &str, message: String) -> Box<EvalAltResult> {
    let mut m = rhai::Map::new();
    m.insert("kind".into(), Dynamic::from(kind.to_string()));
    m.insert("message".into(), Dynamic::from(message));
    Box::new(EvalAltResult::ErrorRuntime(
        Dynamic::from_map(m),
        Position::NONE,
    ))
}

fn pos(p: Position) -> (Option<usize>, Option<usize>) {
    (p.line(), p.position())
}

/// Turns Rhai's error (possibly nested in function calls) into a [`ScriptError`].
fn to_script_error(e: &EvalAltResult) -> ScriptError {
    let outer = e.position();
    let mut inner = e;
    while let EvalAltResult::ErrorInFunctionCall(_, _, next, _)
    | EvalAltResult::ErrorInModule(_, next, _) = inner
    {
        inner = next;
    }
    let at = if inner.position().is_none() {
        outer
    } else {
        inner.position()
    };
    let (line, column) = pos(at);
    let (kind, message) = match inner {
        EvalAltResult::ErrorRuntime(v, _) => match v.read_lock::<rhai::Map>() {
            Some(m) => (
                m.get("kind")
                    .map(|k| k.to_string())
                    .unwrap_or_else(|| "runtime".into()),
                m.get("message").map(|k| k.to_string()).unwrap_or_default(),
            ),
            None => ("runtime".to_string(), v.to_string()),
        },
        EvalAltResult::ErrorParsing(p, _) => ("syntax".to_string(), p.to_string()),
        EvalAltResult::ErrorTooManyOperations(_) => (
            "limit".to_string(),
            "the script exceeded max_operations".to_string(),
        ),
        EvalAltResult::ErrorTerminated(v, _) => ("timeout".to_string(), v.to_string()),
        EvalAltResult::ErrorDataTooLarge(what, _) => {
            ("limit".to_string(), format!("{what} is too large"))
        }
        EvalAltResult::ErrorStackOverflow(_) | EvalAltResult::ErrorTooManyModules(_) => {
            ("limit".to_string(), inner.to_string())
        }
        other => ("runtime".to_string(), strip_position(&other.to_string())),
    };
    ScriptError {
        kind,
        message,
        line,
        column,
    }
}

fn strip_position(s: &str) -> String {
    match s.rfind(" (line ") {
        Some(i) if s.ends_with(')') => s[..i].to_owned(),
        _ => s.to_owned(),
    }
}

fn summary(d: &Device) -> DeviceSummary {
    let i = d.info();
    DeviceSummary {
        name: i.name.clone(),
        kind: i.kind.to_string(),
        platform: i.platform.clone(),
        driver: i.driver.clone(),
    }
}

/// The signatures of every function the playground language registers (`name(a: Tensor, …) -> Tensor`), so
/// the playground reference can be checked against what a script can call.
pub fn function_signatures() -> Vec<String> {
    let ctx: Shared = Rc::new(RefCell::new(Ctx {
        device: Device::builtin(),
        limits: Limits::default(),
        outputs: Vec::new(),
        output_bytes: 0,
        truncated: false,
        elements: 0,
        progress: Rc::new(RefCell::new(Box::new(|_| {}))),
        seq0: 0,
        inputs: RunInputs::default(),
        saved: Vec::new(),
    }));
    let mut engine = Engine::new_raw();
    register_all(&mut engine, &ctx);
    engine.gen_fn_signatures(false)
}

/// Runs `code` on `device` within `limits`.
pub fn run(device: &Device, code: &str, limits: &Limits) -> RunResult {
    run_with_progress(device, code, limits, Box::new(|_| {}))
}

/// Like [`run`], calling `progress` with each value the script passes to `progress(…)` as it happens
/// (training loops report their loss this way; the server streams these as server-sent events).
pub fn run_with_progress(
    device: &Device,
    code: &str,
    limits: &Limits,
    progress: Box<dyn FnMut(&serde_json::Value)>,
) -> RunResult {
    run_with_inputs(device, code, limits, RunInputs::default(), progress)
}

/// Like [`run_with_progress`], with files the script may read: uploads, and the data folder
/// `load_model(name)` looks in (see [`files`]).
pub fn run_with_inputs(
    device: &Device,
    code: &str,
    limits: &Limits,
    inputs: RunInputs,
    progress: Box<dyn FnMut(&serde_json::Value)>,
) -> RunResult {
    let started = Instant::now();
    let seq = autotune::last_seq();
    autotune::begin_scope();
    let build0 = crate::backend::opencl::program::build_ms_total();
    let fail = |kind: &str, message: String| RunResult {
        ok: false,
        device: summary(device),
        outputs: Vec::new(),
        value: None,
        decisions: Vec::new(),
        explained: Vec::new(),
        launches: Vec::new(),
        timings: Timings::default(),
        error: Some(ScriptError {
            kind: kind.into(),
            message,
            line: None,
            column: None,
        }),
        truncated: false,
        files: Vec::new(),
    };
    if code.len() > limits.max_code_bytes {
        return fail(
            "limit",
            format!(
                "the code is {} bytes; max_code_bytes is {}",
                code.len(),
                limits.max_code_bytes
            ),
        );
    }
    let ctx: Shared = Rc::new(RefCell::new(Ctx {
        device: device.clone(),
        limits: limits.clone(),
        outputs: Vec::new(),
        output_bytes: 0,
        truncated: false,
        elements: 0,
        progress: Rc::new(RefCell::new(progress)),
        seq0: seq,
        inputs,
        saved: Vec::new(),
    }));
    let _engine_activity = report_activity(ctx.borrow().progress.clone());
    let mut engine = Engine::new();
    configure(&mut engine, limits, started);
    register_all(&mut engine, &ctx);
    device.record_launches(true);
    let parse_start = Instant::now();
    let ast = engine.compile(code);
    let parse_ms = parse_start.elapsed().as_secs_f64() * 1e3;
    let (value, error) = match ast {
        Err(e) => {
            let (line, column) = pos(e.1);
            (
                None,
                Some(ScriptError {
                    kind: "syntax".into(),
                    message: e.0.to_string(),
                    line,
                    column,
                }),
            )
        }
        Ok(ast) => {
            let mut scope = rhai::Scope::new();
            match engine.eval_ast_with_scope::<Dynamic>(&mut scope, &ast) {
                Ok(v) if v.is_unit() => (None, None),
                Ok(v) => (Some(bindings::display(&v)), None),
                Err(e) => (None, Some(to_script_error(&e))),
            }
        }
    };
    let launches = device.take_launches().unwrap_or_default();
    device.record_launches(false);
    let _ = device.synchronize();
    let decisions = autotune::decisions_since(seq);
    let total_ms = started.elapsed().as_secs_f64() * 1e3;
    let build_ms = crate::backend::opencl::program::build_ms_total() - build0;
    let tune_ms = decisions
        .iter()
        .filter(|d| d.source == autotune::Source::Measured && d.depth == 0)
        .fold(0.0, |a, d| a + d.tune_ms);
    let device_ms = launches.iter().fold(0.0, |a, l| a + l.ms);
    let c = ctx.borrow();
    RunResult {
        ok: error.is_none(),
        device: summary(device),
        outputs: c.outputs.clone(),
        value,
        explained: decisions.iter().map(render::explain).collect(),
        decisions,
        launches,
        timings: Timings {
            queue_ms: 0.0,
            parse_ms,
            build_ms,
            tune_ms,
            run_ms: (total_ms - parse_ms - build_ms - tune_ms).max(0.0),
            device_ms,
            total_ms,
        },
        error,
        truncated: c.truncated,
        files: c.saved.clone(),
    }
}

/// Passes the engine's own work (programs built, candidates measured) to `sink` as progress values with a
/// `netcl` field, which the playground shows as a status line ("building kernels", "measuring candidates")
/// rather than as a value of the script's.
fn report_activity(sink: Progress) -> activity::ObserverGuard {
    let mut built = 0usize;
    let compile0 = crate::backend::opencl::program::compile_ms_thread();
    activity::observe(move |a| {
        // Compile time of this run so far: the playground does not count it against the run's time limit, up
        // to an allowance.
        let compile_ms = (crate::backend::opencl::program::compile_ms_thread() - compile0).round();
        let mut v = match *a {
            Activity::Building {
                family,
                kernel,
                batch,
            } => {
                built += batch;
                serde_json::json!({"netcl": "building", "family": family, "kernel": kernel, "built": built, "batch": batch})
            }
            Activity::Preparing { kernel } => {
                serde_json::json!({"netcl": "preparing", "kernel": kernel})
            }
            Activity::Measuring {
                op,
                candidate,
                index,
                of,
            } => {
                serde_json::json!({"netcl": "measuring", "op": op, "candidate": candidate, "index": index, "of": of})
            }
        };
        v["compile_ms"] = serde_json::json!(compile_ms);
        if let Ok(mut f) = sink.try_borrow_mut() {
            f(&v);
        }
    })
}

fn configure(engine: &mut Engine, limits: &Limits, started: Instant) {
    engine.set_max_operations(limits.max_operations);
    engine.set_max_call_levels(64);
    engine.set_max_expr_depths(128, 64);
    engine.set_max_string_size(1 << 20);
    engine.set_max_array_size(1 << 22);
    engine.set_max_map_size(1 << 16);
    engine.set_max_modules(0);
    let timeout = limits.timeout_ms;
    let allowance = limits.compile_allowance_ms as f64;
    let compile0 = crate::backend::opencl::program::compile_ms_thread();
    engine.on_progress(move |ops| {
        if ops % 256 == 0
            && started.elapsed().as_secs_f64() * 1e3
                - (crate::backend::opencl::program::compile_ms_thread() - compile0).min(allowance)
                > timeout as f64
        {
            Some(Dynamic::from(format!(
                "the run exceeded its time limit of {timeout} ms"
            )))
        } else if autotune::idle_interrupted() {
            Some(Dynamic::from("the idle measurement pass was interrupted"))
        } else {
            None
        }
    });
}
