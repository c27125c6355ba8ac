//! The playground language: outputs, structured errors with positions, every limit, progress, and the
//! worker protocol.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use netcl::Device;
use netcl::script::{Limits, Output, run, run_with_progress};

fn dev() -> Device {
    common::opencl_device().unwrap_or_else(Device::builtin)
}

#[test]
fn a_snippet_prints_summarises_draws_and_returns_a_value() {
    let code = r#"
        let a = tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]);
        let b = tensor([10.0, 20.0, 30.0]);
        let c = a + b;
        print(`shape ${c.shape}`);
        inspect(c, "c");
        show(randn([2, 4, 4], 3), "maps");
        sum_all(c).item()
    "#;
    let r = run(&dev(), code, &Limits::default());
    assert!(r.ok, "{:?}", r.error);
    assert_eq!(r.value.as_deref(), Some("141.0"));
    assert_eq!(
        r.outputs[0],
        Output::Text {
            text: "shape [2, 3]".into()
        }
    );
    match &r.outputs[1] {
        Output::Tensor(s) => {
            assert_eq!(
                (s.shape.clone(), s.min, s.max),
                (vec![2, 3], Some(11.0), Some(36.0))
            );
            assert_eq!(s.preview, vec![11.0, 22.0, 33.0, 14.0, 25.0, 36.0]);
        }
        o => panic!("expected a tensor summary, got {o:?}"),
    }
    match &r.outputs[2] {
        Output::Image {
            width, height, png, ..
        } => {
            assert_eq!((*width, *height), (9, 4));
            assert!(png.starts_with("data:image/png;base64,iVBORw0KGgo"));
        }
        o => panic!("expected an image, got {o:?}"),
    }
    assert!(r.timings.total_ms >= r.timings.run_ms);
    assert!(!r.device.name.is_empty());
}

#[test]
fn errors_carry_kind_line_and_column() {
    let d = dev();
    let r = run(
        &d,
        "let x = zeros([2, 3]);\nlet y = zeros([4, 3]);\nlet z = x + y;",
        &Limits::default(),
    );
    let e = r.error.expect("shape error");
    assert_eq!(
        (e.kind.as_str(), e.line, e.column),
        ("shape", Some(3), Some(11))
    );
    assert!(
        e.message.contains("[2, 3]") && e.message.contains("[4, 3]"),
        "{}",
        e.message
    );
    let r = run(&d, "let x = ;", &Limits::default());
    let e = r.error.expect("syntax error");
    assert_eq!((e.kind.as_str(), e.line), ("syntax", Some(1)));
    let r = run(&d, "let t = randn([2], -1);", &Limits::default());
    assert_eq!(r.error.map(|e| e.kind), Some("invalid".into()));
    let r = run(&d, "no_such_function(1)", &Limits::default());
    let e = r.error.expect("unknown function");
    assert_eq!((e.kind.as_str(), e.line), ("runtime", Some(1)));
    let r = run(&d, "tensor([[1.0, 2.0], [3.0]])", &Limits::default());
    assert_eq!(r.error.map(|e| e.kind), Some("shape".into()));
}

#[test]
fn every_limit_is_enforced() {
    let d = dev();
    let small = |f: fn(&mut Limits)| {
        let mut l = Limits::default();
        f(&mut l);
        l
    };
    let r = run(&d, &"1;".repeat(100), &small(|l| l.max_code_bytes = 50));
    assert_eq!(r.error.map(|e| e.kind), Some("limit".into()));
    let r = run(
        &d,
        "let i = 0; loop { i += 1; }",
        &small(|l| l.max_operations = 10_000),
    );
    assert_eq!(r.error.map(|e| e.kind), Some("limit".into()));
    // A limit the script passes names the setting in its error.
    type SetLimit = fn(&mut Limits);
    let over: [(&str, SetLimit, &str); 2] = [
        (
            "zeros([1000, 1000])",
            |l| l.max_tensor_elements = 10_000,
            "max_tensor_elements",
        ),
        (
            "for i in 0..10 { let t = zeros([100]); }",
            |l| l.max_run_elements = 500,
            "max_run_elements",
        ),
    ];
    for (code, set, name) in over {
        let e = run(&d, code, &small(set)).error.expect(name);
        assert!(e.kind == "limit" && e.message.contains(name), "{e:?}");
    }
    let r = run(
        &d,
        "for i in 0..1000 { print(\"0123456789\"); }",
        &small(|l| l.max_output_bytes = 2_000),
    );
    assert!(r.ok && r.truncated);
    assert!(matches!(r.outputs.last(), Some(Output::Text { text }) if text.contains("truncated")));
    let started = std::time::Instant::now();
    let r = run(
        &d,
        "let i = 0; loop { i += 1; }",
        &small(|l| l.timeout_ms = 300),
    );
    assert_eq!(r.error.map(|e| e.kind), Some("timeout".into()));
    assert!(started.elapsed().as_millis() < 5_000);
}

