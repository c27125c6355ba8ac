//! The command line as a user meets it: an unknown device is an error, listings end quietly when their reader
//! goes away, `export` finds the documentation from any working directory, and `train` reports progress and
//! its throughput after warm-up when its output is not a terminal.

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
    let out = netcl()
        .arg("export")
        .arg(&out_dir)
        .current_dir(&cwd)
        .env_remove("NETCL_WIKI_CONTENT")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
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
