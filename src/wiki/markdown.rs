//! Markdown to HTML for wiki pages: GFM tables, footnotes, task lists, strikethrough and admonitions; heading
//! anchors and the table of contents; highlighted code with a language label and copy button; runnable
//! playground blocks; math as MathML; inline SVG diagrams; links rewritten for the serving mode and checked.

use std::collections::HashSet;

use pulldown_cmark::{
    Alignment, BlockQuoteKind, CodeBlockKind, CowStr, Event, HeadingLevel, Options, Parser, Tag,
    TagEnd,
};

use super::content::Content;
use super::highlight;
use super::html::{escape, escape_into};
use super::links::{Linker, resolve};
use super::{math, svg};

/// One entry of the "on this page" list.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TocEntry {
    pub level: u8,
    pub id: String,
    pub text: String,
}

/// The text of one section (the part of a page under one heading), for search.
#[derive(Debug, Clone, Default)]
pub struct Section {
    /// Heading id, empty for the text before the first heading.
    pub anchor: String,
    pub heading: String,
    pub text: String,
    /// The section of an API item (its heading or its row in a symbols table).
    pub item: bool,
}

/// A page rendered to HTML, with what the layout and the search index need.
#[derive(Debug, Clone, Default)]
pub struct Rendered {
    pub html: String,
    pub toc: Vec<TocEntry>,
    pub sections: Vec<Section>,
    /// Broken links, invalid diagrams and other content errors found while rendering.
    pub problems: Vec<String>,
    /// Code spans linked to the API item they name.
    pub api_links: usize,
    /// Links with a fragment, as (target page path, fragment): checked against the target's ids once every page
    /// is rendered ([`crate::wiki::site::build`]).
    pub fragments: Vec<(String, String)>,
}

/// Ids the page layout itself uses (and `top`, which browsers scroll to); headings never take them.
pub(crate) const LAYOUT_IDS: &[&str] = &[
    "main",
    "content",
    "nav",
    "toc",
    "search",
    "search-input",
    "search-results",
    "top",
];

/// The one parser configuration: every page is parsed the same way.
pub fn options() -> Options {
    Options::ENABLE_TABLES
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_HEADING_ATTRIBUTES
        | Options::ENABLE_MATH
        | Options::ENABLE_GFM
}

struct HeadingState<'a> {
    level: HeadingLevel,
    id: Option<String>,
    events: Vec<Event<'a>>,
    text: String,
}

