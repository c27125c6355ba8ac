//! The API pages and the crate agree: every item a page names exists in the sources, and every public item of a
//! module has a row in its page's symbol table. The sources are read as text, the way a reader would.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The crate's public top-level modules; each has `web-wiki/content/api/<module>.md`.
const MODULES: &[&str] = &[
    "device", "tensor", "memory", "program", "autotune", "ops", "autograd", "nn", "optim", "train",
    "io", "data", "script", "codec", "rng", "half", "fsio", "bench", "error", "wiki",
];

const ITEM_KINDS: &[&str] = &["fn", "struct", "enum", "trait", "const", "type", "static"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One source file of a module: its text and whether it is reachable from outside the crate through `pub mod`.
struct SourceFile {
    text: String,
    public: bool,
}

/// The names a module's sources make known.
#[derive(Default)]
struct ModuleNames {
    /// `pub` items at module level that the outside world can reach (the ones that need a page entry).
    public: BTreeSet<String>,
    /// Every `pub` item name at any indentation (methods, fields excluded), `pub mod` names and `pub use` names.
    known: BTreeSet<String>,
}

/// The item declared by a line, when it is `pub <kind> <name>` (not `pub(crate)`), with its indentation.
fn pub_item(line: &str) -> Option<(usize, &'static str, String)> {
    let indent = line.len() - line.trim_start().len();
    let rest = line.trim_start().strip_prefix("pub ")?;
    // `pub const fn f` and `pub async fn f` are functions
    let rest = rest
        .strip_prefix("const fn ")
        .or_else(|| rest.strip_prefix("async fn "))
        .map_or(rest.to_string(), |r| format!("fn {r}"));
    let (kind, rest) = rest.split_once(' ')?;
    if !ITEM_KINDS.contains(&kind) && kind != "mod" {
        return None;
    }
    let name: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    if name.is_empty() {
        return None;
    }
    let kind = ITEM_KINDS
        .iter()
        .find(|k| **k == kind)
        .copied()
        .unwrap_or("mod");
    Some((indent, kind, name))
}

/// The files of a module, following `mod x;` declarations, each marked public when every step is `pub mod`.
fn module_files(top: &str) -> Vec<SourceFile> {
    fn walk(path: &Path, public: bool, out: &mut Vec<SourceFile>) {
        let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let base = if path.file_name().is_some_and(|n| n == "mod.rs") {
            path.parent().unwrap().to_path_buf()
        } else {
            path.with_extension("")
        };
        let mut children = Vec::new();
        for line in text.lines() {
            let (vis_pub, rest) = match line.strip_prefix("pub ") {
                Some(r) => (true, r),
                None => (false, line.strip_prefix("pub(crate) ").unwrap_or(line)),
            };
            if let Some(name) = rest.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
                let file = base.join(format!("{name}.rs"));
                let file = if file.exists() {
                    file
                } else {
                    base.join(name).join("mod.rs")
                };
                children.push((file, public && vis_pub));
            }
        }
        out.push(SourceFile { text, public });
        for (file, public) in children {
            walk(&file, public, out);
        }
    }
    let src = root().join("src");
    let file = src.join(format!("{top}.rs"));
    let file = if file.exists() {
        file
    } else {
        src.join(top).join("mod.rs")
    };
    let mut out = Vec::new();
    walk(&file, true, &mut out);
    out
}

/// The last path segment of every name a `pub use` statement exports.
fn pub_use_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("\npub use ") {
        let stmt = &rest[at + "\npub use ".len()..];
        let end = stmt.find(';').unwrap_or(stmt.len());
        let body = &stmt[..end];
        let list = match (body.find('{'), body.rfind('}')) {
            (Some(a), Some(b)) => &body[a + 1..b],
            _ => body,
        };
        for part in list.split(',') {
            let part = part.trim();
            let name = part.rsplit(" as ").next().unwrap_or(part);
            let name = name.rsplit("::").next().unwrap_or(name).trim();
            if !name.is_empty() {
                names.insert(name.to_string());
            }
        }
        rest = &stmt[end..];
    }
    names
}

fn module_names(top: &str) -> ModuleNames {
    let files = module_files(top);
    let mut names = ModuleNames::default();
    let mut reexported = BTreeSet::new();
    for f in &files {
        reexported.extend(pub_use_names(&format!("\n{}", f.text)));
    }
    for f in &files {
        for line in f.text.lines() {
            let Some((indent, kind, name)) = pub_item(line) else {
                continue;
            };
            if indent == 0 && kind != "mod" && (f.public || reexported.contains(&name)) {
                names.public.insert(name.clone());
            }
            names.known.insert(name);
        }
    }
    names.known.extend(reexported);
    names
}

/// The first cells of the symbol table rows (`| `Name` | …`) under `## Symbols`.
fn symbol_rows(page: &str) -> BTreeSet<String> {
    let mut rows = BTreeSet::new();
    let mut in_symbols = false;
    for line in page.lines() {
        if line.starts_with("## ") {
            in_symbols = line.trim() == "## Symbols";
            continue;
        }
        if !in_symbols {
            continue;
        }
        if let Some(cell) = line.strip_prefix("| `").and_then(|r| r.split_once('`')) {
            rows.insert(cell.0.to_string());
        }
    }
    rows
}

