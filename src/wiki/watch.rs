//! `--watch`: polls the content directory every 500 ms and re-renders the site when a file was added, removed
//! or changed. Polling needs no platform notification API and costs a directory walk per tick.

use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::server::{AppState, Site};

/// How often the content directory is checked.
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// A hash over every file's path, size and modification time below `root`.
pub fn fingerprint(root: &Path) -> u64 {
    let mut hasher = DefaultHasher::new();
    hash_dir(root, 0, &mut hasher);
    hasher.finish()
}

fn hash_dir(dir: &Path, depth: usize, hasher: &mut DefaultHasher) {
    if depth > 8 {
        return;
    }
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for path in paths {
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        path.hash(hasher);
        if meta.is_dir() {
            hash_dir(&path, depth + 1, hasher);
        } else {
            meta.len().hash(hasher);
            meta.modified().ok().hash(hasher);
        }
    }
}

/// Starts the polling thread; it lives as long as the process.
pub fn spawn(state: Arc<AppState>) {
    let root = state.config().content_dir.clone();
    let spawned = std::thread::Builder::new().name("wiki-watch".into()).spawn(move || {
        let mut last = fingerprint(&root);
        loop {
            std::thread::sleep(POLL_INTERVAL);
            let now = fingerprint(&root);
            if now == last {
                continue;
            }
            last = now;
            match Site::load(state.config()) {
                Ok(site) => {
                    for problem in &site.problems {
                        tracing::warn!(%problem, "content problem");
                    }
                    tracing::info!(pages = site.content.pages.len(), "content reloaded");
                    state.replace_site(site);
                }
                Err(e) => tracing::error!(error = %e, "content reload failed; still serving the previous version"),
            }
        }
    });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "could not start the content watcher");
    }
}
