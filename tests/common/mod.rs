//! Shared helpers of the integration tests.
#![allow(dead_code)]

use netcl::{Device, Tensor};

/// The OpenCL device the tests run on (`NETCL_TEST_DEVICE`, else the default selection).
///
/// Under `CI=true` a machine without an OpenCL device fails the test; elsewhere the test is skipped with a
/// loud message (the function returns `None`).
pub fn opencl_device() -> Option<Device> {
    let sel = std::env::var("NETCL_TEST_DEVICE").ok();
    let found = match sel.as_deref() {
        Some(s) => Device::select(Some(s)).ok().filter(|d| d.is_opencl()),
        None => netcl::opencl_available()
            .then(|| Device::select(Some("auto")).ok())
            .flatten(),
    };
    if found.is_none() {
        let msg = "no OpenCL device found (install PoCL: apt-get install pocl-opencl-icd ocl-icd-libopencl1)";
        if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
            panic!("{msg}; under CI=true a missing OpenCL device is a failure");
        }
        eprintln!("\n!!!!!!!! SKIPPED: {msg} !!!!!!!!\n");
    }
    found
}

/// The built-in reference device.
/// Whether `d` is an NVIDIA GPU (whose OpenCL compiler takes inline PTX).
pub fn is_nvidia_gpu(d: &Device) -> bool {
    let i = d.info();
    let v = format!("{} {}", i.platform, i.vendor).to_ascii_lowercase();
    i.kind == netcl::DeviceType::Gpu && v.contains("nvidia")
}

pub fn cpu() -> Device {
    Device::builtin()
}

/// The built-in device, then the OpenCL device when there is one.
pub fn devices() -> Vec<Device> {
    let mut v = vec![cpu()];
    v.extend(opencl_device());
    v
}

/// The OpenCL device of a child process; without one, prints `NO_DEVICE` for its test to read.
pub fn child_device() -> Option<Device> {
    let dev = opencl_device();
    if dev.is_none() {
        println!("NO_DEVICE");
    }
    dev
}

/// Prints this process's program counters as a `PROGRAM_STATS` line (a child process's report to its test).
pub fn print_program_stats() {
    let stats = netcl::program::program_stats();
    let json = serde_json::to_string(&stats).expect("stats json");
    println!("PROGRAM_STATS {json}");
}

/// Asserts `|got − want| ≤ atol + rtol·|want|` elementwise, with NaN matching NaN and infinities matching exactly.
pub fn assert_close(got: &[f32], want: &[f32], atol: f32, rtol: f32, what: &str) {
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: length {} vs {}",
        got.len(),
        want.len()
    );
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if w.is_nan() {
            assert!(g.is_nan(), "{what}[{i}]: got {g}, want NaN");
        } else if w.is_infinite() {
            assert_eq!(g, w, "{what}[{i}]: got {g}, want {w}");
        } else {
            assert!(
                (g - w).abs() <= atol + rtol * w.abs(),
                "{what}[{i}]: got {g}, want {w} (atol {atol}, rtol {rtol})"
            );
        }
    }
}

/// [`assert_close`] on the f32 values of two tensors (read back from their devices).
pub fn assert_tensors_close(got: &Tensor, want: &Tensor, atol: f32, rtol: f32, what: &str) {
    let read = |t: &Tensor| t.to_vec::<f32>().expect("read f32 values");
    assert_close(&read(got), &read(want), atol, rtol, what);
}

/// The same tensor's values on the built-in device and on `dev`.
pub fn pair(dev: &Device, shape: &[usize], seed: u64) -> (Tensor, Tensor) {
    let c = Tensor::randn(&cpu(), shape, 0.0, 1.0, seed).expect("randn on cpu");
    let d = c.to_device(dev).expect("to_device");
    (c, d)
}

/// A small deterministic generator for test shapes.
pub struct Lcg(pub u64);

impl Lcg {
    /// A value in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        lo + ((self.0 >> 33) as usize) % (hi - lo + 1)
    }
}

/// A command that runs the ignored test `name` of this test binary alone in a child process, its output
/// captured by the test harness's `--nocapture`.
pub fn child_command(name: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        name,
        "--ignored",
        "--test-threads=1",
        "--nocapture",
    ]);
    cmd
}

/// The output of a child test process that ran the ignored test `name` with the setting `force` (for
/// example `NETCL_AUTOTUNE_FORCE` set to it), after asserting that it succeeded and ran exactly one test.
pub fn child_test_output(name: &str, force: &str, out: &std::process::Output) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{name} with {force}:\n{text}");
    assert!(
        text.contains("1 passed"),
        "{name} with {force} did not run:\n{text}"
    );
    text
}

/// Runs `python3 script args…` (a check against netcl 0.3.2) and fails with its output unless it succeeds.
pub fn python_check_passes<S: AsRef<std::ffi::OsStr>>(
    script: &str,
    args: impl IntoIterator<Item = S>,
) {
    let out = std::process::Command::new("python3")
        .arg(script)
        .args(args)
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "netcl 0.3.2 disagreed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
}

/// Whether python3 can import netcl 0.3.2 and pyopencl; says loudly that the test is skipped when not.
pub fn has_netcl() -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import netcl, pyopencl"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!(
            "\n!!!!!!!! SKIPPED: python3 cannot import netcl 0.3.2 (pip install pyopencl netcl==0.3.2) !!!!!!!!\n"
        );
    }
    ok
}

/// The label `NETCL_AUTOTUNE_FORCE` (`kernel=label;…`, set by a parent test) forces for `kernel`.
pub fn forced_label(kernel: &str) -> Option<String> {
    let force = std::env::var("NETCL_AUTOTUNE_FORCE").ok()?;
    force.split(';').find_map(|e| {
        let (k, l) = e.split_once('=')?;
        (k == kernel).then(|| l.to_owned())
    })
}

/// The central difference (step `h`) of `loss` in entry `i` of `x`, whose values are `base`; `x` holds
/// `base` again afterwards.
pub fn central_difference(
    x: &netcl::autograd::Var,
    base: &[f32],
    i: usize,
    h: f32,
    mut loss: impl FnMut() -> f32,
) -> f32 {
    let dev = x.value().device().clone();
    let mut at = |d: f32| {
        let mut v = base.to_vec();
        v[i] += d;
        x.value()
            .assign(&Tensor::from_slice(&dev, &v, x.shape()).expect("t"))
            .expect("assign");
        loss()
    };
    let fd = (at(h) - at(-h)) / (2.0 * h);
    x.value()
        .assign(&Tensor::from_slice(&dev, base, x.shape()).expect("t"))
        .expect("restore");
    fd
}

/// Asserts that the derivative `got` matches its central difference `fd` within `tol`·(1 + |fd|).
pub fn assert_matches_fd(got: f32, fd: f64, tol: f64, what: &str) {
    assert!(
        (got as f64 - fd).abs() <= tol * (1.0 + fd.abs()),
        "{what}: {got} vs {fd}"
    );
}

/// Fails unless `r` is an error whose message contains `want`; `case` names the bad input.
pub fn assert_refused<T>(r: netcl::Result<T>, case: &str, want: &str) {
    let e = r.map(|_| ()).expect_err(case);
    assert!(e.to_string().contains(want), "{e}");
}

/// Runs `cmd` to completion and fails with its standard error unless it succeeded.
pub fn output_ok(cmd: &mut std::process::Command) -> std::process::Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
