//! Content tests: the documentation has no broken internal link, no missing front matter field and no page
//! outside the navigation manifest; and each of those defects is in fact detected.

mod wiki_support;

use std::fs;
use std::path::Path;

use wiki_support::{content_dir, scratch};

#[test]
fn the_documentation_has_no_content_problems() {
    let problems = netcl::wiki::check(&content_dir()).unwrap();
    assert!(
        problems.is_empty(),
        "content problems:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_required_pages_exist() {
    let content = netcl::wiki::content::Content::load(&content_dir()).unwrap();
    for page in [
        "index",
        "quickstart",
        "faq",
        "concepts/device",
        "concepts/autotune",
        "reference/cli",
        "reference/http-api",
        "reference/env-vars",
        "architecture/overview",
    ] {
        assert!(content.pages.contains_key(page), "missing page {page}");
    }
}

fn page(dir: &Path, path: &str, front: &str, body: &str) {
    let file = dir.join(format!("{path}.md"));
    fs::create_dir_all(file.parent().unwrap()).unwrap();
    fs::write(file, format!("---\n{front}\n---\n{body}\n")).unwrap();
}

const FRONT: &str = "title: T\nstatus: Draft\nsummary: S";

fn site(pages: &[&str]) -> std::path::PathBuf {
    let dir = scratch("content");
    let list: Vec<String> = pages.iter().map(|p| format!("\"{p}\"")).collect();
    fs::write(
        dir.join("nav.toml"),
        format!(
            "[[section]]\ntitle = \"All\"\npages = [{}]\n",
            list.join(", ")
        ),
    )
    .unwrap();
    dir
}

#[test]
fn a_clean_site_has_no_problems() {
    let dir = site(&["index", "guide/a"]);
    page(&dir, "index", FRONT, "See [a](guide/a.md#top).");
    page(&dir, "guide/a", FRONT, "Back [home](../index.md).");
    assert_eq!(netcl::wiki::check(&dir).unwrap(), Vec::<String>::new());
}

#[test]
fn a_broken_internal_link_is_a_problem() {
    let dir = site(&["index"]);
    page(
        &dir,
        "index",
        FRONT,
        "See [gone](missing.md) and ![img](nope.svg).",
    );
    let problems = netcl::wiki::check(&dir).unwrap();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0].contains("broken link `missing.md`"),
        "{problems:?}"
    );
    assert!(problems[1].contains("nope.svg"), "{problems:?}");
}

#[test]
fn a_missing_front_matter_field_is_a_problem() {
    let dir = site(&["index"]);
    page(&dir, "index", "title: T\nstatus: Draft", "body");
    let problems = netcl::wiki::check(&dir).unwrap();
    assert!(
        problems
            .iter()
            .any(|p| p.contains("index.md") && p.contains("`summary` is missing")),
        "{problems:?}"
    );
}

#[test]
fn a_page_absent_from_the_manifest_is_a_problem() {
    let dir = site(&["index"]);
    page(&dir, "index", FRONT, "body");
    page(&dir, "orphan", FRONT, "body");
    let problems = netcl::wiki::check(&dir).unwrap();
    assert_eq!(
        problems,
        vec!["orphan.md: page is absent from nav.toml".to_string()]
    );
}

#[test]
fn a_manifest_entry_without_a_file_is_a_problem() {
    let dir = site(&["index", "ghost"]);
    page(&dir, "index", FRONT, "body");
    let problems = netcl::wiki::check(&dir).unwrap();
    assert!(
        problems.iter().any(|p| p.contains("`ghost` has no file")),
        "{problems:?}"
    );
}

#[cfg(unix)]
#[test]
fn nothing_outside_the_content_dir_is_read() {
    let outside = scratch("outside");
    fs::write(
        outside.join("secret.md"),
        format!("---\n{FRONT}\n---\nSECRET\n"),
    )
    .unwrap();
    let dir = site(&["index"]);
    page(&dir, "index", FRONT, "[x](../outside/secret.md)");
    std::os::unix::fs::symlink(outside.join("secret.md"), dir.join("linked.md")).unwrap();
    std::os::unix::fs::symlink(&outside, dir.join("linkdir")).unwrap();
    let content = netcl::wiki::content::Content::load(&dir).unwrap();
    assert_eq!(
        content.pages.keys().collect::<Vec<_>>(),
        vec!["index"],
        "symbolic links are not followed"
    );
    let problems = netcl::wiki::check(&dir).unwrap();
    assert!(
        problems
            .iter()
            .any(|p| p.contains("leaves the content directory")),
        "{problems:?}"
    );
}
