//! The full-text search index: one document per page section, ranked with BM25 over titles, headings and body
//! (titles and headings weigh more), with prefix matching, one-typo tolerance for longer words, and snippets
//! with the matched words marked. Built in memory when the content is (re)loaded.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Bound;

use serde::Serialize;

use super::html::escape_into;

/// At most this many query words are used.
const MAX_TERMS: usize = 8;
/// Longer query words are cut to this many characters.
const MAX_TERM_CHARS: usize = 40;
const TITLE_WEIGHT: f32 = 5.0;
const HEADING_WEIGHT: f32 = 3.0;
const K1: f32 = 1.2;
const B: f32 = 0.75;
/// Added to a section whose heading is the whole query ignoring case (an API item looked up by name), twice
/// over when the case matches too: such sections rank first, in BM25 order among themselves.
const EXACT_HEADING_BONUS: f32 = 100.0;
/// Added to a section whose heading contains a query of several words as a phrase ("autotune cache" in "The
/// autotune cache").
const HEADING_PHRASE_BONUS: f32 = 10.0;
/// Factors of a vocabulary word matched exactly, as a prefix of the query word, or within one typo.
const EXACT: f32 = 1.0;
const PREFIX: f32 = 0.6;
const TYPO: f32 = 0.4;

/// One searchable section.
#[derive(Debug, Clone, Serialize)]
pub struct SearchDoc {
    pub page: String,
    pub title: String,
    pub anchor: String,
    pub heading: String,
    pub text: String,
    /// An API item (its heading is the item's name): the page title, the module every item of the page
    /// shares, is not indexed for it, so items are found by their own name and description.
    pub item: bool,
}

#[derive(Debug, Clone, Copy)]
struct Posting {
    doc: u32,
    weight: f32,
}

/// The in-memory index.
#[derive(Debug, Default)]
pub struct SearchIndex {
    docs: Vec<SearchDoc>,
    lengths: Vec<f32>,
    avg_len: f32,
    terms: BTreeMap<String, Vec<Posting>>,
}

/// One ranked result.
#[derive(Debug, Clone, Serialize)]
pub struct Hit {
    pub page: String,
    pub title: String,
    pub anchor: String,
    pub heading: String,
    /// Escaped HTML with `<mark>` around matched words.
    pub snippet_html: String,
    pub score: f32,
}

/// Splits text into lower-case words; `snake_case` words are kept whole and also split into their parts.
pub fn tokenize(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in text
        .char_indices()
        .chain(std::iter::once((text.len(), ' ')))
    {
        let word_char = c.is_alphanumeric() || c == '_';
        match (start, word_char) {
            (None, true) => start = Some(i),
            (Some(s), false) => {
                let word = text[s..i].to_lowercase();
                if word.contains('_') {
                    let mut offset = s;
                    for part in text[s..i].split('_') {
                        if !part.is_empty() && part.len() < i - s {
                            out.push((offset, part.to_lowercase()));
                        }
                        offset += part.len() + 1;
                    }
                }
                let word = word.trim_matches('_').to_string();
                if !word.is_empty() {
                    out.push((s, word));
                }
                start = None;
            }
            _ => {}
        }
    }
    out
}

/// True when `a` and `b` differ by at most one insertion, deletion, substitution or swap of neighbours.
fn within_one_edit(a: &str, b: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let (short, long) = if a.len() <= b.len() {
        (&a, &b)
    } else {
        (&b, &a)
    };
    if long.len() - short.len() > 1 {
        return false;
    }
    let prefix = short
        .iter()
        .zip(long.iter())
        .take_while(|(x, y)| x == y)
        .count();
    if short.len() == long.len() {
        let substituted = short[prefix..]
            .iter()
            .skip(1)
            .eq(long[prefix..].iter().skip(1));
        let transposed = prefix + 1 < short.len()
            && short[prefix] == long[prefix + 1]
            && short[prefix + 1] == long[prefix]
            && short[prefix + 2..] == long[prefix + 2..];
        substituted || transposed
    } else {
        short[prefix..] == long[prefix + 1..]
    }
}

