//! Devices: every OpenCL platform and device, device selection, and the built-in CPU device.
//!
//! A [`Device`] is a cheap handle (an `Arc`) to one context and one in-order queue. Selecting the same device
//! twice in a process returns the same handle, so kernels, the buffer pool and the autotune memo are shared.
//!
//! Each device kind implements the engine's primitives behind [`DeviceKind`]: the OpenCL kind enqueues kernels
//! from `kernels/`, the built-in CPU kind runs plain Rust and is the reference every kernel is tested against.

mod cpu;
pub(crate) mod opencl;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::memory::{BufferPool, PoolStats, Storage};

pub(crate) use cpu::CpuDevice;
pub(crate) use cpu::access as cpu_access;
pub(crate) use opencl::ClDevice;

/// Everything netcl reports about a device (`netcl devices`, `/devices` in the wiki).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DeviceInfo {
    /// Position in [`list_devices`]; usable as a selector.
    pub index: usize,
    /// The OpenCL platform name, or `netcl` for the built-in device.
    pub platform: String,
    /// The device name as the driver reports it.
    pub name: String,
    /// The vendor string.
    pub vendor: String,
    /// The driver version.
    pub driver: String,
    /// The device's OpenCL version string.
    pub version: String,
    /// The highest OpenCL C version the compiler accepts.
    pub opencl_c_version: String,
    /// `gpu`, `cpu`, `accelerator` or `builtin`.
    pub kind: String,
    /// Compute units (cores on a CPU, SMs or CUs on a GPU).
    pub compute_units: u32,
    /// The maximum clock in MHz.
    pub max_clock_mhz: u32,
    /// Global memory in bytes.
    pub global_mem_bytes: u64,
    /// Local (work-group shared) memory in bytes.
    pub local_mem_bytes: u64,
    /// Whether local memory is dedicated on-chip memory (`CL_LOCAL`); false where the driver keeps it in global
    /// memory, as CPU OpenCL does (and on the built-in device).
    pub local_mem_dedicated: bool,
    /// The largest single allocation in bytes.
    pub max_alloc_bytes: u64,
    /// The largest work-group.
    pub max_work_group_size: usize,
    /// The largest work-group extent per dimension.
    pub max_work_item_sizes: Vec<usize>,
    /// Whether half-precision storage and arithmetic exist (`cl_khr_fp16`).
    pub fp16: bool,
    /// Whether double precision exists (`cl_khr_fp64`).
    pub fp64: bool,
    /// Whether the device shares memory with the host.
    pub unified_memory: bool,
}

impl DeviceInfo {
    /// The autotune identity of the device: `"{name}|{driver}"`, as netcl forms it.
    pub fn tune_id(&self) -> String {
        format!("{}|{}", self.name.trim(), self.driver.trim())
    }
}

/// Lists every OpenCL device of every platform, then the built-in CPU device (always last).
///
/// A machine without an OpenCL loader or platform still lists the built-in device.
pub fn list_devices() -> Result<Vec<DeviceInfo>> {
    let mut out = opencl::enumerate()
        .map(|v| v.into_iter().map(|(_, info)| info).collect())
        .unwrap_or_else(|e| {
            tracing::debug!("no OpenCL devices: {e}");
            Vec::new()
        });
    let idx = out.len();
    out.push(cpu::builtin_info(idx));
    Ok(out)
}

/// Whether at least one OpenCL device exists on this machine.
pub fn opencl_available() -> bool {
    opencl::enumerate().map(|v| !v.is_empty()).unwrap_or(false)
}

/// The engine's primitives, one sub-trait per op family; each device kind implements all of them.
pub(crate) trait DeviceKind: Send + Sync + crate::ops::Kernels {
    /// Allocates `bytes` bytes of uninitialised device memory.
    fn alloc(&self, bytes: usize) -> Result<Storage>;
    /// Copies `data` into `dst` at byte `offset`; returns when the host memory may be reused.
    fn write(&self, dst: &Storage, offset: usize, data: &[u8]) -> Result<()>;
    /// Copies `out.len()` bytes from `src` at byte `offset` into `out`, after all queued work.
    fn read(&self, src: &Storage, offset: usize, out: &mut [u8]) -> Result<()>;
    /// Fills `bytes` bytes of `dst` with a repeated 4-byte pattern.
    fn fill(&self, dst: &Storage, pattern: [u8; 4], bytes: usize) -> Result<()>;
    /// Copies `bytes` bytes from `src` to `dst` on the device.
    fn copy(&self, src: &Storage, dst: &Storage, bytes: usize) -> Result<()>;
    /// Waits for all queued work.
    fn finish(&self) -> Result<()>;
    /// Downcast to the OpenCL kind, for code that is OpenCL-only by nature (launch recording).
    fn as_cl(&self) -> Option<&ClDevice> {
        None
    }
}

pub(crate) struct DeviceInner {
    pub(crate) info: DeviceInfo,
    /// `info.tune_id()`, kept: every autotune lookup starts its key with it.
    pub(crate) tune_id: String,
    pub(crate) kind: Box<dyn DeviceKind>,
    pub(crate) pool: BufferPool,
}

/// A handle to one device: its context, its in-order queue, its kernel cache and its buffer pool.
#[derive(Clone)]
pub struct Device(pub(crate) Arc<DeviceInner>);

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Device({} #{}: {})",
            self.0.info.kind, self.0.info.index, self.0.info.name
        )
    }
}

impl PartialEq for Device {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

fn registry() -> &'static Mutex<HashMap<usize, Device>> {
    static REG: OnceLock<Mutex<HashMap<usize, Device>>> = OnceLock::new();
    REG.get_or_init(|| Mutex::new(HashMap::new()))
}

