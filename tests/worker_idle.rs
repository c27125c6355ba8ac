//! Tuning in idle time: a playground worker answers a new shape at once from the database or the heuristic,
//! without measuring during the run; once no job runs on the device it runs the finished job again with
//! measurement on, and the next run of the same shape answers from the measured winner.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// A product whose shape has several candidates on every device.
const JOB: &str = "let a = randn([48, 40], 1);\nlet b = randn([40, 36], 2);\nlet c = matmul(a, b);\nprint(`${c.shape}`);";

fn result_of(lines: &mut impl Iterator<Item = std::io::Result<String>>, id: &str) -> Value {
    for line in lines {
        let v: Value = serde_json::from_str(&line.expect("worker output")).expect("a JSON line");
        if v["event"] == "result" && v["id"] == id {
            return v["result"].clone();
        }
    }
    panic!("the worker closed its output before answering {id}");
}

fn matmul_sources(result: &Value) -> Vec<String> {
    result["decisions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| {
            d["kernel"]
                .as_str()
                .is_some_and(|k| k.starts_with("matmul"))
        })
        .map(|d| d["source"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[test]
fn a_worker_measures_a_finished_job_while_idle_and_the_next_run_uses_the_winner() {
    if common::opencl_device().is_none() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("netcl-worker-idle-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let cache = dir.join("autotune.json");
    let mut worker = Command::new(env!("CARGO_BIN_EXE_netcl"))
        .arg("worker")
        .env_remove("NETCL_AUTOTUNE")
        .env_remove("NETCL_AUTOTUNE_FORCE")
        .env("NETCL_AUTOTUNE_CACHE", &cache)
        .env("NETCL_PROGRAM_CACHE", dir.join("programs"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start netcl worker");
    let mut stdin = worker.stdin.take().unwrap();
    let mut lines = BufReader::new(worker.stdout.take().unwrap()).lines();
    let send = |stdin: &mut std::process::ChildStdin, id: &str| {
        writeln!(stdin, "{}", json!({"id": id, "code": JOB})).unwrap();
        stdin.flush().unwrap();
    };

    send(&mut stdin, "first");
    let first = result_of(&mut lines, "first");
    assert_eq!(first["ok"], true, "{first}");
    let sources = matmul_sources(&first);
    assert!(
        !sources.is_empty(),
        "the run made a matmul decision: {first}"
    );
    assert!(
        sources.iter().all(|s| s == "heuristic" || s == "database"),
        "a first run answers without measuring: {sources:?}"
    );

    // The worker is idle now: it measures the job's candidates and stores the winner.
    let started = Instant::now();
    let measured = loop {
        // The cache file holds each winner under its key at the top level (candidate times under a reserved key).
        let text = std::fs::read_to_string(&cache).unwrap_or_default();
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if v.as_object().is_some_and(|m| {
            m.keys()
                .any(|k| k != netcl::autotune::META_KEY && k.contains("::matmul@"))
        }) {
            break true;
        }
        if started.elapsed() > Duration::from_secs(120) {
            break false;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        measured,
        "no matmul winner was stored while the worker was idle"
    );

    send(&mut stdin, "second");
    let second = result_of(&mut lines, "second");
    assert_eq!(second["ok"], true, "{second}");
    let sources = matmul_sources(&second);
    assert!(
        !sources.is_empty() && sources.iter().all(|s| s == "cache"),
        "the next run answers from the measured winner: {sources:?}"
    );

    drop(stdin);
    let _ = worker.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
