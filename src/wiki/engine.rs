//! What the wiki shows about the engine: the server's devices and the autotune cache. Pages read them through
//! [`EngineInfo`], so the server can be tested without a device.

use serde::{Deserialize, Serialize};

use crate::Result;

/// One compute device as the engine lists it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DeviceInfo {
    pub index: usize,
    pub platform: String,
    pub name: String,
    pub vendor: String,
    pub driver: String,
    pub version: String,
    pub opencl_c_version: String,
    /// `gpu`, `cpu`, `accelerator` or `builtin`.
    pub kind: String,
    pub compute_units: u32,
    pub max_clock_mhz: u32,
    pub global_mem_bytes: u64,
    pub local_mem_bytes: u64,
    pub max_alloc_bytes: u64,
    pub max_work_group_size: usize,
    pub max_work_item_sizes: Vec<usize>,
    pub fp16: bool,
    pub fp64: bool,
    pub unified_memory: bool,
}

/// One measured candidate of an autotune decision.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CandidateTime {
    pub candidate: serde_json::Value,
    pub label: String,
    pub ms: Option<f64>,
    pub median_ms: Option<f64>,
    pub error: Option<String>,
}

/// One key of the autotune cache and its winner.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CacheEntry {
    pub key: String,
    pub device: String,
    pub kernel: String,
    pub shape_key: String,
    pub winner: serde_json::Value,
    pub candidates: Option<Vec<CandidateTime>>,
}

/// The autotune cache file as read now.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CacheSnapshot {
    pub path: std::path::PathBuf,
    /// How reading went, in words (`ok`, `missing`, `corrupt: …`).
    pub status: String,
    pub entries: Vec<CacheEntry>,
}

/// Where the wiki gets engine data from.
pub trait EngineInfo: Send + Sync + 'static {
    /// Every device of every platform.
    fn devices(&self) -> Result<Vec<DeviceInfo>>;
    /// The current content of the autotune cache.
    fn autotune(&self) -> Result<CacheSnapshot>;
}

impl CacheEntry {
    /// Whether the entry mentions `needle` (lower case) in its key, device, kernel, shape or winner.
    pub fn matches(&self, needle: &str) -> bool {
        needle.is_empty()
            || [&self.key, &self.device, &self.kernel, &self.shape_key]
                .iter()
                .any(|s| s.to_lowercase().contains(needle))
            || self.winner.to_string().to_lowercase().contains(needle)
    }
}
