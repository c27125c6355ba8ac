//! `netcl export DIR`: the wiki as static files. Every page becomes `DIR/<path>/index.html` with relative links,
//! so the copy works from disk and from any static host; search runs in the browser over `search-index.json`
//! (also as `search-index.js`, which a page opened from disk can load where fetching a file is not allowed).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::assets::{FAVICON, STATIC_FILES};
use super::content::Content;
use super::links::{LinkMode, Linker};
use super::site::{self, llms_txt};
use super::views::{Chrome, SearchView, SiteSettings, render};
use crate::wiki::error::{Result, WikiError};

/// What an export wrote.
#[derive(Debug, Clone)]
pub struct ExportReport {
    pub files: usize,
    pub problems: Vec<String>,
}

/// Writes the wiki in `content` to `out`.
pub fn export(content: &Content, settings: &SiteSettings, out: &Path) -> Result<ExportReport> {
    let mode = LinkMode::Export;
    let built = site::build(content, settings, &mode)?;
    let mut files = 0;
    let mut write = |rel: &str, bytes: &[u8]| -> Result<()> {
        write_atomic(&out.join(rel), bytes)?;
        files += 1;
        Ok(())
    };
    for page in &built.pages {
        let rel = if page.path == "index" {
            "index.html".to_string()
        } else {
            format!("{}/index.html", page.path)
        };
        write(&rel, page.html.as_bytes())?;
    }
    for page in content.pages.values() {
        write(&format!("{}.md", page.path), page.source.as_bytes())?;
    }
    for (path, bytes) in &content.assets {
        write(path, bytes)?;
    }
    for (name, _, bytes) in STATIC_FILES {
        write(&format!("static/{name}"), bytes)?;
    }
    write("favicon.ico", FAVICON)?;
    let linker = Linker::new(&mode, "search");
    let view = SearchView {
        chrome: Chrome::new(content, settings, &linker, "route:search"),
        hits: Vec::new(),
        message: None,
        offline: true,
    };
    write("search/index.html", render(&view)?.as_bytes())?;
    let index = built.index.to_json(|d| {
        let url = if d.page == "index" {
            "index.html".to_string()
        } else {
            format!("{}/index.html", d.page)
        };
        if d.anchor.is_empty() {
            url
        } else {
            format!("{url}#{}", d.anchor)
        }
    });
    let index =
        serde_json::to_string(&index).map_err(|e| WikiError::Site(format!("search index: {e}")))?;
    write("search-index.json", index.as_bytes())?;
    write(
        "search-index.js",
        format!("window.netclSearchIndex = {index};\n").as_bytes(),
    )?;
    write(
        "llms.txt",
        llms_txt(content, settings, &Linker::new(&mode, "index")).as_bytes(),
    )?;
    Ok(ExportReport {
        files,
        problems: built.problems,
    })
}

/// Writes `bytes` to a temporary file beside `path` and renames it into place, so readers never see half a file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let io = |p: &Path, e: std::io::Error| WikiError::Site(format!("{}: {e}", p.display()));
    let dir = path
        .parent()
        .ok_or_else(|| WikiError::Site(format!("{}: no parent directory", path.display())))?;
    fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp: PathBuf = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let mut file = fs::File::create(&tmp).map_err(|e| io(&tmp, e))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| io(&tmp, e))?;
    fs::rename(&tmp, path).map_err(|e| io(path, e))
}
