//! The content store: Markdown pages with front matter, embedded assets and the navigation manifest,
//! read from the content directory and never from anywhere else.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Deserialize;

use crate::{Error, Result};

/// Files larger than this are refused: content is documentation, not data.
const MAX_FILE_BYTES: u64 = 4 << 20;
/// Directory depth below the content root that is still read.
const MAX_DEPTH: usize = 8;
/// Top-level names an exported site uses for itself, so no page may take them.
pub const RESERVED_NAMES: &[&str] = &["static", "search", "search-index.json", "search-index.js"];

/// The fields every page declares at its top, between `---` lines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FrontMatter {
    pub title: String,
    pub status: String,
    pub summary: String,
    /// `YYYY-MM-DD`; when absent the file's modification date is shown.
    pub updated: Option<String>,
}

/// One Markdown page of the wiki.
#[derive(Debug, Clone)]
pub struct Page {
    /// Path below the content root without `.md`, with `/` separators: `concepts/device`. The home page is `index`.
    pub path: String,
    pub front: FrontMatter,
    /// Markdown after the front matter.
    pub body: String,
    /// The whole file, served as raw Markdown.
    pub source: String,
    /// Date of last change, `YYYY-MM-DD`.
    pub updated: String,
}

/// A section of the left navigation.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct NavSection {
    pub title: String,
    pub pages: Vec<String>,
}

/// `nav.toml`: the ordered sections of the navigation.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct Manifest {
    #[serde(default, rename = "section")]
    pub sections: Vec<NavSection>,
}

/// Everything read from the content directory.
#[derive(Debug, Clone, Default)]
pub struct Content {
    pub pages: BTreeMap<String, Page>,
    /// Images and diagrams, by path below the content root (`architecture/modules.svg`).
    pub assets: BTreeMap<String, Vec<u8>>,
    pub manifest: Manifest,
    /// Problems found while reading: malformed front matter, unreadable files, manifest errors.
    pub problems: Vec<String>,
    /// The items of the API pages, found once on first use (see `markdown::api_items`).
    pub(crate) api_items: std::sync::OnceLock<std::collections::HashMap<String, (String, String)>>,
}

impl Content {
    /// Reads the content directory. Only regular files inside `root` are read; symbolic links are skipped.
    pub fn load(root: &Path) -> Result<Content> {
        let meta = fs::metadata(root).map_err(|e| {
            Error::Wiki(format!(
                "content directory {}: {e} (give the documentation's directory with --content DIR or NETCL_WIKI_CONTENT)",
                root.display()
            ))
        })?;
        if !meta.is_dir() {
            return Err(Error::Wiki(format!(
                "content directory {} is not a directory",
                root.display()
            )));
        }
        let mut content = Content::default();
        walk(root, root, 0, &mut content)?;
        let manifest_path = root.join("nav.toml");
        match fs::read_to_string(&manifest_path) {
            Ok(text) => match basic_toml::from_str::<Manifest>(&text) {
                Ok(manifest) => content.manifest = manifest,
                Err(e) => content.problems.push(format!("nav.toml: {e}")),
            },
            Err(e) => content.problems.push(format!("nav.toml: {e}")),
        }
        content.check_manifest();
        Ok(content)
    }

    /// Page paths in navigation order; pages absent from the manifest are not part of it.
    pub fn ordered(&self) -> Vec<&str> {
        self.manifest
            .sections
            .iter()
            .flat_map(|s| s.pages.iter())
            .map(String::as_str)
            .filter(|p| self.pages.contains_key(*p))
            .collect()
    }

    fn check_manifest(&mut self) {
        let mut listed = BTreeMap::new();
        for section in &self.manifest.sections {
            for page in &section.pages {
                if !self.pages.contains_key(page) {
                    self.problems
                        .push(format!("nav.toml: page `{page}` has no file {page}.md"));
                }
                if listed.insert(page.clone(), ()).is_some() {
                    self.problems
                        .push(format!("nav.toml: page `{page}` is listed twice"));
                }
            }
        }
        for path in self.pages.keys() {
            if !listed.contains_key(path) {
                self.problems
                    .push(format!("{path}.md: page is absent from nav.toml"));
            }
        }
    }
}

fn wiki_io(path: &Path, e: std::io::Error) -> Error {
    Error::Wiki(format!("{}: {e}", path.display()))
}