/// Renders the Markdown `body` of the page at `page_path`, writing links with `linker` and checking link targets
/// against `content`.
pub fn render(body: &str, page_path: &str, content: &Content, linker: &Linker) -> Rendered {
    let dir = page_path.rsplit_once('/').map_or("", |(d, _)| d);
    let mut r = Rendered {
        sections: vec![Section::default()],
        ..Rendered::default()
    };
    let mut used_ids: HashSet<String> = LAYOUT_IDS.iter().map(|s| s.to_string()).collect();
    let mut events: Vec<Event> = Vec::new();
    let mut heading: Option<HeadingState> = None;
    let mut code: Option<(String, String)> = None;
    let api = is_api_page(page_path);
    let all: Vec<Event> = Parser::new_ext(body, options()).collect();
    // API pages: the items described in detail (a paragraph that is only **`name`**) and the symbols table's
    // state (inside a table whose first column is "Item", and which cell of the row comes next).
    let detailed: HashSet<String> = if api {
        (0..all.len())
            .filter_map(|i| item_paragraph(&all, i))
            .collect()
    } else {
        HashSet::new()
    };
    let mut symbols_table = false;
    let mut cell = 0usize;
    let mut item_sections: Vec<Section> = Vec::new();
    let mut skip = 0usize;
    let mut link_depth = 0usize;
    let mut footnotes: Vec<String> = Vec::new();
    let mut open_footnotes: Vec<String> = Vec::new();

    for (i, event) in all.iter().cloned().enumerate() {
        if skip > 0 {
            skip -= 1;
            continue;
        }
        if api && heading.is_none() && code.is_none() {
            // **`name`** on its own line: the item's heading, with the name as its anchor.
            if let Some(name) = item_paragraph(&all, i) {
                let h = HeadingState {
                    level: HeadingLevel::H3,
                    id: Some(name.clone()),
                    events: vec![Event::Code(name.clone().into())],
                    text: name,
                };
                let html = finish_heading(h, &mut used_ids, &mut r, true);
                events.push(Event::Html(html.into()));
                skip = 4;
                continue;
            }
            match &event {
                Event::Start(Tag::TableHead) => {
                    symbols_table = matches!(
                        (all.get(i + 1), all.get(i + 2)),
                        (Some(Event::Start(Tag::TableCell)), Some(Event::Text(t))) if t.trim() == "Item"
                    );
                }
                Event::End(TagEnd::Table) => symbols_table = false,
                Event::Start(Tag::TableRow) => cell = 0,
                Event::End(TagEnd::TableCell) => cell += 1,
                Event::Start(Tag::TableCell) if symbols_table && cell == 0 => {
                    if let (Some(Event::Code(name)), Some(Event::End(TagEnd::TableCell))) =
                        (all.get(i + 1), all.get(i + 2))
                    {
                        let name = name.to_string();
                        let mut cell_html = String::from("<td>");
                        if detailed.contains(&name) {
                            cell_html.push_str("<a class=\"item-link\" href=\"#");
                            escape_into(&mut cell_html, &name);
                            cell_html.push_str("\"><code>");
                            escape_into(&mut cell_html, &name);
                            cell_html.push_str("</code></a>");
                        } else {
                            // An item without a detail block is anchored at its row.
                            let id = unique_id(&name, &mut used_ids);
                            cell_html.push_str("<code class=\"item-anchor\" id=\"");
                            escape_into(&mut cell_html, &id);
                            cell_html.push_str("\">");
                            escape_into(&mut cell_html, &name);
                            cell_html.push_str("</code>");
                            item_sections.push(Section {
                                anchor: id,
                                heading: name.clone(),
                                text: row_text(&all[i + 2..]),
                                item: true,
                            });
                        }
                        cell_html.push_str("</td>");
                        push_text(&mut r.sections, &name);
                        push_text(&mut r.sections, " ");
                        events.push(Event::Html(cell_html.into()));
                        cell += 1;
                        skip = 2;
                        continue;
                    }
                }
                _ => {}
            }
        }
        if let Some((info, text)) = &mut code {
            match event {
                Event::Text(t) => text.push_str(&t),
                Event::End(TagEnd::CodeBlock) => {
                    let info = if api && signature(info, text) {
                        "rust".to_string()
                    } else {
                        info.clone()
                    };
                    let html = code_block(&info, text, &mut r.problems, page_path);
                    push_text(&mut r.sections, text);
                    events.push(Event::Html(html.into()));
                    code = None;
                }
                _ => {}
            }
            continue;
        }
        let event = match event {
            Event::Start(Tag::CodeBlock(kind)) => {
                let info = match kind {
                    CodeBlockKind::Fenced(info) => info.to_string(),
                    CodeBlockKind::Indented => String::new(),
                };
                code = Some((info, String::new()));
                continue;
            }
            Event::Start(Tag::Heading { level, id, .. }) => {
                if level == HeadingLevel::H1 {
                    r.problems.push(format!("{page_path}.md: `# ` heading in the body; the title comes from front matter"));
                }
                heading = Some(HeadingState {
                    level,
                    id: id.map(|i| i.to_string()),
                    events: Vec::new(),
                    text: String::new(),
                });
                continue;
            }
            Event::End(TagEnd::Heading(_)) => {
                if let Some(h) = heading.take() {
                    let html = finish_heading(h, &mut used_ids, &mut r, false);
                    events.push(Event::Html(html.into()));
                }
                continue;
            }
            Event::Start(mut tag @ (Tag::Link { .. } | Tag::Image { .. })) => {
                if let Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. } = &mut tag {
                    *dest_url = rewrite(
                        dest_url,
                        dir,
                        page_path,
                        (content, linker),
                        &mut r.problems,
                        &mut r.fragments,
                    );
                }
                Event::Start(tag)
            }
            Event::Start(Tag::Table(aligns)) => {
                // Alignment would be written as a style attribute, which the CSP forbids.
                Event::Start(Tag::Table(vec![Alignment::None; aligns.len()]))
            }
            Event::InlineMath(ref src) | Event::DisplayMath(ref src) => {
                let display = matches!(event, Event::DisplayMath(_));
                if heading.is_none() {
                    // Search sees the TeX source; readers see MathML.
                    push_text(&mut r.sections, src);
                    push_text(&mut r.sections, " ");
                }
                let ml = math::to_mathml(src, display);
                // Display math sits inside a paragraph: a block-level span that scrolls sideways in its own box
                // rather than widening the page on a narrow screen.
                Event::InlineHtml(if display {
                    format!("<span class=\"math-block\">{ml}</span>").into()
                } else {
                    ml.into()
                })
            }
            // Footnotes: numbered in order of first reference, each reference and definition with an id, and a
            // link from the definition back to where it was cited.
            Event::FootnoteReference(label) => {
                let (n, first) = footnote_number(&mut footnotes, &label);
                let mut html = String::from("<sup class=\"footnote-reference\"");
                if first {
                    html.push_str(" id=\"fnref-");
                    escape_into(&mut html, &slug(&label));
                    html.push('"');
                }
                html.push_str("><a href=\"#fn-");
                escape_into(&mut html, &slug(&label));
                html.push_str(&format!("\">{n}</a></sup>"));
                Event::InlineHtml(html.into())
            }
            Event::Start(Tag::FootnoteDefinition(label)) => {
                let (n, _) = footnote_number(&mut footnotes, &label);
                let id = escape(&slug(&label));
                open_footnotes.push(id.clone());
                Event::Html(format!("<div class=\"footnote-definition\" id=\"fn-{id}\"><sup class=\"footnote-definition-label\">{n}</sup>\n").into())
            }
            Event::End(TagEnd::FootnoteDefinition) => {
                let id = open_footnotes.pop().unwrap_or_default();
                Event::Html(format!("<a class=\"footnote-backref\" href=\"#fnref-{id}\" aria-label=\"Back to the reference\" title=\"Back to the reference\">↩</a></div>\n").into())
            }
            // Raw HTML is shown as text: pages stay within what the renderer and the CSP allow.
            Event::Html(raw) | Event::InlineHtml(raw) => Event::Text(raw),
            Event::Start(Tag::BlockQuote(Some(kind))) => {
                let (class, title) = admonition(kind);
                Event::Html(format!("<div class=\"admonition {class}\" role=\"note\"><p class=\"admonition-title\">{title}</p>\n").into())
            }
            Event::End(TagEnd::BlockQuote(Some(_))) => Event::Html("</div>\n".into()),
            other => other,
        };
        let event = match event {
            Event::Start(Tag::Link { .. }) => {
                link_depth += 1;
                event
            }
            Event::End(TagEnd::Link) => {
                link_depth = link_depth.saturating_sub(1);
                event
            }
            Event::Code(ref text) if !api && link_depth == 0 && heading.is_none() => {
                match api_link(text, content) {
                    Some((page, anchor)) => {
                        push_text(&mut r.sections, text);
                        let mut html = String::from("<a class=\"api-link\" href=\"");
                        escape_into(&mut html, &format!("{}#{anchor}", linker.page(page)));
                        html.push_str("\"><code>");
                        escape_into(&mut html, text);
                        html.push_str("</code></a>");
                        r.api_links += 1;
                        events.push(Event::InlineHtml(html.into()));
                        continue;
                    }
                    None => event,
                }
            }
            other => other,
        };
        match &mut heading {
            Some(h) => {
                if let Event::Text(t) | Event::Code(t) = &event {
                    h.text.push_str(t);
                }
                h.events.push(event);
            }
            None => {
                if let Event::Text(t) | Event::Code(t) = &event {
                    push_text(&mut r.sections, t);
                }
                if matches!(
                    event,
                    Event::SoftBreak
                        | Event::HardBreak
                        | Event::End(TagEnd::Paragraph | TagEnd::Item | TagEnd::TableCell)
                ) {
                    push_text(&mut r.sections, " ");
                }
                events.push(event);
            }
        }
    }
    let mut html = String::with_capacity(body.len() * 2);
    pulldown_cmark::html::push_html(&mut html, events.into_iter());
    r.html = html;
    r.sections.extend(item_sections);
    r.sections
        .retain(|s| !s.heading.is_empty() || !s.text.trim().is_empty());
    r
}