impl Device {
    /// Selects a device by `selector`, or by `NETCL_DEVICE` when `selector` is `None`.
    ///
    /// A selector is an index into [`list_devices`], `gpu`, `cpu` (the first OpenCL CPU device), `builtin`
    /// (the built-in CPU device), `auto`, or a case-insensitive substring of the device or platform name.
    /// Without a selector: the first GPU, else the first OpenCL CPU device, else the built-in device.
    pub fn select(selector: Option<&str>) -> Result<Device> {
        let env = std::env::var("NETCL_DEVICE")
            .ok()
            .filter(|s| !s.trim().is_empty());
        let sel = selector
            .map(str::to_owned)
            .or(env)
            .unwrap_or_else(|| "auto".to_owned());
        let cl = opencl::enumerate().unwrap_or_default();
        let builtin_index = cl.len();
        let s = sel.trim().to_ascii_lowercase();
        let index = match s.as_str() {
            "auto" => cl
                .iter()
                .position(|(_, i)| i.kind == "gpu")
                .or_else(|| cl.iter().position(|(_, i)| i.kind == "cpu"))
                .or_else(|| (!cl.is_empty()).then_some(0))
                .unwrap_or(builtin_index),
            "gpu" => cl
                .iter()
                .position(|(_, i)| i.kind == "gpu")
                .ok_or_else(|| {
                    Error::Device(format!(
                        "selector `{sel}`: no OpenCL GPU on this machine ({})",
                        summary(&cl)
                    ))
                })?,
            "cpu" => cl
                .iter()
                .position(|(_, i)| i.kind == "cpu")
                .ok_or_else(|| {
                    Error::Device(format!(
                        "selector `{sel}`: no OpenCL CPU device on this machine ({})",
                        summary(&cl)
                    ))
                })?,
            "builtin" | "reference" => builtin_index,
            _ => {
                if let Ok(i) = s.parse::<usize>() {
                    if i > builtin_index {
                        return Err(Error::Device(format!(
                            "selector `{sel}`: index {i} is out of range; devices are 0..={builtin_index} ({})",
                            summary(&cl)
                        )));
                    }
                    i
                } else if let Some(i) = cl.iter().position(|(_, i)| {
                    i.name.to_ascii_lowercase().contains(&s)
                        || i.platform.to_ascii_lowercase().contains(&s)
                }) {
                    i
                } else if "netcl built-in cpu".contains(&s) {
                    builtin_index
                } else {
                    return Err(Error::Device(format!(
                        "selector `{sel}` matches no device; use an index, gpu, cpu, builtin or a name substring ({})",
                        summary(&cl)
                    )));
                }
            }
        };
        let mut reg = registry()
            .lock()
            .map_err(|_| Error::Device("device registry poisoned".into()))?;
        if let Some(d) = reg.get(&index) {
            return Ok(d.clone());
        }
        let (kind, info): (Box<dyn DeviceKind>, DeviceInfo) = if index == builtin_index {
            (Box::new(CpuDevice::new()), cpu::builtin_info(index))
        } else {
            let (id, info) = cl[index].clone();
            (Box::new(ClDevice::new(id, info.clone())?), info)
        };
        let dev = Device(Arc::new(DeviceInner {
            pool: BufferPool::new(&info),
            tune_id: info.tune_id(),
            info,
            kind,
        }));
        reg.insert(index, dev.clone());
        Ok(dev)
    }

    /// The built-in CPU device: plain Rust, the reference implementation of every op.
    pub fn builtin() -> Device {
        // The built-in device needs no driver, so selecting it cannot fail for a reason input controls.
        match Device::select(Some("builtin")) {
            Ok(d) => d,
            Err(_) => {
                let info = cpu::builtin_info(0);
                Device(Arc::new(DeviceInner {
                    pool: BufferPool::new(&info),
                    tune_id: info.tune_id(),
                    info,
                    kind: Box::new(CpuDevice::new()),
                }))
            }
        }
    }

    /// What the device reports about itself.
    pub fn info(&self) -> &DeviceInfo {
        &self.0.info
    }

    /// The device name.
    pub fn name(&self) -> &str {
        &self.0.info.name
    }

    /// Whether this is an OpenCL device (as opposed to the built-in CPU device).
    pub fn is_opencl(&self) -> bool {
        self.0.kind.as_cl().is_some()
    }

    /// Waits until every operation queued on this device has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.0.kind.finish()
    }

    /// The buffer pool's counters.
    pub fn pool_stats(&self) -> PoolStats {
        self.0.pool.stats()
    }

    /// Drops every cached (free) buffer of the pool.
    pub fn pool_clear(&self) {
        self.0.pool.clear()
    }

    /// Starts (or stops) recording the kernel launches this thread makes, with their device times. The
    /// built-in device launches no kernels, so nothing is recorded for it.
    pub fn record_launches(&self, on: bool) {
        opencl::record_launches(on);
    }

    /// Returns and clears this thread's recorded launches, waiting for them to finish to read their times.
    pub fn take_launches(&self) -> Result<Vec<Launch>> {
        Ok(opencl::take_launches())
    }

    pub(crate) fn kind(&self) -> &dyn DeviceKind {
        self.0.kind.as_ref()
    }

    pub(crate) fn pool(&self) -> &BufferPool {
        &self.0.pool
    }
}

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
}

fn summary(cl: &[(opencl3::types::cl_device_id, DeviceInfo)]) -> String {
    if cl.is_empty() {
        return "no OpenCL devices found; the built-in device is `builtin`".into();
    }
    let names: Vec<String> = cl
        .iter()
        .map(|(_, i)| format!("{}: {} [{}]", i.index, i.name, i.kind))
        .collect();
    format!("available: {}; {}: built-in", names.join(", "), cl.len())
}
