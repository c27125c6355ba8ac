//! Programs built by helper processes: in background mode, a product whose chosen kernel is not built yet runs
//! the quick kernel (`gemm_simple`) at once, a helper process (`netcl build-programs`) builds the chosen
//! kernel's program into the on-disk cache, and a later call loads it and switches. A helper that cannot build
//! leaves the product to build here. A tuning table's program list is built by helpers as soon as a device of
//! its class is opened. Each scenario runs in a child process with fresh caches.

mod common;

use std::time::{Duration, Instant};

use netcl::autotune::{self, Source};
use netcl::{Device, ops};

/// Runs `a·b` on the device and checks it against the built-in CPU device; returns the kernels it launched.
fn product(dev: &Device, seed: u64, what: &str) -> Vec<String> {
    let (ac, ad) = common::pair(dev, &[70, 40], seed);
    let (bc, bd) = common::pair(dev, &[40, 52], seed + 1);
    let want = ops::matmul(&ac, &bc)
        .and_then(|t| t.to_vec::<f32>())
        .expect("cpu");
    dev.record_launches(true);
    let got = ops::matmul(&ad, &bd)
        .and_then(|t| t.to_vec::<f32>())
        .expect("device");
    let launched: Vec<String> = dev
        .take_launches()
        .expect("launches")
        .into_iter()
        .filter(|l| !l.tuning)
        .map(|l| l.kernel)
        .collect();
    dev.record_launches(false);
    common::assert_close(&got, &want, 1e-4, 1e-4, what);
    launched
}