/// The public items described on the API pages of `content`: `module::Item` (as `ops::conv2d`, the module being
/// the page title without `netcl::`) → (API page path, the item's anchor). Other pages link code spans that name
/// an item to it. Found once per content, on first use.
pub fn api_items(content: &Content) -> &std::collections::HashMap<String, (String, String)> {
    content.api_items.get_or_init(|| {
        let mut items = std::collections::HashMap::new();
        for page in content.pages.values() {
            if !is_api_page(&page.path) {
                continue;
            }
            let title = page.front.title.trim();
            let module = title.strip_prefix("netcl::").unwrap_or(title).to_string();
            for name in api_item_names(&page.body) {
                items
                    .entry(format!("{module}::{name}"))
                    .or_insert_with(|| (page.path.clone(), name.clone()));
            }
        }
        items
    })
}

/// The names of the items an API page anchors, in page order: its detail blocks (**`name`**) and the first
/// column of its symbols tables. The first anchor of a name is the name itself.
pub fn api_item_names(body: &str) -> Vec<String> {
    let all: Vec<Event> = Parser::new_ext(body, options()).collect();
    let mut names = Vec::new();
    let mut symbols = false;
    let mut first_cell = false;
    for (i, event) in all.iter().enumerate() {
        if let Some(name) = item_paragraph(&all, i) {
            names.push(name);
            continue;
        }
        match event {
            Event::Start(Tag::TableHead) => {
                symbols = matches!(
                    (all.get(i + 1), all.get(i + 2)),
                    (Some(Event::Start(Tag::TableCell)), Some(Event::Text(t))) if t.trim() == "Item"
                );
            }
            Event::End(TagEnd::TableHead) => {}
            Event::Start(Tag::TableRow) => first_cell = true,
            Event::Start(Tag::TableCell) if symbols && first_cell => {
                first_cell = false;
                if let (Some(Event::Code(name)), Some(Event::End(TagEnd::TableCell))) =
                    (all.get(i + 1), all.get(i + 2))
                {
                    names.push(name.to_string());
                }
            }
            Event::Start(Tag::TableCell) => first_cell = false,
            Event::End(TagEnd::Table) => symbols = false,
            _ => {}
        }
    }
    names
}

