//! A run reports the engine's own work as it happens: the programs it builds and the tuning candidates it
//! measures reach the run's progress stream as values with a `netcl` field (the playground's status line).

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use netcl::script::{Limits, run_with_progress};
use serde_json::Value;

fn run_collecting(dev: &netcl::Device, code: &str) -> (bool, Vec<Value>) {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let s = seen.clone();
    let r = run_with_progress(
        dev,
        code,
        &Limits::default(),
        Box::new(move |v| s.borrow_mut().push(v.clone())),
    );
    assert!(r.ok, "run failed: {:?}", r.error);
    let v = seen.borrow().clone();
    (r.ok, v)
}

#[test]
fn a_first_run_reports_the_kernels_it_builds_and_the_candidates_it_measures() {
    let Some(dev) = common::opencl_device() else {
        return;
    };
    let work = std::env::temp_dir().join(format!("netcl-activity-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).expect("temp dir");
    // SAFETY: the only test of this binary; nothing else reads the environment meanwhile.
    unsafe {
        std::env::set_var("NETCL_AUTOTUNE_CACHE", work.join("autotune.json"));
        std::env::set_var("NETCL_AUTOTUNE", "sync");
        std::env::set_var("NETCL_AUTOTUNE_REPS", "1");
    }
    netcl::autotune::reload_config();
    // A shape no other step of this process has used: its programs are built here, its choice measured.
    let code = "let x = randn([3, 37, 29], 1);\nlet s = sum(x, [1]);\nprogress(#{loss: 1.5});\nprint(s.shape);";
    let (_, events) = run_collecting(&dev, code);
    let engine: Vec<&Value> = events.iter().filter(|v| v.get("netcl").is_some()).collect();
    let building: Vec<&&Value> = engine.iter().filter(|v| v["netcl"] == "building").collect();
    assert!(!building.is_empty(), "no build reported: {events:?}");
    for b in &building {
        let family = b["family"].as_str().expect("family");
        let kernel = b["kernel"].as_str().expect("kernel");
        let declared = netcl::program::kernel_names(family).expect("a known family");
        assert!(
            declared.contains(&kernel),
            "{kernel} is not a kernel of {family}"
        );
        assert!(b["built"].as_u64().is_some_and(|n| n >= 1));
    }
    let measuring: Vec<&&Value> = engine
        .iter()
        .filter(|v| v["netcl"] == "measuring")
        .collect();
    assert!(!measuring.is_empty(), "no measurement reported: {events:?}");
    for m in &measuring {
        let (i, of) = (
            m["index"].as_u64().expect("index"),
            m["of"].as_u64().expect("of"),
        );
        assert!(1 <= i && i <= of, "candidate {i} of {of}");
        assert!(m["candidate"].as_str().is_some_and(|c| !c.is_empty()));
    }
    // The script's own progress values come through unchanged beside them.
    assert!(events.iter().any(|v| v["loss"] == 1.5), "{events:?}");
    // A second run of the same code builds and measures nothing more.
    let (_, again) = run_collecting(&dev, code);
    assert!(
        again.iter().all(|v| v.get("netcl").is_none()),
        "a warm run reported engine work: {again:?}"
    );
    let _ = std::fs::remove_dir_all(&work);
}
