//! Limits that count everything: model parameters and op outputs charged before allocation, shapes checked
//! before arithmetic, and the CLI's time limit holding even inside one long device call.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use netcl::Device;
use netcl::script::{Limits, run};

fn dev() -> Device {
    common::opencl_device().unwrap_or_else(Device::builtin)
}

fn error_kind(code: &str) -> (String, String) {
    let r = run(&dev(), code, &Limits::default());
    assert!(!r.ok, "`{code}` ran");
    let e = r.error.expect("an error");
    (e.kind, e.message)
}

#[test]
fn model_parameters_are_charged_before_they_are_made() {
    let started = Instant::now();
    let (kind, message) = error_kind(
        r#"sequential([#{type: "Linear", args: #{in_features: 8192, out_features: 8192}}], 0)"#,
    );
    assert_eq!(kind, "limit", "{message}");
    assert!(message.contains("max_tensor_elements"), "{message}");
    let (kind, message) = error_kind(r#"preset("example_mlp", 1000000, 1000, 10, 0)"#);
    assert_eq!(kind, "limit", "{message}");
    // Refused before anything was allocated: no time spent filling 67 M weights.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // Many layers each under the per-tensor limit still count against the run's total.
    let layer = r#"#{type: "Linear", args: #{in_features: 4096, out_features: 4000}}"#;
    let layers = [layer; 10].join(", ");
    let (kind, message) = error_kind(&format!("sequential([{layers}], 0)"));
    assert_eq!(kind, "limit", "{message}");
    assert!(message.contains("max_run_elements"), "{message}");
    // A model within the limits is built.
    let r = run(
        &dev(),
        r#"let m = sequential([#{type: "Linear", args: #{in_features: 4, out_features: 2}}], 0); forward(m, ones([3, 4]))"#,
        &Limits::default(),
    );
    assert!(r.ok, "{:?}", r.error);
}

#[test]
fn negative_shapes_are_a_clear_error() {
    for code in [
        "rand([-1], 1)",
        "randn([-1], 1)",
        "zeros([2, -1])",
        "ones([-3])",
    ] {
        let (kind, message) = error_kind(code);
        assert!(kind == "shape", "{code}: {kind}: {message}");
    }
    let (kind, message) = error_kind("rand([9223372036854775807, 9223372036854775807], 1)");
    assert_eq!(kind, "limit", "{message}");
}

#[test]
fn op_outputs_are_charged_before_they_are_computed() {
    let started = Instant::now();
    let (kind, message) = error_kind("ones([16384, 1]) + ones([1, 16384])");
    assert_eq!(kind, "limit", "{message}");
    assert!(message.contains("max_tensor_elements"), "{message}");
    // Refused by the check made before the op ("would make"), not by counting the gigabyte it had made.
    assert!(message.contains("would make"), "{message}");
    let tight = Limits {
        max_run_elements: 1000,
        ..Limits::default()
    };
    let r = run(
        &dev(),
        "let a = ones([20, 20]); let b = matmul(a, a); matmul(b, a)",
        &tight,
    );
    let e = r.error.expect("over the run's budget");
    assert_eq!(e.kind, "limit", "{}", e.message);
    assert!(e.message.contains("would make"), "{}", e.message);
    assert!(started.elapsed() < Duration::from_secs(10));
}

fn cli(args: &[&str], code: &str) -> (Option<i32>, String, Duration) {
    let dir = std::env::temp_dir().join(format!("netcl-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("{}.rhai", args.len()));
    std::fs::write(&file, code).unwrap();
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_netcl"))
        .arg("run")
        .args(args)
        .arg(&file)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        started.elapsed(),
    )
}

#[test]
fn the_cli_reports_a_negative_shape_without_a_panic() {
    let (code, stderr, _) = cli(&[], "rand([-1], 1)");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("shape"), "{stderr}");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "{stderr}"
    );
}

#[test]
fn the_cli_time_limit_holds_inside_one_device_call() {
    // Four chained 4096³ matrix products, enqueued without waiting: the final read waits for all of them in
    // one device call, several seconds on a CPU device (well past the limit, its grace and the build time).
    let code = "let a = ones([4096, 4096]); let b = matmul(a, a); let c = matmul(b, a); \
                let d = matmul(c, a); sum_all(matmul(d, a))";
    let (code, stderr, took) = cli(&["--timeout-ms", "300"], code);
    assert_eq!(code, Some(124), "{stderr}");
    assert!(stderr.contains("time limit of 300 ms"), "{stderr}");
    assert!(took < Duration::from_secs(15), "{took:?}");
}