/// The API item a code span on another page names (`ops::conv2d`, `netcl::ops::conv2d(x, w, …)`,
/// `Tensor::zeros`), as (page, anchor).
fn api_link<'c>(code: &str, content: &'c Content) -> Option<&'c (String, String)> {
    let path = code.trim().strip_prefix("netcl::").unwrap_or(code.trim());
    let path = path.split(['(', '<', ' ', '{']).next().unwrap_or("");
    let parts: Vec<&str> = path.split("::").collect();
    if parts.iter().any(|p| p.is_empty()) {
        return None;
    }
    let items = api_items(content);
    // The longest module prefix that names an item: `nn::Conv2d`, `autograd::ops::conv2d`, `ops::conv2d`.
    let by_module = (1..parts.len())
        .rev()
        .find_map(|m| items.get(&format!("{}::{}", parts[..m].join("::"), parts[m])));
    if by_module.is_some() {
        return by_module;
    }
    // A type by its name alone (`Tensor`, `Device::builtin`), where exactly one module has an item of that name.
    let ty = parts[0];
    if !ty.starts_with(|c: char| c.is_ascii_uppercase())
        || !ty.chars().all(|c| c.is_ascii_alphanumeric())
        || ty.len() < 3
    {
        return None;
    }
    let suffix = format!("::{ty}");
    let mut found = items
        .iter()
        .filter(|(k, _)| k.ends_with(&suffix) && k.matches("::").count() == 1);
    match (found.next(), found.next()) {
        (Some((_, item)), None) => Some(item),
        _ => None,
    }
}

