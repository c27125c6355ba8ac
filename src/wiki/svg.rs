//! Sanitises SVG written inline in fenced ```svg blocks, so a diagram can be drawn in a page without opening a
//! door to script: only drawing elements and presentation attributes survive, links may point only inside the
//! document, and scripts, styles, foreign objects, event handlers and external references are removed. An
//! element not on the list is removed with everything inside it.

use super::html::escape_into;

const ELEMENTS: &[&str] = &[
    "svg",
    "g",
    "path",
    "rect",
    "circle",
    "ellipse",
    "line",
    "polyline",
    "polygon",
    "text",
    "tspan",
    "title",
    "desc",
    "defs",
    "marker",
    "use",
    "symbol",
    "lineargradient",
    "radialgradient",
    "stop",
    "clippath",
    "pattern",
];

const ATTRIBUTES: &[&str] = &[
    "viewbox",
    "width",
    "height",
    "x",
    "y",
    "x1",
    "y1",
    "x2",
    "y2",
    "cx",
    "cy",
    "r",
    "rx",
    "ry",
    "d",
    "points",
    "fill",
    "stroke",
    "stroke-width",
    "stroke-dasharray",
    "stroke-linecap",
    "stroke-linejoin",
    "opacity",
    "fill-opacity",
    "stroke-opacity",
    "transform",
    "font-size",
    "font-family",
    "font-weight",
    "text-anchor",
    "dominant-baseline",
    "id",
    "class",
    "marker-end",
    "marker-start",
    "markerwidth",
    "markerheight",
    "refx",
    "refy",
    "orient",
    "offset",
    "stop-color",
    "stop-opacity",
    "gradientunits",
    "preserveaspectratio",
    "xmlns",
    "href",
    "xlink:href",
    "xmlns:xlink",
    "dx",
    "dy",
    "role",
    "aria-label",
    "clip-path",
    "markerunits",
    "patternunits",
];

/// Returns sanitised SVG markup, or `None` when the block holds no `<svg>` root.
pub fn sanitize(src: &str) -> Option<String> {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    let mut skip_depth = 0usize;
    let mut open: Vec<String> = Vec::new();
    let mut saw_root = false;
    while !rest.is_empty() {
        let Some(lt) = rest.find('<') else {
            if skip_depth == 0 && !open.is_empty() {
                text(&mut out, rest);
            }
            break;
        };
        if skip_depth == 0 && !open.is_empty() {
            text(&mut out, &rest[..lt]);
        }
        rest = &rest[lt..];
        for (start, end) in [
            ("<!--", "-->"),
            ("<![CDATA[", "]]>"),
            ("<?", "?>"),
            ("<!", ">"),
        ] {
            if rest.starts_with(start) {
                rest = rest.find(end).map_or("", |i| &rest[i + end.len()..]);
                break;
            }
        }
        if !rest.starts_with('<') {
            continue;
        }
        let Some(gt) = find_tag_end(rest) else { break };
        let tag = &rest[1..gt];
        rest = &rest[gt + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            let name = name.trim().to_ascii_lowercase();
            if skip_depth > 0 {
                // Every element opened while skipping counted one level, whatever its name, so every end tag
                // closes one: an allowed child of a removed element must not keep the rest of the image out.
                skip_depth -= 1;
                continue;
            }
            if open.last() == Some(&name) {
                open.pop();
                out.push_str("</");
                out.push_str(&name);
                out.push('>');
            }
            continue;
        }
        let self_closing = tag.ends_with('/');
        let tag = tag.trim_end_matches('/');
        let name_end = tag.find(|c: char| c.is_whitespace()).unwrap_or(tag.len());
        let name = tag[..name_end].to_ascii_lowercase();
        let allowed = ELEMENTS.contains(&name.as_str()) && (saw_root || name == "svg");
        if skip_depth > 0 || !allowed {
            if !self_closing {
                skip_depth += 1;
            }
            continue;
        }
        saw_root = true;
        out.push('<');
        out.push_str(&name);
        attributes(&mut out, &tag[name_end..]);
        if self_closing {
            out.push_str("/>");
        } else {
            out.push('>');
            open.push(name);
        }
    }
    while let Some(name) = open.pop() {
        out.push_str("</");
        out.push_str(&name);
        out.push('>');
    }
    saw_root.then_some(out)
}

/// The index of the `>` closing a tag, skipping quoted attribute values.
fn find_tag_end(s: &str) -> Option<usize> {
    let mut quote = None;
    for (i, c) in s.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if q == c => quote = None,
            (None, '>') => return Some(i),
            _ => {}
        }
    }
    None
}

