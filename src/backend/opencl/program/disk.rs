//! Compiled program binaries kept on disk, so a new process (a restarted playground worker, the next `netcl run`)
//! loads a program instead of compiling it again.
//!
//! One file per program, named by a checksum of its key: the device (name, vendor, driver version, OpenCL
//! version), the compiler options with every define, and a checksum of the full source text. The file repeats the
//! key, so two keys that share a file name only miss. Entries are written with [`crate::fsio::write_atomic`]:
//! processes that build the same program at once each replace the file whole, and a reader never sees half of
//! one. A file that is truncated, altered or rejected by the driver is rebuilt from source and replaced.
//!
//! Where: `NETCL_PROGRAM_CACHE` (a directory; `off` or `0` disables the cache), else `netcl/programs` under
//! `XDG_CACHE_HOME`, `~/.cache` or the temporary directory, beside the autotune cache.

use std::path::{Path, PathBuf};

use opencl3::device::Device as ClDeviceId;
use opencl3::types::cl_device_id;

/// The first bytes of every entry; the digit is the format's version.
const MAGIC: &[u8; 8] = b"NETCLPB1";

/// The directory program binaries are kept in, or `None` when `NETCL_PROGRAM_CACHE` disables the cache. Read on
/// every call (a build costs far more than reading a variable).
pub fn cache_dir() -> Option<PathBuf> {
    match std::env::var_os("NETCL_PROGRAM_CACHE") {
        Some(v) if !v.is_empty() => {
            let off = v
                .to_str()
                .map(|s| s.trim().to_ascii_lowercase())
                .is_some_and(|s| matches!(s.as_str(), "0" | "off" | "none" | "false" | "no"));
            (!off).then(|| PathBuf::from(v))
        }
        _ => {
            let base = std::env::var_os("XDG_CACHE_HOME")
                .filter(|p| !p.is_empty())
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
                .unwrap_or_else(std::env::temp_dir);
            Some(base.join("netcl").join("programs"))
        }
    }
}

/// Whether programs built for `device` are kept here: always when `NETCL_PROGRAM_CACHE` names a directory;
/// by default not on PoCL while its own kernel cache is on (`POCL_KERNEL_CACHE` unset or not `0`). PoCL keeps
/// every compiled kernel itself, and asking it for a program's binary compiles every kernel of the program a
/// second time, for a local size it will not run with: on a fresh 2-core machine that doubled the cost of a
/// first run (2.5 s of compiling became 3.7 s).
pub(super) fn keep_for(device: cl_device_id) -> bool {
    if std::env::var_os("NETCL_PROGRAM_CACHE").is_some_and(|v| !v.is_empty()) {
        return true;
    }
    let pocl_cache_on = std::env::var("POCL_KERNEL_CACHE").map_or(true, |v| v.trim() != "0");
    !(pocl_cache_on && is_pocl(device))
}

/// Whether `device` belongs to PoCL (the Portable Computing Language platform).
fn is_pocl(device: cl_device_id) -> bool {
    let d = ClDeviceId::new(device);
    let platform = d
        .platform()
        .ok()
        .map(|p| opencl3::platform::Platform::new(p as _))
        .and_then(|p| p.name().ok())
        .unwrap_or_default();
    platform.contains("Portable Computing Language") || platform.eq_ignore_ascii_case("pocl")
}

/// 64-bit FNV-1a of `bytes`, continuing from `h`.
pub(super) fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

const FNV_BASIS: u64 = 0xcbf2_9ce4_8422_2325;

/// A 128-bit checksum of `bytes`: FNV-1a from two different starting values, and the length.
fn checksum(bytes: &[u8]) -> String {
    let a = fnv(FNV_BASIS, bytes);
    let b = fnv(FNV_BASIS ^ 0x9e37_79b9_7f4a_7c15, bytes);
    format!("{a:016x}{b:016x}-{}", bytes.len())
}

/// The text that identifies the device a binary was compiled for: what the driver says of itself.
pub(super) fn device_tag(device: cl_device_id) -> String {
    let d = ClDeviceId::new(device);
    format!(
        "device={}\nvendor={}\ndriver={}\nversion={}\n",
        d.name().unwrap_or_default().trim(),
        d.vendor().unwrap_or_default().trim(),
        d.driver_version().unwrap_or_default().trim(),
        d.version().unwrap_or_default().trim(),
    )
}

/// The file beside the binaries that lists every program compiled from source into this cache, one JSON line
/// each: `[device tag, family, kernel, defines]`. It is what `netcl tune export` reads to name the programs a
/// device's workloads use, so that a table can list them for helpers to build ahead on a fresh machine.
pub(super) const BUILT_LIST: &str = "built.list";

/// Appends one program to [`BUILT_LIST`] in `dir`. Each line is one `write` to a file opened for appending, so
/// lines of processes writing at once do not interleave; a reader skips a line it cannot parse.
pub(super) fn note_built(dir: &Path, tag: &str, family: &str, kernel: &str, defines: &str) {
    use std::io::Write;
    let mut line = serde_json::json!([tag, family, kernel, defines]).to_string();
    line.push('\n');
    let r = std::fs::create_dir_all(dir).and_then(|()| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(BUILT_LIST))?
            .write_all(line.as_bytes())
    });
    if let Err(e) = r {
        tracing::debug!("cannot note a built program in {}: {e}", dir.display());
    }
}

