//! The on-disk cache of compiled program binaries: a second process loads what the first built, a damaged
//! entry is rebuilt and replaced, two processes building at once both succeed, and the cache can be switched off.
//!
//! Each case runs the ignored test `child_product` in fresh processes (the binary cache matters only across
//! processes), each with its own temporary program and autotune caches.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use netcl::program::ProgramStats;
use netcl::{Device, Tensor, ops};

/// Runs a product whose programs are all built on first use and prints this process's program counters and
/// the result. Run by the tests below in child processes.
#[test]
#[ignore = "run as a child process by the tests of this file"]
fn child_product() {
    let Some(dev) = common::child_device() else {
        return;
    };
    let a = Tensor::arange(&Device::builtin(), 0.0, 48.0 * 40.0, 1.0)
        .and_then(|t| t.reshape(&[48, 40]))
        .and_then(|t| t.to_device(&dev))
        .expect("a");
    let b = Tensor::ones(&dev, &[40, 24]).expect("b");
    let c = ops::matmul(&a, &b).expect("matmul");
    let sums = ops::sum(&c, Some(&[0]), false).expect("sum");
    let values = sums.to_vec::<f32>().expect("read");
    common::print_program_stats();
    println!("RESULT {values:?}");
}

/// A fresh temporary directory for one case.
fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("netcl-progcache-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn child(programs: &str, work: &Path) -> std::process::Command {
    let mut cmd = common::child_command("child_product");
    cmd.env("NETCL_PROGRAM_CACHE", programs)
        .env("NETCL_AUTOTUNE_CACHE", work.join("autotune.json"))
        // No measurement: the product runs its default candidates, so each process builds the same programs.
        .env("NETCL_AUTOTUNE", "0");
    cmd
}

/// The counters and result a child printed, or `None` when it found no OpenCL device.
fn parse(out: &Output) -> Option<(ProgramStats, String)> {
    let text = common::child_test_output("child_product", "program cache", out);
    if text.contains("NO_DEVICE") {
        return None;
    }
    let line = |tag: &str| {
        text.lines()
            .find_map(|l| l.find(tag).map(|i| &l[i + tag.len()..]))
            .unwrap_or_else(|| panic!("no {tag} line in:\n{text}"))
            .to_owned()
    };
    let stats: ProgramStats = serde_json::from_str(&line("PROGRAM_STATS ")).expect("stats");
    Some((stats, line("RESULT ")))
}

fn run(cmd: &mut std::process::Command) -> Option<(ProgramStats, String)> {
    parse(&cmd.output().expect("spawn child"))
}

/// A fresh case `name`: its work directory, its program cache, and the counters and result of a first
/// process on that cache (`None` without an OpenCL device).
fn first_run(name: &str) -> Option<(PathBuf, PathBuf, ProgramStats, String)> {
    let work = temp_dir(name);
    let cache = work.join("programs");
    let (stats, result) = run(&mut child(cache.to_str().unwrap(), &work))?;
    Some((work, cache, stats, result))
}

