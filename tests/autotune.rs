//! The autotuner: measurement, the persistent cache, re-validation, the off switch, corrupt files, and two
//! processes writing one cache file at once.
//!
//! The cache path and the mode are environment variables, which are process-wide and read once into the
//! tuner's configuration, so every test here takes one lock, sets its own cache file and reloads the
//! configuration. Tests of this file run in `sync` mode unless they say otherwise.

mod common;

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use netcl::autotune::{self, Source, TuneKey};
use netcl::{Device, Tensor, ops};

static ENV: Mutex<()> = Mutex::new(());

/// Takes the environment for one test (every test of this file holds `ENV` while it touches the environment)
/// and points the tuner at a fresh cache file of its own: the guard and the file's path.
fn fresh_cache(name: &str) -> (MutexGuard<'static, ()>, PathBuf) {
    let guard = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let dir =
        std::env::temp_dir().join(format!("netcl-autotune-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("autotune.json");
    // SAFETY: every test of this file holds ENV while it touches the environment.
    unsafe {
        std::env::set_var("NETCL_AUTOTUNE_CACHE", &path);
        std::env::set_var("NETCL_AUTOTUNE", "sync");
        std::env::remove_var("NETCL_AUTOTUNE_FORCE");
        std::env::remove_var("NETCL_TUNING_DIR");
    }
    autotune::reload_config();
    autotune::clear_memory();
    (guard, path)
}

/// Runs the ignored test `child` in two processes at once on the cache file `cache`, each with the variable
/// `env(id)` (name and value) set, and fails unless both succeed.
fn two_children(child: &str, cache: &Path, env: impl Fn(usize) -> (&'static str, OsString)) {
    let exe = std::env::current_exe().expect("test binary");
    let children: Vec<_> = (0..2)
        .map(|id| {
            let (name, value) = env(id);
            Command::new(&exe)
                .args(["--exact", child, "--include-ignored", "--test-threads=1"])
                .env("NETCL_AUTOTUNE_CACHE", cache)
                .env(name, value)
                .stdout(Stdio::null())
                .spawn()
                .expect("spawn child")
        })
        .collect();
    for mut c in children {
        assert!(
            c.wait().expect("wait").success(),
            "a {child} process failed"
        );
    }
}

/// Sets (or with `None` removes) an environment variable and reloads the tuner's configuration.
fn set_env(k: &str, v: Option<&str>) {
    // SAFETY: every test of this file holds ENV while it touches the environment.
    unsafe {
        match v {
            Some(v) => std::env::set_var(k, v),
            None => std::env::remove_var(k),
        }
    }
    autotune::reload_config();
}

/// A test key with one shape field per value.
fn key(kernel: &str, dims: &[i64]) -> TuneKey {
    const NAMES: [&str; 4] = ["a", "b", "c", "d"];
    let fields: Vec<(&'static str, i64)> = dims
        .iter()
        .enumerate()
        .map(|(i, &v)| (NAMES[i], v))
        .collect();
    TuneKey::new(kernel.to_owned(), &fields)
}

fn last_decision(kernel: &str) -> autotune::Decision {
    autotune::decisions_since(0)
        .into_iter()
        .rev()
        .find(|d| d.kernel == kernel)
        .expect("a decision was logged")
}

#[test]
fn the_fastest_candidate_wins_and_is_cached_with_its_times() {
    let (_g, path) = fresh_cache("winner");
    let dev = Device::builtin();
    let times = [3.0, 1.0, 2.0];
    let mut calls = 0;
    let w = autotune::tune(&dev, &key("t_winner", &[8, 8]), &["a", "b", "c"], 0, |c| {
        calls += 1;
        Ok(times[["a", "b", "c"].iter().position(|x| x == c).expect("known")])
    })
    .expect("tune");
    assert_eq!(w, "b");
    assert_eq!(
        calls,
        3 * 6,
        "one warm-up and five timed runs per candidate"
    );
    let d = last_decision("t_winner");
    assert_eq!(d.source, Source::Measured);
    assert_eq!(
        d.candidates.iter().map(|c| c.ms).collect::<Vec<_>>(),
        vec![Some(3.0), Some(1.0), Some(2.0)]
    );
    assert!(
        d.key
            .starts_with(&format!("{}::t_winner@", dev.info().tune_id()))
            && d.key.ends_with("::(8, 8)"),
        "netcl's key with the kernel's checksum: {}",
        d.key
    );

    // The next call is answered from memory without running anything.
    let w = autotune::tune(&dev, &key("t_winner", &[8, 8]), &["a", "b", "c"], 0, |_| {
        panic!("must not measure")
    })
    .expect("tune");
    assert_eq!((w, last_decision("t_winner").source), ("b", Source::Cache));

    // A new process (simulated by dropping the memo) reads the file, with the recorded times.
    autotune::clear_memory();
    let w = autotune::tune(&dev, &key("t_winner", &[8, 8]), &["a", "b", "c"], 0, |_| {
        panic!("must not measure")
    })
    .expect("tune");
    let d = last_decision("t_winner");
    assert_eq!((w, d.source, d.candidates.len()), ("b", Source::Cache, 3));
    let text = std::fs::read_to_string(&path).expect("file written");
    let v: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    assert_eq!(
        v[&d.key],
        serde_json::json!("b"),
        "netcl's flat key → winner layout"
    );
    let snap = autotune::cache_snapshot().expect("snapshot");
    assert_eq!(snap.status, "ok");
    assert!(
        snap.entries
            .iter()
            .any(|e| e.kernel == "t_winner" && e.shape_key == "(8, 8)" && e.candidates.is_some())
    );
}

#[test]
fn a_stale_winner_is_measured_again() {
    let (_g, _) = fresh_cache("stale");
    let dev = Device::builtin();
    let w = autotune::tune(&dev, &key("t_stale", &[1]), &[16, 32], 0, |c| {
        Ok(if *c == 32 { 1.0 } else { 2.0 })
    })
    .expect("tune");
    assert_eq!(w, 32);
    // The candidate set changed (32 is gone): the cached 32 is dropped and the shape re-measured.
    let mut measured = false;
    let w = autotune::tune(&dev, &key("t_stale", &[1]), &[8, 16], 0, |c| {
        measured = true;
        Ok(if *c == 8 { 1.0 } else { 2.0 })
    })
    .expect("tune");
    assert!(measured);
    assert_eq!((w, last_decision("t_stale").source), (8, Source::Measured));
}

#[test]
fn failing_candidates_are_disqualified_and_all_failing_uses_the_default() {
    let (_g, path) = fresh_cache("fail");
    let dev = Device::builtin();
    let w = autotune::tune(&dev, &key("t_fail", &[2]), &["x", "y"], 1, |c| {
        if *c == "x" {
            Err(netcl::Error::Invalid("x cannot run".into()))
        } else {
            Ok(5.0)
        }
    })
    .expect("tune");
    assert_eq!(w, "y");
    let d = last_decision("t_fail");
    assert!(
        d.candidates[0]
            .error
            .as_deref()
            .is_some_and(|e| e.contains("x cannot run"))
    );
    let w = autotune::tune(&dev, &key("t_fail_all", &[2]), &["x", "y"], 1, |_| {
        Err(netcl::Error::Invalid("no".into()))
    })
    .expect("tune");
    assert_eq!(
        (w, last_decision("t_fail_all").source),
        ("y", Source::Default)
    );
    let text = std::fs::read_to_string(&path).expect("file");
    assert!(
        !text.contains("t_fail_all"),
        "nothing is cached when every candidate fails"
    );
}

#[test]
fn autotune_off_measures_nothing() {
    let (_g, path) = fresh_cache("off");
    set_env("NETCL_AUTOTUNE", Some("0"));
    let dev = Device::builtin();
    let w = autotune::tune(&dev, &key("t_off", &[3]), &["a", "b"], 1, |_| {
        panic!("must not measure")
    })
    .expect("tune");
    set_env("NETCL_AUTOTUNE", Some("sync"));
    // The op's first choice, from the heuristic.
    assert_eq!((w, last_decision("t_off").source), ("b", Source::Heuristic));
    assert!(!path.exists(), "no file is written when autotuning is off");
    // Real ops still run with their defaults.
    if let Some(cl) = common::opencl_device() {
        set_env("NETCL_AUTOTUNE", Some("off"));
        let seq = autotune::last_seq();
        let s = Tensor::ones(&cl, &[1000])
            .and_then(|t| ops::sum_all(&t))
            .and_then(|t| t.to_vec::<f32>())
            .expect("sum");
        set_env("NETCL_AUTOTUNE", Some("sync"));
        assert_eq!(s, vec![1000.0]);
        assert!(
            autotune::decisions_since(seq)
                .iter()
                .all(|d| !matches!(d.source, Source::Measured | Source::Cache))
        );
    }
}

#[test]
fn a_corrupt_cache_file_is_reported_and_rebuilt() {
    let (_g, path) = fresh_cache("corrupt");
    std::fs::write(&path, "{\"truncated\": [1, 2").expect("write garbage");
    let snap = autotune::cache_snapshot().expect("snapshot of a corrupt file is not an error");
    assert!(snap.status.starts_with("corrupt"), "{}", snap.status);
    std::fs::write(&path, "{\"truncated\": [1, 2").expect("write garbage again");
    let dev = Device::builtin();
    let w =
        autotune::tune(&dev, &key("t_corrupt", &[4]), &[1, 2], 0, |c| Ok(*c as f64)).expect("tune");
    assert_eq!(w, 1);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("file")).expect("valid again");
    assert!(
        v.as_object()
            .is_some_and(|o| o.keys().any(|k| k.contains("t_corrupt")))
    );
    let dir = path.parent().expect("dir");
    let aside = std::fs::read_dir(dir)
        .expect("dir")
        .filter_map(|e| e.ok())
        .any(|e| e.file_name().to_string_lossy().contains("corrupt-"));
    assert!(aside, "the corrupt file is kept aside for inspection");
}

/// Runs only as a child of `two_processes_write_one_file_at_once`.
#[test]
#[ignore = "child process of two_processes_write_one_file_at_once"]
fn cache_writer_child() {
    let Ok(id) = std::env::var("NETCL_TEST_WRITER") else {
        return;
    };
    let dev = Device::builtin();
    for i in 0..40 {
        let w = autotune::tune(
            &dev,
            &key(&format!("t_proc{id}_{i}"), &[1]),
            &["p", "q"],
            0,
            |c| Ok(if *c == "q" { 1.0 } else { 2.0 }),
        )
        .expect("tune");
        assert_eq!(w, "q");
    }
}

#[test]
fn two_processes_write_one_file_at_once() {
    let (_g, path) = fresh_cache("procs");
    two_children("cache_writer_child", &path, |id| {
        ("NETCL_TEST_WRITER", id.to_string().into())
    });
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("file")).expect("valid JSON");
    let keys: Vec<&String> = v.as_object().expect("object").keys().collect();
    for id in 0..2 {
        for i in 0..40 {
            let k = format!("::t_proc{id}_{i}@");
            assert!(
                keys.iter().any(|key| key.contains(&k)),
                "entry {k} lost: merges under the lock keep both writers' entries"
            );
        }
    }
}

#[test]
fn sum_all_records_its_decision_with_candidate_times() {
    let (_g, _) = fresh_cache("sum");
    let Some(dev) = common::opencl_device() else {
        return;
    };
    let seq = autotune::last_seq();
    let x = Tensor::ones(&dev, &[300_001]).expect("x");
    let s = ops::sum_all(&x)
        .and_then(|t| t.to_vec::<f32>())
        .expect("sum");
    assert_eq!(s, vec![300_001.0]);
    let d = autotune::decisions_since(seq)
        .into_iter()
        .find(|d| d.kernel == "reduce")
        .expect("decision");
    assert_eq!(d.source, Source::Measured);
    assert!(d.candidates.len() >= 2 && d.candidates.iter().all(|c| c.ms.is_some_and(|m| m >= 0.0)));
    assert!(d.candidates.iter().any(|c| c.candidate == d.winner));
    let again = ops::sum_all(&x)
        .and_then(|t| t.to_vec::<f32>())
        .expect("sum");
    assert_eq!(again, s);
    assert_eq!(
        autotune::decisions_since(seq).last().map(|d| d.source),
        Some(Source::Cache)
    );
}

/// A product's decision lists every candidate it timed. On a device whose local memory is not on chip (CPU
/// OpenCL) the tiled GPU kernels are not among them, and on one where it is (GPUs) the packed and register
/// CPU kernels are not; all stay listed by `matmul_candidates` and forcible by label.
#[test]
fn a_product_times_the_tiled_kernels_only_where_local_memory_is_on_chip() {
    let (_g, _) = fresh_cache("gemm-cands");
    let Some(dev) = common::opencl_device() else {
        return;
    };
    let seq = autotune::last_seq();
    let (ac, ad) = common::pair(&dev, &[96, 80], 31);
    let (bc, bd) = common::pair(&dev, &[80, 72], 32);
    let want = ops::matmul(&ac, &bc)
        .and_then(|t| t.to_vec::<f32>())
        .expect("cpu");
    let got = ops::matmul(&ad, &bd)
        .and_then(|t| t.to_vec::<f32>())
        .expect("device");
    common::assert_close(&got, &want, 1e-4, 1e-4, "tuned product");
    let d = autotune::decisions_since(seq)
        .into_iter()
        .find(|d| d.kernel == "matmul")
        .expect("decision");
    assert_eq!(d.source, Source::Measured);
    let timed = |prefixes: &[&str]| {
        d.candidates
            .iter()
            .any(|c| prefixes.iter().any(|p| c.label.starts_with(p)))
    };
    let timed_tiled = timed(&["[\"tiled"]);
    let timed_cpu = timed(&["[\"packed\"", "[\"reg\""]);
    let on_chip = dev.info().local_mem_dedicated;
    let labels: Vec<&String> = d.candidates.iter().map(|c| &c.label).collect();
    assert_eq!(
        (timed_tiled, timed_cpu),
        (on_chip, !on_chip),
        "tiled / packed or register kernels timed, local memory on chip: {on_chip}; {labels:?}"
    );
    let listed = ops::matmul_candidates(&ad, &bd, false, false).expect("labels");
    for kind in ["[\"tiled\"", "[\"packed\"", "[\"reg\""] {
        let label = listed
            .iter()
            .find(|l| l.starts_with(kind))
            .unwrap_or_else(|| panic!("a {kind} label is listed: {listed:?}"));
        let forced = ops::matmul_with(&ad, &bd, false, false, label)
            .and_then(|t| t.to_vec::<f32>())
            .expect("forced");
        common::assert_close(&forced, &want, 1e-4, 1e-4, &format!("forced {label}"));
    }
}

/// A thread that asks the same question again gets its earlier answer without the candidate list being
/// looked at, until something that could change the answer happens: a forced label, the off switch, a new
/// logging scope, another cache file, a cleared cache, or another thread measuring a new winner.
#[test]
fn repeated_answers_follow_every_change() {
    let (_g, first) = fresh_cache("hot");
    let dev = Device::builtin();
    let cands = ["a", "b", "c"];
    let timed = |times: [f64; 3]| {
        move |c: &&str| Ok(times[["a", "b", "c"].iter().position(|x| x == c).expect("known")])
    };
    let hot = key("t_hot", &[8]);
    let ask = |d: &Device| autotune::answered::<&str>(d, &hot);
    let never = |_: &&str| -> netcl::Result<f64> { panic!("must not measure") };

    assert_eq!(ask(&dev), None, "nothing answered yet");
    let w =
        autotune::tune(&dev, &key("t_hot", &[8]), &cands, 0, timed([3.0, 1.0, 2.0])).expect("tune");
    assert_eq!(w, "b");
    // Logged from the cache once in this scope, then answered from memory.
    for _ in 0..2 {
        assert_eq!(
            autotune::tune(&dev, &key("t_hot", &[8]), &cands, 0, never).expect("tune"),
            "b"
        );
    }
    assert_eq!(ask(&dev), Some("b"));
    let seq = autotune::last_seq();
    assert_eq!(
        autotune::tune(&dev, &key("t_hot", &[8]), &cands, 0, never).expect("tune"),
        "b"
    );
    assert_eq!(autotune::last_seq(), seq, "a repeated answer logs nothing");

    // A forced label and the off switch win over a kept answer.
    set_env("NETCL_AUTOTUNE_FORCE", Some("t_hot=c"));
    assert_eq!(ask(&dev), None);
    let w = autotune::tune(&dev, &key("t_hot", &[8]), &cands, 0, never).expect("tune");
    assert_eq!((w, last_decision("t_hot").source), ("c", Source::Forced));
    set_env("NETCL_AUTOTUNE_FORCE", None);
    set_env("NETCL_AUTOTUNE", Some("0"));
    assert_eq!(ask(&dev), None);
    let w = autotune::tune(&dev, &key("t_hot", &[8]), &cands, 0, never).expect("tune");
    assert_eq!((w, last_decision("t_hot").source), ("a", Source::Heuristic));
    set_env("NETCL_AUTOTUNE", Some("sync"));

    // A new scope logs the cached answer again.
    autotune::begin_scope();
    assert_eq!(ask(&dev), None);
    let seq = autotune::last_seq();
    let w = autotune::tune(&dev, &key("t_hot", &[8]), &cands, 0, never).expect("tune");
    assert_eq!((w, last_decision("t_hot").source), ("b", Source::Cache));
    assert!(autotune::last_seq() > seq);

    // Another cache file has its own answer.
    for _ in 0..2 {
        autotune::tune(&dev, &key("t_hot", &[8]), &cands, 0, never).expect("tune");
    }
    assert_eq!(ask(&dev), Some("b"));
    let other = first.with_file_name("other.json");
    set_env("NETCL_AUTOTUNE_CACHE", other.to_str());
    assert_eq!(ask(&dev), None);
    let w =
        autotune::tune(&dev, &key("t_hot", &[8]), &cands, 0, timed([0.5, 1.0, 2.0])).expect("tune");
    assert_eq!((w, last_decision("t_hot").source), ("a", Source::Measured));
    set_env("NETCL_AUTOTUNE_CACHE", first.to_str());
    for _ in 0..2 {
        assert_eq!(
            autotune::tune(&dev, &key("t_hot", &[8]), &cands, 0, never).expect("tune"),
            "b"
        );
    }
    assert_eq!(ask(&dev), Some("b"));

    // Another thread clears the cache and measures a new winner: this thread's kept answer is dropped.
    std::thread::scope(|s| {
        s.spawn(|| {
            autotune::clear_cache().expect("clear");
            let d = Device::builtin();
            let w = autotune::tune(&d, &key("t_hot", &[8]), &cands, 0, timed([3.0, 2.0, 1.0]))
                .expect("tune");
            assert_eq!(w, "c");
        });
    });
    assert_eq!(ask(&dev), None);
    assert_eq!(
        autotune::tune(&dev, &key("t_hot", &[8]), &cands, 0, never).expect("tune"),
        "c"
    );

    // Clearing the cache on this thread makes the next call measure again.
    for _ in 0..2 {
        autotune::tune(&dev, &key("t_hot", &[8]), &cands, 0, never).expect("tune");
    }
    assert_eq!(ask(&dev), Some("c"));
    autotune::clear_cache().expect("clear");
    assert_eq!(ask(&dev), None);
    let w =
        autotune::tune(&dev, &key("t_hot", &[8]), &cands, 0, timed([1.0, 2.0, 3.0])).expect("tune");
    assert_eq!((w, last_decision("t_hot").source), ("a", Source::Measured));
}

/// Counts calls of a fake bench and answers fixed times per candidate.
fn times_of(times: &'static [(&'static str, f64)]) -> impl Fn(&&str) -> netcl::Result<f64> {
    move |c: &&str| Ok(times.iter().find(|t| t.0 == *c).map(|t| t.1).unwrap_or(9.0))
}