/// Every inline code span outside fenced blocks that looks like a module path: `netcl::m::Item` or `m::Item`
/// with `m` one of the crate's modules. Returned as (module, last segment).
fn module_paths(page: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in page.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        for (i, span) in line.split('`').enumerate() {
            if i % 2 == 0 {
                continue;
            }
            let span = span.strip_prefix("netcl::").unwrap_or(span);
            let mut segs = span.split("::");
            let (Some(first), Some(_)) = (segs.next(), span.split_once("::")) else {
                continue;
            };
            if !MODULES.contains(&first) {
                continue;
            }
            let last = span.rsplit("::").next().unwrap_or_default();
            let ident =
                !last.is_empty() && last.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if ident {
                out.push((first.to_string(), last.to_string()));
            }
        }
    }
    out
}

/// Problems of one API page against the names of all modules.
fn page_problems(module: &str, page: &str, all: &BTreeMap<String, ModuleNames>) -> Vec<String> {
    let mut problems = Vec::new();
    let names = &all[module];
    let rows = symbol_rows(page);
    for row in &rows {
        let item = row.rsplit("::").next().unwrap_or(row);
        if !names.known.contains(item) {
            problems.push(format!(
                "api/{module}.md: symbol row `{row}` is not an item of netcl::{module}"
            ));
        }
    }
    for item in &names.public {
        if !rows.contains(item) {
            problems.push(format!(
                "api/{module}.md: public item `{item}` has no symbol-table row"
            ));
        }
    }
    for (m, item) in module_paths(page) {
        if !all[&m].known.contains(&item) {
            problems.push(format!(
                "api/{module}.md: `{m}::{item}` names no item of netcl::{m}"
            ));
        }
    }
    problems
}

fn all_names() -> BTreeMap<String, ModuleNames> {
    MODULES
        .iter()
        .map(|m| (m.to_string(), module_names(m)))
        .collect()
}

#[test]
fn every_api_page_matches_the_crate() {
    let all = all_names();
    let dir = root().join("web-wiki/content/api");
    let mut problems = Vec::new();
    for module in MODULES {
        let path = dir.join(format!("{module}.md"));
        match fs::read_to_string(&path) {
            Ok(page) => problems.extend(page_problems(module, &page, &all)),
            Err(e) => problems.push(format!("{}: {e}", path.display())),
        }
    }
    assert!(
        problems.is_empty(),
        "API page problems:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_source_scan_finds_the_crate_surface() {
    let all = all_names();
    // Items defined in private submodules count when re-exported, and not otherwise.
    assert!(all["data"].public.contains("Digits"));
    assert!(all["ops"].public.contains("conv2d"));
    assert!(all["device"].public.contains("Device"));
    assert!(!all["device"].public.contains("ClDevice"));
    assert!(all["tensor"].known.contains("reshape"));
}

#[test]
fn a_missing_entry_and_an_unknown_name_are_reported() {
    let all = all_names();
    let page = "## Symbols\n\n| Item | Kind |\n|---|---|\n| `Tensor` | struct |\n| `NoSuchThing` | fn |\n\n\
                See `tensor::Tensor`, `netcl::tensor::Vanished` and `Tensor::reshape`.\n";
    let problems = page_problems("tensor", page, &all);
    for want in [
        "`NoSuchThing` is not an item",
        "`tensor::Vanished` names no item",
        "public item `DType` has no symbol-table row",
    ] {
        assert!(
            problems.iter().any(|p| p.contains(want)),
            "{want}: {problems:?}"
        );
    }
    assert!(
        !problems.iter().any(|p| p.contains("`Tensor` has no")),
        "{problems:?}"
    );
    assert!(
        !problems.iter().any(|p| p.contains("reshape")),
        "{problems:?}"
    );
}

/// Every page path (relative to the content directory) with a ```rust block.
fn pages_with_rust(dir: &Path, base: &Path, out: &mut Vec<String>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            pages_with_rust(&path, base, out);
        } else if path.extension().is_some_and(|x| x == "md") {
            let text = fs::read_to_string(&path).unwrap_or_default();
            if text.lines().any(|l| l.trim_start().starts_with("```rust")) {
                let rel = path.strip_prefix(base).unwrap_or(&path);
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
}

/// The pages whose Rust blocks `src/lib.rs` does not compile as doctests.
fn pages_without_doctests(pages: &[String], lib_rs: &str) -> Vec<String> {
    pages
        .iter()
        .filter(|p| !lib_rs.contains(&format!("include_str!(\"../web-wiki/content/{p}\")")))
        .cloned()
        .collect()
}

#[test]
fn every_page_with_rust_code_is_compiled_as_a_doctest() {
    let content = root().join("web-wiki/content");
    let mut pages = Vec::new();
    pages_with_rust(&content, &content, &mut pages);
    assert!(!pages.is_empty());
    let lib_rs = fs::read_to_string(root().join("src/lib.rs")).unwrap();
    let missing = pages_without_doctests(&pages, &lib_rs);
    assert!(
        missing.is_empty(),
        "pages with ```rust blocks missing from src/lib.rs's docs_pages: {missing:?}"
    );
    let uncovered = pages_without_doctests(&["concepts/none.md".to_string()], &lib_rs);
    assert_eq!(uncovered, vec!["concepts/none.md".to_string()]);
}
