//! Kernel sources from `kernels/`, built once per (context, source, defines) and kept.
//!
//! A build failure returns [`Error::Build`] with the compiler's log. Kernel objects are wrapped in a mutex:
//! setting arguments and enqueueing is one critical section, so a kernel can be launched from several threads.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use opencl3::context::Context;
use opencl3::kernel::Kernel;
use opencl3::program::Program;
use opencl3::types::cl_device_id;

use crate::error::{ClContext, Error, Result};

include!(concat!(env!("OUT_DIR"), "/kernel_sources.rs"));

/// The OpenCL C source of kernel family `name` as it is built: the shared prelude, then the file
/// `kernels/<name>.cl`; `None` if there is no such family.
pub fn kernel_source(name: &str) -> Option<&'static str> {
    KERNEL_SOURCES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
}

/// The shared prelude (`kernels/prelude.cl`) that begins the source of every kernel family.
pub fn kernel_prelude() -> &'static str {
    KERNEL_PRELUDE
}

/// The kernels that family `name` declares, in source order (read from its source when netcl was built);
/// `None` for an unknown family. Kernels inside `#if` blocks are listed whether or not a given set of defines
/// compiles them.
pub fn kernel_names(family: &str) -> Option<&'static [&'static str]> {
    KERNEL_NAMES
        .iter()
        .find(|(n, _)| *n == family)
        .map(|(_, k)| *k)
}

/// The names of every embedded kernel family.
pub fn kernel_families() -> impl Iterator<Item = &'static str> {
    KERNEL_SOURCES.iter().map(|(n, _)| *n)
}

/// Preprocessor defines for one build of a kernel family; part of the cache key. Kept as the option text
/// itself (` -D name=value` per define, in order), one string that grows as defines are added: launches build
/// their defines on every call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Defines(String);

impl Defines {
    /// No defines.
    pub fn new() -> Self {
        Defines(String::new())
    }

    /// Adds `-D name=value`.
    pub fn set(mut self, name: &str, value: impl std::fmt::Display) -> Self {
        if self.0.is_empty() {
            self.0.reserve(96);
        }
        let _ = write!(self.0, " -D {name}={value}");
        self
    }

    /// The compiler options: OpenCL C 1.2, contraction into FMA allowed, IEEE semantics kept (no fast-math,
    /// so NaN and infinities propagate), then the defines in order.
    pub fn options(&self) -> String {
        format!("-cl-std=CL1.2 -cl-mad-enable{}", self.0)
    }
}

/// FNV-1a over the bytes written: the program map's keys are short strings, hashed on every launch.
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// A built kernel, lockable for argument setting and launch.
pub(crate) struct ClKernel {
    pub(crate) name: String,
    kernel: Mutex<KernelSlot>,
}

/// A kernel object with the by-value arguments last set on it. OpenCL keeps argument values between launches,
/// so a launch sets only the values that changed: repeated calls of one op skip most `clSetKernelArg` calls.
pub(crate) struct KernelSlot {
    pub(crate) kernel: Kernel,
    /// Per argument index: the bytes last set by value, or `None` when unknown or set to a buffer (a buffer
    /// handle is set every time: a released handle's address can come back for a new buffer).
    pub(crate) values: Vec<Option<ArgBytes>>,
}

/// The bytes of one by-value argument (at most an `int8`), or the size of a `__local` buffer.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArgBytes {
    Value(u8, [u8; 32]),
    Local(usize),
}

impl ClKernel {
    pub(crate) fn lock(&self) -> Result<MutexGuard<'_, KernelSlot>> {
        self.kernel
            .lock()
            .map_err(|_| Error::Invalid(format!("kernel `{}` lock poisoned", self.name)))
    }
}

struct Built {
    program: Program,
    kernels: Mutex<HashMap<String, Arc<ClKernel>>>,
}

// SAFETY: Program is Send + Sync in opencl3; the kernel map is behind a mutex.
unsafe impl Sync for Built {}

/// Built programs of one context, keyed by (family, defines). The map is keyed by a hash of the pair and holds
/// the pairs themselves for the comparison, so a lookup builds no strings (launches look kernels up every time).
#[derive(Default)]
pub(crate) struct ProgramCache {
    built: Mutex<HashMap<u64, Vec<BuiltEntry>>>,
    /// Kernels by a caller's compact key (see [`ProgramCache::kernel_by`]).
    quick: Mutex<HashMap<QuickKey, Arc<ClKernel>>>,
}

/// A kernel named by its family, its name and up to 12 integers that determine its defines, so that a hot
/// call finds it without writing and hashing the compile options.
pub(crate) type QuickKey = (&'static str, &'static str, [i32; 12]);

/// The [`QuickKey`] of kernel `name` of `family` whose defines are determined by `parts` (at most 12).
pub(crate) fn quick_key(family: &'static str, name: &'static str, parts: &[usize]) -> QuickKey {
    debug_assert!(parts.len() <= 12, "a quick key holds at most 12 integers");
    let mut k = [0; 12];
    for (slot, &p) in k.iter_mut().zip(parts) {
        *slot = p as i32;
    }
    (family, name, k)
}