/// A path component authors may use: letters, digits, `-`, `_` and inner dots.
fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn walk(root: &Path, dir: &Path, depth: usize, content: &mut Content) -> Result<()> {
    if depth > MAX_DEPTH {
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .map_err(|e| wiki_io(dir, e))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for path in entries {
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if !plain_name(name) {
            continue;
        }
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            walk(root, &path, depth + 1, content)?;
            continue;
        }
        if !meta.is_file() {
            continue;
        }
        let Ok(rel) = path.strip_prefix(root) else {
            continue;
        };
        let rel: Vec<&str> = rel.iter().filter_map(|c| c.to_str()).collect();
        let rel = rel.join("/");
        if meta.len() > MAX_FILE_BYTES {
            content.problems.push(format!(
                "{rel}: larger than {MAX_FILE_BYTES} bytes, skipped"
            ));
            continue;
        }
        let ext = name
            .rsplit_once('.')
            .map(|(_, e)| e.to_ascii_lowercase())
            .unwrap_or_default();
        match ext.as_str() {
            "md" => {
                let page_path = rel.trim_end_matches(".md").to_string();
                let source = fs::read_to_string(&path).map_err(|e| wiki_io(&path, e))?;
                let modified = meta.modified().ok();
                match parse_page(&page_path, &source, modified) {
                    Ok(page) => {
                        if RESERVED_NAMES.contains(&page_path.split('/').next().unwrap_or("")) {
                            content
                                .problems
                                .push(format!("{rel}: `{page_path}` is a reserved name"));
                        }
                        content.pages.insert(page_path, page);
                    }
                    Err(msg) => content.problems.push(format!("{rel}: {msg}")),
                }
            }
            "svg" | "png" | "jpg" | "jpeg" | "gif" | "webp" => {
                let bytes = fs::read(&path).map_err(|e| wiki_io(&path, e))?;
                content.assets.insert(rel, bytes);
            }
            _ => {}
        }
    }
    Ok(())
}

/// Splits front matter from the body and checks the required fields.
pub fn parse_page(
    path: &str,
    source: &str,
    modified: Option<SystemTime>,
) -> std::result::Result<Page, String> {
    let text = source.strip_prefix('\u{feff}').unwrap_or(source);
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
        .ok_or("missing front matter (a `---` block with title, status and summary)")?;
    let (head, body) = match rest.find("\n---") {
        Some(end) => {
            let after = &rest[end + 4..];
            let body = after
                .strip_prefix("\r\n")
                .or_else(|| after.strip_prefix('\n'))
                .unwrap_or(after);
            (&rest[..end], body)
        }
        None => return Err("front matter is not closed by `---`".into()),
    };
    let mut front = FrontMatter::default();
    for line in head.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            return Err(format!("front matter line `{line}` is not `key: value`"));
        };
        let value = unquote(value.trim()).to_string();
        match key.trim() {
            "title" => front.title = value,
            "status" => front.status = value,
            "summary" => front.summary = value,
            "updated" => front.updated = Some(value),
            other => return Err(format!("unknown front matter field `{other}`")),
        }
    }
    for (name, value) in [
        ("title", &front.title),
        ("status", &front.status),
        ("summary", &front.summary),
    ] {
        if value.is_empty() {
            return Err(format!("front matter field `{name}` is missing"));
        }
    }
    let updated = match &front.updated {
        Some(date) if is_date(date) => date.clone(),
        Some(date) => return Err(format!("front matter `updated: {date}` is not YYYY-MM-DD")),
        None => modified.map(iso_date).unwrap_or_default(),
    };
    Ok(Page {
        path: path.to_string(),
        front,
        body: body.to_string(),
        source: source.to_string(),
        updated,
    })
}

fn unquote(value: &str) -> &str {
    for q in ['"', '\''] {
        if value.len() >= 2 && value.starts_with(q) && value.ends_with(q) {
            return &value[1..value.len() - 1];
        }
    }
    value
}

fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
}

/// Formats a time as a UTC calendar date (days-to-civil conversion, no time zone data needed).
pub fn iso_date(time: SystemTime) -> String {
    let secs = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (secs / 86_400) as i64;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn front_matter_is_parsed_and_required() {
        let page = parse_page(
            "a",
            "---\ntitle: A\nstatus: Draft\nsummary: \"S: s\"\n---\n# Body\n",
            None,
        )
        .unwrap();
        assert_eq!(page.front.title, "A");
        assert_eq!(page.front.summary, "S: s");
        assert_eq!(page.body, "# Body\n");
        let err = parse_page("a", "---\ntitle: A\nstatus: Draft\n---\nx", None).unwrap_err();
        assert!(err.contains("summary"), "{err}");
        assert!(parse_page("a", "# no front matter", None).is_err());
    }

    #[test]
    fn dates_are_civil() {
        assert_eq!(iso_date(SystemTime::UNIX_EPOCH), "1970-01-01");
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_169_600 + 3600);
        assert_eq!(iso_date(t), "2026-12-02");
    }
}