/// The number of footnote `label` (numbered in order of first appearance) and whether this is its first.
fn footnote_number(seen: &mut Vec<String>, label: &str) -> (usize, bool) {
    match seen.iter().position(|l| l == label) {
        Some(i) => (i + 1, false),
        None => {
            seen.push(label.to_string());
            (seen.len(), true)
        }
    }
}

/// Whether the page at `path` is an API reference page (items get anchors, signatures are highlighted).
pub fn is_api_page(path: &str) -> bool {
    path.starts_with("api/")
}

/// The item name when `all[i..]` starts a paragraph that is only a strong code span (**`name`**).
fn item_paragraph(all: &[Event], i: usize) -> Option<String> {
    match all.get(i..i + 5)? {
        [
            Event::Start(Tag::Paragraph),
            Event::Start(Tag::Strong),
            Event::Code(name),
            Event::End(TagEnd::Strong),
            Event::End(TagEnd::Paragraph),
        ] if !name.trim().is_empty() => Some(name.to_string()),
        _ => None,
    }
}

/// The text of a table row from `events` up to its end, for search.
fn row_text(events: &[Event]) -> String {
    let mut text = String::new();
    for event in events {
        match event {
            Event::Text(t) | Event::Code(t) => text.push_str(t),
            Event::End(TagEnd::TableCell) => text.push(' '),
            Event::End(TagEnd::TableRow) => break,
            _ => {}
        }
    }
    text
}

/// Whether a fenced block is a Rust signature written as `text` (API pages show these highlighted).
fn signature(info: &str, text: &str) -> bool {
    let tag = info.split([',', ' ']).next().unwrap_or("");
    (tag.is_empty() || tag == "text")
        && ["pub ", "impl ", "#["]
            .iter()
            .any(|p| text.trim_start().starts_with(p))
}

/// `base`, or `base-1`, `base-2`… : the first not yet in `used`, which then holds it.
fn unique_id(base: &str, used: &mut HashSet<String>) -> String {
    let mut id = base.to_string();
    let mut n = 1;
    while !used.insert(id.clone()) {
        id = format!("{base}-{n}");
        n += 1;
    }
    id
}

fn push_text(sections: &mut [Section], text: &str) {
    if let Some(last) = sections.last_mut() {
        last.text.push_str(text);
    }
}

fn admonition(kind: BlockQuoteKind) -> (&'static str, &'static str) {
    match kind {
        BlockQuoteKind::Note => ("note", "Note"),
        BlockQuoteKind::Tip => ("tip", "Tip"),
        BlockQuoteKind::Important => ("important", "Important"),
        BlockQuoteKind::Warning => ("warning", "Warning"),
        BlockQuoteKind::Caution => ("caution", "Caution"),
    }
}

/// A URL-safe id from heading text: lower case, words joined by `-`.
pub fn slug(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if c.is_alphanumeric() {
            out.extend(c.to_lowercase());
        } else if (c.is_whitespace() || c == '-' || c == '_')
            && !out.ends_with('-')
            && !out.is_empty()
        {
            out.push('-');
        }
    }
    let out = out.trim_end_matches('-').to_string();
    if out.is_empty() {
        "section".into()
    } else {
        out
    }
}

fn finish_heading(
    h: HeadingState,
    used: &mut HashSet<String>,
    r: &mut Rendered,
    item: bool,
) -> String {
    let base = h.id.unwrap_or_else(|| slug(&h.text));
    let id = unique_id(&base, used);
    let level = h.level as u8;
    let mut inner = String::new();
    pulldown_cmark::html::push_html(&mut inner, h.events.into_iter());
    if (2..=3).contains(&level) {
        r.toc.push(TocEntry {
            level,
            id: id.clone(),
            text: h.text.clone(),
        });
    }
    r.sections.push(Section {
        anchor: id.clone(),
        heading: h.text,
        text: String::new(),
        item,
    });
    let id = escape(&id);
    let class = if item { " class=\"api-item\"" } else { "" };
    format!(
        "<h{level} id=\"{id}\"{class}>{inner} <a class=\"anchor\" href=\"#{id}\" aria-label=\"Link to this section\" title=\"Copy link to this section\">#</a></h{level}>\n"
    )
}