impl SearchIndex {
    /// Builds the index over `docs`.
    pub fn build(docs: Vec<SearchDoc>) -> SearchIndex {
        let mut terms: BTreeMap<String, Vec<Posting>> = BTreeMap::new();
        let mut lengths = Vec::with_capacity(docs.len());
        for (id, doc) in docs.iter().enumerate() {
            let mut weights: HashMap<String, f32> = HashMap::new();
            let mut len = 0usize;
            let title = if doc.item { "" } else { doc.title.as_str() };
            for (text, weight) in [
                (title, TITLE_WEIGHT),
                (&doc.heading, HEADING_WEIGHT),
                (&doc.text, 1.0),
            ] {
                for (_, word) in tokenize(text) {
                    *weights.entry(word).or_default() += weight;
                    len += 1;
                }
            }
            lengths.push(len as f32);
            for (word, weight) in weights {
                terms.entry(word).or_default().push(Posting {
                    doc: id as u32,
                    weight,
                });
            }
        }
        let avg_len = if lengths.is_empty() {
            1.0
        } else {
            lengths.iter().sum::<f32>() / lengths.len() as f32
        };
        SearchIndex {
            docs,
            lengths,
            avg_len: avg_len.max(1.0),
            terms,
        }
    }

    /// The indexed sections.
    pub fn docs(&self) -> &[SearchDoc] {
        &self.docs
    }

    /// Vocabulary words a query word matches, with a factor: 1 exact, 0.6 prefix, 0.4 one typo.
    fn expand(&self, word: &str) -> Vec<(&str, f32)> {
        let mut out: Vec<(&str, f32)> = Vec::new();
        if let Some((w, _)) = self.terms.get_key_value(word) {
            out.push((w.as_str(), EXACT));
        }
        if word.chars().count() >= 2 {
            for (w, _) in self
                .terms
                .range::<str, _>((Bound::Included(word), Bound::Unbounded))
                .skip_while(|(w, _)| w.as_str() == word)
            {
                if !w.starts_with(word) || out.len() >= 64 {
                    break;
                }
                out.push((w.as_str(), PREFIX));
            }
        }
        if word.chars().count() >= 5 {
            for w in self.terms.keys() {
                if w != word && !w.starts_with(word) && within_one_edit(w, word) {
                    out.push((w.as_str(), TYPO));
                }
            }
        }
        out
    }

