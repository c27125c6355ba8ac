//! First contact with a fresh wiki: `netcl serve` on the shipped content with every cache empty (a new `HOME`,
//! no autotune cache, no program cache, no PoCL kernel cache), the default configuration (10 s per run, the
//! default tuning mode), and every runnable block of every page clicked once, the way a reader meets them: each
//! must answer ok on its first click. The time of each click is printed (`--nocapture` shows them). One test
//! client clicks every block in a row, so its per-client rate limit is raised; nothing else is changed.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use netcl::wiki::content::Content;
use netcl::wiki::markdown::runnable_blocks;

/// Stops the server when the test ends, whatever its outcome.
struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn post_run(address: &str, code: &str) -> (u16, serde_json::Value) {
    let body = serde_json::json!({ "code": code }).to_string();
    let mut s = TcpStream::connect(address).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "POST /api/run HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let json = text
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(serde_json::Value::Null);
    (status, json)
}

#[test]
fn every_runnable_block_answers_ok_on_its_first_click_on_a_fresh_server() {
    if common::opencl_device().is_none() {
        return;
    }
    let content_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("web-wiki/content");
    let content = Content::load(&content_dir).unwrap();
    let mut pages: Vec<_> = content.pages.values().collect();
    pages.sort_by(|a, b| a.path.cmp(&b.path));
    let blocks: Vec<(String, usize, String)> = pages
        .iter()
        .flat_map(|p| {
            runnable_blocks(&p.body)
                .into_iter()
                .enumerate()
                .map(|(i, code)| (p.path.clone(), i + 1, code))
        })
        .collect();
    assert!(blocks.len() >= 60, "{} runnable blocks", blocks.len());

    let home = std::env::temp_dir().join(format!("netcl-first-click-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home).unwrap();
    let config = home.join("wiki.toml");
    std::fs::write(
        &config,
        "playground_rate_per_minute = 100000\nplayground_burst = 100000\n",
    )
    .unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_netcl"));
    cmd.args(["serve", "--bind", "127.0.0.1:0", "--config"])
        .arg(&config)
        .arg("--content")
        .arg(&content_dir)
        .env("HOME", &home)
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .env("POCL_CACHE_DIR", home.join("pocl"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for var in [
        "NETCL_AUTOTUNE",
        "NETCL_AUTOTUNE_CACHE",
        "NETCL_PROGRAM_CACHE",
        "NETCL_TUNING_DIR",
        "NETCL_TUNING_TABLE",
        "NETCL_AUTOTUNE_FORCE",
    ] {
        cmd.env_remove(var);
    }
    let mut child = cmd.spawn().expect("start netcl serve");
    let stderr = child.stderr.take().unwrap();
    let server = Served(child);
    let mut lines = BufReader::new(stderr).lines();
    let started = Instant::now();
    let address = loop {
        let line = lines
            .next()
            .expect("the server printed its address")
            .expect("server log");
        if let Some(rest) = line.strip_prefix("netcl wiki on http://") {
            break rest.trim_end_matches('/').to_owned();
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no address in 60 s"
        );
    };
    // The log is drained so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});

    let mut failures = Vec::new();
    let mut times = Vec::new();
    for (page, i, code) in &blocks {
        let t0 = Instant::now();
        let (status, answer) = post_run(&address, code);
        let ms = t0.elapsed().as_millis();
        eprintln!("{page}.md block {i}: {ms} ms, status {status}");
        times.push(ms);
        if status != 200 || answer["ok"] != true {
            failures.push(format!(
                "{page}.md, runnable block {i} ({ms} ms): status {status}, {}",
                answer["error"]
            ));
        }
    }
    times.sort_unstable();
    eprintln!(
        "{} blocks: median {} ms, slowest {} ms, total {} ms",
        times.len(),
        times[times.len() / 2],
        times[times.len() - 1],
        times.iter().sum::<u128>()
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&home);
    assert!(
        failures.is_empty(),
        "{} of {} blocks failed on their first click:\n{}",
        failures.len(),
        blocks.len(),
        failures.join("\n")
    );
}
