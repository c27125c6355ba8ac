//! Exclusive measurement per device: one thread of one process times candidates on a device at a time.
//!
//! In the process, a gate per device admits one thread (re-entrant: a candidate that tunes its own sub-kernels
//! passes its own gate again). Across processes, the thread that holds the gate also holds a lock file beside
//! the cache, one per device. A thread that waited re-reads the cache before measuring, so a key measured by
//! the gate's previous holder (in this process or another) is never measured twice.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::ThreadId;

use crate::fsio::FileLock;

#[derive(Default)]
struct State {
    owner: Option<ThreadId>,
    depth: u32,
}

type Gate = Arc<(Mutex<State>, Condvar)>;

fn gates() -> &'static Mutex<HashMap<String, Gate>> {
    static G: OnceLock<Mutex<HashMap<String, Gate>>> = OnceLock::new();
    G.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The lock file guarding measurement on `tune_id` for the cache at `cache`.
pub fn lock_path(cache: &Path, tune_id: &str) -> PathBuf {
    let sum = super::key::fnv(0xcbf2_9ce4_8422_2325, tune_id.as_bytes());
    let name = cache
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "autotune.json".into());
    cache.with_file_name(format!("{name}.measure-{sum:016x}.lock"))
}

/// The lock file that processes running jobs on `tune_id` hold shared ([`super::JobScope`]); an idle
/// measurement pass probes it to learn whether anyone is running a job.
pub fn jobs_lock_path(cache: &Path, tune_id: &str) -> PathBuf {
    let sum = super::key::fnv(0xcbf2_9ce4_8422_2325, tune_id.as_bytes());
    let name = cache
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "autotune.json".into());
    cache.with_file_name(format!("{name}.jobs-{sum:016x}.lock"))
}

/// Holds the right to measure on one device; released on drop.
pub struct Exclusive {
    gate: Gate,
    /// The cross-process lock, held by the outermost entry only.
    _file: Option<FileLock>,
    /// Whether this entry had to wait for another holder (the caller then re-reads the cache).
    pub waited: bool,
}

impl Drop for Exclusive {
    fn drop(&mut self) {
        let (m, cv) = &*self.gate;
        if let Ok(mut s) = m.lock() {
            s.depth = s.depth.saturating_sub(1);
            if s.depth == 0 {
                s.owner = None;
                cv.notify_all();
            }
        }
    }
}

/// Enters the gate of `tune_id`: waits for another holder when `wait`, else answers `None` while one is
/// measuring. The lock file's errors are reported and measurement goes on unguarded across processes.
pub fn enter(tune_id: &str, cache: &Path, wait: bool) -> Option<Exclusive> {
    let gate = {
        let mut g = gates().lock().ok()?;
        g.entry(tune_id.to_owned()).or_default().clone()
    };
    let me = std::thread::current().id();
    let mut waited = false;
    {
        let (m, cv) = &*gate;
        let mut s = m.lock().ok()?;
        if s.owner == Some(me) {
            s.depth += 1;
            drop(s);
            return Some(Exclusive {
                gate,
                _file: None,
                waited: false,
            });
        }
        while s.owner.is_some() {
            if !wait {
                return None;
            }
            waited = true;
            s = cv.wait(s).ok()?;
        }
        s.owner = Some(me);
        s.depth = 1;
    }
    let path = lock_path(cache, tune_id);
    let file = if wait {
        match FileLock::try_acquire(&path) {
            Ok(Some(l)) => Some(l),
            Ok(None) => {
                waited = true;
                FileLock::acquire(&path)
                    .map_err(|e| tracing::warn!("measurement lock {}: {e}", path.display()))
                    .ok()
            }
            Err(e) => {
                tracing::warn!("measurement lock {}: {e}", path.display());
                None
            }
        }
    } else {
        match FileLock::try_acquire(&path) {
            Ok(Some(l)) => Some(l),
            Ok(None) => {
                // Another process is measuring on this device: leave the gate and answer without measuring.
                drop(Exclusive {
                    gate,
                    _file: None,
                    waited,
                });
                return None;
            }
            Err(e) => {
                tracing::warn!("measurement lock {}: {e}", path.display());
                None
            }
        }
    };
    Some(Exclusive {
        gate,
        _file: file,
        waited,
    })
}