    /// Ranked sections for `query`: sections matching every word, or, when none does, any word.
    pub fn search(&self, query: &str, limit: usize) -> Vec<Hit> {
        let words: Vec<String> = tokenize(query)
            .into_iter()
            .map(|(_, w)| w.chars().take(MAX_TERM_CHARS).collect())
            .collect::<Vec<String>>()
            .into_iter()
            .fold(Vec::new(), |mut acc: Vec<String>, w| {
                if !acc.contains(&w) {
                    acc.push(w);
                }
                acc
            })
            .into_iter()
            .take(MAX_TERMS)
            .collect();
        if words.is_empty() {
            return Vec::new();
        }
        let n = self.docs.len() as f32;
        let mut per_word: Vec<HashMap<u32, f32>> = Vec::new();
        let mut matched: HashSet<&str> = HashSet::new();
        for word in &words {
            let mut scores: HashMap<u32, f32> = HashMap::new();
            let idf_of = |term: &str| {
                let df = self.terms.get(term).map_or(0, Vec::len) as f32;
                ((n - df + 0.5) / (df + 0.5) + 1.0).ln()
            };
            // A longer word the query word is a prefix of (or a typo away from) is rarer than the word itself;
            // where the word is in the vocabulary, its weight caps theirs, so rarity alone does not rank them first.
            let cap = self.terms.contains_key(word.as_str()).then(|| idf_of(word));
            for (term, factor) in self.expand(word) {
                matched.insert(term);
                let postings = &self.terms[term];
                let idf = cap.map_or(idf_of(term), |c| idf_of(term).min(c));
                for p in postings {
                    // Sections shorter than the average are normalised as average ones, so a one-line item
                    // does not outrank the prose that explains it on length alone.
                    let len = self.lengths[p.doc as usize].max(self.avg_len);
                    let tf = p.weight;
                    let s = factor * idf * tf * (K1 + 1.0)
                        / (tf + K1 * (1.0 - B + B * len / self.avg_len));
                    let e = scores.entry(p.doc).or_default();
                    *e = e.max(s);
                }
            }
            per_word.push(scores);
        }
        let mut totals: HashMap<u32, (f32, usize)> = HashMap::new();
        for scores in &per_word {
            for (&doc, &s) in scores {
                let e = totals.entry(doc).or_default();
                e.0 += s;
                e.1 += 1;
            }
        }
        let all = words.len();
        let exact = query.split_whitespace().collect::<Vec<_>>().join(" ");
        let exact_lower = exact.to_lowercase();
        // Sections whose heading is the query (an item looked up by name) come first, case-exact before
        // case-insensitive, and among themselves in page order (navigation order: `ops::conv2d` before
        // `autograd::conv2d`), not by BM25, whose small differences between two descriptions mean nothing here.
        let mut tier: HashMap<u32, u8> = HashMap::new();
        for (&doc, total) in totals.iter_mut() {
            let heading = &self.docs[doc as usize].heading;
            if *heading == exact {
                total.0 += 2.0 * EXACT_HEADING_BONUS;
                tier.insert(doc, 2);
            } else if heading.to_lowercase() == exact_lower {
                total.0 += EXACT_HEADING_BONUS;
                tier.insert(doc, 1);
            } else if exact_lower.contains(' ') && heading.to_lowercase().contains(&exact_lower) {
                total.0 += HEADING_PHRASE_BONUS;
            }
        }
        let mut ranked: Vec<(u32, f32)> = if totals.values().any(|&(_, k)| k == all) {
            totals
                .iter()
                .filter(|(_, (_, k))| *k == all)
                .map(|(&d, &(s, _))| (d, s))
                .collect()
        } else {
            totals.iter().map(|(&d, &(s, _))| (d, s)).collect()
        };
        let tier_of = |d: u32| tier.get(&d).copied().unwrap_or(0);
        ranked.sort_by(|a, b| {
            let (ta, tb) = (tier_of(a.0), tier_of(b.0));
            tb.cmp(&ta).then_with(|| {
                if ta > 0 {
                    a.0.cmp(&b.0)
                } else {
                    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
                }
            })
        });
        ranked
            .into_iter()
            .take(limit)
            .map(|(id, score)| {
                let doc = &self.docs[id as usize];
                let source = if doc.text.trim().is_empty() {
                    &doc.heading
                } else {
                    &doc.text
                };
                Hit {
                    page: doc.page.clone(),
                    title: doc.title.clone(),
                    anchor: doc.anchor.clone(),
                    heading: doc.heading.clone(),
                    snippet_html: snippet(source, &matched),
                    score,
                }
            })
            .collect()
    }

    /// The index as JSON for an exported site, whose script ranks with the same BM25 as [`SearchIndex::search`]:
    /// the sections (with `url(doc)` as their link), each section's length, the average length, the ranking
    /// constants, and the vocabulary with its postings as `[section, weight]` pairs.
    pub fn to_json(&self, url: impl Fn(&SearchDoc) -> String) -> serde_json::Value {
        let docs: Vec<serde_json::Value> = self
            .docs
            .iter()
            .map(|d| serde_json::json!({"url": url(d), "title": d.title, "heading": d.heading, "text": d.text}))
            .collect();
        let terms: serde_json::Map<String, serde_json::Value> = self
            .terms
            .iter()
            .map(|(term, postings)| {
                let list: Vec<serde_json::Value> = postings
                    .iter()
                    .map(|p| serde_json::json!([p.doc, p.weight]))
                    .collect();
                (term.clone(), serde_json::Value::Array(list))
            })
            .collect();
        serde_json::json!({
            "docs": docs,
            "lengths": self.lengths,
            "avg_len": self.avg_len,
            "k1": K1,
            "b": B,
            "factors": {"exact": EXACT, "prefix": PREFIX, "typo": TYPO},
            "exact_heading_bonus": EXACT_HEADING_BONUS,
            "heading_phrase_bonus": HEADING_PHRASE_BONUS,
            "max_terms": MAX_TERMS,
            "max_term_chars": MAX_TERM_CHARS,
            "terms": terms,
        })
    }

