//! The autotuner: measurement, the persistent cache, re-validation, the off switch, corrupt files, and two
//! processes writing one cache file at once.
//!
//! The cache path and the off switch are environment variables, which are process-wide, so every test here
//! takes one lock and sets its own cache file.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;

use netcl::autotune::{self, Source};
use netcl::{Device, Tensor, ops};

static ENV: Mutex<()> = Mutex::new(());

fn fresh_cache(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("netcl-autotune-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("autotune.json");
    // SAFETY: every test of this file holds ENV while it touches the environment.
    unsafe {
        std::env::set_var("NETCL_AUTOTUNE_CACHE", &path);
        std::env::remove_var("NETCL_AUTOTUNE");
    }
    autotune::clear_memory();
    path
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
    let _g = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let path = fresh_cache("winner");
    let dev = Device::builtin();
    let times = [3.0, 1.0, 2.0];
    let mut calls = 0;
    let w = autotune::tune(&dev, "t_winner", "(8, 8)", &["a", "b", "c"], 0, |c| {
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
    assert_eq!(d.key, format!("{}::t_winner::(8, 8)", dev.info().tune_id()));

    // The next call is answered from memory without running anything.
    let w = autotune::tune(&dev, "t_winner", "(8, 8)", &["a", "b", "c"], 0, |_| {
        panic!("must not measure")
    })
    .expect("tune");
    assert_eq!((w, last_decision("t_winner").source), ("b", Source::Cache));

    // A new process (simulated by dropping the memo) reads the file, with the recorded times.
    autotune::clear_memory();
    let w = autotune::tune(&dev, "t_winner", "(8, 8)", &["a", "b", "c"], 0, |_| {
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
    let _g = ENV.lock().unwrap_or_else(|e| e.into_inner());
    fresh_cache("stale");
    let dev = Device::builtin();
    let w = autotune::tune(&dev, "t_stale", "(1,)", &[16, 32], 0, |c| {
        Ok(if *c == 32 { 1.0 } else { 2.0 })
    })
    .expect("tune");
    assert_eq!(w, 32);
    // The candidate set changed (32 is gone): the cached 32 is dropped and the shape re-measured.
    let mut measured = false;
    let w = autotune::tune(&dev, "t_stale", "(1,)", &[8, 16], 0, |c| {
        measured = true;
        Ok(if *c == 8 { 1.0 } else { 2.0 })
    })
    .expect("tune");
    assert!(measured);
    assert_eq!((w, last_decision("t_stale").source), (8, Source::Measured));
}

#[test]
fn failing_candidates_are_disqualified_and_all_failing_uses_the_default() {
    let _g = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let path = fresh_cache("fail");
    let dev = Device::builtin();
    let w = autotune::tune(&dev, "t_fail", "(2,)", &["x", "y"], 1, |c| {
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
    let w = autotune::tune(&dev, "t_fail_all", "(2,)", &["x", "y"], 1, |_| {
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
    let _g = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let path = fresh_cache("off");
    // SAFETY: ENV is held.
    unsafe { std::env::set_var("NETCL_AUTOTUNE", "0") };
    let dev = Device::builtin();
    let w = autotune::tune(&dev, "t_off", "(3,)", &["a", "b"], 1, |_| {
        panic!("must not measure")
    })
    .expect("tune");
    // SAFETY: ENV is held.
    unsafe { std::env::remove_var("NETCL_AUTOTUNE") };
    assert_eq!((w, last_decision("t_off").source), ("b", Source::Default));
    assert!(!path.exists(), "no file is written when autotuning is off");
    // Real ops still run with their defaults.
    if let Some(cl) = common::opencl_device() {
        // SAFETY: ENV is held.
        unsafe { std::env::set_var("NETCL_AUTOTUNE", "0") };
        let seq = autotune::last_seq();
        let s = Tensor::ones(&cl, &[1000])
            .and_then(|t| ops::sum_all(&t))
            .and_then(|t| t.to_vec::<f32>())
            .expect("sum");
        // SAFETY: ENV is held.
        unsafe { std::env::remove_var("NETCL_AUTOTUNE") };
        assert_eq!(s, vec![1000.0]);
        assert!(
            autotune::decisions_since(seq)
                .iter()
                .all(|d| d.source == Source::Default)
        );
    }
}

#[test]
fn a_corrupt_cache_file_is_reported_and_rebuilt() {
    let _g = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let path = fresh_cache("corrupt");
    std::fs::write(&path, "{\"truncated\": [1, 2").expect("write garbage");
    let snap = autotune::cache_snapshot().expect("snapshot of a corrupt file is not an error");
    assert!(snap.status.starts_with("corrupt"), "{}", snap.status);
    std::fs::write(&path, "{\"truncated\": [1, 2").expect("write garbage again");
    let dev = Device::builtin();
    let w = autotune::tune(&dev, "t_corrupt", "(4,)", &[1, 2], 0, |c| Ok(*c as f64)).expect("tune");
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
            &format!("t_proc{id}_{i}"),
            "(1,)",
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
    let _g = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let path = fresh_cache("procs");
    let exe = std::env::current_exe().expect("test binary");
    let children: Vec<_> = (0..2)
        .map(|id| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "cache_writer_child",
                    "--include-ignored",
                    "--test-threads=1",
                ])
                .env("NETCL_AUTOTUNE_CACHE", &path)
                .env("NETCL_TEST_WRITER", id.to_string())
                .stdout(Stdio::null())
                .spawn()
                .expect("spawn writer")
        })
        .collect();
    for mut c in children {
        assert!(c.wait().expect("wait").success(), "a writer failed");
    }
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("file")).expect("valid JSON");
    let keys: Vec<&String> = v.as_object().expect("object").keys().collect();
    for id in 0..2 {
        for i in 0..40 {
            let k = format!("::t_proc{id}_{i}::");
            assert!(
                keys.iter().any(|key| key.contains(&k)),
                "entry {k} lost: merges under the lock keep both writers' entries"
            );
        }
    }
}

#[test]
fn sum_all_records_its_decision_with_candidate_times() {
    let _g = ENV.lock().unwrap_or_else(|e| e.into_inner());
    fresh_cache("sum");
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

/// A thread that asks the same question again gets its earlier answer without the candidate list being
/// looked at, until something that could change the answer happens: a forced label, the off switch, a new
/// logging scope, another cache file, a cleared cache, or another thread measuring a new winner.
#[test]
fn repeated_answers_follow_every_change() {
    let _g = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let first = fresh_cache("hot");
    let dev = Device::builtin();
    let cands = ["a", "b", "c"];
    let timed = |times: [f64; 3]| {
        move |c: &&str| Ok(times[["a", "b", "c"].iter().position(|x| x == c).expect("known")])
    };
    let ask = |d: &Device| autotune::answered::<&str>(d, "t_hot", "(8,)");
    let never = |_: &&str| -> netcl::Result<f64> { panic!("must not measure") };

    assert_eq!(ask(&dev), None, "nothing answered yet");
    let w = autotune::tune(&dev, "t_hot", "(8,)", &cands, 0, timed([3.0, 1.0, 2.0])).expect("tune");
    assert_eq!(w, "b");
    // Logged from the cache once in this scope, then answered from memory.
    for _ in 0..2 {
        assert_eq!(
            autotune::tune(&dev, "t_hot", "(8,)", &cands, 0, never).expect("tune"),
            "b"
        );
    }
    assert_eq!(ask(&dev), Some("b"));
    let seq = autotune::last_seq();
    assert_eq!(
        autotune::tune(&dev, "t_hot", "(8,)", &cands, 0, never).expect("tune"),
        "b"
    );
    assert_eq!(autotune::last_seq(), seq, "a repeated answer logs nothing");

    // A forced label and the off switch win over a kept answer.
    // SAFETY: ENV is held.
    unsafe { std::env::set_var("NETCL_AUTOTUNE_FORCE", "t_hot=c") };
    assert_eq!(ask(&dev), None);
    let w = autotune::tune(&dev, "t_hot", "(8,)", &cands, 0, never).expect("tune");
    assert_eq!((w, last_decision("t_hot").source), ("c", Source::Forced));
    // SAFETY: ENV is held.
    unsafe {
        std::env::remove_var("NETCL_AUTOTUNE_FORCE");
        std::env::set_var("NETCL_AUTOTUNE", "0");
    }
    assert_eq!(ask(&dev), None);
    let w = autotune::tune(&dev, "t_hot", "(8,)", &cands, 0, never).expect("tune");
    assert_eq!((w, last_decision("t_hot").source), ("a", Source::Default));
    // SAFETY: ENV is held.
    unsafe { std::env::remove_var("NETCL_AUTOTUNE") };

    // A new scope logs the cached answer again.
    autotune::begin_scope();
    assert_eq!(ask(&dev), None);
    let seq = autotune::last_seq();
    let w = autotune::tune(&dev, "t_hot", "(8,)", &cands, 0, never).expect("tune");
    assert_eq!((w, last_decision("t_hot").source), ("b", Source::Cache));
    assert!(autotune::last_seq() > seq);

    // Another cache file has its own answer.
    for _ in 0..2 {
        autotune::tune(&dev, "t_hot", "(8,)", &cands, 0, never).expect("tune");
    }
    assert_eq!(ask(&dev), Some("b"));
    let other = first.with_file_name("other.json");
    // SAFETY: ENV is held.
    unsafe { std::env::set_var("NETCL_AUTOTUNE_CACHE", &other) };
    assert_eq!(ask(&dev), None);
    let w = autotune::tune(&dev, "t_hot", "(8,)", &cands, 0, timed([0.5, 1.0, 2.0])).expect("tune");
    assert_eq!((w, last_decision("t_hot").source), ("a", Source::Measured));
    // SAFETY: ENV is held.
    unsafe { std::env::set_var("NETCL_AUTOTUNE_CACHE", &first) };
    for _ in 0..2 {
        assert_eq!(
            autotune::tune(&dev, "t_hot", "(8,)", &cands, 0, never).expect("tune"),
            "b"
        );
    }
    assert_eq!(ask(&dev), Some("b"));

    // Another thread clears the cache and measures a new winner: this thread's kept answer is dropped.
    std::thread::scope(|s| {
        s.spawn(|| {
            autotune::clear_cache().expect("clear");
            let d = Device::builtin();
            let w = autotune::tune(&d, "t_hot", "(8,)", &cands, 0, timed([3.0, 2.0, 1.0]))
                .expect("tune");
            assert_eq!(w, "c");
        });
    });
    assert_eq!(ask(&dev), None);
    assert_eq!(
        autotune::tune(&dev, "t_hot", "(8,)", &cands, 0, never).expect("tune"),
        "c"
    );

    // Clearing the cache on this thread makes the next call measure again.
    for _ in 0..2 {
        autotune::tune(&dev, "t_hot", "(8,)", &cands, 0, never).expect("tune");
    }
    assert_eq!(ask(&dev), Some("c"));
    autotune::clear_cache().expect("clear");
    assert_eq!(ask(&dev), None);
    let w = autotune::tune(&dev, "t_hot", "(8,)", &cands, 0, timed([1.0, 2.0, 3.0])).expect("tune");
    assert_eq!((w, last_decision("t_hot").source), ("a", Source::Measured));
}
