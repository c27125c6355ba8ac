//! Candidate programs are built ahead of timing: when the tuner measures a product, every candidate's program
//! is built by the parallel prebuild, and timing the candidates builds nothing more.

mod common;

use netcl::ops;
use netcl::program::ProgramStats;

/// Tunes one product from empty caches and prints the program counters; run by the test below in a child
/// process, so that nothing is built yet.
#[test]
#[ignore = "run as a child process by the test of this file"]
fn child_tuned_product() {
    let Some(dev) = common::child_device() else {
        return;
    };
    let (ac, ad) = common::pair(&dev, &[3, 70, 40], 1);
    let (bc, bd) = common::pair(&dev, &[3, 40, 52], 2);
    let want = ops::bmm(&ac, &bc, false, false)
        .and_then(|t| t.to_vec::<f32>())
        .expect("cpu");
    let got = ops::bmm(&ad, &bd, false, false)
        .and_then(|t| t.to_vec::<f32>())
        .expect("device");
    common::assert_close(&got, &want, 1e-4, 1e-4, "tuned bmm 3x70x40x52");
    common::print_program_stats();
}

#[test]
fn tuning_a_product_builds_every_candidate_ahead_and_nothing_while_timing() {
    let work = std::env::temp_dir().join(format!("netcl-prebuild-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).expect("temp dir");
    let out = common::child_command("child_tuned_product")
        .env("NETCL_PROGRAM_CACHE", "off")
        .env("NETCL_AUTOTUNE_CACHE", work.join("autotune.json"))
        .env("NETCL_AUTOTUNE", "sync")
        .env("NETCL_AUTOTUNE_REPS", "1")
        .output()
        .expect("spawn child");
    let text = common::child_test_output("child_tuned_product", "prebuild", &out);
    let _ = std::fs::remove_dir_all(&work);
    if text.contains("NO_DEVICE") {
        return;
    }
    let json = text
        .lines()
        .find_map(|l| l.find("PROGRAM_STATS ").map(|i| &l[i + 14..]))
        .unwrap_or_else(|| panic!("no counters in:\n{text}"));
    let s: ProgramStats = serde_json::from_str(json).expect("stats");
    assert!(
        s.prebuilt >= 3,
        "several candidate programs are built ahead: {s:?}"
    );
    assert_eq!(
        s.source_builds, s.prebuilt,
        "timing the candidates built programs the prebuild did not list: {s:?}"
    );
}
