//! The playground language reads the way a user writes it: integer literals where a float is expected, i32
//! tensors from `full_int`, numbers with sensible precision, maps as tables, errors that say their kind once, and
//! a reference page that documents every function a script can call.

use netcl::Device;
use netcl::script::render::transcript;
use netcl::script::{Limits, RunResult, function_signatures, run};

fn go(code: &str) -> RunResult {
    run(&Device::builtin(), code, &Limits::default())
}

fn ok(code: &str) -> String {
    let r = go(code);
    assert!(r.ok, "{code}: {:?}", r.error);
    transcript(&r)
}

#[test]
fn full_int_makes_i32_labels_that_losses_take() {
    assert_eq!(ok("full_int([2, 3], 4).dtype"), "→ i32\n");
    let out = ok(
        "let logits = randn([4, 3], 1);\nlet labels = full_int([4], 2);\n\
                  print(one_hot(labels, 3).shape);\ncross_entropy(logits, labels).item() > 0.0",
    );
    assert_eq!(out, "[4, 3]\n→ true\n");
    let r = go("full_int([2], 1.5)");
    let e = r.error.expect("a fractional value is refused");
    assert_eq!(e.kind, "dtype");
    assert!(e.message.contains("whole number"), "{}", e.message);
}

#[test]
fn integer_literals_are_accepted_where_a_float_is() {
    assert_eq!(
        ok("clamp(tensor([-2.0, 3.0, 9.0]), 0, 6).to_array()"),
        "→ [0.0, 3.0, 6.0]\n"
    );
    assert_eq!(
        ok("leaky_relu(tensor([-2.0, 3.0]), 1).to_array()"),
        "→ [-2.0, 3.0]\n"
    );
    assert_eq!(ok("elu(tensor([1.0]), 1).to_array()"), "→ [1.0]\n");
    let r = go("clamp(tensor([1.0]), \"a\", 2)");
    assert_eq!(r.error.expect("a string is refused").kind, "dtype");
}

#[test]
fn numbers_print_with_sensible_precision_and_maps_as_tables() {
    assert_eq!(ok("1.0 / 3.0"), "→ 0.333333\n");
    assert_eq!(ok("print(0.1 + 0.2)"), "0.3\n");
    assert_eq!(ok("2.5e-7"), "→ 2.5000e-7\n");
    assert_eq!(ok("print(tensor([0.1]).item())"), "0.1\n");
    assert_eq!(ok("tensor([0.1, 0.2]).to_array()"), "→ [0.1, 0.2]\n");
    assert_eq!(
        ok("print(#{name: \"a\", compute_units: 4})"),
        "compute_units  4\nname           a\n"
    );
    let dev = ok("print(device())");
    assert!(dev.lines().count() >= 6, "one line per field: {dev}");
    assert!(dev.lines().any(|l| l.starts_with("kind ")), "{dev}");
}

#[test]
fn summaries_and_errors_say_things_once() {
    let out = ok("inspect(tensor([[1.0, 2.0], [3.0, 4.0]]), \"a\"); tensor([1.0, 2.0])");
    assert!(!out.contains("Some("), "{out}");
    assert!(
        out.starts_with("a [2, 2] f32 min=1.0 max=4.0 mean=2.5 [1.0, 2.0, 3.0, 4.0]"),
        "{out}"
    );
    let r = go("let x = randn([2, 3], 1);\nsum(x, [5])");
    let e = r.error.expect("an axis out of range is an error");
    assert!(
        !e.message.starts_with(&format!("{}:", e.kind))
            && !e.message.starts_with("invalid argument"),
        "the message repeats its kind: {e:?}"
    );
    assert_eq!(e.line, Some(2));
}

#[test]
fn forced_algorithms_and_new_functions_run() {
    let out = ok("let g = ones([4, 3, 2]);\nreduce_to_shape(g, [1, 3, 1]).to_array()");
    assert_eq!(out, "→ [8.0, 8.0, 8.0]\n");
    let out = ok(
        "let x = randn([1, 2, 6, 6], 1);\nlet w = randn([2, 1, 3, 3], 2);\n\
                  let a = depthwise_conv2d(x, w, #{padding: 1, algo: \"naive\"});\n\
                  let b = depthwise_conv2d(x, w, #{padding: 1});\nmax(abs(a - b), [0, 1, 2, 3]).item() < 1e-4",
    );
    assert_eq!(out, "→ true\n");
    assert_eq!(ok("tensor([0.1]).cast(\"f16\").dtype"), "→ f16\n");
    assert_eq!(
        ok("layer_norm(tensor([[1.0, 3.0]]), 1).to_array()"),
        "→ [-0.999995, 0.999995]\n"
    );
    assert_eq!(ok("kernel_families().len() > 3"), "→ true\n");
}

#[test]
fn the_playground_reference_documents_every_function() {
    let page = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("web-wiki/content/reference/playground.md"),
    )
    .unwrap();
    let mut names: Vec<String> = function_signatures()
        .iter()
        .filter_map(|s| s.split('(').next().map(str::to_owned))
        .filter(|n| n.chars().next().is_some_and(|c| c.is_ascii_alphabetic()))
        .filter(|n| !n.starts_with("get$") && !n.starts_with("set$"))
        .filter(|n| n != "to_string" && n != "to_debug")
        .collect();
    names.sort();
    names.dedup();
    assert!(
        names.len() > 80,
        "the signatures list the bindings: {names:?}"
    );
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| {
            !(page.contains(&format!("`{n}("))
                || page.contains(&format!("`{n}`"))
                || page.contains(&format!(".{n}("))
                || page.contains(&format!(", {n}("))
                || page.contains(&format!("`, `{n}`")))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "functions missing from reference/playground.md: {missing:?}"
    );
}