#[test]
fn an_edited_kernel_or_a_changed_candidate_set_is_measured_again() {
    let (_g, _) = fresh_cache("checksum");
    let dev = Device::builtin();
    let bench = times_of(&[("a", 2.0), ("b", 1.0), ("c", 3.0)]);
    let old = key("t_sum", &[4]).source("kernel void k(global float* x) { x[0] = 1.0f; }");
    let w = autotune::tune(&dev, &old, &["a", "b"], 0, &bench).expect("tune");
    assert_eq!((w, last_decision("t_sum").source), ("b", Source::Measured));
    let w = autotune::tune(&dev, &old, &["a", "b"], 0, |_| panic!("cached")).expect("tune");
    assert_eq!((w, last_decision("t_sum").source), ("b", Source::Cache));

    // The kernel source changed: the old winner is not reused.
    let edited = key("t_sum", &[4]).source("kernel void k(global float* x) { x[0] = 2.0f; }");
    let mut calls = 0;
    autotune::tune(&dev, &edited, &["a", "b"], 0, |c| {
        calls += 1;
        bench(c)
    })
    .expect("tune");
    assert!(calls > 0, "an edited kernel is measured again");
    assert_eq!(last_decision("t_sum").source, Source::Measured);

    // The candidate list changed (a new candidate, the old winner still in it): measured again, and the
    // new candidate can win.
    let w = autotune::tune(&dev, &old, &["a", "b", "c"], 0, |c| {
        Ok(if *c == "c" { 0.5 } else { bench(c)? })
    })
    .expect("tune");
    assert_eq!((w, last_decision("t_sum").source), ("c", Source::Measured));
    // Both generations of the key are in the file, each with its own checksum.
    let snap = autotune::cache_snapshot().expect("snapshot");
    let keys: HashSet<&str> = snap
        .entries
        .iter()
        .filter(|e| e.kernel == "t_sum")
        .map(|e| e.key.as_str())
        .collect();
    assert_eq!(keys.len(), 3, "{keys:?}");
}

