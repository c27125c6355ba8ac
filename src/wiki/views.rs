//! The askama views: the shared page chrome (header, navigation, search box) and one view per kind of page.

use askama::Template;

use super::content::Content;
use super::links::Linker;
use super::markdown::TocEntry;
use crate::wiki::error::{Result, WikiError};

/// A link in the navigation, breadcrumbs or prev/next.
#[derive(Debug, Clone)]
pub struct NavItem {
    pub title: String,
    pub url: String,
    pub current: bool,
}

/// A titled group of navigation links.
#[derive(Debug, Clone)]
pub struct NavSectionView {
    pub title: String,
    pub items: Vec<NavItem>,
}

/// What every page around its content shows.
#[derive(Debug, Clone)]
pub struct Chrome {
    pub site_title: String,
    pub home: String,
    pub css: String,
    pub print_css: String,
    pub js: String,
    pub theme_js: String,
    pub playground_js: String,
    pub search: String,
    /// Prefilled search box text.
    pub query: String,
    pub nav: Vec<NavSectionView>,
    /// Pages only the server has (devices, autotune).
    pub server_links: Vec<NavItem>,
    pub llms: Option<String>,
    pub search_api: Option<String>,
    /// The offline index script of an exported site.
    pub search_index_js: Option<String>,
    pub playground: bool,
    /// `POST` here to run code (served sites with the playground on).
    pub run_api: Option<String>,
    /// The standalone playground page (served sites with the playground on).
    pub playground_url: Option<String>,
    /// The site icon.
    pub favicon: String,
    /// The version of netcl that rendered the site, shown in the footer.
    pub version: &'static str,
}

/// Site-wide settings the views need.
#[derive(Debug, Clone)]
pub struct SiteSettings {
    pub title: String,
    pub edit_url: Option<String>,
    pub playground: bool,
}

impl Chrome {
    /// The chrome for the page or route `current` (a content path, or `route:devices` style names).
    pub fn new(
        content: &Content,
        settings: &SiteSettings,
        linker: &Linker,
        current: &str,
    ) -> Chrome {
        let nav = content
            .manifest
            .sections
            .iter()
            .map(|section| NavSectionView {
                title: section.title.clone(),
                items: section
                    .pages
                    .iter()
                    .filter_map(|path| content.pages.get(path))
                    .map(|page| NavItem {
                        title: page.front.title.clone(),
                        url: linker.page(&page.path),
                        current: page.path == current,
                    })
                    .collect(),
            })
            .collect();
        let playground_url = linker.route("playground").filter(|_| settings.playground);
        let pages: &[(&str, &str)] = if playground_url.is_some() {
            &[
                ("playground", "Playground"),
                ("devices", "Devices"),
                ("autotune", "Autotune cache"),
            ]
        } else {
            &[("devices", "Devices"), ("autotune", "Autotune cache")]
        };
        let server_links = pages
            .iter()
            .filter_map(|(route, title)| {
                linker.route(route).map(|url| NavItem {
                    title: (*title).into(),
                    url,
                    current: current == format!("route:{route}"),
                })
            })
            .collect();
        Chrome {
            site_title: settings.title.clone(),
            home: linker.page("index"),
            css: linker.static_file("site.css"),
            print_css: linker.static_file("print.css"),
            js: linker.static_file("app.js"),
            theme_js: linker.static_file("theme.js"),
            playground_js: linker.static_file("playground.js"),
            search: linker.search(),
            query: String::new(),
            nav,
            server_links,
            llms: linker.route("llms.txt"),
            search_api: linker.route("api/search"),
            search_index_js: linker
                .is_export()
                .then(|| format!("{}search-index.js", linker.root())),
            playground: settings.playground,
            run_api: linker.route("api/run").filter(|_| settings.playground),
            playground_url,
            favicon: linker.static_file("favicon.ico"),
            version: env!("CARGO_PKG_VERSION"),
        }
    }
}

/// One example on the playground page: a runnable block of a page.
#[derive(Debug, Clone)]
pub struct ExampleView {
    pub title: String,
    pub page_url: String,
    pub code: String,
}

/// The standalone playground: an empty editor and every runnable example of the wiki.
#[derive(Template)]
#[template(path = "playground.html")]
pub struct PlaygroundView {
    pub chrome: Chrome,
    pub examples: Vec<ExampleView>,
}

