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
fn a_link_to_a_missing_heading_is_a_problem() {
    let dir = site(&["index", "guide/a"]);
    page(
        &dir,
        "index",
        FRONT,
        "## Here\n\n[ok](#here), [there](guide/a.md#usage), [gone](guide/a.md#setup), [self](#nowhere).",
    );
    page(&dir, "guide/a", FRONT, "## Usage\n\nText.");
    let problems = netcl::wiki::check(&dir).unwrap();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems
            .iter()
            .any(|p| p.contains("`guide/a.md#setup`") && p.contains("no heading or anchor `setup`")),
        "{problems:?}"
    );
    assert!(
        problems.iter().any(|p| p.contains("`index.md#nowhere`")),
        "{problems:?}"
    );
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

/// Renders the page at `path` as the server would.
fn rendered(content: &netcl::wiki::content::Content, path: &str) -> String {
    let linker = netcl::wiki::links::Linker::new(
        &netcl::wiki::links::LinkMode::Server {
            base: String::new(),
        },
        path,
    );
    netcl::wiki::markdown::render(&content.pages[path].body, path, content, &linker).html
}

#[test]
fn concept_and_tutorial_pages_link_to_the_api_items_they_use() {
    let content = netcl::wiki::content::Content::load(&content_dir()).unwrap();
    let mut total = 0;
    let mut without = Vec::new();
    for path in content.pages.keys() {
        if !(path.starts_with("concepts/") || path.starts_with("tutorials/")) {
            continue;
        }
        let html = rendered(&content, path);
        let links = html.matches("class=\"api-link\" href=\"/docs/api/").count();
        total += links;
        if links == 0 {
            without.push(path.clone());
        }
    }
    eprintln!("{total} links from concept and tutorial pages to API items; none on {without:?}");
    assert!(total >= 100, "only {total} links into the API pages");
    assert!(
        without.len() <= 3,
        "pages without a link to an API item: {without:?}"
    );
    // The link goes to the item's anchor, which exists on the API page.
    let conv = rendered(&content, "concepts/convolution");
    assert!(
        conv.contains(
            "<a class=\"api-link\" href=\"/docs/api/ops#conv2d\"><code>ops::conv2d</code></a>"
        ),
        "ops::conv2d is linked"
    );
    let ops = rendered(&content, "api/ops");
    assert!(ops.contains("id=\"conv2d\""));
}

#[test]
fn concept_pages_teach_and_the_benchmarks_page_holds_the_numbers() {
    let content = netcl::wiki::content::Content::load(&content_dir()).unwrap();
    let dated = |text: &str| {
        text.as_bytes().windows(10).any(|w| {
            w.iter().enumerate().all(|(i, b)| match i {
                4 | 7 => *b == b'-',
                _ => b.is_ascii_digit(),
            }) && w.starts_with(b"20")
        })
    };
    for (path, page) in &content.pages {
        if !path.starts_with("concepts/") {
            continue;
        }
        for bad in ["bench/results", ".jsonl", "-r1-", "-r2-"] {
            assert!(
                !page.body.contains(bad),
                "{path} cites a result file (`{bad}`)"
            );
        }
        assert!(!dated(&page.body), "{path} holds a dated run");
        // Tables of measured times or rates belong on the benchmarks page.
        for line in page.body.lines().filter(|l| l.starts_with('|')) {
            let measured = [" ms", "µs", "GB/s", "TFLOP/s", "GFLOP/s"]
                .iter()
                .any(|unit| line.contains(unit))
                && line.chars().any(|c| c.is_ascii_digit());
            assert!(!measured, "{path} holds a table of measurements: {line}");
        }
    }
    let bench = &content.pages["benchmarks"];
    let summary = bench
        .body
        .split("## Summary")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("the benchmarks page opens with a summary");
    assert!(
        bench.body.trim_start().starts_with("## Summary"),
        "the summary comes first"
    );
    assert!(summary.contains(
        "| case | H200 netcl | H200 netcl 0.3.2 | H200 PyTorch/cuDNN | PoCL netcl | PoCL netcl 0.3.2 |"
    ));
    let rows = summary.lines().filter(|l| l.starts_with("| `")).count();
    assert!(rows >= 15, "{rows} summary rows");
    for chart in ["charts/h200.svg", "charts/pocl.svg"] {
        assert!(summary.contains(&format!("]({chart})")), "{chart} shown");
        let svg = String::from_utf8(content.assets[chart].clone()).unwrap();
        assert!(svg.starts_with("<svg"), "{chart}");
        // One bar per case and implementation, each with its time as a tooltip.
        assert!(svg.matches("<title>").count() >= 2 * 15, "{chart} bars");
    }
    // The peer script the page tells readers to run is in the repository.
    assert!(bench.body.contains("bench/peer_netcl.py"));
    assert!(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("bench/peer_netcl.py")
            .is_file()
    );
}