#[test]
fn progress_is_reported_as_it_happens() {
    let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let s = seen.clone();
    let r = run_with_progress(
        &Device::builtin(),
        "for i in 0..3 { progress(#{step: i, loss: 1.0 / (i + 1)}); }",
        &Limits::default(),
        Box::new(move |v| s.borrow_mut().push(v.clone())),
    );
    assert!(r.ok, "{:?}", r.error);
    let seen = seen.borrow();
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[2]["step"], 2);
}

#[test]
fn decisions_and_launches_are_reported() {
    let Some(d) = common::opencl_device() else {
        return;
    };
    let r = run(&d, "sum_all(randn([40000], 5)).item()", &Limits::default());
    assert!(r.ok, "{:?}", r.error);
    assert!(
        r.launches.iter().any(|l| l.kernel.starts_with("red_")),
        "{:?}",
        r.launches
    );
    let r = run(
        &d,
        "sum_all(randn([40001], 5)); decisions()",
        &Limits::default(),
    );
    assert!(r.ok);
    assert!(r.value.is_some_and(|v| v.contains("reduce")));
}

#[test]
fn the_worker_answers_json_lines_and_survives_bad_requests() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_netcl"))
        .args(["--device", "builtin", "worker"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn worker");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    writeln!(stdin, "not json").expect("write");
    let l: serde_json::Value =
        serde_json::from_str(&lines.next().expect("line").expect("read")).expect("json");
    assert_eq!(l["event"], "error");
    let req = serde_json::json!({"id": 7, "code": "progress(1); print(\"hi\"); 1 + 2"});
    writeln!(stdin, "{req}").expect("write");
    let p: serde_json::Value =
        serde_json::from_str(&lines.next().expect("line").expect("read")).expect("json");
    assert_eq!(
        (p["id"].clone(), p["event"].clone(), p["data"].clone()),
        (serde_json::json!(7), "progress".into(), 1.into())
    );
    let r: serde_json::Value =
        serde_json::from_str(&lines.next().expect("line").expect("read")).expect("json");
    assert_eq!(r["event"], "result");
    assert_eq!(r["result"]["ok"], true);
    assert_eq!(r["result"]["value"], "3");
    assert_eq!(r["result"]["outputs"][0]["text"], "hi");
    drop(stdin);
    assert!(child.wait().expect("exit").success());
}

#[test]
fn the_language_covers_ops_autograd_models_and_training() {
    let d = dev();
    let code = r#"
        let x = randn([2, 3, 6, 6], 1);
        let w = param(randn([4, 3, 3, 3], #{seed: 2, std: 0.2}));
        let y = conv2d(x, w, #{stride: 2, padding: 1, relu: true});
        let loss = mean_all(y * y);
        backward(loss);
        let g = grad(w);
        let pooled = max_pool2d(relu(conv2d(x, randn([5, 3, 1, 1], 3))), #{kernel: 2});
        let p = softmax(matmul(randn([2, 4], 4), randn([4, 3], 5)), 1);
        let m = sequential([#{type: "Flatten"}, #{type: "Linear", args: #{in_features: 64, out_features: 10}}], 7);
        let data = digits(0);
        let h = fit(m, adam(m, 0.01), data, #{epochs: 1, batch: 64});
        let img = sample_image("digits");
        [y.shape, g.shape, pooled.shape, p.shape, sum_all(p).item(), h.len(), h[0].val_accuracy > 0.5, img.shape]
    "#;
    let steps = std::rc::Rc::new(std::cell::Cell::new(0));
    let s = steps.clone();
    let r = run_with_progress(
        &d,
        code,
        &Limits {
            timeout_ms: 120_000,
            ..Limits::default()
        },
        Box::new(move |v| {
            if v["event"] == "step" {
                s.set(s.get() + 1);
            }
        }),
    );
    assert!(r.ok, "{:?}", r.error);
    assert_eq!(
        r.value.as_deref(),
        Some("[[2, 4, 3, 3], [4, 3, 3, 3], [2, 5, 3, 3], [2, 3], 2.0, 1, true, [10, 1, 8, 8]]")
    );
    assert!(steps.get() >= 20, "fit streams every step: {}", steps.get());
    let r = run(
        &d,
        "conv2d(randn([1, 2, 4, 4], 1), randn([3, 2, 3, 3], 2), #{strid: 2})",
        &Limits::default(),
    );
    let e = r.error.expect("unknown option");
    assert!(e.kind == "invalid" && e.message.contains("strid"), "{e:?}");
    let r = run(&d, "let w = param(ones([2])); grad(w)", &Limits::default());
    assert_eq!(r.error.map(|e| e.kind), Some("invalid".into()));
}
