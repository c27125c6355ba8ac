//! Small file helpers every layer may use: atomic replacement and an advisory lock file.
//!
//! Caches and model files are replaced, never rewritten in place, so a reader or a killed writer never sees
//! half a file.

use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes `bytes` to `path` atomically: a unique temporary file in the same directory, synced, then renamed
/// over `path`. On failure the temporary file is removed and `path` is unchanged.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static N: AtomicU64 = AtomicU64::new(0);
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(
        ".tmp.{}.{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let tmp = path.with_file_name(name);
    let r = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if r.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    r
}

/// An exclusive advisory lock on a lock file, held while the value lives. Processes that take the same lock
/// file wait for each other; the file itself is never removed (removing it would race with a waiter).
pub struct FileLock(File);

impl FileLock {
    /// The lock file at `lock_path`, created (with its directory) if needed; its contents are never touched.
    fn open(lock_path: &Path) -> std::io::Result<File> {
        if let Some(dir) = lock_path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir)?;
        }
        OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(lock_path)
    }

    /// Blocks until the lock on `lock_path` is held, creating the file (and its directory) if needed.
    pub fn acquire(lock_path: &Path) -> std::io::Result<FileLock> {
        let f = FileLock::open(lock_path)?;
        f.lock()?;
        Ok(FileLock(f))
    }

    /// Blocks until a shared hold on `lock_path` is granted: any number of shared holders at once, none while an
    /// exclusive holder has it.
    pub fn acquire_shared(lock_path: &Path) -> std::io::Result<FileLock> {
        let f = FileLock::open(lock_path)?;
        f.lock_shared()?;
        Ok(FileLock(f))
    }

    /// Takes the lock if no other holder has it, without waiting.
    pub fn try_acquire(lock_path: &Path) -> std::io::Result<Option<FileLock>> {
        let f = FileLock::open(lock_path)?;
        match f.try_lock() {
            Ok(()) => Ok(Some(FileLock(f))),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Err(e),
        }
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_whole_file_and_leaves_no_temporary() {
        let dir = std::env::temp_dir().join(format!("netcl-fsio-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let p = dir.join("a.json");
        write_atomic(&p, b"first").unwrap();
        write_atomic(&p, b"second").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"second");
        let names: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        assert!(write_atomic(&dir.join("missing/b.json"), b"x").is_err());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_held_lock_is_not_taken_twice() {
        let p = std::env::temp_dir().join(format!("netcl-fsio-lock-{}", std::process::id()));
        let held = FileLock::acquire(&p).unwrap();
        // flock locks belong to the open file description, so a second open in this process contends too.
        assert!(FileLock::try_acquire(&p).unwrap().is_none());
        drop(held);
        assert!(FileLock::try_acquire(&p).unwrap().is_some());
        let _ = fs::remove_file(&p);
    }
}
