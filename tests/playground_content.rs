//! Documentation cannot go stale: every runnable block under `web-wiki/content/` runs on the test device and
//! succeeds, and the output recorded under it (the `output` block a static export shows) has the shape of a fresh
//! run's: the same lines, with numbers free to differ (timings, the last digits of a device's arithmetic).
//!
//! `NETCL_RECORD_OUTPUTS=1 cargo test --test playground_content` rewrites the recorded outputs from a fresh run.

mod common;

use std::path::{Path, PathBuf};

use netcl::Device;
use netcl::script::render::transcript;
use netcl::script::{Limits, RunInputs, run_with_inputs};
use netcl::wiki::content::Content;
use netcl::wiki::markdown::{is_runnable, runnable_blocks};

/// One fenced block of a page file: its info string, code, and the line range of the whole fence.
struct Fence {
    info: String,
    code: String,
    open: usize,
    close: usize,
}

/// The top-level fenced blocks of a Markdown file, in order.
fn fences(text: &str) -> Vec<Fence> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        if let Some(rest) = l.strip_prefix("```") {
            let info = rest.trim().to_string();
            let mut j = i + 1;
            while j < lines.len() && lines[j].trim_end() != "```" {
                j += 1;
            }
            let code: String = lines[i + 1..j.min(lines.len())]
                .iter()
                .map(|l| format!("{l}\n"))
                .collect();
            out.push(Fence {
                info,
                code,
                open: i,
                close: j,
            });
            i = j + 1;
        } else {
            i += 1;
        }
    }
    out
}

/// A runnable block and the recorded output that follows it (with only blank lines between), if any.
struct Example {
    code: String,
    /// Line after the runnable block's closing fence.
    after: usize,
    recorded: Option<(usize, usize, String)>,
}

fn examples(text: &str) -> Vec<Example> {
    let f = fences(text);
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (k, b) in f.iter().enumerate() {
        if !is_runnable(&b.info) {
            continue;
        }
        let recorded = f.get(k + 1).filter(|n| {
            n.info == "output"
                && lines[b.close + 1..n.open]
                    .iter()
                    .all(|l| l.trim().is_empty())
        });
        out.push(Example {
            code: b.code.clone(),
            after: b.close + 1,
            recorded: recorded.map(|n| (n.open, n.close, n.code.clone())),
        });
    }
    out
}