/// Rewrites a link target for the serving mode; relative `.md` links become page URLs, other relative links
/// content asset URLs. Targets that do not exist are reported.
fn rewrite<'a>(
    dest: &CowStr<'a>,
    dir: &str,
    page_path: &str,
    (content, linker): (&Content, &Linker),
    problems: &mut Vec<String>,
    fragments: &mut Vec<(String, String)>,
) -> CowStr<'a> {
    let d: &str = dest;
    if let Some(f) = d.strip_prefix('#').filter(|f| !f.is_empty()) {
        fragments.push((page_path.to_owned(), f.to_owned()));
    }
    let has_scheme = d.split_once(':').is_some_and(|(scheme, _)| {
        !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '-')
    });
    if has_scheme || d.starts_with('#') || d.is_empty() {
        return dest.clone();
    }
    if d.starts_with('/') {
        problems.push(format!(
            "{page_path}.md: absolute link `{d}`; write a relative link to a .md file"
        ));
        return dest.clone();
    }
    let (path, fragment) = match d.split_once('#') {
        Some((p, f)) => (p, format!("#{f}")),
        None => (d, String::new()),
    };
    let Some(target) = resolve(dir, path) else {
        problems.push(format!(
            "{page_path}.md: link `{d}` leaves the content directory"
        ));
        return dest.clone();
    };
    if let Some(page) = target.strip_suffix(".md") {
        if content.pages.contains_key(page) {
            if let Some(f) = fragment.strip_prefix('#').filter(|f| !f.is_empty()) {
                fragments.push((page.to_owned(), f.to_owned()));
            }
            return format!("{}{fragment}", linker.page(page)).into();
        }
        problems.push(format!(
            "{page_path}.md: broken link `{d}` (no page `{page}`)"
        ));
    } else if content.assets.contains_key(&target) {
        return format!("{}{fragment}", linker.asset(&target)).into();
    } else {
        problems.push(format!(
            "{page_path}.md: broken link `{d}` (no file `{target}` in the content directory)"
        ));
    }
    dest.clone()
}

/// Whether a fenced block with this info string is a playground example: `netcl`, or any language with the
/// `run` flag (`rhai,run`); `norun` opts a block out.
pub fn is_runnable(info: &str) -> bool {
    let mut words = info
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|w| !w.is_empty());
    let tag = words.next().unwrap_or("").to_ascii_lowercase();
    let flags: Vec<&str> = words.collect();
    (tag == "netcl" || flags.contains(&"run")) && !flags.contains(&"norun")
}

/// The code of every runnable block of a page's Markdown, in order.
pub fn runnable_blocks(body: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for event in Parser::new_ext(body, options()) {
        match event {
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info))) if is_runnable(&info) => {
                current = Some(String::new());
            }
            Event::Text(t) => {
                if let Some(code) = &mut current {
                    code.push_str(&t);
                }
            }
            Event::End(TagEnd::CodeBlock) => {
                if let Some(code) = current.take() {
                    blocks.push(code);
                }
            }
            _ => {}
        }
    }
    blocks
}