/// One built program with the (family, defines) pair it was built for.
type BuiltEntry = (String, Defines, Arc<Built>);

impl ProgramCache {
    pub(crate) fn kernel(
        &self,
        context: &Context,
        device: cl_device_id,
        source: &str,
        defines: &Defines,
        name: &str,
    ) -> Result<Arc<ClKernel>> {
        let hash = {
            let mut h = Fnv(0xcbf2_9ce4_8422_2325);
            (source, defines).hash(&mut h);
            h.finish()
        };
        let built = {
            let mut map = self
                .built
                .lock()
                .map_err(|_| Error::Invalid("program cache lock poisoned".into()))?;
            let same = map.entry(hash).or_default();
            match same.iter().find(|(s, d, _)| s == source && d == defines) {
                Some((_, _, b)) => b.clone(),
                None => {
                    let b = Arc::new(build(context, device, source, &defines.options())?);
                    same.push((source.to_owned(), defines.clone(), b.clone()));
                    b
                }
            }
        };
        let mut kernels = built
            .kernels
            .lock()
            .map_err(|_| Error::Invalid("kernel map lock poisoned".into()))?;
        if let Some(k) = kernels.get(name) {
            return Ok(k.clone());
        }
        let k = Kernel::create(&built.program, name).map_err(|e| {
            Error::Invalid(format!(
                "kernel `{name}` not found in `{source}`: {}",
                cl3::error_codes::error_text(e.0)
            ))
        })?;
        let k = Arc::new(ClKernel {
            name: name.to_owned(),
            kernel: Mutex::new(KernelSlot {
                kernel: k,
                values: Vec::new(),
            }),
        });
        kernels.insert(name.to_owned(), k.clone());
        Ok(k)
    }

    /// The kernel `key.1` of family `key.0` built with `defines()`; `key.2` must determine the defines (the
    /// caller's contract: equal keys, equal defines). Later calls with the same key skip `defines` entirely.
    pub(crate) fn kernel_by(
        &self,
        context: &Context,
        device: cl_device_id,
        key: QuickKey,
        defines: impl FnOnce() -> Defines,
    ) -> Result<Arc<ClKernel>> {
        let lock = || {
            self.quick
                .lock()
                .map_err(|_| Error::Invalid("kernel memo lock poisoned".into()))
        };
        if let Some(k) = lock()?.get(&key) {
            return Ok(k.clone());
        }
        let k = self.kernel(context, device, key.0, &defines(), key.1)?;
        lock()?.insert(key, k.clone());
        Ok(k)
    }
}

fn build(context: &Context, device: cl_device_id, source: &str, options: &str) -> Result<Built> {
    let src = kernel_source(source)
        .ok_or_else(|| Error::Invalid(format!("no kernel family `{source}` under kernels/")))?;
    build_source(context, device, source, src, options)
}

/// Builds `src` on `device`; on failure the error carries the build log.
fn build_source(
    context: &Context,
    device: cl_device_id,
    source_name: &str,
    src: &str,
    options: &str,
) -> Result<Built> {
    let started = std::time::Instant::now();
    let r = build_source_untimed(context, device, source_name, src, options);
    BUILD_US.fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    r
}

static BUILD_US: AtomicU64 = AtomicU64::new(0);

/// Milliseconds this process has spent building OpenCL programs (a running total: take differences).
pub fn build_ms_total() -> f64 {
    BUILD_US.load(Ordering::Relaxed) as f64 / 1e3
}

fn build_source_untimed(
    context: &Context,
    device: cl_device_id,
    source_name: &str,
    src: &str,
    options: &str,
) -> Result<Built> {
    let mut program = Program::create_from_source(context, src).cl("clCreateProgramWithSource")?;
    if let Err(e) = program.build(&[device], options) {
        let log = program
            .get_build_log(device)
            .unwrap_or_else(|_| format!("(no build log; {})", cl3::error_codes::error_text(e.0)));
        return Err(Error::Build {
            source_name: source_name.to_owned(),
            options: options.to_owned(),
            log,
        });
    }
    Ok(Built {
        program,
        kernels: Mutex::new(HashMap::new()),
    })
}

/// Builds arbitrary OpenCL C `src` on an OpenCL device and returns the names of its kernels.
///
/// Used to check user-written kernels (the playground) and to test build-failure reporting.
pub fn build_check(device: &crate::Device, src: &str, defines: &Defines) -> Result<Vec<String>> {
    let cl = device
        .backend()
        .as_any()
        .downcast_ref::<super::ClDevice>()
        .ok_or_else(|| Error::Unsupported("building OpenCL C needs an OpenCL device".into()))?;
    let built = build_source(
        &cl.context,
        cl.device.id(),
        "<inline>",
        src,
        &defines.options(),
    )?;
    let names = built.program.kernel_names();
    Ok(names
        .split(';')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect())
}
