//! The persistent cache: one JSON file of key → winner (netcl's flat layout) plus one reserved key holding the
//! candidate times, complete or partial. Every measured candidate is written as soon as it is measured, so a
//! process killed mid-tuning leaves its measurements for the next one. Writes take a lock file, merge what
//! other processes wrote, and replace the file atomically; a corrupt file is set aside and rebuilt.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::log::CandidateTime;
use crate::fsio::{FileLock, write_atomic};

/// The reserved top-level key of the cache file that holds candidate times.
pub const META_KEY: &str = "__netcl_meta__";

/// The candidate times of one key: all of them once a winner is stored, those measured so far before.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Meta {
    pub candidates: Vec<CandidateTime>,
    pub measured_at: u64,
}

#[derive(Default)]
pub(crate) struct FileCache {
    pub winners: BTreeMap<String, Value>,
    pub meta: BTreeMap<String, Meta>,
}

pub(crate) fn memo() -> &'static Mutex<HashMap<PathBuf, FileCache>> {
    static M: OnceLock<Mutex<HashMap<PathBuf, FileCache>>> = OnceLock::new();
    M.get_or_init(|| Mutex::new(HashMap::new()))
}

pub(crate) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The winner and candidate times of `key` (read from the file on the first use of `path`); `None` when the
/// key has no winner. Partial times come back with `None` as winner.
pub(crate) fn lookup(path: &Path, key: &str) -> (Option<Value>, Vec<CandidateTime>) {
    let Ok(mut m) = memo().lock() else {
        return (None, Vec::new());
    };
    let fc = m
        .entry(path.to_owned())
        .or_insert_with(|| read_file(path).0);
    let times = fc
        .meta
        .get(key)
        .map(|mt| mt.candidates.clone())
        .unwrap_or_default();
    (fc.winners.get(key).cloned(), times)
}

/// Reads `key` from the file again into the process memo (another process may have measured it).
pub(crate) fn refresh(path: &Path, key: &str) {
    let (fc, _) = read_file(path);
    if let Ok(mut m) = memo().lock() {
        let mine = m.entry(path.to_owned()).or_default();
        if let Some(w) = fc.winners.get(key) {
            mine.winners.insert(key.to_owned(), w.clone());
        }
        if let Some(mt) = fc.meta.get(key) {
            let keep = mine
                .meta
                .get(key)
                .is_some_and(|old| old.candidates.len() > mt.candidates.len());
            if !keep {
                mine.meta.insert(key.to_owned(), mt.clone());
            }
        }
    }
}

/// Forgets `key` in the process memo (its winner is no longer a candidate).
pub(crate) fn forget(path: &Path, key: &str) {
    if let Ok(mut m) = memo().lock()
        && let Some(fc) = m.get_mut(path)
    {
        fc.winners.remove(key);
        fc.meta.remove(key);
    }
}

/// Reads the cache file; returns the entries and a status line.
pub(crate) fn read_file(path: &Path) -> (FileCache, String) {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return (FileCache::default(), "missing".into());
        }
        Err(e) => return (FileCache::default(), format!("unreadable: {e}")),
    };
    match parse(&text) {
        Ok(fc) => (fc, "ok".into()),
        Err(msg) => {
            let aside = path.with_extension(format!("json.corrupt-{}", now_secs()));
            let moved = fs::rename(path, &aside).is_ok();
            tracing::warn!(
                "autotune cache {} is corrupt ({msg}); {}; it will be rebuilt",
                path.display(),
                if moved {
                    format!("moved to {}", aside.display())
                } else {
                    "left in place".into()
                }
            );
            (FileCache::default(), format!("corrupt ({msg}); rebuilt"))
        }
    }
}

pub(crate) fn parse(text: &str) -> std::result::Result<FileCache, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let Value::Object(obj) = v else {
        return Err("the top level is not a JSON object".into());
    };
    let mut fc = FileCache::default();
    for (k, v) in obj {
        if k == META_KEY {
            if let Ok(meta) = serde_json::from_value::<BTreeMap<String, Meta>>(v) {
                fc.meta = meta;
            }
        } else {
            fc.winners.insert(k, v);
        }
    }
    Ok(fc)
}

fn render(fc: &FileCache) -> Vec<u8> {
    let mut obj = serde_json::Map::new();
    for (k, v) in &fc.winners {
        obj.insert(k.clone(), v.clone());
    }
    obj.insert(
        META_KEY.into(),
        serde_json::to_value(&fc.meta).unwrap_or(Value::Null),
    );
    let mut out = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b" ");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
    if Value::Object(obj).serialize(&mut ser).is_err() {
        return b"{}".to_vec();
    }
    out.push(b'\n');
    out
}

/// Applies `change` to the memo's and the file's entries (merged with what other processes wrote, under the
/// file's lock, written atomically).
fn update(path: &Path, change: impl Fn(&mut FileCache)) {
    if let Ok(mut m) = memo().lock() {
        change(m.entry(path.to_owned()).or_default());
    }
    let r = (|| -> std::io::Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir)?;
        }
        let _lock = FileLock::acquire(&path.with_extension("json.lock"))?;
        let (mut fc, _) = read_file(path);
        change(&mut fc);
        write_atomic(path, &render(&fc))
    })();
    if let Err(e) = r {
        tracing::warn!("autotune cache {} not written: {e}", path.display());
    }
}

/// Records one measured candidate of `key` (no winner yet).
pub(crate) fn store_candidate(path: &Path, key: &str, t: &CandidateTime) {
    update(path, |fc| {
        let mt = fc.meta.entry(key.to_owned()).or_default();
        mt.candidates.retain(|c| c.candidate != t.candidate);
        mt.candidates.push(t.clone());
        mt.measured_at = now_secs();
    });
}

/// Stores the winner of `key` with every candidate's time.
pub(crate) fn store_winner(path: &Path, key: &str, winner: &Value, times: &[CandidateTime]) {
    update(path, |fc| {
        fc.winners.insert(key.to_owned(), winner.clone());
        fc.meta.insert(
            key.to_owned(),
            Meta {
                candidates: times.to_vec(),
                measured_at: now_secs(),
            },
        );
    });
}

/// Removes every trace of `key` (its candidates all failed: nothing is kept).
pub(crate) fn drop_key(path: &Path, key: &str) {
    update(path, |fc| {
        fc.winners.remove(key);
        fc.meta.remove(key);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corrupt_text_is_rejected_by_parse() {
        assert!(parse("{not json").is_err());
        assert!(parse("[1,2]").is_err());
        let fc = parse(r#"{"a::b::(1,)": "x", "__netcl_meta__": {}}"#).map_err(|e| e.to_string());
        assert_eq!(fc.map(|f| f.winners.len()).ok(), Some(1));
    }
}
