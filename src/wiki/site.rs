//! Renders the whole wiki once: every page through Markdown and the layout, the search index and `llms.txt`.
//! The server keeps the result in memory; the exporter writes it to files.

use super::content::Content;
use super::links::{LinkMode, Linker};
use super::markdown;
use super::search::{SearchDoc, SearchIndex};
use super::views::{Chrome, NavItem, PageView, SiteSettings, render};
use crate::wiki::error::Result;

/// One rendered page.
#[derive(Debug, Clone)]
pub struct BuiltPage {
    /// Content path (`concepts/device`, `index`).
    pub path: String,
    pub html: String,
}

/// The rendered wiki.
#[derive(Debug)]
pub struct Build {
    pub pages: Vec<BuiltPage>,
    pub index: SearchIndex,
    /// Content problems: from reading and from rendering (broken links and the like).
    pub problems: Vec<String>,
}

/// Renders every page of `content` for `mode`.
pub fn build(content: &Content, settings: &SiteSettings, mode: &LinkMode) -> Result<Build> {
    let ordered = content.ordered();
    let mut problems = content.problems.clone();
    let mut pages = Vec::with_capacity(content.pages.len());
    let mut docs = Vec::new();
    let mut ids: std::collections::HashMap<String, std::collections::HashSet<String>> =
        std::collections::HashMap::new();
    let mut fragment_links: Vec<(String, String, String)> = Vec::new();
    // Pages in navigation order (then any page outside the navigation), so search results that tie, such as an
    // item documented on two API pages, come in the order a reader meets them.
    let in_nav = ordered.iter().filter_map(|p| content.pages.get(*p));
    let outside = content
        .pages
        .values()
        .filter(|p| !ordered.contains(&p.path.as_str()));
    for page in in_nav.chain(outside) {
        let linker = Linker::new(mode, &page.path);
        let rendered = markdown::render(&page.body, &page.path, content, &linker);
        problems.extend(rendered.problems.iter().cloned());
        ids.insert(page.path.clone(), element_ids(&rendered.html));
        fragment_links.extend(
            rendered
                .fragments
                .iter()
                .map(|(to, f)| (page.path.clone(), to.clone(), f.clone())),
        );
        let position = ordered.iter().position(|p| *p == page.path);
        let neighbour = |p: Option<&&str>| {
            p.and_then(|p| content.pages.get(*p)).map(|n| NavItem {
                title: n.front.title.clone(),
                url: linker.page(&n.path),
                current: false,
            })
        };
        let prev = position
            .and_then(|i| i.checked_sub(1))
            .and_then(|i| neighbour(ordered.get(i)));
        let next = position.and_then(|i| neighbour(ordered.get(i + 1)));
        let section = content
            .manifest
            .sections
            .iter()
            .find(|s| s.pages.contains(&page.path))
            .map(|s| s.title.clone())
            .filter(|_| page.path != "index");
        let view = PageView {
            chrome: Chrome::new(content, settings, &linker, &page.path),
            path: &page.path,
            title: &page.front.title,
            status: &page.front.status,
            summary: &page.front.summary,
            section,
            body: &rendered.html,
            toc: &rendered.toc,
            updated: &page.updated,
            edit_url: settings
                .edit_url
                .as_ref()
                .map(|base| format!("{base}{}.md", page.path)),
            raw_url: linker.raw(&page.path),
            prev,
            next,
        };
        let html = render(&view)?;
        let mut first = true;
        for section in rendered.sections {
            let mut text = section.text;
            if first && section.anchor.is_empty() {
                text = format!("{} {text}", page.front.summary);
            }
            first = false;
            docs.push(SearchDoc {
                page: page.path.clone(),
                title: page.front.title.clone(),
                anchor: section.anchor,
                heading: section.heading,
                text: collapse_space(&text),
                item: section.item,
            });
        }
        if docs.last().is_none_or(|d| d.page != page.path) {
            docs.push(SearchDoc {
                page: page.path.clone(),
                title: page.front.title.clone(),
                anchor: String::new(),
                heading: String::new(),
                text: page.front.summary.clone(),
                item: false,
            });
        }
        pages.push(BuiltPage {
            path: page.path.clone(),
            html,
        });
    }
    // A link into a page lands on its heading or anchor; one whose fragment names nothing there would open the
    // page at its top, so it is reported like a broken link.
    for (from, to, fragment) in fragment_links {
        if ids.get(&to).is_some_and(|set| !set.contains(&fragment)) {
            problems.push(format!(
                "{from}.md: broken link to `{to}.md#{fragment}` (no heading or anchor `{fragment}` there)"
            ));
        }
    }
    Ok(Build {
        pages,
        index: SearchIndex::build(docs),
        problems,
    })
}

/// The values of every `id="…"` attribute in `html` (headings, API item anchors, footnotes), and the ids of the
/// page layout around it.
fn element_ids(html: &str) -> std::collections::HashSet<String> {
    html.split(" id=\"")
        .skip(1)
        .filter_map(|rest| rest.split_once('"').map(|(id, _)| id.to_owned()))
        .chain(markdown::LAYOUT_IDS.iter().map(|s| s.to_string()))
        .collect()
}

fn collapse_space(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `llms.txt`: the site's pages as a Markdown list of links to their raw Markdown, in navigation order.
pub fn llms_txt(content: &Content, settings: &SiteSettings, linker: &Linker) -> String {
    let mut out = format!("# {}\n\n", settings.title);
    if let Some(home) = content.pages.get("index") {
        out.push_str(&format!("> {}\n\n", home.front.summary));
    }
    for section in &content.manifest.sections {
        out.push_str(&format!("## {}\n\n", section.title));
        for page in section.pages.iter().filter_map(|p| content.pages.get(p)) {
            out.push_str(&format!(
                "- [{}]({}): {}\n",
                page.front.title,
                linker.raw(&page.path),
                page.front.summary
            ));
        }
        out.push('\n');
    }
    out
}