/// The programs [`BUILT_LIST`] in `dir` names for the device `tag` describes, each once, in the order first
/// built: `(family, kernel, defines)`.
pub(super) fn built_programs(dir: &Path, tag: &str) -> Vec<(String, String, String)> {
    let Ok(text) = std::fs::read_to_string(dir.join(BUILT_LIST)) else {
        return Vec::new();
    };
    let mut seen = std::collections::HashSet::new();
    text.lines()
        .filter_map(|l| serde_json::from_str::<(String, String, String, String)>(l).ok())
        .filter(|(t, ..)| t == tag)
        .map(|(_, f, k, d)| (f, k, d))
        .filter(|p| seen.insert(p.clone()))
        .collect()
}

/// The lock file in the cache directory that the process handing a tuning table's program list to its helpers
/// holds until they are done, so that processes opening the device together (a server's workers, parallel runs)
/// do not each start helpers on the same programs. The lock goes with its process, however that ends.
pub(super) const WARM_LOCK: &str = "warm-ahead.lock";

/// Where one program's binary lives and what its file must say it is.
pub(super) struct Entry {
    pub(super) path: PathBuf,
    key: String,
}

impl Entry {
    /// The entry of `source_name` (its full text `src`) built with `options` for the device `tag` describes, in
    /// `dir`.
    pub(super) fn new(dir: &Path, tag: &str, source_name: &str, src: &str, options: &str) -> Entry {
        let key = format!(
            "netcl program binary\n{tag}family={source_name}\noptions={options}\nsource={}\n",
            checksum(src.as_bytes())
        );
        let a = fnv(FNV_BASIS, key.as_bytes());
        let b = fnv(FNV_BASIS ^ 0x9e37_79b9_7f4a_7c15, key.as_bytes());
        let name = format!("{source_name}-{a:016x}{b:08x}.bin", b = b >> 32);
        Entry {
            path: dir.join(name),
            key,
        }
    }

    /// The binary stored for this entry: `Ok(None)` when there is no file, `Err` with the reason when the file
    /// is not a whole entry of this key (it is then rebuilt and replaced).
    pub(super) fn read(&self) -> Result<Option<Vec<u8>>, String> {
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot read {}: {e}", self.path.display())),
        };
        decode(&bytes, &self.key)
            .map(Some)
            .map_err(|why| format!("{}: {why}", self.path.display()))
    }

    /// Replaces the file with `binary` (atomically; the directory is created when missing).
    pub(super) fn write(&self, binary: &[u8]) -> std::io::Result<()> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        crate::fsio::write_atomic(&self.path, &encode(binary, &self.key))
    }
}

/// The file form: magic, key length (u32 LE), key, binary length (u64 LE), binary, then FNV-1a of all of it.
fn encode(binary: &[u8], key: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(binary.len() + key.len() + 32);
    v.extend_from_slice(MAGIC);
    v.extend_from_slice(&(key.len() as u32).to_le_bytes());
    v.extend_from_slice(key.as_bytes());
    v.extend_from_slice(&(binary.len() as u64).to_le_bytes());
    v.extend_from_slice(binary);
    let sum = fnv(FNV_BASIS, &v);
    v.extend_from_slice(&sum.to_le_bytes());
    v
}

fn decode(bytes: &[u8], key: &str) -> Result<Vec<u8>, &'static str> {
    let body_len = bytes.len().checked_sub(8).ok_or("shorter than a header")?;
    let (body, sum) = bytes.split_at(body_len);
    if u64::from_le_bytes(sum.try_into().map_err(|_| "no checksum")?) != fnv(FNV_BASIS, body) {
        return Err("checksum mismatch (truncated or altered)");
    }
    let rest = body
        .strip_prefix(MAGIC)
        .ok_or("not a program binary entry")?;
    let (n, rest) = rest.split_at_checked(4).ok_or("no key length")?;
    let n = u32::from_le_bytes(n.try_into().map_err(|_| "no key length")?) as usize;
    let (stored_key, rest) = rest.split_at_checked(n).ok_or("key cut short")?;
    if stored_key != key.as_bytes() {
        return Err("entry of another program or device");
    }
    let (n, rest) = rest.split_at_checked(8).ok_or("no binary length")?;
    let n = u64::from_le_bytes(n.try_into().map_err(|_| "no binary length")?);
    if n != rest.len() as u64 || n == 0 {
        return Err("binary length mismatch");
    }
    Ok(rest.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_round_trips_and_any_damage_is_refused() {
        let key = "netcl program binary\ndevice=x\n";
        let bin = b"\x7fELF binary bytes".to_vec();
        let file = encode(&bin, key);
        assert_eq!(decode(&file, key).unwrap(), bin);
        assert!(decode(&file, "another key").is_err());
        for cut in [0, 5, 20, file.len() - 1] {
            assert!(decode(&file[..cut], key).is_err(), "cut at {cut}");
        }
        let mut flipped = file.clone();
        flipped[30] ^= 1;
        assert!(decode(&flipped, key).is_err());
        assert!(decode(b"garbage that is long enough to parse", key).is_err());
    }

    #[test]
    fn keys_differ_by_options_source_and_device() {
        let d = Path::new("/c");
        let a = Entry::new(d, "device=a\n", "gemm", "src", "-D X=1");
        assert_ne!(
            a.path,
            Entry::new(d, "device=a\n", "gemm", "src", "-D X=2").path
        );
        assert_ne!(
            a.path,
            Entry::new(d, "device=a\n", "gemm", "src2", "-D X=1").path
        );
        assert_ne!(
            a.path,
            Entry::new(d, "device=b\n", "gemm", "src", "-D X=1").path
        );
        assert_eq!(
            a.path,
            Entry::new(d, "device=a\n", "gemm", "src", "-D X=1").path
        );
    }
}
