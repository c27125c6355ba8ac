//! A request for a path that is not served: a redirect when the path plainly names one page (the `/docs/`
//! prefix left out, a trailing slash, `.html`, other letter case, or only the page's last segment when no other
//! page ends the same way), else the 404 page with the closest pages first.

use super::content::Content;
use super::links::Linker;

/// The URL the lost path `rest` (below the base path) plainly means, if exactly one page fits.
pub(crate) fn plain_meaning(content: &Content, linker: &Linker, rest: &str) -> Option<String> {
    let stem = rest.trim_end_matches('/');
    let stem = stem
        .strip_suffix(".html")
        .or_else(|| stem.strip_suffix(".htm"))
        .unwrap_or(stem)
        .to_lowercase();
    let tail = stem.trim_start_matches('/');
    let tail = tail.strip_prefix("docs/").unwrap_or(tail);
    if tail.is_empty() || tail.len() > 200 {
        return None;
    }
    if content.pages.contains_key(tail) {
        return Some(linker.page(tail));
    }
    let suffix = format!("/{tail}");
    let mut ending = content.pages.keys().filter(|p| p.ends_with(&suffix));
    match (ending.next(), ending.next()) {
        (Some(only), None) => Some(linker.page(only)),
        _ => None,
    }
}

/// Pages whose last path segment is close to the lost path's last segment (contains it, is contained in it,
/// or is at most two edits away), closest first, as (page path, title).
pub(crate) fn near_pages(content: &Content, path: &str, limit: usize) -> Vec<(String, String)> {
    let last = path
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or("")
        .trim_end_matches(".html")
        .trim_end_matches(".md")
        .to_lowercase();
    if last.len() < 3 || last.len() > 100 {
        return Vec::new();
    }
    let mut scored: Vec<(usize, &String)> = content
        .pages
        .keys()
        .filter_map(|p| {
            let seg = p.rsplit('/').next().unwrap_or(p);
            let d = edit_distance(seg, &last);
            let related = seg.contains(last.as_str()) || last.contains(seg);
            (d <= 2 || related).then_some((if d <= 2 { d } else { 3 }, p))
        })
        .collect();
    scored.sort();
    scored
        .into_iter()
        .take(limit)
        .map(|(_, p)| {
            let title = content
                .pages
                .get(p)
                .map_or_else(|| p.clone(), |page| page.front.title.clone());
            (p.clone(), title)
        })
        .collect()
}

/// The Levenshtein distance between two short strings (by characters).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (row[j + 1] + 1)
                .min(row[j] + 1)
                .min(prev + usize::from(ca != *cb));
            prev = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::edit_distance;

    #[test]
    fn distances() {
        assert_eq!(edit_distance("device", "device"), 0);
        assert_eq!(edit_distance("devise", "device"), 1);
        assert_eq!(edit_distance("gemm", "gem"), 1);
        assert_eq!(edit_distance("tensor", "sensors"), 2);
        assert_eq!(edit_distance("", "abc"), 3);
    }
}