fn text(out: &mut String, s: &str) {
    // Entities already in the source stay as written; every other `&` and bracket is escaped.
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        escape_into(out, &rest[..amp]);
        let tail = &rest[amp..];
        let entity_len = tail.find(';').filter(|&i| {
            i > 1
                && i < 12
                && tail[1..i]
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '#')
        });
        match entity_len {
            Some(i) => {
                out.push_str(&tail[..=i]);
                rest = &tail[i + 1..];
            }
            None => {
                out.push_str("&amp;");
                rest = &tail[1..];
            }
        }
    }
    escape_into(out, rest);
}

fn attributes(out: &mut String, mut s: &str) {
    loop {
        s = s.trim_start();
        if s.is_empty() {
            return;
        }
        let name_end = s
            .find(|c: char| c == '=' || c.is_whitespace())
            .unwrap_or(s.len());
        let name = s[..name_end].to_ascii_lowercase();
        s = s[name_end..].trim_start();
        let mut value = "";
        if let Some(after) = s.strip_prefix('=') {
            let after = after.trim_start();
            match after.chars().next() {
                Some(q @ ('"' | '\'')) => {
                    let body = &after[1..];
                    let end = body.find(q).unwrap_or(body.len());
                    value = &body[..end];
                    s = body.get(end + 1..).unwrap_or("");
                }
                _ => {
                    let end = after.find(char::is_whitespace).unwrap_or(after.len());
                    value = &after[..end];
                    s = &after[end..];
                }
            }
        }
        if name.is_empty() {
            // A stray character: skip it so the loop always advances.
            s = s.get(1..).unwrap_or("");
            continue;
        }
        if !ATTRIBUTES.contains(&name.as_str()) || !safe_value(&name, value) {
            continue;
        }
        out.push(' ');
        out.push_str(&name);
        out.push_str("=\"");
        escape_into(out, value);
        out.push('"');
    }
}

fn safe_value(name: &str, value: &str) -> bool {
    let lower = value.to_ascii_lowercase();
    if name.ends_with("href") {
        return value.starts_with('#');
    }
    if name.starts_with("xmlns") {
        return lower.starts_with("http://www.w3.org/");
    }
    !lower.contains("javascript:") && (!lower.contains("url(") || lower.contains("url(#"))
}

#[cfg(test)]
mod tests {
    use super::sanitize;

    #[test]
    fn drawing_survives() {
        let svg = sanitize(r#"<svg viewBox="0 0 10 10"><rect x="1" y="1" width="8" height="8" fill="red"/><text x="1">a &amp; b</text></svg>"#)
            .unwrap();
        assert_eq!(
            svg,
            r#"<svg viewbox="0 0 10 10"><rect x="1" y="1" width="8" height="8" fill="red"/><text x="1">a &amp; b</text></svg>"#
        );
    }

    #[test]
    fn script_handlers_and_external_links_are_removed() {
        let svg = sanitize(
            r#"<svg onload="alert(1)"><script>alert(2)</script><style>*{}</style><a href="javascript:x"><rect/></a><use href="http://x/y#z"/><rect fill="url(http://x)" style="x" width="1"/><foreignObject><div>hi</div></foreignObject></svg>"#,
        )
        .unwrap();
        for bad in [
            "onload",
            "alert",
            "<style",
            "javascript",
            "http://x",
            "style=",
            "foreign",
            "<div",
            "<a",
        ] {
            assert!(
                !svg.to_ascii_lowercase().contains(&bad.to_ascii_lowercase()),
                "{bad} in {svg}"
            );
        }
        assert!(svg.contains("<rect width=\"1\"/>"), "{svg}");
    }

    #[test]
    fn a_removed_element_with_allowed_children_removes_only_itself() {
        assert_eq!(
            sanitize("<svg><a><rect></rect></a><circle/></svg>").unwrap(),
            "<svg><circle/></svg>"
        );
        assert_eq!(
            sanitize("<svg><switch><g><text>x</text></g></switch><rect/><g></g></svg>").unwrap(),
            "<svg><rect/><g></g></svg>"
        );
        assert_eq!(
            sanitize("<svg><script><g></g></script><line/></svg>").unwrap(),
            "<svg><line/></svg>"
        );
    }

    #[test]
    fn requires_an_svg_root_and_closes_open_tags() {
        assert!(sanitize("<rect/>").is_none());
        assert_eq!(sanitize("<svg><g>").unwrap(), "<svg><g></g></svg>");
    }
}