#[test]
fn one_key_asked_by_two_threads_is_measured_once() {
    let (_g, _) = fresh_cache("threads");
    let calls = AtomicUsize::new(0);
    let k = key("t_threads", &[16]);
    let winners: Vec<(&str, Source)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let dev = Device::builtin();
                    let seq = autotune::last_seq();
                    let w = autotune::tune(&dev, &k, &["a", "b", "c"], 0, |c| {
                        calls.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(2));
                        Ok(if *c == "c" { 1.0 } else { 2.0 })
                    })
                    .expect("tune");
                    let src = autotune::decisions_since(seq)
                        .into_iter()
                        .rev()
                        .find(|d| d.kernel == "t_threads")
                        .map(|d| d.source)
                        .expect("a decision");
                    (w, src)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3 * 6,
        "measured once, not twice"
    );
    assert!(winners.iter().all(|w| w.0 == "c"), "{winners:?}");
    let sources: Vec<Source> = winners.iter().map(|w| w.1).collect();
    assert!(
        sources.contains(&Source::Measured) && sources.contains(&Source::Cache),
        "one thread measured, the other waited for its answer: {sources:?}"
    );
}

#[test]
fn two_threads_never_time_candidates_at_once_on_one_device() {
    let (_g, _) = fresh_cache("exclusive");
    let busy = AtomicBool::new(false);
    let overlaps = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for t in 0..3 {
            let (busy, overlaps) = (&busy, &overlaps);
            s.spawn(move || {
                let dev = Device::builtin();
                for i in 0..3 {
                    autotune::tune(
                        &dev,
                        &key(&format!("t_excl{t}_{i}"), &[1]),
                        &["p", "q"],
                        0,
                        |_| {
                            if busy.swap(true, Ordering::SeqCst) {
                                overlaps.fetch_add(1, Ordering::SeqCst);
                            }
                            std::thread::sleep(Duration::from_micros(300));
                            busy.store(false, Ordering::SeqCst);
                            Ok(1.0)
                        },
                    )
                    .expect("tune");
                }
            });
        }
    });
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "measurements overlapped"
    );
}