    /// Pages (by path, best first, each once) that match any word of `text`; for the 404 page.
    pub fn suggest(&self, text: &str, limit: usize) -> Vec<(String, String)> {
        let mut seen = HashSet::new();
        let query: String = tokenize(text)
            .into_iter()
            .map(|(_, w)| w)
            .collect::<Vec<_>>()
            .join(" ");
        let mut out = Vec::new();
        for word in query.split(' ').filter(|w| !w.is_empty()) {
            for hit in self.search(word, limit * 4) {
                if seen.insert(hit.page.clone()) {
                    out.push((hit.page, hit.title));
                }
            }
        }
        out.truncate(limit);
        out
    }
}

/// About 180 characters of `text` around the first matched word, escaped, with every matched word marked.
fn snippet(text: &str, matched: &HashSet<&str>) -> String {
    let tokens = tokenize(text);
    let first = tokens
        .iter()
        .find(|(_, w)| matched.contains(w.as_str()))
        .map_or(0, |(at, _)| *at);
    let mut start = first.saturating_sub(60);
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    if let Some(space) = text[start..first].find(' ').filter(|_| start > 0) {
        start += space + 1;
    }
    let mut end = (start + 180).min(text.len());
    while !text.is_char_boundary(end) {
        end += 1;
    }
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    let mut pos = start;
    for (at, word) in tokens.iter().filter(|(at, _)| *at >= start && *at < end) {
        if !matched.contains(word.as_str()) || *at < pos {
            continue;
        }
        let word_end = text[*at..]
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(text.len(), |i| at + i);
        let word_end = word_end.min(end).max(*at);
        escape_into(&mut out, &text[pos..*at]);
        out.push_str("<mark>");
        escape_into(&mut out, &text[*at..word_end]);
        out.push_str("</mark>");
        pos = word_end;
    }
    escape_into(&mut out, &text[pos..end]);
    if end < text.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(page: &str, title: &str, heading: &str, text: &str) -> SearchDoc {
        SearchDoc {
            page: page.into(),
            title: title.into(),
            anchor: String::new(),
            heading: heading.into(),
            text: text.into(),
            item: false,
        }
    }

    fn index() -> SearchIndex {
        SearchIndex::build(vec![
            doc(
                "concepts/autotune",
                "Autotune",
                "How it works",
                "Candidates are measured and the winner is cached.",
            ),
            doc(
                "concepts/device",
                "Device",
                "Selection",
                "Set NETCL_DEVICE to gpu, cpu, an index or a name.",
            ),
            doc(
                "faq",
                "FAQ",
                "Why OpenCL",
                "OpenCL runs on GPUs and CPUs alike; the device is chosen at start.",
            ),
        ])
    }

    #[test]
    fn ranks_title_matches_first_and_marks_snippets() {
        let hits = index().search("device", 10);
        assert_eq!(hits[0].page, "concepts/device");
        assert!(hits.iter().any(|h| h.page == "faq"));
        let faq = hits.iter().find(|h| h.page == "faq").unwrap();
        assert!(
            faq.snippet_html.contains("<mark>device</mark>"),
            "{}",
            faq.snippet_html
        );
    }

    #[test]
    fn prefix_typo_and_snake_case() {
        let idx = index();
        assert_eq!(idx.search("autot", 10)[0].page, "concepts/autotune");
        assert_eq!(idx.search("candidats", 10)[0].page, "concepts/autotune");
        assert!(
            idx.search("gpz", 10).is_empty(),
            "typos are tolerated only in words of five or more letters"
        );
        assert_eq!(idx.search("netcl_device", 10)[0].page, "concepts/device");
    }

    #[test]
    fn snippets_escape_markup() {
        let idx = SearchIndex::build(vec![doc(
            "a",
            "A",
            "",
            "use <script>alert(1)</script> here",
        )]);
        let hits = idx.search("script", 10);
        assert_eq!(hits.len(), 1);
        assert!(
            hits[0].snippet_html.contains("&lt;<mark>script</mark>&gt;"),
            "{}",
            hits[0].snippet_html
        );
    }

    #[test]
    fn edit_distance() {
        assert!(within_one_edit("kernel", "kernal"));
        assert!(within_one_edit("kernel", "kernels"));
        assert!(within_one_edit("kernel", "kerne"));
        assert!(within_one_edit("kernel", "kernle"));
        assert!(!within_one_edit("kernel", "kanal"));
    }
}
