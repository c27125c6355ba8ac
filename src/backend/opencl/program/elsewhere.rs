//! Programs built by helper processes while this one goes on.
//!
//! NVIDIA's OpenCL driver compiles the programs of one process nearly one at a time (four tiled GEMM programs:
//! 5.84 s one after another, 4.52 s on four threads; `bench/probe_compile.py`), and a large tiled GEMM program
//! takes 1–7 s to compile. A product that waited for its chosen kernel at its first call would stall that long,
//! and every other first build of the process would queue behind it. So, on GPUs in background mode, the chosen
//! programs are handed to helper processes (`netcl build-programs`, the same executable), which compile them in
//! parallel with each other and with this process and store the binaries in the on-disk program cache
//! ([`super::disk`]); meanwhile the product runs a quick generic kernel. A later call finds the binary on disk,
//! loads it, and runs the chosen kernel.
//!
//! The executable is `NETCL_BUILDER` when set (a path, or `off`), else this process's own executable when it
//! is `netcl` (tests and embedders name it). Helpers run at most `NETCL_BUILDER_JOBS` at once (default: a
//! half of the cores, 1 to 8: each helper compiles on one core, and a tuning table's program list gives them
//! work as soon as a device opens), each given up to [`BATCH`] programs, the urgent ones (a chosen kernel) first.
//! A program a helper could not build is remembered: its product then builds it here, and the build error
//! surfaces as it would without helpers.

use std::collections::{HashSet, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

use super::{Defines, ProgramSpec};

/// Programs handed to one helper process at a time.
const BATCH: usize = 4;

/// One program to build, as the helper reads it: family, kernel, defines (the option text).
type Job = (&'static str, &'static str, Defines);

#[derive(Default)]
struct State {
    /// Programs waiting for a helper, the next first.
    queue: VecDeque<Job>,
    /// Every program ever queued for a device, by (device index, job): never queued twice.
    queued: HashSet<(usize, Job)>,
    /// Programs a helper failed to build.
    failed: HashSet<(usize, Job)>,
    /// The device index of each queued job (parallel to `queue`).
    devices: VecDeque<usize>,
    /// Helper processes running now.
    running: usize,
    /// Programs handed to helpers and not yet reported.
    in_flight: usize,
}

fn state() -> &'static Mutex<State> {
    static S: OnceLock<Mutex<State>> = OnceLock::new();
    S.get_or_init(Mutex::default)
}

/// Set by [`serve_builds_from_here`]: this executable answers `build-programs`.
static SELF_BUILDS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Declares that this executable answers `build-programs` (the `netcl` command does, whatever its file is
/// called), so that its own ops hand programs to helpers that are this executable. Call it before the first
/// device is opened; test binaries and other programs that embed the engine do not, and name the `netcl`
/// executable in `NETCL_BUILDER` instead.
pub fn serve_builds_from_here() {
    SELF_BUILDS.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The executable that builds programs for this process, or `None` when helpers are off: `NETCL_BUILDER` (a
/// path; `off`, `0` or empty turn helpers off), else this executable when it is `netcl`, by its file name or by
/// [`serve_builds_from_here`] (not a test binary or another program embedding the engine: those name the `netcl`
/// binary in the variable). `explicit` says whether the variable named it (helpers are then used on every
/// device type, not only GPUs).
pub(crate) fn builder() -> Option<(PathBuf, bool)> {
    static B: OnceLock<Option<(PathBuf, bool)>> = OnceLock::new();
    B.get_or_init(|| {
        choose_builder(
            std::env::var_os("NETCL_BUILDER"),
            std::env::current_exe().ok(),
            SELF_BUILDS.load(std::sync::atomic::Ordering::Relaxed),
        )
    })
    .clone()
}

/// [`builder`]'s rule, given `NETCL_BUILDER`, this process's executable and whether it declared that it
/// answers `build-programs`.
fn choose_builder(
    var: Option<std::ffi::OsString>,
    exe: Option<PathBuf>,
    serves: bool,
) -> Option<(PathBuf, bool)> {
    match var {
        Some(v) => {
            let s = v.to_string_lossy().trim().to_ascii_lowercase();
            if matches!(s.as_str(), "" | "0" | "off" | "no" | "none" | "false") {
                None
            } else {
                Some((PathBuf::from(v), true))
            }
        }
        None => {
            let exe = exe?;
            let named = exe.file_stem().is_some_and(|s| s == "netcl");
            (serves || named).then_some((exe, false))
        }
    }
}

/// Helper processes allowed at once: `NETCL_BUILDER_JOBS`, else half of the cores (1 to 8).
fn jobs() -> usize {
    std::env::var("NETCL_BUILDER_JOBS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map_or(1, |n| n.get() / 2)
                .clamp(1, 8)
        })
}

/// Hands `specs` to helper processes for the device at `device_index` (its position in
/// [`crate::list_devices`]). Programs queued before are not queued again; `urgent` ones go to the front (a
/// queued one moves there).
pub(crate) fn submit(device_index: usize, specs: &[ProgramSpec], urgent: bool) {
    let Some((exe, _)) = builder() else {
        return;
    };
    let Ok(mut st) = state().lock() else {
        return;
    };
    for spec in specs {
        let job: Job = (spec.0, super::prune::program_kernel(spec.1), spec.2.clone());
        let id = (device_index, job.clone());
        if st.queued.insert(id) {
            if urgent {
                st.queue.push_front(job);
                st.devices.push_front(device_index);
            } else {
                st.queue.push_back(job);
                st.devices.push_back(device_index);
            }
        } else if urgent
            && let Some(at) = st
                .queue
                .iter()
                .zip(&st.devices)
                .position(|(j, &d)| *j == job && d == device_index)
        {
            let j = st.queue.remove(at).unwrap_or(job);
            let d = st.devices.remove(at).unwrap_or(device_index);
            st.queue.push_front(j);
            st.devices.push_front(d);
        }
    }
    while st.running < jobs() && !st.queue.is_empty() {
        st.running += 1;
        let exe = exe.clone();
        let spawned = std::thread::Builder::new()
            .name("netcl-builder".into())
            .spawn(move || run_helpers(exe));
        if spawned.is_err() {
            st.running -= 1;
            break;
        }
    }
}

/// Whether a helper failed to build `spec` for the device at `device_index`.
pub(crate) fn failed(device_index: usize, spec: &ProgramSpec) -> bool {
    let job: Job = (spec.0, super::prune::program_kernel(spec.1), spec.2.clone());
    state()
        .lock()
        .is_ok_and(|st| st.failed.contains(&(device_index, job)))
}

/// Programs queued for helpers or being built by them now (0 once everything handed over is done).
pub fn builds_pending() -> usize {
    state().lock().map_or(0, |st| st.queue.len() + st.in_flight)
}

/// One helper thread: while programs wait, takes a batch (of one device), runs a helper process on it, and
/// records what it could not build.
fn run_helpers(exe: PathBuf) {
    loop {
        let (device, batch) = {
            let Ok(mut st) = state().lock() else {
                return;
            };
            let Some(&device) = st.devices.front() else {
                st.running -= 1;
                return;
            };
            let mut batch = Vec::with_capacity(BATCH);
            while batch.len() < BATCH && st.devices.front() == Some(&device) {
                st.devices.pop_front();
                if let Some(j) = st.queue.pop_front() {
                    batch.push(j);
                }
            }
            st.in_flight += batch.len();
            (device, batch)
        };
        let built = run_helper(&exe, device, &batch);
        let Ok(mut st) = state().lock() else {
            return;
        };
        st.in_flight -= batch.len();
        for (i, job) in batch.into_iter().enumerate() {
            if !built.get(i).copied().unwrap_or(false) {
                st.failed.insert((device, job));
            }
        }
    }
}

/// Runs one helper process on `batch`; returns, per program, whether it reported the program built.
fn run_helper(exe: &PathBuf, device: usize, batch: &[Job]) -> Vec<bool> {
    let mut built = vec![false; batch.len()];
    let child = Command::new(exe)
        .args(["--device", &device.to_string(), "build-programs"])
        .env("NETCL_BUILDER", "off")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("cannot start the program builder {}: {e}", exe.display());
            return built;
        }
    };
    if let Some(mut stdin) = child.stdin.take() {
        for (family, kernel, defines) in batch {
            let line = serde_json::json!([family, kernel, defines.text()]);
            if writeln!(stdin, "{line}").is_err() {
                break;
            }
        }
    }
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out)
            .lines()
            .map_while(std::result::Result::ok)
        {
            let mut words = line.split_whitespace();
            if let (Some("built"), Some(i)) = (words.next(), words.next())
                && let Ok(i) = i.parse::<usize>()
                && i < built.len()
            {
                built[i] = true;
            }
        }
    }
    let _ = child.wait();
    built
}