#[test]
fn background_mode_answers_at_once_then_switches_to_the_measured_winner() {
    let (_g, _) = fresh_cache("background");
    set_env("NETCL_AUTOTUNE", Some("background"));
    autotune::begin_scope();
    let dev = Device::builtin();
    let k = key("t_bg", &[32]);
    let cands = ["a", "b", "c"];
    let calls = AtomicUsize::new(0);
    let bench = |c: &&str| {
        calls.fetch_add(1, Ordering::SeqCst);
        Ok(if *c == "c" { 1.0 } else { 2.0 })
    };
    // A caller's call ends when the host waits for the device (a read back or `synchronize`).
    let call = || {
        let w = autotune::tune(&dev, &k, &cands, 1, bench).expect("tune");
        dev.synchronize().expect("synchronize");
        w
    };
    // First call: the heuristic choice (the op's default), nothing measured.
    assert_eq!((call(), calls.load(Ordering::SeqCst)), ("b", 0));
    let d = last_decision("t_bg");
    assert_eq!(d.source, Source::Heuristic);
    // Later calls measure one candidate each and keep answering the first choice meanwhile.
    assert_eq!((call(), calls.load(Ordering::SeqCst)), ("b", 6));
    assert_eq!((call(), calls.load(Ordering::SeqCst)), ("b", 12));
    // The last candidate completes the set: this call switches to the winner.
    assert_eq!(call(), "c");
    assert_eq!(last_decision("t_bg").source, Source::Measured);
    assert_eq!(last_decision("t_bg").candidates.len(), 3);
    let before = calls.load(Ordering::SeqCst);
    assert_eq!((call(), calls.load(Ordering::SeqCst)), ("c", before));
    set_env("NETCL_AUTOTUNE", Some("sync"));
}