/// The cache's entry files (no temporaries, not the list of built programs).
fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|r| {
            r.map(|e| e.expect("entry").path())
                .filter(|p| p.extension().is_some_and(|x| x == "bin"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The expected column sums of the child's product: column j of A·1 summed over rows is the sum of A.
fn expected() -> String {
    let total: f64 = (0..48 * 40).map(f64::from).sum();
    format!("{:?}", vec![total as f32; 24])
}

#[test]
fn a_second_process_loads_every_program_from_disk() {
    let Some((work, cache, first, r1)) = first_run("reuse") else {
        return;
    };
    assert_eq!(r1, expected());
    assert!(first.source_builds >= 2, "{first:?}");
    assert_eq!(first.binary_loads, 0, "{first:?}");
    assert_eq!(first.binary_stored, first.source_builds, "{first:?}");
    assert_eq!(entries(&cache).len() as u64, first.binary_stored);

    let (second, r2) = run(&mut child(cache.to_str().unwrap(), &work)).expect("device");
    assert_eq!(r2, r1, "a loaded binary computes the same result");
    assert_eq!(second.source_builds, 0, "{second:?}");
    assert_eq!(second.binary_loads, first.binary_stored, "{second:?}");
    assert_eq!(second.binary_rejected, 0, "{second:?}");
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn damaged_entries_are_rebuilt_and_replaced() {
    let Some((work, cache, first, r1)) = first_run("corrupt") else {
        return;
    };
    let files = entries(&cache);
    assert!(files.len() >= 2, "{files:?}");
    // One entry replaced by garbage, one cut in half, one with a flipped byte in its binary.
    std::fs::write(&files[0], b"not a program binary at all").expect("garbage");
    let whole = std::fs::read(&files[1]).expect("read");
    std::fs::write(&files[1], &whole[..whole.len() / 2]).expect("truncate");
    if let Some(f) = files.get(2) {
        let mut b = std::fs::read(f).expect("read");
        let mid = b.len() / 2;
        b[mid] ^= 0x5a;
        std::fs::write(f, b).expect("flip");
    }
    let damaged = files.len().min(3) as u64;

    let (second, r2) = run(&mut child(cache.to_str().unwrap(), &work)).expect("device");
    assert_eq!(r2, r1, "rebuilt programs compute the same result");
    assert_eq!(second.binary_rejected, damaged, "{second:?}");
    assert_eq!(second.source_builds, damaged, "{second:?}");
    assert_eq!(
        second.binary_loads,
        first.binary_stored - damaged,
        "{second:?}"
    );
    assert_eq!(
        second.binary_stored, damaged,
        "the rebuilt entries are written back"
    );

    let (third, r3) = run(&mut child(cache.to_str().unwrap(), &work)).expect("device");
    assert_eq!(r3, r1);
    assert_eq!(third.source_builds, 0, "replaced entries load: {third:?}");
    assert_eq!(third.binary_rejected, 0, "{third:?}");
    assert_eq!(entries(&cache).len(), files.len(), "no temporaries left");
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn two_processes_building_at_once_both_succeed_and_leave_valid_entries() {
    let work = temp_dir("concurrent");
    let cache = work.join("programs");
    let a = child(cache.to_str().unwrap(), &work)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn a");
    let b = child(cache.to_str().unwrap(), &work)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn b");
    let (oa, ob) = (
        a.wait_with_output().expect("a"),
        b.wait_with_output().expect("b"),
    );
    let Some((sa, ra)) = parse(&oa) else {
        return;
    };
    let (sb, rb) = parse(&ob).expect("device");
    assert_eq!(ra, expected());
    assert_eq!(rb, expected());
    assert_eq!(sa.binary_rejected + sb.binary_rejected, 0, "{sa:?} {sb:?}");
    let n = entries(&cache).len() as u64;
    assert_eq!(
        n,
        sa.source_builds + sa.binary_loads,
        "one file per program, no temporaries"
    );

    let (after, r) = run(&mut child(cache.to_str().unwrap(), &work)).expect("device");
    assert_eq!(r, expected());
    assert_eq!(after.source_builds, 0, "{after:?}");
    assert_eq!(after.binary_loads, n, "{after:?}");
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn the_cache_can_be_switched_off() {
    let work = temp_dir("off");
    let Some((s1, r1)) = run(&mut child("off", &work)) else {
        return;
    };
    let (s2, r2) = run(&mut child("off", &work)).expect("device");
    assert_eq!(r1, expected());
    assert_eq!(r2, r1);
    for s in [s1, s2] {
        assert!(s.source_builds >= 2, "{s:?}");
        assert_eq!((s.binary_loads, s.binary_stored), (0, 0), "{s:?}");
    }
    let _ = std::fs::remove_dir_all(&work);
}
