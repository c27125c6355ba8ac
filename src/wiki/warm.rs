//! `netcl serve --warm`: every runnable block of the content is run once, in the background, as the server
//! starts, so that a reader's first click finds its kernels built (and kept on disk) and its choices tuned.
//!
//! Blocks go through the playground's own worker pool with the playground's limits, one at a time, so the
//! server answers readers meanwhile and a warm-up run is bounded like any other. A block that hits the time
//! limit is run again, up to [`ATTEMPTS`] times in all: the programs it built are on disk by then, so each run
//! gets further.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::playground::Playground;
use super::playground::pool::{Refusal, RunEvent};
use super::server::Site;

/// Runs of one block at most, while it hits the time limit.
pub const ATTEMPTS: usize = 3;

/// What a warm-up did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WarmReport {
    /// Distinct runnable blocks found.
    pub blocks: usize,
    /// Blocks that ran to an `ok` result.
    pub ok: usize,
    /// Blocks that did not, with their page and the error's kind and message.
    pub failed: Vec<WarmFailure>,
    /// Wall time of the whole warm-up.
    pub elapsed: Duration,
}

/// One block that did not run clean during the warm-up.
#[derive(Debug, Clone, PartialEq)]
pub struct WarmFailure {
    pub page: String,
    pub kind: String,
    pub message: String,
}

/// Every distinct runnable block of `site`, with the page it is on, in navigation order.
pub fn blocks(site: &Site) -> Vec<(String, String)> {
    blocks_of(&site.content)
}

/// Every distinct runnable block of `content`, with the page it is on, in navigation order.
fn blocks_of(content: &super::content::Content) -> Vec<(String, String)> {
    let mut seen = std::collections::HashSet::new();
    content
        .ordered()
        .iter()
        .filter_map(|path| content.pages.get(*path))
        .flat_map(|page| {
            super::markdown::runnable_blocks(&page.body)
                .into_iter()
                .map(|code| (page.path.clone(), code))
        })
        .filter(|(_, code)| seen.insert(code.clone()))
        .collect()
}

/// Every distinct runnable block of the content under `dir`, with the page it is on, in navigation order
/// (`netcl tune warm` without files).
pub fn content_blocks(
    dir: &std::path::Path,
) -> Result<Vec<(String, String)>, super::error::WikiError> {
    Ok(blocks_of(&super::content::Content::load(dir)?))
}

/// What `netcl tune warm` did with one snippet.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TuneWarmed {
    /// The page or file the snippet came from.
    pub source: String,
    /// Whether it ran clean.
    pub ok: bool,
    /// Its error, when it did not.
    pub error: Option<String>,
    /// Wall time of the run, in milliseconds.
    pub ms: f64,
    /// Decisions measured during the run (candidates timed now).
    pub measured: usize,
    /// Decisions answered from the cache or the tuning table.
    pub answered: usize,
}

/// Runs each snippet of `snippets` (source, code) on `device` in this process with the autotuner measuring
/// every candidate at once (mode `sync`), so that later runs of the same shapes, here or in a server's
/// workers, answer from the cache: `netcl tune warm`. The limits are the playground's, with `timeout_ms` as
/// the wall-time limit of each snippet. `each` is called after every snippet.
pub fn tune_warm(
    device: &crate::Device,
    snippets: &[(String, String)],
    timeout_ms: u64,
    mut each: impl FnMut(usize, &TuneWarmed),
) -> Vec<TuneWarmed> {
    use crate::autotune::{self, Mode, Source};
    let before = autotune::config().mode;
    autotune::prefer_mode(Mode::Sync);
    let forced_elsewhere = autotune::config().mode != Mode::Sync;
    let limits = crate::script::Limits {
        timeout_ms,
        ..crate::script::Limits::default()
    };
    let mut out = Vec::with_capacity(snippets.len());
    for (i, (source, code)) in snippets.iter().enumerate() {
        let t = Instant::now();
        let r = crate::script::run(device, code, &limits);
        let count = |s: Source| r.decisions.iter().filter(|d| d.source == s).count();
        let w = TuneWarmed {
            source: source.clone(),
            ok: r.ok,
            error: r
                .error
                .as_ref()
                .map(|e| format!("{}: {}", e.kind, e.message)),
            ms: t.elapsed().as_secs_f64() * 1e3,
            measured: count(Source::Measured),
            answered: count(Source::Cache) + count(Source::Database),
        };
        each(i, &w);
        out.push(w);
    }
    if !forced_elsewhere {
        autotune::prefer_mode(before);
    }
    out
}

/// Starts the warm-up of `site` on a background thread; its handle gives the report when it ends.
pub fn spawn(
    playground: Arc<Playground>,
    site: Arc<Site>,
) -> std::io::Result<std::thread::JoinHandle<WarmReport>> {
    std::thread::Builder::new()
        .name("warm-up".into())
        .spawn(move || warm(&playground, &site))
}

/// Runs every block of `site` once through `playground`, logging progress; blocks until done.
pub fn warm(playground: &Playground, site: &Site) -> WarmReport {
    let started = Instant::now();
    let blocks = blocks(site);
    let n = blocks.len();
    eprintln!("warm-up: running {n} runnable blocks in the background");
    let mut report = WarmReport {
        blocks: n,
        ..WarmReport::default()
    };
    for (i, (page, code)) in blocks.iter().enumerate() {
        let t = Instant::now();
        let mut result = run(playground, code);
        for attempt in 2..=ATTEMPTS {
            if error_kind(&result).as_deref() != Some("timeout") {
                break;
            }
            eprintln!(
                "warm-up {}/{n} {page}: timed out, run {attempt} of {ATTEMPTS}",
                i + 1
            );
            result = run(playground, code);
        }
        let ms = t.elapsed().as_millis();
        match error_kind(&result) {
            None => {
                report.ok += 1;
                eprintln!("warm-up {}/{n} {page}: ok in {ms} ms", i + 1);
            }
            Some(kind) => {
                let message = result
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                eprintln!(
                    "warm-up {}/{n} {page}: {kind} after {ms} ms: {message}",
                    i + 1
                );
                report.failed.push(WarmFailure {
                    page: page.clone(),
                    kind,
                    message,
                });
            }
        }
    }
    report.elapsed = started.elapsed();
    eprintln!(
        "warm-up done: {}/{n} blocks ok in {:.1} s",
        report.ok,
        report.elapsed.as_secs_f64()
    );
    report
}

/// `None` for an ok result, else the error's kind.
fn error_kind(result: &Value) -> Option<String> {
    if result.get("ok").and_then(Value::as_bool) == Some(true) {
        return None;
    }
    Some(
        result
            .pointer("/error/kind")
            .and_then(Value::as_str)
            .unwrap_or("error")
            .to_owned(),
    )
}

/// One run of `code` with the playground's limits; waits for a free place while readers hold every one.
fn run(playground: &Playground, code: &str) -> Value {
    let mut ticket = loop {
        match playground.pool().submit_with(
            code.to_owned(),
            playground.limits().clone(),
            None,
            playground.inputs(),
        ) {
            Ok(ticket) => break ticket,
            Err(Refusal::Busy) => std::thread::sleep(Duration::from_millis(250)),
            Err(Refusal::Closed) => {
                return serde_json::json!({
                    "ok": false,
                    "error": {"kind": "closed", "message": "the playground is shutting down"},
                });
            }
        }
    };
    while let Some(event) = ticket.events.blocking_recv() {
        if let RunEvent::Result(value) = event {
            return value;
        }
    }
    serde_json::json!({
        "ok": false,
        "error": {"kind": "closed", "message": "the run ended without a result"},
    })
}