/// A call that meets one shape several times (a network with repeated layers) measures nothing in that call:
/// measuring starts on a later call, once the host has waited for the device.
#[test]
fn background_mode_measures_nothing_in_the_call_that_first_meets_a_shape() {
    let (_g, _) = fresh_cache("repeat");
    set_env("NETCL_AUTOTUNE", Some("background"));
    autotune::begin_scope();
    let dev = Device::builtin();
    let calls = AtomicUsize::new(0);
    let bench = |_: &&str| {
        calls.fetch_add(1, Ordering::SeqCst);
        Ok(1.0)
    };
    for _ in 0..4 {
        let w = autotune::tune(&dev, &key("t_repeat", &[3]), &["a", "b"], 0, bench).expect("tune");
        assert_eq!(w, "a");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0, "the first call measured");
    dev.synchronize().expect("synchronize");
    let _ = autotune::tune(&dev, &key("t_repeat", &[3]), &["a", "b"], 0, bench).expect("tune");
    assert!(
        calls.load(Ordering::SeqCst) > 0,
        "the next call did not measure"
    );
    set_env("NETCL_AUTOTUNE", Some("sync"));
}

/// A background measurement in a caller's call whose candidate has a nested choice not measured yet (a
/// Winograd tile and its product) measures one nested candidate per call, not all of them, and times the
/// outer candidate only once the nested choice is settled. The outcome is the sync mode's.
#[test]
fn background_mode_measures_a_nested_choice_one_candidate_per_call() {
    let (_g, _) = fresh_cache("nested");
    set_env("NETCL_AUTOTUNE", Some("background"));
    autotune::begin_scope();
    let dev = Device::builtin();
    let inner_runs = AtomicUsize::new(0);
    let inner = |c: &&str| {
        inner_runs.fetch_add(1, Ordering::SeqCst);
        Ok(match *c {
            "p" => 2.0,
            "q" => 3.0,
            _ => 0.5,
        })
    };
    let inner_cands = ["p", "q", "r"];
    // The outer candidate "nested" runs the nested choice: its time is the nested winner's plus 0.1.
    let outer = |c: &&str| -> netcl::Result<f64> {
        match *c {
            "direct" => Ok(1.0),
            _ => {
                let w = autotune::tune(&dev, &key("t_inner", &[9]), &inner_cands, 0, inner)?;
                inner(&w).map(|t| t + 0.1)
            }
        }
    };
    let outer_cands = ["direct", "nested"];
    let mut answers = Vec::new();
    let mut per_call = Vec::new();
    for _ in 0..8 {
        let before = inner_runs.load(Ordering::SeqCst);
        answers.push(
            autotune::tune(&dev, &key("t_outer", &[9]), &outer_cands, 0, outer).expect("tune"),
        );
        dev.synchronize().expect("synchronize");
        per_call.push(inner_runs.load(Ordering::SeqCst) - before);
    }
    // No call ran more than one nested candidate's measurement (a warm-up and the timed runs, with the outer
    // candidate's own runs of the nested choice).
    let reps = autotune::config().reps;
    assert!(
        per_call.iter().all(|&n| n <= 2 * (reps + 1)),
        "nested runs per call: {per_call:?}"
    );
    assert_eq!(answers[0], "direct");
    assert_eq!(
        *answers.last().expect("answers"),
        "nested",
        "answers {answers:?}"
    );
    let d = last_decision("t_inner");
    assert!(
        matches!(d.source, Source::Measured | Source::Cache),
        "{:?}",
        d.source
    );
    assert_eq!((d.winner_label.as_str(), d.candidates.len()), ("r", 3));
    set_env("NETCL_AUTOTUNE", Some("sync"));
}