/// A documentation page.
#[derive(Template)]
#[template(path = "page.html")]
pub struct PageView<'a> {
    pub chrome: Chrome,
    pub path: &'a str,
    pub title: &'a str,
    pub status: &'a str,
    pub summary: &'a str,
    pub section: Option<String>,
    pub body: &'a str,
    pub toc: &'a [TocEntry],
    pub updated: &'a str,
    pub edit_url: Option<String>,
    pub raw_url: String,
    pub prev: Option<NavItem>,
    pub next: Option<NavItem>,
}

/// One search result as shown.
#[derive(Debug, Clone)]
pub struct HitView {
    pub url: String,
    pub title: String,
    pub heading: String,
    pub snippet_html: String,
}

/// The search results page (server) or the offline search page (export).
#[derive(Template)]
#[template(path = "search.html")]
pub struct SearchView {
    pub chrome: Chrome,
    pub hits: Vec<HitView>,
    pub message: Option<String>,
    pub offline: bool,
}

/// A suggested page on the 404 page.
#[derive(Debug, Clone)]
pub struct Suggestion {
    pub url: String,
    pub title: String,
}

/// The 404 page.
#[derive(Template)]
#[template(path = "not_found.html")]
pub struct NotFoundView {
    pub chrome: Chrome,
    pub requested: String,
    pub suggestions: Vec<Suggestion>,
}

/// One device, formatted for display.
#[derive(Debug, Clone)]
pub struct DeviceView {
    pub index: usize,
    /// Whether this is the device the server's selection chooses.
    pub selected: bool,
    pub name: String,
    pub kind: String,
    pub platform: String,
    pub vendor: String,
    pub driver: String,
    pub version: String,
    pub opencl_c_version: String,
    pub compute_units: u32,
    pub max_clock_mhz: u32,
    pub global_mem: String,
    pub local_mem: String,
    pub max_alloc: String,
    pub max_work_group_size: usize,
    pub work_item_sizes: String,
    pub fp16: &'static str,
    pub fp64: &'static str,
    pub unified_memory: &'static str,
}

/// The devices page.
#[derive(Template)]
#[template(path = "devices.html")]
pub struct DevicesView {
    pub chrome: Chrome,
    pub devices: Vec<DeviceView>,
    pub selection: Option<String>,
    /// The chosen device as `index: name`.
    pub selected: Option<String>,
    /// Why the selection matches no device.
    pub selection_error: Option<String>,
    pub error: Option<String>,
    pub json_url: String,
}

/// One candidate row of an autotune entry.
#[derive(Debug, Clone)]
pub struct CandidateView {
    pub label: String,
    pub ms: String,
    pub median_ms: String,
    pub error: Option<String>,
    /// Time relative to the slowest candidate, for the bar.
    pub fraction: String,
    pub winner: bool,
}

/// One autotune cache entry, formatted.
#[derive(Debug, Clone)]
pub struct TuneEntryView {
    pub kernel: String,
    pub shape_key: String,
    pub device: String,
    pub winner: String,
    pub candidates: Vec<CandidateView>,
    pub filter_text: String,
}

/// The autotune cache page.
#[derive(Template)]
#[template(path = "autotune.html")]
pub struct AutotuneView {
    pub chrome: Chrome,
    pub path: String,
    pub status: String,
    pub error: Option<String>,
    pub filter: String,
    pub shown: usize,
    pub total: usize,
    pub entries: Vec<TuneEntryView>,
    pub self_url: String,
    pub json_url: String,
}

/// Renders a view to a string, mapping template errors into the crate error.
pub fn render<T: Template>(view: &T) -> Result<String> {
    view.render()
        .map_err(|e| WikiError::Site(format!("template: {e}")))
}

/// Bytes in binary units, one decimal.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn bytes_are_human() {
        assert_eq!(super::human_bytes(512), "512 B");
        assert_eq!(super::human_bytes(3 << 30), "3.0 GiB");
    }
}

/// A 4xx page for a request the server will not answer.
#[derive(Template)]
#[template(path = "error.html")]
pub struct ErrorView {
    pub chrome: Chrome,
    pub heading: String,
    pub message: String,
}
