//! Sanitises SVG written inline in fenced ```svg blocks, so a diagram can be drawn in a page without opening a
//! door to script.
//!
//! Two passes. First `svg-hush` (a maintained SVG sanitizer): it keeps only SVG drawing elements and their
//! presentation attributes, and removes scripts, event handlers, foreign objects and external references. Then
//! the page's own policy, which is stricter because the diagram is inlined into an HTML page served with a
//! Content-Security-Policy of `style-src 'self'`: no `<style>` element and no `style` attribute (the browser
//! would refuse them and report a violation), and links only inside the document (`href="#id"`). The XML
//! declaration is dropped, since the result is a fragment of the page.

use std::borrow::Cow;

use xml::reader::{ParserConfig, XmlEvent};
use xml::writer::EmitterConfig;

const SVG_NS: &str = "http://www.w3.org/2000/svg";

/// Returns sanitised SVG markup, or `None` when the block holds no `<svg>` root or is not well-formed XML.
pub fn sanitize(src: &str) -> Option<String> {
    let src = src.trim();
    if !src.starts_with("<svg") && !src.starts_with("<?xml") {
        return None;
    }
    // svg-hush keeps only elements in the SVG namespace; a diagram written without `xmlns` means SVG too.
    let src: Cow<str> = match src.find("<svg") {
        Some(at)
            if !src[at..src[at..].find('>').map_or(src.len(), |e| at + e)].contains("xmlns=") =>
        {
            Cow::Owned(format!(
                "{}<svg xmlns=\"{SVG_NS}\"{}",
                &src[..at],
                &src[at + 4..]
            ))
        }
        Some(_) => Cow::Borrowed(src),
        None => return None,
    };
    let mut hushed = Vec::with_capacity(src.len());
    svg_hush::Filter::new()
        .filter(src.as_bytes(), &mut hushed)
        .ok()?;
    page_policy(&hushed)
}

/// The second pass: no styles, links only inside the document, no XML declaration, no indentation added.
fn page_policy(svg: &[u8]) -> Option<String> {
    let reader = ParserConfig::new().ignore_comments(true).create_reader(svg);
    let mut out = Vec::with_capacity(svg.len());
    let mut writer = EmitterConfig::new()
        .write_document_declaration(false)
        .perform_indent(false)
        .pad_self_closing(false)
        .normalize_empty_elements(true)
        .create_writer(&mut out);
    let mut skipping = 0usize;
    let mut saw_root = false;
    for event in reader {
        let event = event.ok()?;
        match &event {
            XmlEvent::StartDocument { .. } | XmlEvent::EndDocument => continue,
            // Whitespace between elements (svg-hush indents its output) is layout noise inside a page.
            XmlEvent::Whitespace(_) => continue,
            XmlEvent::ProcessingInstruction { .. } | XmlEvent::Doctype { .. } => continue,
            XmlEvent::StartElement {
                name,
                attributes,
                namespace,
            } => {
                if skipping > 0 || name.local_name == "style" {
                    skipping += 1;
                    continue;
                }
                if !saw_root && name.local_name != "svg" {
                    return None;
                }
                saw_root = true;
                let kept: Vec<_> = attributes
                    .iter()
                    .filter(|a| {
                        let local = a.name.local_name.as_str();
                        local != "style"
                            && (local != "href" || a.value.trim_start().starts_with('#'))
                    })
                    .map(|a| a.borrow())
                    .collect();
                writer
                    .write(xml::writer::XmlEvent::StartElement {
                        name: name.borrow(),
                        attributes: Cow::Owned(kept),
                        namespace: Cow::Borrowed(namespace),
                    })
                    .ok()?;
                continue;
            }
            XmlEvent::EndElement { .. } if skipping > 0 => {
                skipping -= 1;
                continue;
            }
            _ if skipping > 0 => continue,
            _ => {}
        }
        if let Some(w) = event.as_writer_event() {
            writer.write(w).ok()?;
        }
    }
    if !saw_root {
        return None;
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::sanitize;

    const NS: &str = r#"xmlns="http://www.w3.org/2000/svg""#;

    #[test]
    fn drawing_survives() {
        let svg = sanitize(&format!(
            r#"<svg {NS} viewBox="0 0 10 10"><rect x="1" y="1" width="8" height="8" fill="red"/><text x="1" fill="currentColor">a &amp; b</text></svg>"#
        ))
        .unwrap();
        assert!(svg.starts_with("<svg"), "{svg}");
        for kept in [
            "viewBox=\"0 0 10 10\"",
            "<rect",
            "fill=\"red\"",
            "width=\"8\"",
            "a &amp; b",
            "fill=\"currentColor\"",
        ] {
            assert!(svg.contains(kept), "{kept} missing in {svg}");
        }
        assert!(!svg.contains("<?xml"), "{svg}");
    }

    #[test]
    fn a_diagram_without_xmlns_is_svg_too() {
        let svg = sanitize(r#"<svg viewBox="0 0 4 4"><circle r="2"/></svg>"#).unwrap();
        assert!(svg.contains("<circle"), "{svg}");
    }

    #[test]
    fn script_handlers_styles_and_external_links_are_removed() {
        let svg = sanitize(&format!(
            r##"<svg {NS} onload="alert(1)"><script>alert(2)</script><style>*{{color:red}}</style><a href="javascript:x"><rect/></a><use href="http://x/y#z"/><use href="/y#z"/><rect fill="url(http://x)" style="fill:red" width="1"/><foreignObject><div>hi</div></foreignObject><use href="#inside"/></svg>"##
        ))
        .unwrap();
        for bad in [
            "onload",
            "alert",
            "<style",
            "javascript",
            "http://x",
            "/y#z",
            "style=",
            "foreign",
            "<div",
        ] {
            assert!(
                !svg.to_ascii_lowercase().contains(&bad.to_ascii_lowercase()),
                "{bad} in {svg}"
            );
        }
        assert!(svg.contains("width=\"1\""), "{svg}");
        assert!(svg.contains("href=\"#inside\""), "{svg}");
    }

    #[test]
    fn a_removed_element_with_allowed_children_keeps_what_follows() {
        let svg = sanitize(&format!(
            "<svg {NS}><switch><g><text>x</text></g></switch><rect/><g></g></svg>"
        ))
        .unwrap();
        assert!(svg.contains("<rect"), "{svg}");
        let svg = sanitize(&format!("<svg {NS}><script><g></g></script><line/></svg>")).unwrap();
        assert!(svg.contains("<line") && !svg.contains("<g"), "{svg}");
        let svg = sanitize(&format!("<svg {NS}><a><rect></rect></a><circle/></svg>")).unwrap();
        assert!(svg.contains("<circle"), "{svg}");
    }

    #[test]
    fn requires_an_svg_root_and_well_formed_markup() {
        assert!(sanitize("<rect/>").is_none());
        assert!(sanitize("no markup").is_none());
        assert!(sanitize("<svg><g>").is_none());
    }
}