#[test]
fn background_measurement_stops_at_the_scope_budget() {
    let (_g, _) = fresh_cache("budget");
    set_env("NETCL_AUTOTUNE", Some("background"));
    set_env("NETCL_AUTOTUNE_BUDGET_MS", Some("0"));
    autotune::begin_scope();
    let dev = Device::builtin();
    let mut calls = 0;
    for _ in 0..5 {
        let w = autotune::tune(&dev, &key("t_budget", &[2]), &["a", "b"], 0, |_| {
            calls += 1;
            std::thread::sleep(Duration::from_millis(20));
            Ok(1.0)
        })
        .expect("tune");
        assert_eq!(w, "a");
        dev.synchronize().expect("synchronize");
    }
    // The second call measured one candidate (120 ms); with no budget, the scope's time share (a tenth of its
    // running time) does not cover another one yet.
    assert_eq!(calls, 6);
    assert_eq!(last_decision("t_budget").source, Source::Heuristic);
    set_env("NETCL_AUTOTUNE_BUDGET_MS", None);
    set_env("NETCL_AUTOTUNE", Some("sync"));
}

#[test]
fn a_bad_mode_is_a_clear_error() {
    let (_g, _) = fresh_cache("badmode");
    set_env("NETCL_AUTOTUNE", Some("sometimes"));
    let dev = Device::builtin();
    let e = autotune::tune(&dev, &key("t_bad", &[1]), &["a", "b"], 0, |_| Ok(1.0))
        .expect_err("an unknown mode is refused");
    set_env("NETCL_AUTOTUNE", Some("sync"));
    let msg = e.to_string();
    assert!(
        msg.contains("NETCL_AUTOTUNE") && msg.contains("sometimes"),
        "{msg}"
    );
}

/// Runs only as a child of `measurements_survive_a_kill`: measures `t_kill`, and dies (as a run killed at
/// its time limit) while timing the second candidate.
#[test]
#[ignore = "child process of measurements_survive_a_kill"]
fn killed_measurer_child() {
    if std::env::var_os("NETCL_TEST_KILL").is_none() {
        return;
    }
    let dev = Device::builtin();
    let mut timed = 0;
    let _ = autotune::tune(&dev, &key("t_kill", &[64]), &["a", "b", "c"], 0, |c| {
        if *c != "a" {
            timed += 1;
            if timed == 3 {
                std::process::exit(9);
            }
        }
        Ok(if *c == "a" { 4.0 } else { 2.0 })
    });
}

#[test]
fn measurements_survive_a_kill() {
    let (_g, path) = fresh_cache("kill");
    let status = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "killed_measurer_child",
            "--include-ignored",
            "--test-threads=1",
        ])
        .env("NETCL_AUTOTUNE_CACHE", &path)
        .env("NETCL_TEST_KILL", "1")
        .stdout(Stdio::null())
        .status()
        .expect("run child");
    assert_eq!(status.code(), Some(9), "the child died mid-measurement");
    // The first candidate's measurement was written before the child died.
    let partial = autotune::partial_entries();
    let (k, times) = partial
        .iter()
        .find(|(k, _)| k.contains("::t_kill@"))
        .expect("a partial entry is kept");
    assert_eq!(times.len(), 1, "{k}: {times:?}");
    assert_eq!((times[0].label.as_str(), times[0].ms), ("a", Some(4.0)));
    // A rerun resumes: only the two remaining candidates are timed.
    let dev = Device::builtin();
    let mut timed = Vec::new();
    let w = autotune::tune(&dev, &key("t_kill", &[64]), &["a", "b", "c"], 0, |c| {
        timed.push(*c);
        Ok(if *c == "c" { 1.0 } else { 2.0 })
    })
    .expect("tune");
    assert!(
        !timed.contains(&"a"),
        "the kept measurement is reused: {timed:?}"
    );
    assert_eq!(w, "c");
    let d = last_decision("t_kill");
    assert_eq!((d.source, d.candidates.len()), (Source::Measured, 3));
    assert!(
        autotune::partial_entries()
            .iter()
            .all(|(k, _)| !k.contains("::t_kill@"))
    );
}

