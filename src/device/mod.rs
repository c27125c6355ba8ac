//! Devices at run time: what a device reports ([`DeviceInfo`]) and the handle every tensor holds ([`Device`]).
//!
//! A [`Device`] is a cheap handle (an `Arc`) to one backend (its context and in-order queue, or the host),
//! its buffer pool and its identity for the tuner. Which backends exist and how one is chosen is the business
//! of device selection ([`Device::select`], in `select.rs`), the only code that names a concrete backend; here
//! a backend is the [`Backend`] contract and nothing more.

pub mod activity;
pub mod timing;

use std::fmt;
use std::sync::Arc;

use serde::Serialize;

use crate::contract::Backend;
use crate::error::Result;
use crate::memory::{BufferPool, PoolStats};

pub use timing::Launch;

/// What kind of device a [`DeviceInfo`] describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceType {
    /// An OpenCL GPU.
    Gpu,
    /// An OpenCL CPU device (PoCL, say).
    Cpu,
    /// An OpenCL accelerator.
    Accelerator,
    /// An OpenCL device of another type.
    Other,
    /// The built-in CPU device (plain Rust, the reference).
    Builtin,
}

impl DeviceType {
    /// The lowercase name: `gpu`, `cpu`, `accelerator`, `other` or `builtin`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceType::Gpu => "gpu",
            DeviceType::Cpu => "cpu",
            DeviceType::Accelerator => "accelerator",
            DeviceType::Other => "other",
            DeviceType::Builtin => "builtin",
        }
    }
}

impl fmt::Display for DeviceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for DeviceType {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

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
    /// What kind of device it is.
    pub kind: DeviceType,
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

pub(crate) struct DeviceInner {
    pub(crate) info: DeviceInfo,
    /// `info.tune_id()`, kept: every tuning lookup starts its key with it.
    pub(crate) tune_id: String,
    pub(crate) backend: Box<dyn Backend>,
    pub(crate) pool: BufferPool,
}

/// A handle to one device: its backend (context and in-order queue, or the host), its kernel cache and its
/// buffer pool.
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

impl Device {
    /// A device over `backend`, described by `info`.
    pub(crate) fn from_backend(info: DeviceInfo, backend: Box<dyn Backend>) -> Device {
        Device(Arc::new(DeviceInner {
            pool: BufferPool::new(
                info.global_mem_bytes,
                matches!(info.kind, DeviceType::Gpu | DeviceType::Accelerator),
            ),
            tune_id: info.tune_id(),
            info,
            backend,
        }))
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
        self.0.info.kind != DeviceType::Builtin
    }

    /// Waits until every operation queued on this device has finished.
    pub fn synchronize(&self) -> Result<()> {
        timing::count_host_wait();
        self.0.backend.finish()
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
        timing::record_launches(on);
    }

    /// Returns and clears this thread's recorded launches, waiting for them to finish to read their times.
    pub fn take_launches(&self) -> Result<Vec<Launch>> {
        Ok(timing::take_launches())
    }

    /// The device's backend: the op front-ends call its primitives.
    pub(crate) fn backend(&self) -> &dyn Backend {
        self.0.backend.as_ref()
    }

    /// The device's identity for tuning keys (`"{name}|{driver}"`).
    pub(crate) fn tune_id(&self) -> &str {
        &self.0.tune_id
    }

    pub(crate) fn pool(&self) -> &BufferPool {
        &self.0.pool
    }
}