/// Waits until helper processes have finished every program handed to them.
fn wait_for_helpers() {
    let start = Instant::now();
    while netcl::program::builds_pending() > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(240),
            "helpers still building after 240 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
#[ignore = "run as a child process by the tests of this file"]
fn child_quick_then_chosen() {
    let Some(dev) = common::child_device() else {
        return;
    };
    let seq = autotune::last_seq();
    let first = product(&dev, 1, "first call (quick kernel)");
    assert_eq!(
        first,
        ["gemm_simple"],
        "the first call runs the quick kernel"
    );
    let interim: Vec<_> = autotune::decisions_since(seq)
        .into_iter()
        .filter(|d| d.source == Source::Interim)
        .collect();
    assert_eq!(interim.len(), 1, "one interim decision is logged");
    assert_eq!(interim[0].winner_label, "[\"simple\"]");
    assert!(
        interim[0]
            .note
            .as_deref()
            .is_some_and(|n| n.contains("helper process")),
        "the note says why: {:?}",
        interim[0].note
    );
    assert_eq!(
        netcl::program::program_stats().source_builds,
        1,
        "only the quick kernel is compiled here"
    );
    // Convolutions' products (bias epilogue, transposed operands in the backward pass) run the quick kernel
    // too on their first call, and are right.
    let o = netcl::ops::Conv2dOptions::new().padding(1);
    let (xc, xd) = common::pair(&dev, &[2, 5, 9, 7], 11);
    let (wc, wd) = common::pair(&dev, &[6, 5, 3, 3], 12);
    let (bc, bd) = common::pair(&dev, &[6], 13);
    let want = ops::conv2d(&xc, &wc, Some(&bc), &o).expect("cpu conv");
    let got = ops::conv2d(&xd, &wd, Some(&bd), &o).expect("device conv");
    common::assert_tensors_close(&got, &want, 2e-4, 1e-4, "conv2d with bias, first call");
    let (gc, gd) = common::pair(&dev, want.shape(), 14);
    let want = ops::conv2d_backward(&xc, &wc, &gc, true, true, &o).expect("cpu backward");
    let got = ops::conv2d_backward(&xd, &wd, &gd, true, true, &o).expect("device backward");
    let (gx, wx) = (got.grad_x.expect("grad_x"), want.grad_x.expect("grad_x"));
    common::assert_tensors_close(&gx, &wx, 2e-4, 1e-4, "conv2d grad_x, first call");
    common::assert_tensors_close(
        &got.grad_w,
        &want.grad_w,
        1e-3,
        1e-4,
        "conv2d grad_w, first call",
    );
    assert!(
        autotune::decisions_since(seq)
            .iter()
            .filter(|d| d.source == Source::Interim)
            .count()
            >= 2,
        "the convolution's products ran the quick kernel too"
    );
    let built_here = netcl::program::program_stats().source_builds;
    wait_for_helpers();
    let later = product(&dev, 3, "call after the helper built the chosen kernel");
    assert!(
        !later.is_empty() && !later.iter().any(|k| k == "gemm_simple"),
        "a later call runs the chosen kernel, not the quick one: {later:?}"
    );
    let stats = netcl::program::program_stats();
    assert_eq!(
        stats.source_builds, built_here,
        "the chosen program is loaded from the helper's binary, not compiled here: {stats:?}"
    );
    assert!(stats.binary_loads >= 1, "{stats:?}");
    println!("QUICK_THEN_CHOSEN ok {later:?}");
}

#[test]
#[ignore = "run as a child process by the tests of this file"]
fn child_helper_fails() {
    let Some(dev) = common::child_device() else {
        return;
    };
    let seq = autotune::last_seq();
    let first = product(&dev, 5, "first call, helper broken");
    // The helper exits at once: when its failure is known before the product asks, the first call already
    // builds the first choice here (on some CPUs a packed product: two packing kernels and the product);
    // otherwise it runs the quick kernel. Either way the first call runs one candidate and times none.
    let decisions = autotune::decisions_since(seq);
    assert!(!first.is_empty(), "the first call launched nothing");
    assert!(
        decisions
            .iter()
            .all(|d| matches!(d.source, Source::Interim | Source::Heuristic)),
        "the first call measures nothing: {decisions:?}"
    );
    if decisions.iter().any(|d| d.source == Source::Interim) {
        assert_eq!(first, ["gemm_simple"], "the quick kernel ran: {first:?}");
    } else {
        assert!(
            !first.iter().any(|k| k == "gemm_simple"),
            "the first choice ran, built here: {first:?}"
        );
    }
    wait_for_helpers();
    let later = product(&dev, 7, "call after the helper failed");
    assert!(
        !later.iter().any(|k| k == "gemm_simple"),
        "the chosen kernel is built here once the helper failed: {later:?}"
    );
    assert!(netcl::program::program_stats().source_builds >= 1);
    println!("HELPER_FAILS ok {later:?}");
}

/// Runs child `name` with its caches in `work`, background tuning, the helper executable `builder` (two at
/// once) and, when given, the tuning tables of `tables`; returns its output.
fn child_in(
    name: &str,
    builder: &str,
    work: &std::path::Path,
    tables: Option<&std::path::Path>,
) -> String {
    let mut cmd = common::child_command(name);
    cmd.env("NETCL_PROGRAM_CACHE", work.join("programs"))
        .env("NETCL_AUTOTUNE_CACHE", work.join("autotune.json"))
        .env("NETCL_AUTOTUNE", "background")
        .env("NETCL_BUILDER", builder)
        .env("NETCL_BUILDER_JOBS", "2");
    if let Some(t) = tables {
        cmd.env("NETCL_TUNING_DIR", t);
    }
    let out = cmd.output().expect("spawn child");
    common::child_test_output(name, builder, &out)
}

/// A child with empty caches in `work`, background tuning and the helper executable `builder`.
fn run_child(name: &str, builder: &str, marker: &str) {
    let work = std::env::temp_dir().join(format!("netcl-elsewhere-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).expect("temp dir");
    let text = child_in(name, builder, &work, None);
    let _ = std::fs::remove_dir_all(&work);
    if text.contains("NO_DEVICE") {
        return;
    }
    assert!(text.contains(marker), "{name}:\n{text}");
}

#[test]
fn a_first_product_runs_the_quick_kernel_and_later_calls_load_the_chosen_one() {
    run_child(
        "child_quick_then_chosen",
        env!("CARGO_BIN_EXE_netcl"),
        "QUICK_THEN_CHOSEN ok",
    );
}

#[test]
fn a_helper_that_cannot_build_leaves_the_product_to_build_here() {
    // An executable that exits at once without building anything.
    run_child("child_helper_fails", "/bin/false", "HELPER_FAILS ok");
}

/// Three programs of the kernel families, as a tuning table lists them.
const LISTED: [(&str, &str, &str); 3] = [
    ("elementwise", "binary_same", " -D OP(x,y)=((x)+(y))"),
    (
        "reduce",
        "red_row_chunk",
        " -D COMB(a,b)=((a)+(b)) -D IDENT=0.0f -D PRE(v)=(v) -D KAHAN=1",
    ),
    (
        "reduce",
        "red_row_wg",
        " -D COMB(a,b)=((a)+(b)) -D IDENT=0.0f -D PRE(v)=(v) -D KAHAN=1 -D ALIGN4=1",
    ),
];

/// A program only the table of another device class lists.
const OTHER: (&str, &str, &str) = ("elementwise", "binary_same", " -D OP(x,y)=((x)*(y))");

/// The programs the cache's list of built programs names, as `family kernel defines` lines.
fn built_list(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("built.list"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<(String, String, String, String)>(l).ok())
        .map(|(_, f, k, d)| format!("{f} {k} {d}"))
        .collect()
}

#[test]
#[ignore = "run as a child process by the tests of this file"]
fn child_table_programs_built_ahead() {
    let Some(dev) = common::child_device() else {
        return;
    };
    // Opening the device handed the table's programs to helpers; nothing else has run here.
    let dir = std::path::PathBuf::from(std::env::var("NETCL_PROGRAM_CACHE").expect("cache dir"));
    let want: Vec<String> = LISTED
        .iter()
        .map(|(f, k, d)| format!("{f} {k} {d}"))
        .collect();
    let start = Instant::now();
    while !want.iter().all(|w| built_list(&dir).contains(w)) {
        assert!(
            start.elapsed() < Duration::from_secs(240),
            "the listed programs were not built by helpers within 240 s: {:?}",
            built_list(&dir)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_for_helpers();
    let specs: Vec<netcl::program::ProgramSpec> = LISTED
        .iter()
        .map(|(f, k, d)| (*f, *k, netcl::program::Defines::from_text(d)))
        .collect();
    netcl::program::prebuild(&dev, &specs).expect("prebuild");
    let stats = netcl::program::program_stats();
    assert_eq!(
        (stats.source_builds, stats.binary_loads),
        (0, 3),
        "the three listed programs are loaded from the helpers' binaries, none compiled here: {stats:?}"
    );
    let other = format!("{} {} {}", OTHER.0, OTHER.1, OTHER.2);
    assert!(
        !built_list(&dir).contains(&other),
        "a program listed only for another device class was built"
    );
    // Every listed program is on disk now: a later hand-over finds nothing to do.
    assert_eq!(netcl::program::warm_ahead(&dev), 0);
    // The table's unknown kernel was skipped, and the device still works.
    product(&dev, 9, "a product after the table's programs");
    println!("TABLE_PROGRAMS ok");
}

#[test]
#[ignore = "run as a child process by the tests of this file"]
fn child_table_programs_locked_elsewhere() {
    let Some(dev) = common::child_device() else {
        return;
    };
    // Another process holds the hand-over's lock: neither the hand-over at the device's opening nor this one
    // gives helpers anything, and the listed programs stay unbuilt.
    assert_eq!(netcl::program::warm_ahead(&dev), 0);
    assert_eq!(netcl::program::builds_pending(), 0);
    let dir = std::path::PathBuf::from(std::env::var("NETCL_PROGRAM_CACHE").expect("cache dir"));
    let built = built_list(&dir);
    assert!(
        LISTED
            .iter()
            .all(|(f, k, d)| !built.contains(&format!("{f} {k} {d}"))),
        "listed programs were built although another process held the lock: {built:?}"
    );
    println!("TABLE_LOCKED ok");
}

/// Runs child `name` with a table listing [`LISTED`] (and an unknown kernel) for the test device's class and
/// [`OTHER`] for another class, fresh caches, background mode and helpers; with `hold_lock`, this process holds
/// the program cache's hand-over lock while the child runs. Returns the child's output.
fn run_table_child(name: &str, hold_lock: bool) -> Option<String> {
    let dev = common::opencl_device()?;
    let work = std::env::temp_dir().join(format!(
        "netcl-elsewhere-{name}-{hold_lock}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(work.join("tables")).expect("temp dir");
    let class = autotune::db::DeviceClass::of(dev.info());
    let table = |class: &autotune::db::DeviceClass, programs: Vec<(&str, &str, &str)>| {
        serde_json::json!({
            "format": autotune::db::FORMAT,
            "device": class,
            "entries": {},
            "programs": programs,
        })
        .to_string()
    };
    let mut listed = LISTED.to_vec();
    listed.push(("elementwise", "no_such_kernel", ""));
    std::fs::write(work.join("tables/this.json"), table(&class, listed)).expect("table");
    let other = autotune::db::DeviceClass {
        name: format!("{} (another)", class.name),
        ..class.clone()
    };
    std::fs::write(work.join("tables/other.json"), table(&other, vec![OTHER])).expect("table");
    let lock = hold_lock.then(|| {
        netcl::fsio::FileLock::acquire(&work.join("programs/warm-ahead.lock")).expect("lock")
    });
    let text = child_in(
        name,
        env!("CARGO_BIN_EXE_netcl"),
        &work,
        Some(&work.join("tables")),
    );
    drop(lock);
    let _ = std::fs::remove_dir_all(&work);
    Some(text)
}

#[test]
fn a_tuning_tables_programs_are_built_by_helpers_when_the_device_opens() {
    let name = "child_table_programs_built_ahead";
    if let Some(text) = run_table_child(name, false) {
        assert!(text.contains("TABLE_PROGRAMS ok"), "{name}:\n{text}");
    }
}

#[test]
fn a_process_holding_the_hand_over_lock_keeps_the_list_from_another_ones_helpers() {
    let name = "child_table_programs_locked_elsewhere";
    if let Some(text) = run_table_child(name, true) {
        assert!(text.contains("TABLE_LOCKED ok"), "{name}:\n{text}");
    }
}