/// Measures `kernel` at shape class `[n]` among x, y, z with `winner` the fastest, checks the answer, and
/// exports the cache as a table.
fn measured_table(
    dev: &Device,
    kernel: &str,
    n: i64,
    winner: &'static str,
) -> autotune::TuningTable {
    let bench = move |c: &&str| Ok(if *c == winner { 0.5 } else { 9.0 });
    let w = autotune::tune(dev, &key(kernel, &[n]), &["x", "y", "z"], 0, bench).expect("tune");
    assert_eq!(w, winner);
    autotune::export_table(dev).expect("export")
}

/// Writes `table` as the only table of the directory `name` beside the test cache and empties the cache: a
/// fresh machine with that table once `NETCL_TUNING_DIR` names the returned directory.
fn fresh_machine_with(path: &Path, name: &str, table: &autotune::TuningTable) -> PathBuf {
    let dir = path.parent().expect("dir").join(name);
    std::fs::create_dir_all(&dir).expect("dir");
    let text = serde_json::to_string(table).expect("json");
    std::fs::write(dir.join("mine.json"), text).expect("write table");
    autotune::clear_cache().expect("clear");
    dir
}

#[test]
fn an_exported_table_is_a_database_hit_for_its_device_class_only() {
    let (_g, path) = fresh_cache("export");
    let dev = Device::builtin();
    let table = measured_table(&dev, "t_db", 7, "z");
    assert_eq!(table.device, autotune::DeviceClass::of(dev.info()));
    assert_eq!(
        table.entries.get("t_db::(7,)"),
        Some(&serde_json::json!("z"))
    );

    // A fresh machine (empty cache) with the table: the first answer comes from it, nothing is measured.
    let dir = fresh_machine_with(&path, "tables", &table);
    set_env("NETCL_TUNING_DIR", dir.to_str());
    set_env("NETCL_AUTOTUNE", Some("off"));
    // One answer for t_db of shape class `n` among x, y, z (first choice `default`), measuring nothing.
    let ask = |n: i64, default: usize| {
        let w = autotune::tune(&dev, &key("t_db", &[n]), &["x", "y", "z"], default, |_| {
            panic!("off")
        })
        .expect("tune");
        (w, last_decision("t_db"))
    };
    // `t` as the directory's only table, read again.
    let install = |t: &autotune::TuningTable| {
        let text = serde_json::to_string(t).expect("json");
        std::fs::write(dir.join("mine.json"), text).expect("write");
        set_env("NETCL_TUNING_DIR", None);
        set_env("NETCL_TUNING_DIR", dir.to_str());
    };
    let (w, d) = ask(7, 0);
    assert_eq!((w, d.source), ("z", Source::Database));
    // Another shape class is not in the table: the heuristic first choice.
    let (w, d) = ask(8, 0);
    assert_eq!((w, d.source), ("x", Source::Heuristic));

    // A table of another device class of the same type is a heuristic hint, not a database hit.
    let mut other = table.clone();
    other.device.compute_units += 1;
    install(&other);
    let (w, d) = ask(7, 0);
    assert_eq!((w, d.source), ("z", Source::Heuristic));
    assert!(
        d.note
            .as_deref()
            .is_some_and(|n| n.contains("another class")),
        "{:?}",
        d.note
    );

    // A table of another device type is not used at all; a winner that is not a candidate neither.
    other.device.kind = "gpu".into();
    install(&other);
    let (w, d) = ask(7, 1);
    assert_eq!((w, d.source), ("y", Source::Heuristic));
    set_env("NETCL_TUNING_DIR", None);
    set_env("NETCL_AUTOTUNE", Some("sync"));
}

/// Background mode keeps a winner from a table of exactly this device class: no later call measures it, so
/// a warm process runs the table's kernel from its first call on. Sync mode still measures and replaces it.
#[test]
fn background_mode_keeps_an_exact_table_winner_and_sync_measures_it() {
    let (_g, path) = fresh_cache("keep");
    let dev = Device::builtin();
    let table = measured_table(&dev, "t_keep", 5, "y");
    let dir = fresh_machine_with(&path, "keep-tables", &table);
    set_env("NETCL_TUNING_DIR", dir.to_str());
    set_env("NETCL_AUTOTUNE", Some("background"));
    autotune::begin_scope();
    let calls = AtomicUsize::new(0);
    let bench = |c: &&str| {
        calls.fetch_add(1, Ordering::SeqCst);
        Ok(if *c == "z" { 0.1 } else { 1.0 })
    };
    for _ in 0..6 {
        let w =
            autotune::tune(&dev, &key("t_keep", &[5]), &["x", "y", "z"], 0, bench).expect("tune");
        assert_eq!(w, "y");
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "nothing measured in background mode"
    );
    let d = last_decision("t_keep");
    assert_eq!(d.source, Source::Database);
    assert!(
        d.note
            .as_deref()
            .is_some_and(|n| n.contains("kept in background mode")),
        "{:?}",
        d.note
    );
    // A shape the table lacks is still measured on later calls.
    let _ = autotune::tune(&dev, &key("t_keep", &[6]), &["x", "y", "z"], 0, bench).expect("tune");
    dev.synchronize().expect("synchronize");
    let _ = autotune::tune(&dev, &key("t_keep", &[6]), &["x", "y", "z"], 0, bench).expect("tune");
    assert!(
        calls.load(Ordering::SeqCst) > 0,
        "the uncovered shape is measured"
    );
    // Sync mode measures the covered shape and takes the measured winner.
    set_env("NETCL_AUTOTUNE", Some("sync"));
    let w = autotune::tune(&dev, &key("t_keep", &[5]), &["x", "y", "z"], 0, bench).expect("tune");
    assert_eq!((w, last_decision("t_keep").source), ("z", Source::Measured));
    set_env("NETCL_TUNING_DIR", None);
}