/// The helper's side (`netcl build-programs`): reads programs as JSON lines `[family, kernel, defines]` from
/// `input` until it ends, builds each on `device` (storing its binary in the on-disk cache) and writes
/// `built I` or `failed I: reason` per line `I` (from 0). An unknown family or kernel is reported as failed.
pub fn serve_builds(
    device: &crate::Device,
    input: impl BufRead,
    mut out: impl Write,
) -> crate::Result<()> {
    let cl = device
        .backend()
        .as_any()
        .downcast_ref::<super::super::ClDevice>()
        .ok_or_else(|| {
            crate::Error::Unsupported("building programs needs an OpenCL device".into())
        })?;
    let io = |e| crate::Error::io("<build-programs pipe>", e);
    for (i, line) in input.lines().enumerate() {
        let line = line.map_err(io)?;
        let parsed: Option<(String, String, String)> = serde_json::from_str(&line).ok();
        let result = match parsed {
            None => Err(format!("not a [family, kernel, defines] line: {line}")),
            Some((family, kernel, defines)) => match super::declared(&family, &kernel) {
                Err(e) => Err(e.to_string()),
                Ok((f, k)) => cl
                    .build_one(f, k, &Defines::from_text(&defines))
                    .map_err(|e| e.to_string()),
            },
        };
        match result {
            Ok(()) => writeln!(out, "built {i}").map_err(io)?,
            Err(e) => writeln!(out, "failed {i}: {}", e.replace('\n', " ")).map_err(io)?,
        }
        out.flush().map_err(io)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builder_is_the_variable_or_the_netcl_command_under_any_name() {
        let exe = |p: &str| Some(PathBuf::from(p));
        let own = |p: &str| Some((PathBuf::from(p), false));
        assert_eq!(
            choose_builder(None, exe("/usr/bin/netcl"), false),
            own("/usr/bin/netcl")
        );
        // The command under another file name declares itself.
        assert_eq!(
            choose_builder(None, exe("/opt/netcl-new"), true),
            own("/opt/netcl-new")
        );
        // A test binary or an embedding program does not build for itself.
        assert_eq!(
            choose_builder(None, exe("/t/netcl_tests-1a2b"), false),
            None
        );
        assert_eq!(
            choose_builder(Some("/usr/bin/netcl".into()), exe("/t/app"), false),
            Some((PathBuf::from("/usr/bin/netcl"), true))
        );
        for off in ["off", "0", "", " NONE ", "false", "no"] {
            assert_eq!(
                choose_builder(Some(off.into()), exe("/usr/bin/netcl"), true),
                None
            );
        }
    }
}