/// The text with every number replaced by `#`: what must stay the same between a recording and a fresh run.
/// What of an output must match its recording: its skeleton, and for a block that prints the device's
/// description (`device()`), which differs from machine to machine, the description's keys only.
fn compared(code: &str, text: &str) -> String {
    let s = skeleton(&sampled_text_folded(text));
    if !code.contains("device()") {
        return s;
    }
    const KEYS: [&str; 8] = [
        "compute_units",
        "driver",
        "global_mem_bytes",
        "kind",
        "local_mem_bytes",
        "max_work_group_size",
        "name",
        "platform",
    ];
    s.lines()
        .map(|l| match l.split_whitespace().next() {
            Some(k) if KEYS.contains(&k) => k,
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Text a model sampled (printed as lines starting with `> `) depends on the device's last digits: its lines
/// fold into one `> …`, so only its presence is compared.
fn sampled_text_folded(text: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for line in text.lines() {
        if line.starts_with("> ") || line == ">" {
            if out.last() != Some(&"> …") {
                out.push("> …");
            }
        } else {
            out.push(line);
        }
    }
    out.join("\n") + if text.ends_with('\n') { "\n" } else { "" }
}

fn skeleton(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let b: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < b.len() {
        let starts_number = b[i].is_ascii_digit()
            || (b[i] == '-' && b.get(i + 1).is_some_and(|c| c.is_ascii_digit()));
        if starts_number && (i == 0 || !(b[i - 1].is_alphanumeric() || b[i - 1] == '_')) {
            i += 1;
            while i < b.len()
                && (b[i].is_ascii_digit()
                    || (b[i] == '.' && b.get(i + 1).is_some_and(|c| c.is_ascii_digit()))
                    || (b[i] == 'e'
                        && b.get(i + 1)
                            .is_some_and(|c| c.is_ascii_digit() || *c == '-')))
            {
                i += if b[i] == 'e' && b.get(i + 1) == Some(&'-') {
                    2
                } else {
                    1
                };
            }
            out.push('#');
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

fn content_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("web-wiki/content")
}

fn page_files() -> Vec<(String, PathBuf)> {
    let dir = content_dir();
    let content = Content::load(&dir).unwrap();
    let mut v: Vec<(String, PathBuf)> = content
        .pages
        .values()
        .map(|p| (p.path.clone(), dir.join(format!("{}.md", p.path))))
        .collect();
    v.sort();
    v
}

/// Writes `text` to `path` through a temporary file and a rename.
fn write_atomic(path: &Path, text: &str) {
    let tmp = path.with_extension("md.tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn every_runnable_block_runs_and_matches_its_recorded_output() {
    let device = common::opencl_device().unwrap_or_else(Device::builtin);
    let record = std::env::var("NETCL_RECORD_OUTPUTS").is_ok_and(|v| v == "1");
    let mut count = 0;
    let mut failures = Vec::new();
    for (path, file) in page_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let found = examples(&text);
        let body_blocks = Content::load(&content_dir())
            .ok()
            .and_then(|c| c.pages.get(&path).map(|p| runnable_blocks(&p.body).len()));
        assert_eq!(
            Some(found.len()),
            body_blocks,
            "{path}.md: every runnable block is a top-level fence"
        );
        let mut edits: Vec<(usize, usize, String)> = Vec::new();
        for (i, ex) in found.iter().enumerate() {
            let started = std::time::Instant::now();
            // As a served wiki runs them: `load_model(name)` reads the content's data folder.
            let inputs = RunInputs {
                files: Vec::new(),
                data_dir: Some(content_dir().join("data")),
            };
            let r = run_with_inputs(
                &device,
                &ex.code,
                &Limits::default(),
                inputs,
                Box::new(|_| {}),
            );
            let ms = started.elapsed().as_millis();
            let where_ = format!("{path}.md, runnable block {}", i + 1);
            eprintln!("{where_}: {ms} ms");
            assert!(r.ok, "{where_}: {:?}\n{}", r.error, ex.code);
            let got = transcript(&r);
            assert!(
                !got.contains("Some("),
                "{where_}: the output shows an Option: {got}"
            );
            count += 1;
            let fresh = format!("```output\n{got}```");
            match &ex.recorded {
                Some((open, close, recorded)) => {
                    if compared(&ex.code, recorded) != compared(&ex.code, &got) {
                        if record {
                            edits.push((*open, *close + 1, fresh));
                        } else {
                            failures.push(format!(
                                "{where_}: the recorded output differs from a fresh run's\n--- recorded\n{recorded}--- fresh\n{got}"
                            ));
                        }
                    }
                }
                None if record => edits.push((ex.after, ex.after, format!("\n{fresh}"))),
                None => failures.push(format!(
                    "{where_}: no recorded output follows the block; a fresh run prints\n{got}"
                )),
            }
        }
        if record && !edits.is_empty() {
            let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
            for (from, to, with) in edits.into_iter().rev() {
                lines.splice(from..to, with.lines().map(str::to_owned));
            }
            write_atomic(&file, &(lines.join("\n") + "\n"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} recorded outputs are stale (NETCL_RECORD_OUTPUTS=1 rewrites them):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(
        count >= 60,
        "the docs hold at least 60 runnable examples ({count})"
    );
}

#[test]
fn every_tutorial_and_concept_page_has_a_runnable_block() {
    let mut missing = Vec::new();
    for (path, file) in page_files() {
        if !(path.starts_with("tutorials/") || path.starts_with("concepts/")) {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        if examples(&text).is_empty() {
            missing.push(path);
        }
    }
    assert!(
        missing.is_empty(),
        "pages without a runnable block: {missing:?}"
    );
}

#[test]
fn runnable_blocks_are_found_by_their_info_string() {
    let md =
        "```netcl\na\n```\n\n```rhai,run\nb\n```\n\n```rhai\nc\n```\n\n```netcl,norun\nd\n```\n";
    assert_eq!(
        runnable_blocks(md),
        vec!["a\n".to_string(), "b\n".to_string()]
    );
    let ex = examples(
        "```netcl\na\n```\n\n```output\n1.5\n```\n\n```netcl\nb\n```\ntext\n```output\nx\n```\n",
    );
    assert_eq!(ex.len(), 2);
    assert_eq!(ex[0].recorded.as_ref().map(|r| r.2.as_str()), Some("1.5\n"));
    assert!(
        ex[1].recorded.is_none(),
        "text between keeps an output block apart"
    );
}

#[test]
fn the_skeleton_masks_numbers_and_keeps_words() {
    assert_eq!(
        skeleton("y [2, 8] f32 min=-0.25 max=3e-5 conv2d 1.2 ms"),
        "y [#, #] f32 min=# max=# conv2d # ms"
    );
    assert_ne!(skeleton("im2col 1.0"), skeleton("winograd 1.0"));
    assert_ne!(skeleton("a\nb"), skeleton("a"));
    assert_eq!(
        sampled_text_folded("loss 1\n> ab\n> cd\nend\n"),
        sampled_text_folded("loss 2\n> xyz\nend\n").replace("2", "1")
    );
}