/// Renders one fenced block: a diagram, display math, a recorded output, or highlighted code (runnable or not).
fn code_block(info: &str, text: &str, problems: &mut Vec<String>, page_path: &str) -> String {
    let tag = info
        .split(|c: char| c == ',' || c.is_whitespace())
        .find(|w| !w.is_empty())
        .unwrap_or("")
        .to_ascii_lowercase();
    match tag.as_str() {
        "svg" => match svg::sanitize(text) {
            Some(svg) => return format!("<figure class=\"diagram\">{svg}</figure>\n"),
            None => problems.push(format!(
                "{page_path}.md: ```svg block without an <svg> root"
            )),
        },
        "math" => {
            return format!(
                "<div class=\"math-block\">{}</div>\n",
                math::to_mathml(text, true)
            );
        }
        "output" => {
            let mut out = String::from(
                "<div class=\"recorded-output\"><div class=\"code-head\"><span class=\"code-lang\">Recorded output</span></div><pre><code>",
            );
            escape_into(&mut out, text);
            out.push_str("</code></pre></div>\n");
            return out;
        }
        _ => {}
    }
    let (lang, label) = match highlight::language(&tag) {
        Some((lang, label)) => (lang.to_string(), label.to_string()),
        None => {
            let lang: String = tag
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
                .take(24)
                .collect();
            let label = if lang.is_empty() {
                "Text".to_string()
            } else {
                lang.clone()
            };
            (lang, label)
        }
    };
    let runnable = is_runnable(info);
    // Rust blocks hide rustdoc's `# ` lines; Copy gives the whole program, as rustdoc compiles it.
    let rust = (lang == "rust").then(|| highlight::rust_block(text));
    let shown = rust.as_ref().map_or(text, |r| r.shown.as_str());
    let mut out = String::with_capacity(text.len() * 2 + 256);
    out.push_str("<div class=\"code-block");
    if runnable {
        out.push_str(" runnable");
    }
    out.push_str("\" data-lang=\"");
    out.push_str(&lang);
    out.push('"');
    if runnable {
        out.push_str(" data-runnable=\"true\"");
    }
    if let Some(r) = &rust {
        out.push_str(" data-copy=\"");
        escape_into(&mut out, &highlight::rust_program(&r.compiled));
        out.push('"');
        if r.has_hidden {
            out.push_str(" data-hidden-lines=\"true\"");
        }
    }
    out.push_str("><div class=\"code-head\"><span class=\"code-lang\">");
    escape_into(&mut out, &label);
    out.push_str("</span>");
    if runnable {
        out.push_str("<span class=\"run-badge\">runnable</span>");
    }
    out.push_str("<button type=\"button\" class=\"copy-btn\" hidden>Copy</button></div><pre><code class=\"language-");
    out.push_str(&lang);
    out.push_str("\">");
    out.push_str(&highlight::highlight(&lang, shown));
    out.push_str("</code></pre>");
    if runnable {
        out.push_str("<div class=\"run-result\" data-run-result hidden></div>");
    }
    out.push_str("</div>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wiki::content::{Content, parse_page};
    use crate::wiki::links::LinkMode;

    fn content() -> Content {
        let mut c = Content::default();
        for path in ["index", "faq", "concepts/device"] {
            let page =
                parse_page(path, "---\ntitle: T\nstatus: S\nsummary: S\n---\n", None).unwrap();
            c.pages.insert(path.into(), page);
        }
        c.assets
            .insert("concepts/flow.svg".into(), b"<svg/>".to_vec());
        c
    }

    fn render_server(md: &str) -> Rendered {
        let linker = Linker::new(&LinkMode::Server { base: "/w".into() }, "concepts/device");
        render(md, "concepts/device", &content(), &linker)
    }

    #[test]
    fn headings_get_unique_anchors_and_toc() {
        let r = render_server("## Hello World\ntext\n## Hello World\n### Deep `code`\n");
        assert!(
            r.html.contains(
                "<h2 id=\"hello-world\">Hello World <a class=\"anchor\" href=\"#hello-world\""
            ),
            "{}",
            r.html
        );
        assert!(r.html.contains("id=\"hello-world-1\""), "{}", r.html);
        assert_eq!(r.toc.len(), 3);
        assert_eq!(r.toc[2].text, "Deep code");
        assert_eq!(r.sections[0].heading, "Hello World");
        assert!(r.sections[0].text.contains("text"));
    }

    #[test]
    fn admonitions_keep_code_blocks_intact() {
        let r =
            render_server("> [!NOTE]\n> Import it:\n>\n> ```rust\n> use netcl::Tensor;\n> ```\n");
        assert!(r.html.contains("<div class=\"admonition note\" role=\"note\"><p class=\"admonition-title\">Note</p>"), "{}", r.html);
        assert!(
            r.html
                .contains("<pre><code class=\"language-rust\"><span class=\"tok-kw\">use</span>"),
            "{}",
            r.html
        );
    }

    #[test]
    fn links_are_rewritten_and_checked() {
        let r = render_server(
            "[a](../faq.md#x) [b](flow.svg) [c](missing.md) [d](https://example.org) [e](/abs)",
        );
        assert!(r.html.contains("href=\"/w/docs/faq#x\""), "{}", r.html);
        assert!(
            r.html.contains("href=\"/w/docs/concepts/flow.svg\""),
            "{}",
            r.html
        );
        assert!(
            r.html.contains("href=\"https://example.org\""),
            "{}",
            r.html
        );
        assert_eq!(r.problems.len(), 2, "{:?}", r.problems);
        let export = render(
            "[a](../faq.md)",
            "concepts/device",
            &content(),
            &Linker::new(&LinkMode::Export, "concepts/device"),
        );
        assert!(
            export.html.contains("href=\"../../faq/index.html\""),
            "{}",
            export.html
        );
    }

    #[test]
    fn rust_blocks_hide_rustdoc_lines_and_copy_the_program() {
        let r = render_server(
            "```rust\n# use netcl::Device;\nlet dev = Device::builtin();\n# Ok::<(), netcl::Error>(())\n```\n",
        );
        let shown = r.html.split("<pre>").nth(1).unwrap_or_default();
        assert!(!shown.contains("Ok::"), "{}", r.html);
        assert!(!shown.contains("use"), "{}", r.html);
        assert!(shown.contains("builtin"), "{}", r.html);
        assert!(r.html.contains("data-hidden-lines=\"true\""), "{}", r.html);
        assert!(
            r.html.contains("data-copy=\"fn main() {\n    fn _inner() -&gt; Result&lt;(), impl core::fmt::Debug&gt; {\nuse netcl::Device;\nlet dev = Device::builtin();\nOk::&lt;(), netcl::Error&gt;(())\n"),
            "{}",
            r.html
        );
        let plain = render_server("```opencl\n# define X 1\n```\n");
        assert!(!plain.html.contains("data-copy"), "{}", plain.html);
        assert!(plain.html.contains("define"), "{}", plain.html);
    }

    #[test]
    fn runnable_blocks_math_svg_and_raw_html() {
        let r = render_server(
            "```rhai,run\nlet x = 1;\n```\n\n```netcl\nprint(1);\n```\n\n```output\n<ok>\n```\n\n$a^2$\n\n```svg\n<svg><script>x</script><circle r=\"1\"/></svg>\n```\n\n<script>alert(1)</script>\n\n| a | b |\n|:--|--:|\n| 1 | 2 |\n",
        );
        assert_eq!(
            r.html.matches("data-runnable=\"true\"").count(),
            2,
            "{}",
            r.html
        );
        assert!(r.html.contains("class=\"run-result\""), "{}", r.html);
        assert!(
            r.html.contains("<div class=\"recorded-output\">"),
            "{}",
            r.html
        );
        assert!(r.html.contains("&lt;ok&gt;"), "{}", r.html);
        assert!(
            r.html
                .contains("<math><semantics><mrow><msup><mi>a</mi><mn>2</mn></msup>"),
            "{}",
            r.html
        );
        assert!(
            r.html.contains(
                "<figure class=\"diagram\"><svg xmlns=\"http://www.w3.org/2000/svg\"><circle r=\"1\"/></svg></figure>"
            ),
            "{}",
            r.html
        );
        assert!(!r.html.contains("<script>"), "{}", r.html);
        assert!(!r.html.contains("style="), "{}", r.html);
    }

    #[test]
    fn gfm_extensions_render() {
        let r = render_server("- [x] done\n\n~~old~~ text[^1]\n\n[^1]: note\n");
        assert!(r.html.contains("type=\"checkbox\""), "{}", r.html);
        assert!(r.html.contains("<del>old</del>"), "{}", r.html);
        assert!(
            r.html.contains(
                "<sup class=\"footnote-reference\" id=\"fnref-1\"><a href=\"#fn-1\">1</a></sup>"
            ),
            "{}",
            r.html
        );
        assert!(
            r.html
                .contains("<div class=\"footnote-definition\" id=\"fn-1\">"),
            "{}",
            r.html
        );
        assert!(
            r.html
                .contains("<a class=\"footnote-backref\" href=\"#fnref-1\""),
            "footnotes link back: {}",
            r.html
        );
    }
}
