//! Kernel sources from `kernels/`, built once per (context, family, defines, kernel) and kept.
//!
//! A program holds one kernel: the family's source with the other kernels taken out ([`prune`]), because
//! compilers build every kernel of a program and an op launches one or a few of a family.
//!
//! Built programs are also kept on disk as the driver's binaries ([`disk`]), so another process loads them
//! instead of compiling; [`ProgramCache::prebuild`] builds the programs of many tuning candidates on several
//! threads before they are timed. A build failure returns [`Error::Build`] with the compiler's log. Kernel objects are wrapped in a mutex:
//! setting arguments and enqueueing is one critical section, so a kernel can be launched from several threads.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use opencl3::context::Context;
use opencl3::kernel::Kernel;
use opencl3::program::Program;
use opencl3::types::cl_device_id;

use crate::device::activity::{self, Activity};
use crate::error::{ClContext, Error, Result};

mod disk;
mod elsewhere;
mod prune;

pub use disk::cache_dir as binary_cache_dir;
pub use elsewhere::{builds_pending, serve_builds, serve_builds_from_here};

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

    /// The defines as option text (` -D name=value` each), as [`Defines::from_text`] reads them back.
    pub fn text(&self) -> &str {
        &self.0
    }

    /// Defines from their option text ([`Defines::text`]).
    pub fn from_text(text: &str) -> Self {
        Defines(text.to_owned())
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
    /// On a CPU device: the work sizes this kernel was launched with so far (global sizes where the driver
    /// chose the work-group). CPU drivers compile a kernel again for each work-group size at its first launch,
    /// and that first launch is timed as compile time ([`compile_ms_total`]).
    pub(crate) launched: Vec<[usize; 3]>,
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
    /// The device's part of the on-disk key ([`disk::device_tag`]), asked of the driver once.
    device_tag: OnceLock<String>,
    /// Whether this device's programs are kept on disk ([`disk::keep_for`]).
    keep_binaries: OnceLock<bool>,
    /// Programs [`ProgramCache::ready`] found ready, by their map hash, and the disk paths it looked at.
    ready: Mutex<(
        std::collections::HashSet<u64>,
        HashMap<u64, std::path::PathBuf>,
    )>,
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

/// One built program with the (family, defines, kernel) it was built for.
type BuiltEntry = (&'static str, Defines, &'static str, Arc<Built>);

/// A program to build: (kernel family, the one kernel it holds, defines).
pub type ProgramSpec = (&'static str, &'static str, Defines);

impl ProgramCache {
    pub(crate) fn kernel(
        &self,
        context: &Context,
        device: cl_device_id,
        source: &str,
        defines: &Defines,
        name: &str,
    ) -> Result<Arc<ClKernel>> {
        // Kernels launched together share a program, named by the first of them.
        let held = prune::program_kernel(name);
        let hash = program_hash(source, defines, held);
        let built = {
            let mut map = self
                .built
                .lock()
                .map_err(|_| Error::Invalid("program cache lock poisoned".into()))?;
            let same = map.entry(hash).or_default();
            match same
                .iter()
                .find(|(s, d, k, _)| *s == source && d == defines && *k == held)
            {
                Some((_, _, _, b)) => b.clone(),
                None => {
                    let (family, kernel) = declared(source, name)?;
                    activity::report(&Activity::Building {
                        family,
                        kernel,
                        batch: 1,
                    });
                    let kernel = prune::program_kernel(kernel);
                    let b = Arc::new(self.build(
                        context,
                        device,
                        family,
                        kernel,
                        &defines.options(),
                    )?);
                    same.push((family, defines.clone(), kernel, b.clone()));
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
        let k = Kernel::create(&built.program, name).map_err(|e| Error::OpenCl {
            call: "clCreateKernel",
            code: e.0,
            name: cl3::error_codes::error_text(e.0),
            context: Some(format!("for kernel `{name}` of `{source}`")),
        })?;
        let k = Arc::new(ClKernel {
            name: name.to_owned(),
            kernel: Mutex::new(KernelSlot {
                launched: Vec::new(),
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

    /// Whether a kernel was got through [`ProgramCache::kernel_by`] with `key` (it is built and kept).
    pub(crate) fn has_quick(&self, key: &QuickKey) -> bool {
        self.quick.lock().is_ok_and(|m| m.contains_key(key))
    }

    /// Whether the program of `spec` is at hand without compiling: built in this process, or its binary in the
    /// on-disk cache (written by this or another process, such as a builder helper).
    pub(crate) fn ready(&self, device: cl_device_id, spec: &ProgramSpec) -> bool {
        let (family, kernel, defines) = spec;
        let held = prune::program_kernel(kernel);
        let hash = program_hash(family, defines, held);
        let Ok(mut memo) = self.ready.lock() else {
            return false;
        };
        if memo.0.contains(&hash) {
            return true;
        }
        let built = self.built.lock().is_ok_and(|map| {
            map.get(&hash).is_some_and(|v| {
                v.iter()
                    .any(|(s, d, k, _)| s == family && d == defines && *k == held)
            })
        });
        if built {
            memo.0.insert(hash);
            return true;
        }
        let path = match memo.1.get(&hash) {
            Some(p) => p.clone(),
            None => {
                let keep = *self.keep_binaries.get_or_init(|| disk::keep_for(device));
                let (Some(dir), Some(full)) =
                    (disk::cache_dir().filter(|_| keep), kernel_source(family))
                else {
                    return false;
                };
                let declared = kernel_names(family).unwrap_or_default();
                let src = prune::keep_only(full, declared, held);
                let tag = self.device_tag.get_or_init(|| disk::device_tag(device));
                let p = disk::Entry::new(&dir, tag, family, &src, &defines.options()).path;
                memo.1.insert(hash, p.clone());
                p
            }
        };
        let on_disk = path.is_file();
        if on_disk {
            memo.0.insert(hash);
        }
        on_disk
    }

    /// Whether this device's programs are kept in the on-disk cache.
    pub(crate) fn keeps_binaries(&self, device: cl_device_id) -> bool {
        *self.keep_binaries.get_or_init(|| disk::keep_for(device)) && disk::cache_dir().is_some()
    }

    /// Builds every program of `programs` (kernel family, kernel, defines) not built yet, on up to as many threads as
    /// the machine has cores, and keeps them; returns how many were built or loaded. Programs are independent
    /// and OpenCL builds are thread-safe, so the candidates a tuner is about to time are compiled at once rather
    /// than one after another. A program that fails to build is left out: its candidate meets the same error,
    /// with the build log, when it is timed.
    pub(crate) fn prebuild(
        &self,
        context: &Context,
        device: cl_device_id,
        programs: &[ProgramSpec],
    ) -> Result<usize> {
        let missing: Vec<(&'static str, &'static str, &Defines)> = {
            let map = self
                .built
                .lock()
                .map_err(|_| Error::Invalid("program cache lock poisoned".into()))?;
            let mut seen = std::collections::HashSet::new();
            programs
                .iter()
                .map(|(s, k, d)| (*s, prune::program_kernel(k), d))
                .filter(|(s, k, d)| {
                    let present = map.get(&program_hash(s, d, k)).is_some_and(|v| {
                        v.iter()
                            .any(|(vs, vd, vk, _)| vs == s && vd == *d && vk == k)
                    });
                    !present && seen.insert((*s, *k, *d))
                })
                .collect()
        };
        if missing.is_empty() {
            return Ok(0);
        }
        activity::report(&Activity::Building {
            family: missing[0].0,
            kernel: missing[0].1,
            batch: missing.len(),
        });
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(missing.len());
        let next = AtomicUsize::new(0);
        // A device id is a plain handle, valid on every thread (OpenCL 1.2 §A.2).
        let device_handle = device as usize;
        let work = || {
            let device = device_handle as cl_device_id;
            let mut done = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((source, kernel, defines)) = missing.get(i) else {
                    return done;
                };
                if let Ok(b) = self.build(context, device, source, kernel, &defines.options()) {
                    done.push((i, b));
                }
            }
        };
        let built: Vec<(usize, Built)> = if threads <= 1 {
            work()
        } else {
            std::thread::scope(|s| {
                let handles: Vec<_> = (0..threads).map(|_| s.spawn(work)).collect();
                handles
                    .into_iter()
                    .flat_map(|h| h.join().unwrap_or_default())
                    .collect()
            })
        };
        let count = built.len();
        let mut map = self
            .built
            .lock()
            .map_err(|_| Error::Invalid("program cache lock poisoned".into()))?;
        for (i, b) in built {
            let (source, kernel, defines) = missing[i];
            let same = map
                .entry(program_hash(source, defines, kernel))
                .or_default();
            if !same
                .iter()
                .any(|(s, d, k, _)| *s == source && d == defines && *k == kernel)
            {
                same.push((source, defines.clone(), kernel, Arc::new(b)));
            }
        }
        Ok(count)
    }

    /// Builds kernel `kernel` of family `source` with `options`: loaded from the on-disk binary cache when it
    /// holds this program for this device, else compiled from source and stored there.
    fn build(
        &self,
        context: &Context,
        device: cl_device_id,
        source: &str,
        kernel: &str,
        options: &str,
    ) -> Result<Built> {
        let full = kernel_source(source)
            .ok_or_else(|| Error::Invalid(format!("no kernel family `{source}` under kernels/")))?;
        let declared = kernel_names(source).unwrap_or_default();
        let src = prune::keep_only(full, declared, kernel);
        let keep = *self.keep_binaries.get_or_init(|| disk::keep_for(device));
        let Some(dir) = disk::cache_dir().filter(|_| keep) else {
            return build_pruned(context, device, source, &src, full, options);
        };
        let tag = self.device_tag.get_or_init(|| disk::device_tag(device));
        let entry = disk::Entry::new(&dir, tag, source, &src, options);
        let started = std::time::Instant::now();
        match entry.read() {
            Ok(Some(binary)) => match build_binary(context, device, &binary, options) {
                Ok(b) => {
                    STATS.binary_loads.fetch_add(1, Ordering::Relaxed);
                    let us = started.elapsed().as_micros() as u64;
                    STATS.load_us.fetch_add(us, Ordering::Relaxed);
                    THREAD_COMPILE_US.with(|c| c.set(c.get() + us));
                    return Ok(b);
                }
                Err(why) => {
                    STATS.binary_rejected.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        "program binary {} rejected by the driver ({why}); rebuilding from source",
                        entry.path.display()
                    );
                }
            },
            Ok(None) => {}
            Err(why) => {
                STATS.binary_rejected.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    "program binary cache entry unusable ({why}); rebuilding from source"
                );
            }
        }
        let built = build_pruned(context, device, source, &src, full, options)?;
        let defines = options.strip_prefix(Defines::new().options().as_str());
        disk::note_built(&dir, tag, source, kernel, defines.unwrap_or(options));
        match built.program.get_binaries() {
            Ok(bins) if bins.first().is_some_and(|b| !b.is_empty()) => {
                match entry.write(&bins[0]) {
                    Ok(()) => {
                        STATS.binary_stored.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        tracing::warn!("cannot write program binary {}: {e}", entry.path.display())
                    }
                }
            }
            Ok(_) => tracing::debug!("the driver returned no binary for `{source}`; not cached"),
            Err(e) => tracing::warn!(
                "clGetProgramInfo(CL_PROGRAM_BINARIES) failed for `{source}`: {}",
                cl3::error_codes::error_text(e.0)
            ),
        }
        Ok(built)
    }
}

/// The program map's key: a hash of (family, defines, kernel).
fn program_hash(source: &str, defines: &Defines, kernel: &str) -> u64 {
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    (source, defines, kernel).hash(&mut h);
    h.finish()
}

/// The family and kernel names as the embedded tables hold them (`'static`), or an error naming what is
/// not there.
fn declared(family: &str, kernel: &str) -> Result<(&'static str, &'static str)> {
    let Some(&(f, names)) = KERNEL_NAMES.iter().find(|(n, _)| *n == family) else {
        return Err(Error::Invalid(format!(
            "no kernel family `{family}` under kernels/"
        )));
    };
    match names.iter().find(|n| **n == kernel) {
        Some(k) => Ok((f, k)),
        None => Err(Error::Invalid(format!(
            "kernel family `{family}` declares no kernel `{kernel}`; it declares {names:?}"
        ))),
    }
}

/// Builds one kernel's program text `src` (the family `full` with the other kernels taken out). Should the
/// reduced text fail where the whole family builds, the family is used and the difference reported: a kernel
/// that cannot stand alone costs build time, never a failure.
fn build_pruned(
    context: &Context,
    device: cl_device_id,
    family: &str,
    src: &str,
    full: &str,
    options: &str,
) -> Result<Built> {
    match build_source(context, device, family, src, options) {
        Err(e) if src.len() != full.len() => {
            match build_source(context, device, family, full, options) {
                Ok(b) => {
                    STATS.prune_fallbacks.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        "a kernel of `{family}` does not build alone ({e}); built with its family"
                    );
                    Ok(b)
                }
                Err(_) => Err(e),
            }
        }
        r => r,
    }
}

/// A program created from a binary this device produced earlier and built with the same options (OpenCL
/// requires the build call for binaries too; it links, it does not compile). `Err` names why it was refused.
fn build_binary(
    context: &Context,
    device: cl_device_id,
    binary: &[u8],
    options: &str,
) -> std::result::Result<Built, String> {
    // SAFETY: `device` is the one device of `context` (each OpenCL device gets its own context).
    let mut program = unsafe { Program::create_from_binary(context, &[device], &[binary]) }
        .map_err(|e| {
            format!(
                "clCreateProgramWithBinary: {}",
                cl3::error_codes::error_text(e.0)
            )
        })?;
    program
        .build(&[device], options)
        .map_err(|e| format!("clBuildProgram: {}", cl3::error_codes::error_text(e.0)))?;
    Ok(Built {
        program,
        kernels: Mutex::new(HashMap::new()),
    })
}

/// Counters of program builds in this process (see [`program_stats`]).
struct Stats {
    source_builds: AtomicU64,
    binary_loads: AtomicU64,
    binary_rejected: AtomicU64,
    binary_stored: AtomicU64,
    prebuilt: AtomicU64,
    load_us: AtomicU64,
    prune_fallbacks: AtomicU64,
}

static STATS: Stats = Stats {
    source_builds: AtomicU64::new(0),
    binary_loads: AtomicU64::new(0),
    binary_rejected: AtomicU64::new(0),
    binary_stored: AtomicU64::new(0),
    prebuilt: AtomicU64::new(0),
    load_us: AtomicU64::new(0),
    prune_fallbacks: AtomicU64::new(0),
};

/// How this process got its OpenCL programs so far (running totals: take differences).
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct ProgramStats {
    /// Programs compiled from source (embedded families and checked user kernels).
    pub source_builds: u64,
    /// Programs loaded from the on-disk binary cache.
    pub binary_loads: u64,
    /// Cache entries found unusable (damaged, or refused by the driver) and rebuilt from source.
    pub binary_rejected: u64,
    /// Binaries written to the cache.
    pub binary_stored: u64,
    /// Programs built or loaded ahead of their first launch by [`prebuild`] (counted in the two above too).
    pub prebuilt: u64,
    /// Milliseconds spent compiling from source, summed over threads.
    pub build_ms: f64,
    /// Milliseconds spent loading binaries, summed over threads.
    pub load_ms: f64,
    /// Kernels that did not build on their own and were built with their whole family (zero unless a kernel
    /// depends on another kernel's definition).
    #[serde(default)]
    pub prune_fallbacks: u64,
}

/// This process's [`ProgramStats`].
pub fn program_stats() -> ProgramStats {
    ProgramStats {
        source_builds: STATS.source_builds.load(Ordering::Relaxed),
        binary_loads: STATS.binary_loads.load(Ordering::Relaxed),
        binary_rejected: STATS.binary_rejected.load(Ordering::Relaxed),
        binary_stored: STATS.binary_stored.load(Ordering::Relaxed),
        prebuilt: STATS.prebuilt.load(Ordering::Relaxed),
        build_ms: BUILD_US.load(Ordering::Relaxed) as f64 / 1e3,
        load_ms: STATS.load_us.load(Ordering::Relaxed) as f64 / 1e3,
        prune_fallbacks: STATS.prune_fallbacks.load(Ordering::Relaxed),
    }
}

/// Builds the programs `programs` (kernel family, kernel, defines) on `device` on several threads, or loads
/// them from the binary cache, so that their first launch finds them ready; returns how many were built or
/// loaded now. An unknown family or kernel is an error; a program that fails to build is reported by its first
/// launch, not here. A device that is not OpenCL has nothing to build.
pub fn prebuild(device: &crate::Device, programs: &[ProgramSpec]) -> Result<usize> {
    for (family, kernel, _) in programs {
        declared(family, kernel)?;
    }
    match device.backend().as_any().downcast_ref::<super::ClDevice>() {
        Some(cl) => cl.prebuild(programs),
        None => Ok(0),
    }
}

/// The programs the on-disk cache's list ([`disk::BUILT_LIST`]) says were compiled for `device`, as
/// `(family, kernel, defines)`: what `netcl tune export` writes into a table's `programs`. Empty for a device
/// that is not OpenCL or when the cache is off.
pub fn built_programs(device: &crate::Device) -> Vec<(String, String, String)> {
    let (Some(cl), Some(dir)) = (
        device.backend().as_any().downcast_ref::<super::ClDevice>(),
        disk::cache_dir(),
    ) else {
        return Vec::new();
    };
    disk::built_programs(&dir, &disk::device_tag(cl.device.id()))
}

/// Hands the programs that the tuning tables list for `device` ([`crate::autotune::db::programs_for`]: its exact
/// class, or else a sibling class), and that are neither built nor on disk yet, to builder helpers, behind any
/// program an op asks for; returns how many.
/// Nothing happens where programs are not built by helpers (see [`super::ClDevice::builds_elsewhere`]), so on
/// a fresh machine the helpers compile what the device's workloads use while the first ops run. Of processes
/// sharing a cache directory, one at a time does this: it holds the lock file [`disk::WARM_LOCK`] there until
/// its helpers have built everything handed to them (this call waits that long), and the others, finding the
/// lock held, hand nothing over.
pub fn warm_ahead(device: &crate::Device) -> usize {
    let Some(cl) = device.backend().as_any().downcast_ref::<super::ClDevice>() else {
        return 0;
    };
    if !cl.builds_elsewhere() {
        return 0;
    }
    let class = crate::autotune::db::DeviceClass::of(&cl.info);
    let tables = crate::autotune::db::tables();
    let specs: Vec<ProgramSpec> = crate::autotune::db::programs_for(&tables, &class)
        .iter()
        .filter_map(|(f, k, d)| {
            let (f, k) = declared(f, k).ok()?;
            Some((f, k, Defines::from_text(d)))
        })
        .filter(|s| !cl.programs_ready(std::slice::from_ref(s)))
        .collect();
    if specs.is_empty() {
        return 0;
    }
    let lock = disk::cache_dir()
        .and_then(|dir| crate::fsio::FileLock::try_acquire(&dir.join(disk::WARM_LOCK)).ok())
        .flatten();
    let Some(_held) = lock else {
        return 0;
    };
    cl.build_elsewhere(&specs, false);
    while elsewhere::builds_pending() > 0 {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    specs.len()
}

impl super::ClDevice {
    /// See [`ProgramCache::prebuild`].
    pub(crate) fn prebuild(&self, programs: &[ProgramSpec]) -> Result<usize> {
        // The caller waits for the whole parallel build: that wall time is this thread's compile time (the
        // building threads' own counts are not the caller's).
        let (before, started) = (
            THREAD_COMPILE_US.with(|c| c.get()),
            std::time::Instant::now(),
        );
        let n = self
            .programs
            .prebuild(&self.context, self.device.id(), programs);
        THREAD_COMPILE_US.with(|c| c.set(before + started.elapsed().as_micros() as u64));
        let n = n?;
        STATS.prebuilt.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }

    /// Builds (or loads) one program and stores its binary in the on-disk cache, without keeping it in this
    /// process: what a builder helper does ([`serve_builds`]). The error carries the build log.
    pub(crate) fn build_one(&self, family: &str, kernel: &str, defines: &Defines) -> Result<()> {
        self.programs
            .build(
                &self.context,
                self.device.id(),
                family,
                prune::program_kernel(kernel),
                &defines.options(),
            )
            .map(|_| ())
    }

    /// Whether this process has got the kernel of `key` already (see [`ProgramCache::has_quick`]).
    pub(crate) fn has_kernel(&self, key: &QuickKey) -> bool {
        self.programs.has_quick(key)
    }

    /// Whether every program of `specs` is at hand without compiling (see [`ProgramCache::ready`]).
    pub(crate) fn programs_ready(&self, specs: &[ProgramSpec]) -> bool {
        let id = self.device.id();
        specs.iter().all(|s| self.programs.ready(id, s))
    }

    /// Whether this device's ops hand the programs they lack to builder helpers and run a quick kernel
    /// meanwhile ([`elsewhere`]): in background autotune mode, with a builder executable, binaries kept on disk,
    /// and either a GPU or a builder named by `NETCL_BUILDER`. Never inside a measurement.
    pub(crate) fn builds_elsewhere(&self) -> bool {
        if !crate::autotune::background() || crate::autotune::measuring() {
            return false;
        }
        let Some((_, explicit)) = elsewhere::builder() else {
            return false;
        };
        (explicit || self.info.kind == crate::device::DeviceType::Gpu)
            && self.programs.keeps_binaries(self.device.id())
    }

    /// Hands `specs` to builder helpers (`urgent`: before the programs queued so far).
    pub(crate) fn build_elsewhere(&self, specs: &[ProgramSpec], urgent: bool) {
        elsewhere::submit(self.info.index, specs, urgent);
    }

    /// Whether a builder helper failed on any program of `specs` (they are then built here).
    pub(crate) fn failed_elsewhere(&self, specs: &[ProgramSpec]) -> bool {
        specs.iter().any(|s| elsewhere::failed(self.info.index, s))
    }

    /// A step for the top of a tuner's timing closure: its first call builds the programs `programs()` lists
    /// (every candidate's) on several threads; later calls do nothing. The tuner calls the closure only when it
    /// measures, so an answer from a cache builds nothing more than its winner.
    pub(crate) fn prebuild_once<'a>(
        &'a self,
        programs: impl FnOnce() -> Vec<ProgramSpec> + 'a,
    ) -> impl FnMut() + 'a {
        let mut pending = Some(programs);
        move || {
            if let Some(list) = pending.take()
                && let Err(e) = self.prebuild(&list())
            {
                tracing::debug!("prebuilding candidate programs: {e}");
            }
        }
    }
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
    STATS.source_builds.fetch_add(1, Ordering::Relaxed);
    let us = started.elapsed().as_micros() as u64;
    tracing::debug!(
        target: "netcl::build",
        "built {source_name} in {:.1} ms ({} bytes of source; {options})",
        us as f64 / 1e3,
        src.len()
    );
    BUILD_US.fetch_add(us, Ordering::Relaxed);
    THREAD_COMPILE_US.with(|c| c.set(c.get() + us));
    r
}

static BUILD_US: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// This thread's share of [`compile_ms_total`]: what it compiled or loaded itself, and the whole wall time of
    /// its parallel prebuilds.
    static THREAD_COMPILE_US: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Milliseconds this thread has spent compiling (see [`compile_ms_total`]; a parallel prebuild counts its wall
/// time here), a running total: a run's time limit subtracts its own thread's compile time, never another's.
pub fn compile_ms_thread() -> f64 {
    THREAD_COMPILE_US.with(|c| c.get()) as f64 / 1e3
}
/// Microseconds of first launches on CPU devices (where the driver compiles the kernel for its work-group size).
static FIRST_LAUNCH_US: AtomicU64 = AtomicU64::new(0);

/// Adds the time of a kernel's first launch at a new work-group size on a CPU device to [`compile_ms_total`].
pub(crate) fn add_first_launch(us: u64) {
    THREAD_COMPILE_US.with(|c| c.set(c.get() + us));
    FIRST_LAUNCH_US.fetch_add(us, Ordering::Relaxed);
}

/// Milliseconds this process has spent compiling: [`build_ms_total`] plus the first launches of kernels at new
/// work-group sizes on CPU devices, where the driver compiles each kernel once per work-group size (a running
/// total: take differences). The playground does not count this time against a run's time limit, up to an
/// allowance.
pub fn compile_ms_total() -> f64 {
    build_ms_total() + FIRST_LAUNCH_US.load(Ordering::Relaxed) as f64 / 1e3
}

/// Milliseconds this process has spent getting OpenCL programs ready: compiling from source plus loading cached
/// binaries, summed over threads (a running total: take differences).
pub fn build_ms_total() -> f64 {
    (BUILD_US.load(Ordering::Relaxed) + STATS.load_us.load(Ordering::Relaxed)) as f64 / 1e3
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
