//! The command line as a user meets it: an unknown device is an error, listings end quietly when their reader
//! goes away, `export` finds the documentation from any working directory, and `train` reports progress and
//! its throughput after warm-up when its output is not a terminal, `tune warm` measures once and then answers
//! from the cache, `bench` lines say the precision they ran at, and `tune merge` joins recorded program lists.

mod common;

use std::process::{Command, Stdio};

fn netcl() -> Command {
    Command::new(env!("CARGO_BIN_EXE_netcl"))
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("netcl-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn an_unknown_device_is_an_error() {
    let out = netcl()
        .args(["--device", "nosuch", "devices"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "exit status {:?}", out.status);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`nosuch` matches no device"), "{err}");
    assert!(out.stdout.is_empty(), "nothing is listed");
}

#[test]
fn listings_end_quietly_when_the_reader_goes_away() {
    for args in [&["tune", "list"][..], &["devices"], &["tune", "path"]] {
        let mut child = netcl()
            .args(args)
            .env("NETCL_AUTOTUNE_CACHE", scratch("pipe").join("cache.json"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Close the reading end before the command writes, as `| head -1` does after its line.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_ne!(out.status.code(), Some(101), "{args:?}: {err}");
    }
}

#[test]
fn export_finds_the_documentation_from_another_directory() {
    let cwd = scratch("cwd");
    let out_dir = cwd.join("site");
    common::output_ok(
        netcl()
            .arg("export")
            .arg(&out_dir)
            .current_dir(&cwd)
            .env_remove("NETCL_WIKI_CONTENT"),
    );
    assert!(out_dir.join("api/ops/index.html").is_file());
    let missing = netcl()
        .args(["export", "--content", "/no/such/dir"])
        .arg(cwd.join("other"))
        .output()
        .unwrap();
    assert!(!missing.status.success());
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        err.contains("--content"),
        "the error says how to give it: {err}"
    );
}

#[test]
fn train_reports_progress_and_throughput_after_warm_up() {
    let out = netcl()
        .args(["train", "--epochs", "1"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("epoch 1/1: batch 1/"),
        "a progress line when not a terminal: {stderr}"
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with("epoch 1:"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(line.contains("samples/s after warm-up"), "{line}");
}

#[test]
fn tune_warm_measures_every_candidate_once_and_later_runs_answer_from_the_cache() {
    if std::env::var("CI").is_err() && !netcl::opencl_available() {
        eprintln!("SKIPPED: no OpenCL device");
        return;
    }
    let dir = scratch("tune-warm");
    let snippet = dir.join("snippet.rhai");
    std::fs::write(
        &snippet,
        "let x = randn([2, 24, 40], 3);\nprint(sum(x, [1]).shape);\n",
    )
    .expect("snippet");
    let warm = |what: &str| {
        let out = netcl()
            .args(["--device", "cpu", "tune", "warm"])
            .arg(&snippet)
            .env("NETCL_AUTOTUNE_CACHE", dir.join("autotune.json"))
            .env_remove("NETCL_AUTOTUNE")
            .env("NETCL_AUTOTUNE_REPS", "1")
            .output()
            .expect("run netcl tune warm");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{what}: {err}");
        err
    };
    let first = warm("first");
    let measured = |text: &str| -> usize {
        let line = text
            .lines()
            .find(|l| l.contains("decisions measured"))
            .unwrap_or_else(|| panic!("no summary in:\n{text}"));
        line.split(", ")
            .nth(1)
            .and_then(|w| w.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no count in {line}"))
    };
    assert!(
        measured(&first) >= 1,
        "the first warm-up measured nothing:\n{first}"
    );
    assert!(
        first.contains("1/1") && first.contains(": ok in"),
        "{first}"
    );
    let second = warm("second");
    assert_eq!(
        measured(&second),
        0,
        "the second warm-up measured again:\n{second}"
    );
    let bad = netcl()
        .args(["tune", "warm", "/no/such/snippet.rhai"])
        .output()
        .expect("run");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("/no/such/snippet.rhai"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bench_lines_name_the_precision_they_ran_at() {
    let line = |precision: Option<&str>| {
        let mut cmd = netcl();
        cmd.args([
            "--device",
            "builtin",
            "bench",
            "--small",
            "--reps",
            "1",
            "--no-check",
            "add_1k",
        ]);
        match precision {
            Some(p) => cmd.env("NETCL_PRECISION", p),
            None => cmd.env_remove("NETCL_PRECISION"),
        };
        let out = cmd.output().expect("run netcl bench");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let last = stdout
            .lines()
            .rev()
            .find(|l| l.contains("\"case\""))
            .unwrap_or_else(|| panic!("{precision:?}: no result line"));
        let v: serde_json::Value = serde_json::from_str(last).expect("JSON");
        (
            out.status.success(),
            v,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for (set, want) in [
        (None, "fp32"),
        (Some("tf32"), "tf32"),
        (Some("fp16"), "fp16"),
    ] {
        let (ok, v, err) = line(set);
        assert!(ok, "{set:?}: {err}");
        assert_eq!(v["case"], "add_1k");
        assert_eq!(v["precision"], want, "{set:?}: {v}");
    }
    // An unknown value fails the case with an error that names the variable, on the case's own line.
    let (_, v, _) = line(Some("fp8"));
    let e = v["error"].as_str().unwrap_or_default();
    assert!(e.contains("NETCL_PRECISION") && e.contains("fp8"), "{v}");
}

/// `--profile` adds where a call's device time goes: per-kernel launches and times that add up to the busy
/// time, shares that add up to one, a span that holds the busy time; without the flag, no profile.
#[test]
fn bench_profile_accounts_for_the_device_time() {
    if std::env::var("CI").is_err() && !netcl::opencl_available() {
        eprintln!("SKIPPED: no OpenCL device");
        return;
    }
    let dir = scratch("bench-profile");
    let device = std::env::var("NETCL_TEST_DEVICE").unwrap_or_else(|_| "auto".into());
    let run = |profile: bool| -> Vec<serde_json::Value> {
        let mut cmd = netcl();
        cmd.args([
            "--device",
            &device,
            "bench",
            "--small",
            "--reps",
            "3",
            "--no-check",
        ]);
        if profile {
            cmd.arg("--profile");
        }
        let out = cmd
            .args(["batch_norm_train_nchw", "conv3x3_14_bwd"])
            .env("NETCL_AUTOTUNE_CACHE", dir.join("autotune.json"))
            .env("NETCL_AUTOTUNE", "off")
            .output()
            .expect("run netcl bench");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
            .lines()
            .filter(|l| l.contains("\"case\""))
            .map(|l| serde_json::from_str(l).expect("JSON"))
            .collect()
    };
    for v in run(false) {
        assert!(v.get("profile").is_none(), "{v}");
    }
    let lines = run(true);
    assert_eq!(lines.len(), 2);
    for v in &lines {
        let p = &v["profile"];
        let kernels = p["kernels"]
            .as_array()
            .unwrap_or_else(|| panic!("a profile: {v}"));
        assert!(!kernels.is_empty(), "{v}");
        let f = |x: &serde_json::Value, k: &str| x[k].as_f64().unwrap_or(f64::NAN);
        let launches: f64 = kernels.iter().map(|k| f(k, "launches")).sum();
        let ms: f64 = kernels.iter().map(|k| f(k, "ms")).sum();
        let share: f64 = kernels.iter().map(|k| f(k, "share")).sum();
        assert!((launches - f(p, "launches")).abs() < 1e-3, "{p}");
        assert!(
            (ms - f(p, "busy_ms")).abs() <= 1e-3 * kernels.len() as f64,
            "{p}"
        );
        assert!((share - 1.0).abs() < 1e-3 * kernels.len() as f64, "{p}");
        assert!(f(p, "busy_ms") > 0.0, "{p}");
        // An in-order queue runs one kernel at a time: the span holds the kernels' time (clock granularity
        // aside), and idle is what is left.
        assert!(f(p, "span_ms") >= f(p, "busy_ms") * 0.99 - 1e-3, "{p}");
        assert!(
            (f(p, "span_ms") - f(p, "busy_ms") - f(p, "idle_ms")).abs() < 1e-3,
            "{p}"
        );
        // Largest first.
        let times: Vec<f64> = kernels.iter().map(|k| f(k, "ms")).collect();
        assert!(times.windows(2).all(|w| w[0] >= w[1]), "{p}");
        assert_eq!(
            f(p, "tuning_launches"),
            0.0,
            "nothing is tuned with NETCL_AUTOTUNE=off: {p}"
        );
    }
    // The backward of a convolution launches more than one kernel function.
    let conv = &lines[1]["profile"]["kernels"];
    assert!(conv.as_array().is_some_and(|k| k.len() >= 2), "{conv}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The GEMM shape cases (an odd-sized product, a batched one) run on the OpenCL device under `--small`, are
/// checked against the built-in device and report their FLOP rate.
#[test]
fn gemm_shape_cases_run_checked() {
    if std::env::var("CI").is_err() && !netcl::opencl_available() {
        eprintln!("SKIPPED: no OpenCL device");
        return;
    }
    let dir = scratch("gemm-shapes");
    let device = std::env::var("NETCL_TEST_DEVICE").unwrap_or_else(|_| "auto".into());
    let out = netcl()
        .args(["--device", &device, "bench", "--small", "--reps", "1"])
        .args(["matmul_odd_4097", "bmm_96x1024x64"])
        .env("NETCL_AUTOTUNE_CACHE", dir.join("autotune.json"))
        .env("NETCL_AUTOTUNE", "off")
        .output()
        .expect("run netcl bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .filter(|l| l.contains("\"case\""))
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    let cases: Vec<&str> = lines.iter().filter_map(|v| v["case"].as_str()).collect();
    assert_eq!(cases, ["matmul_odd_4097", "bmm_96x1024x64"], "{stdout}");
    for v in &lines {
        assert!(v.get("error").is_none(), "{v}");
        let rel = v["rel_err"].as_f64().unwrap_or(f64::NAN);
        assert!(rel < 1e-4, "checked against the built-in device: {v}");
        assert!(v["gflops"].as_f64().unwrap_or(0.0) > 0.0, "{v}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tune merge` adds the programs of recorded parts to a table, keeping its winners, each program once; a part
/// of another device class is refused with the reason and nothing is written.
#[test]
fn tune_merge_adds_recorded_programs_and_refuses_another_device_class() {
    let dir = scratch("merge");
    let class = |name: &str| serde_json::json!({"vendor": "V", "name": name, "compute_units": 4, "opencl": "3.0", "type": "gpu"});
    let table = |name: &str, entries: serde_json::Value, programs: serde_json::Value| {
        serde_json::json!({"format": "netcl-tuning-1", "device": class(name), "measured": "m",
            "entries": entries, "programs": programs})
        .to_string()
    };
    let p = |k: &str| serde_json::json!(["gemm", k, ""]);
    let base = dir.join("base.json");
    std::fs::write(
        &base,
        table(
            "Dev",
            serde_json::json!({"matmul::(1)": "a"}),
            serde_json::json!([p("k1")]),
        ),
    )
    .unwrap();
    let part1 = dir.join("part1.json");
    std::fs::write(
        &part1,
        table(
            "Dev",
            serde_json::json!({"matmul::(1)": "b"}),
            serde_json::json!([p("k2"), p("k1")]),
        ),
    )
    .unwrap();
    let part2 = dir.join("part2.json");
    std::fs::write(
        &part2,
        table(
            "Dev",
            serde_json::json!({}),
            serde_json::json!([p("k3"), p("k2")]),
        ),
    )
    .unwrap();
    let out = dir.join("merged.json");
    let run = netcl()
        .args(["tune", "merge"])
        .args([&base, &part1, &part2])
        .args(["--measured", "recorded in two parts", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let merged: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(
        merged["entries"],
        serde_json::json!({"matmul::(1)": "a"}),
        "the base's winners stay"
    );
    assert_eq!(
        merged["programs"],
        serde_json::json!([p("k1"), p("k2"), p("k3")])
    );
    assert_eq!(merged["measured"], "recorded in two parts");
    assert!(String::from_utf8_lossy(&run.stderr).contains("2 programs added"));

    let other = dir.join("other.json");
    std::fs::write(
        &other,
        table("Other", serde_json::json!({}), serde_json::json!([p("k9")])),
    )
    .unwrap();
    let out2 = dir.join("refused.json");
    let run = netcl()
        .args(["tune", "merge"])
        .args([&base, &part1, &other])
        .arg("--out")
        .arg(&out2)
        .output()
        .unwrap();
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        err.contains("other.json") && err.contains("recorded on Other"),
        "{err}"
    );
    assert!(!out2.exists(), "nothing is written");
}
