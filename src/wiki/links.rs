//! URLs for pages, assets and routes, for the two ways the wiki is read: served under a base path, or
//! exported to files that must work from disk, where every link is relative to the page that holds it.

/// How links are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkMode {
    /// Served by `netcl serve`; `base` is the path prefix without a trailing slash (`""` or `/wiki`).
    Server { base: String },
    /// Exported: relative links; pages live at `<path>/index.html`.
    Export,
}

/// Writes URLs as seen from one page (or one served route).
#[derive(Debug, Clone)]
pub struct Linker {
    mode: LinkMode,
    /// `../` repeated to reach the export root from the current page.
    up: String,
}

impl Linker {
    /// A linker for the page at `page_path` (`index` for the home page, or any served route in server mode).
    pub fn new(mode: &LinkMode, page_path: &str) -> Linker {
        let up = match mode {
            LinkMode::Export if page_path != "index" => "../".repeat(page_path.split('/').count()),
            _ => String::new(),
        };
        Linker {
            mode: mode.clone(),
            up,
        }
    }

    /// Whether links are written for an exported site.
    pub fn is_export(&self) -> bool {
        self.mode == LinkMode::Export
    }

    /// The site root: `/wiki/` when served, `../../` (or `./`) when exported.
    pub fn root(&self) -> String {
        match &self.mode {
            LinkMode::Server { base } => format!("{base}/"),
            LinkMode::Export if self.up.is_empty() => "./".into(),
            LinkMode::Export => self.up.clone(),
        }
    }

    /// The URL of a page by content path.
    pub fn page(&self, path: &str) -> String {
        match (&self.mode, path) {
            (LinkMode::Server { base }, "index") => format!("{base}/"),
            (LinkMode::Server { base }, _) => format!("{base}/docs/{path}"),
            (LinkMode::Export, "index") => format!("{}index.html", self.up),
            (LinkMode::Export, _) => format!("{}{path}/index.html", self.up),
        }
    }

    /// The URL of a content asset (an image or diagram) by content path.
    pub fn asset(&self, path: &str) -> String {
        match &self.mode {
            LinkMode::Server { base } => format!("{base}/docs/{path}"),
            LinkMode::Export => format!("{}{path}", self.up),
        }
    }

    /// The URL of a page's raw Markdown.
    pub fn raw(&self, path: &str) -> String {
        match &self.mode {
            LinkMode::Server { base } => format!("{base}/docs/{path}.md"),
            LinkMode::Export => format!("{}{path}.md", self.up),
        }
    }

    /// The URL of an embedded static file (`style.css`).
    pub fn static_file(&self, name: &str) -> String {
        match &self.mode {
            LinkMode::Server { base } => format!("{base}/static/{name}"),
            LinkMode::Export => format!("{}static/{name}", self.up),
        }
    }

    /// The search page.
    pub fn search(&self) -> String {
        match &self.mode {
            LinkMode::Server { base } => format!("{base}/search"),
            LinkMode::Export => format!("{}search/index.html", self.up),
        }
    }

    /// A route only the server has (`devices`, `autotune`, `llms.txt`); `None` in an export.
    pub fn route(&self, route: &str) -> Option<String> {
        match &self.mode {
            LinkMode::Server { base } => Some(format!("{base}/{route}")),
            LinkMode::Export => None,
        }
    }
}

/// Joins a relative link to the directory it was written in, resolving `.` and `..`; `None` when the result
/// would leave the content root.
pub fn resolve(dir: &str, rel: &str) -> Option<String> {
    let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
    for part in rel.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_links_honour_the_base_path() {
        let l = Linker::new(
            &LinkMode::Server {
                base: "/wiki".into(),
            },
            "concepts/device",
        );
        assert_eq!(l.page("index"), "/wiki/");
        assert_eq!(l.page("faq"), "/wiki/docs/faq");
        assert_eq!(l.static_file("site.css"), "/wiki/static/site.css");
        assert_eq!(l.route("devices").as_deref(), Some("/wiki/devices"));
    }

    #[test]
    fn export_links_are_relative() {
        let l = Linker::new(&LinkMode::Export, "concepts/device");
        assert_eq!(l.page("faq"), "../../faq/index.html");
        assert_eq!(l.page("index"), "../../index.html");
        assert_eq!(
            l.asset("architecture/modules.svg"),
            "../../architecture/modules.svg"
        );
        let home = Linker::new(&LinkMode::Export, "index");
        assert_eq!(home.page("faq"), "faq/index.html");
        assert_eq!(home.root(), "./");
        assert_eq!(home.route("devices"), None);
    }

    #[test]
    fn resolution_stays_inside_the_root() {
        assert_eq!(
            resolve("concepts", "../reference/cli.md").as_deref(),
            Some("reference/cli.md")
        );
        assert_eq!(resolve("", "./faq.md").as_deref(), Some("faq.md"));
        assert_eq!(resolve("", "../etc/passwd"), None);
    }
}