#[test]
fn shipped_h200_table_matches_only_an_h200() {
    use autotune::db::{DeviceClass, Hint, lookup, tables};
    let (_g, _) = fresh_cache("shipped");
    let t = tables();
    let h200 = t
        .iter()
        .find(|t| t.device.name == "NVIDIA H200")
        .expect("the H200 table ships");
    let (entry, winner) = h200.entries.iter().next().expect("entries");
    let (kernel, shape) = entry.split_once("::").expect("kernel::shape");
    let cands = vec![serde_json::json!("other"), winner.clone()];
    let hit = lookup(&t, &h200.device, kernel, shape, &cands);
    assert!(matches!(hit, Some(Hint::Exact { .. })), "{hit:?}");
    let other_gpu = DeviceClass {
        name: "Some Other GPU".into(),
        ..h200.device.clone()
    };
    let hint = lookup(&t, &other_gpu, kernel, shape, &cands);
    assert!(matches!(hint, Some(Hint::SameType { .. })), "{hint:?}");
    let cpu = DeviceClass {
        kind: "cpu".into(),
        ..other_gpu
    };
    assert_eq!(lookup(&t, &cpu, "no_such_kernel", shape, &cands), None);
    // A winner that is not among the candidates is never answered.
    let none = lookup(
        &t,
        &h200.device,
        kernel,
        shape,
        &[serde_json::json!("other")],
    );
    assert_eq!(none, None);
}

/// Runs only as a child of `two_processes_never_measure_one_key_twice`: tunes one shared key, appending a line
/// to the file `NETCL_TEST_CALLS` for each bench call.
#[test]
#[ignore = "child process of two_processes_never_measure_one_key_twice"]
fn shared_key_child() {
    let Some(calls) = std::env::var_os("NETCL_TEST_CALLS") else {
        return;
    };
    let dev = Device::builtin();
    let w = autotune::tune(&dev, &key("t_shared", &[3]), &["p", "q", "r"], 0, |c| {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&calls)
            .expect("calls file");
        writeln!(f, "{c}").expect("append");
        std::thread::sleep(Duration::from_millis(10));
        Ok(if *c == "q" { 1.0 } else { 2.0 })
    })
    .expect("tune");
    assert_eq!(w, "q");
}

#[test]
fn two_processes_never_measure_one_key_twice() {
    let (_g, path) = fresh_cache("shared");
    let calls = path.with_file_name("calls.txt");
    two_children("shared_key_child", &path, |_| {
        ("NETCL_TEST_CALLS", calls.clone().into())
    });
    let n = std::fs::read_to_string(&calls)
        .expect("calls recorded")
        .lines()
        .count();
    assert_eq!(
        n,
        3 * 6,
        "the key was measured once across both processes (one warm-up and five runs per candidate)"
    );
}

/// Every program a shipped tuning table lists names a kernel family and a kernel of that family that this
/// build embeds, so helpers never spend a start on a program that cannot exist.
#[test]
fn shipped_tables_list_only_programs_this_build_has() {
    let tables = netcl::autotune::db::tables();
    let mut listed = 0;
    for t in tables.iter() {
        for (family, kernel, _) in &t.programs {
            let names = netcl::program::kernel_names(family)
                .unwrap_or_else(|| panic!("{}: no kernel family `{family}`", t.device.name));
            assert!(
                names.contains(&kernel.as_str()),
                "{}: family `{family}` declares no kernel `{kernel}`",
                t.device.name
            );
            listed += 1;
        }
    }
    assert!(listed > 0, "no shipped table lists programs");
}

/// The programs built ahead for a device: its own class's list; when its class lists none, a sibling's (the
/// same vendor, type, OpenCL version and compute units under another name); never a list of another kind.
#[test]
fn programs_built_ahead_come_from_the_class_or_else_a_sibling() {
    use autotune::db::{DeviceClass, FORMAT, TuningTable, programs_for};
    let class = |name: &str, cu: u32| DeviceClass {
        vendor: "V".into(),
        name: name.into(),
        compute_units: cu,
        opencl: "3.0".into(),
        kind: "gpu".into(),
    };
    let table = |c: DeviceClass, progs: &[&str]| TuningTable {
        format: FORMAT.into(),
        device: c,
        measured: String::new(),
        entries: Default::default(),
        programs: progs
            .iter()
            .map(|k| ("gemm".to_owned(), (*k).to_owned(), String::new()))
            .collect(),
    };
    let names = |v: Vec<(String, String, String)>| v.into_iter().map(|p| p.1).collect::<Vec<_>>();
    let tables = vec![
        table(class("A", 132), &["a1", "a2"]),
        table(class("B", 132), &["b1", "a1"]),
        table(class("C", 66), &["c1"]),
        table(class("E", 132), &[]),
    ];
    // A class with its own list gets only that.
    assert_eq!(names(programs_for(&tables, &class("A", 132))), ["a1", "a2"]);
    // A class with no list of its own (no table, or a table with winners only) gets its siblings' lists.
    assert_eq!(
        names(programs_for(&tables, &class("D", 132))),
        ["a1", "a2", "b1"]
    );
    assert_eq!(
        names(programs_for(&tables, &class("E", 132))),
        ["a1", "a2", "b1"]
    );
    // Another compute-unit count or another type is not a sibling.
    assert!(programs_for(&tables, &class("D", 64)).is_empty());
    let cpu = DeviceClass {
        kind: "cpu".into(),
        ..class("D", 132)
    };
    assert!(programs_for(&tables, &cpu).is_empty());
}
