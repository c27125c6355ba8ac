//! The layers of the crate depend one way, lowest first: core → runtime → tune → backends → device selection →
//! ops → autograd → nn/optim/train/io/data/bench → script → wiki. This test reads every file under `src/` and
//! fails when one refers to a module of a higher layer, when an op front-end names a backend's internals, or
//! when a source file grows past 1,000 lines. The architecture pages describe the same picture.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The layer of a module named right after `crate::` (or a name the crate root re-exports).
fn module_layer(name: &str) -> Option<u32> {
    Some(match name {
        "error" | "half" | "rng" | "codec" | "fsio" | "Error" | "Result" => 1,
        "memory" | "tensor" | "device" | "contract" | "Device" | "DeviceInfo" | "DeviceType"
        | "Tensor" | "DType" => 2,
        "autotune" => 3,
        "backend" | "program" => 4,
        "select" | "list_devices" | "opencl_available" => 5,
        "ops" => 6,
        "autograd" => 7,
        "nn" | "optim" | "train" | "io" | "data" | "bench" => 8,
        "script" => 9,
        "wiki" => 10,
        _ => return None,
    })
}

/// The layer of a source file, by its path under `src/`.
fn file_layer(rel: &str) -> Option<u32> {
    let first = rel.split('/').next()?.trim_end_matches(".rs");
    match first {
        "lib" | "main" => None,
        "backend" => Some(4),
        _ => module_layer(first),
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("src/ is readable").flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file without its comments (line comments and doc comments), so prose naming a module is not
/// read as a reference.
fn code_of(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every module a file refers to through `crate::name` or `use crate::{name, …}`.
fn crate_refs(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for part in group[..end].split(',') {
                let name: String = part
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.push(name);
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.push(name);
            }
        }
    }
    out
}

/// Words an op front-end must not use: they belong to a backend or to the tuner.
const OPS_FORBIDDEN: &[&str] = &[
    "ClDevice",
    "CpuDevice",
    "Arg::",
    "Defines",
    "program::",
    "autotune::",
    "crate::backend",
];

#[test]
fn layers_depend_one_way() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    files.sort();
    assert!(
        files.len() > 50,
        "too few source files found: {}",
        files.len()
    );
    let mut problems: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for f in &files {
        let rel = f
            .strip_prefix(root.join("src"))
            .expect("under src")
            .to_string_lossy()
            .replace('\\', "/");
        let text = std::fs::read_to_string(f).expect("readable source");
        let lines = text.lines().count();
        if lines > 1000 {
            problems
                .entry(rel.clone())
                .or_default()
                .push(format!("{lines} lines (at most 1,000)"));
        }
        let Some(layer) = file_layer(&rel) else {
            continue;
        };
        let code = code_of(&text);
        for name in crate_refs(&code) {
            if let Some(l) = module_layer(&name)
                && l > layer
            {
                problems
                    .entry(rel.clone())
                    .or_default()
                    .push(format!("layer {layer} refers to crate::{name} (layer {l})"));
            }
        }
        if rel.starts_with("ops/") {
            for w in OPS_FORBIDDEN {
                if code.contains(w) {
                    problems
                        .entry(rel.clone())
                        .or_default()
                        .push(format!("an op front-end names `{w}`"));
                }
            }
            for name in crate_refs(&code) {
                if matches!(module_layer(&name), Some(3..=5)) {
                    problems
                        .entry(rel.clone())
                        .or_default()
                        .push(format!("an op front-end refers to crate::{name}"));
                }
            }
        }
    }
    let report: Vec<String> = problems
        .iter()
        .map(|(f, p)| format!("src/{f}: {}", p.join("; ")))
        .collect();
    assert!(report.is_empty(), "layering broken:\n{}", report.join("\n"));
}

#[test]
fn the_reader_finds_references_and_skips_comments() {
    let code = code_of(
        "use crate::{ops, device::Device};\n// crate::wiki is only named here\nlet x = crate::autotune::tune();",
    );
    assert_eq!(crate_refs(&code), vec!["ops", "device", "autotune"]);
    assert_eq!(file_layer("backend/opencl/mod.rs"), Some(4));
    assert_eq!(file_layer("ops/conv/mod.rs"), Some(6));
    assert_eq!(file_layer("contract/unary.rs"), Some(2));
    assert_eq!(file_layer("lib.rs"), None);
}

/// The engine without its front-ends: with the `script` and `wiki` features off, the dependency tree holds no
/// web server, async runtime, template engine or scripting language (the lower layers never need them).
#[test]
fn the_engine_needs_no_web_or_script_crates() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "tree",
            "-e",
            "normal",
            "--no-default-features",
            "--prefix",
            "none",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.starts_with("netcl "), "unexpected tree:\n{text}");
    let forbidden = [
        "axum",
        "tokio",
        "askama",
        "rhai",
        "tower",
        "tower-http",
        "hyper",
    ];
    let found: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| forbidden.contains(name))
        .collect();
    assert!(found.is_empty(), "the engine-only build pulls in {found:?}");
    // And with the defaults, the same command lists them: the check above can fail.
    let full =
        std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["tree", "-e", "normal", "--prefix", "none", "--offline"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("cargo runs");
    let full = String::from_utf8_lossy(&full.stdout);
    assert!(
        full.lines().any(|l| l.starts_with("axum ")),
        "the default build serves the wiki"
    );
}
