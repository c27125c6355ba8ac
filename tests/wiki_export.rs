//! Export tests: every page is written as `<path>/index.html`, every relative link and asset in the exported
//! HTML resolves to a file on disk, and the offline search index is complete.

mod wiki_support;

use std::fs;
use std::path::Path;

use netcl::wiki::content::Content;
use netcl::wiki::export::export;
use netcl::wiki::views::SiteSettings;
use wiki_support::{content_dir, scratch};

/// Values of `href="…"` and `src="…"` attributes in `html`.
fn links(html: &str) -> Vec<String> {
    let mut out = Vec::new();
    for attr in ["href=\"", "src=\""] {
        let mut rest = html;
        while let Some(i) = rest.find(attr) {
            rest = &rest[i + attr.len()..];
            if let Some(end) = rest.find('"') {
                out.push(rest[..end].to_string());
            }
        }
    }
    out
}

#[test]
fn exported_site_works_from_disk() {
    let out = scratch("export");
    let content = Content::load(&content_dir()).unwrap();
    let settings = SiteSettings {
        title: "netcl".into(),
        edit_url: None,
        playground: false,
    };
    let report = export(&content, &settings, &out).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    for page in content.pages.values() {
        let file = if page.path == "index" {
            out.join("index.html")
        } else {
            out.join(&page.path).join("index.html")
        };
        assert!(file.is_file(), "{}", file.display());
        assert!(out.join(format!("{}.md", page.path)).is_file());
    }
    let mut html_files = Vec::new();
    collect_html(&out, &mut html_files);
    assert!(
        html_files.len() > content.pages.len(),
        "pages plus the search page"
    );
    let mut checked = 0;
    for file in &html_files {
        let html = fs::read_to_string(file).unwrap();
        assert!(
            !html.contains("href=\"/"),
            "{}: absolute link in an export",
            file.display()
        );
        for link in links(&html) {
            if link.starts_with("http") || link.starts_with('#') || link.starts_with("mailto:") {
                continue;
            }
            let path = link.split('#').next().unwrap().split('?').next().unwrap();
            let target = file.parent().unwrap().join(path);
            assert!(
                target.exists(),
                "{}: link `{link}` does not resolve",
                file.display()
            );
            checked += 1;
        }
    }
    assert!(checked > 100, "only {checked} links checked");
    let index: serde_json::Value =
        serde_json::from_slice(&fs::read(out.join("search-index.json")).unwrap()).unwrap();
    let docs = index["docs"].as_array().unwrap();
    // The exported page ranks with the server's BM25: the index carries its vocabulary and constants.
    assert!(
        index["terms"]["conv2d"]
            .as_array()
            .is_some_and(|p| !p.is_empty())
    );
    assert_eq!(index["lengths"].as_array().map(Vec::len), Some(docs.len()));
    assert!(index["avg_len"].as_f64().unwrap() > 1.0);
    for page in content.pages.values() {
        assert!(
            docs.iter().any(|d| d["title"] == page.front.title.as_str()),
            "{} in the search index",
            page.path
        );
    }
    for doc in docs {
        let url = doc["url"].as_str().unwrap().split('#').next().unwrap();
        assert!(out.join(url).is_file(), "search result url {url}");
    }
    let js = fs::read_to_string(out.join("search-index.js")).unwrap();
    assert!(js.starts_with("window.netclSearchIndex = {"));
    for name in [
        "static/site.css",
        "static/app.js",
        "static/theme.js",
        "static/print.css",
        "favicon.ico",
        "llms.txt",
        "architecture/modules.svg",
    ] {
        assert!(out.join(name).is_file(), "{name}");
    }
    let leftovers: Vec<_> = fs::read_dir(&out)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "atomic writes leave no temporary files"
    );
}

fn collect_html(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_html(&path, out);
        } else if path.extension().is_some_and(|e| e == "html") {
            out.push(path);
        }
    }
}
