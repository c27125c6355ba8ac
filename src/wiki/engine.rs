//! What the wiki shows about the engine: the server's devices and the autotune cache. Pages read them through
//! [`EngineInfo`], so the server can be tested without a device; [`Engine`] is the real provider.

pub use crate::autotune::{CacheEntry, CacheSnapshot, CandidateTime};
pub use crate::device::DeviceInfo;

use crate::error::Result;

/// Where the wiki gets engine data from.
pub trait EngineInfo: Send + Sync + 'static {
    /// Every device of every platform, then the built-in device.
    fn devices(&self) -> Result<Vec<DeviceInfo>>;
    /// The current content of the autotune cache file.
    fn autotune(&self) -> Result<CacheSnapshot>;
    /// The index of the device `selector` (or, without one, the engine's default rule) chooses.
    fn selected(&self, selector: Option<&str>) -> Result<usize>;
}

/// The engine of this process: `netcl::list_devices` and `netcl::autotune::cache_snapshot`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Engine;

impl EngineInfo for Engine {
    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        crate::list_devices()
    }

    fn autotune(&self) -> Result<CacheSnapshot> {
        crate::autotune::cache_snapshot()
    }

    fn selected(&self, selector: Option<&str>) -> Result<usize> {
        crate::device::Device::select(selector).map(|device| device.info().index)
    }
}

/// Whether a cache entry mentions `needle` (lower case) in its key, device, kernel, shape or winner.
pub fn entry_matches(entry: &CacheEntry, needle: &str) -> bool {
    needle.is_empty()
        || [&entry.key, &entry.device, &entry.kernel, &entry.shape_key]
            .iter()
            .any(|s| s.to_lowercase().contains(needle))
        || entry.winner.to_string().to_lowercase().contains(needle)
}
