//! `netcl serve --warm`: the server runs every runnable block of its content once in the background at start,
//! answers requests meanwhile, and leaves the autotune cache filled with the blocks' decisions.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A content directory of one page with one runnable block (a product, which tunes on its first run) and one
/// block that is not runnable.
fn content(dir: &std::path::Path) {
    std::fs::write(
        dir.join("nav.toml"),
        "[[section]]\ntitle = \"All\"\npages = [\"index\"]\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("index.md"),
        "---\ntitle: Warm\nstatus: Draft\nsummary: One runnable block.\n---\n\n\
         ```netcl\nlet a = randn([24, 16], 1);\nlet b = randn([16, 20], 2);\n\
         let c = matmul(a, b);\nprint(`c: ${c.shape}`);\n```\n\n\
         ```rhai\nthis block is not runnable\n```\n",
    )
    .unwrap();
}

fn get(address: &str, path: &str) -> String {
    let mut s = TcpStream::connect(address).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text
}

#[test]
fn serve_warm_runs_every_block_in_the_background_and_fills_the_autotune_cache() {
    if common::opencl_device().is_none() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("netcl-serve-warm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let pages = dir.join("content");
    std::fs::create_dir_all(&pages).unwrap();
    content(&pages);
    let cache = dir.join("autotune.json");
    // Sync mode times every candidate of the product before the run goes on: on a 2-core CPU with PoCL's own
    // kernel cache empty that can take longer than the default 10 s a run, which is not what this test is
    // about (the first-click test holds the default limit), so the warm-up gets two minutes.
    let config = dir.join("wiki.toml");
    std::fs::write(
        &config,
        "playground_timeout_ms = 120000
",
    )
    .unwrap();
    let mut server = Command::new(env!("CARGO_BIN_EXE_netcl"))
        .args(["serve", "--warm", "--bind", "127.0.0.1:0", "--config"])
        .arg(&config)
        .arg("--content")
        .arg(&pages)
        .env("NETCL_AUTOTUNE_CACHE", &cache)
        .env("NETCL_AUTOTUNE", "sync")
        .env("NETCL_PROGRAM_CACHE", dir.join("programs"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start netcl serve");
    let lines = BufReader::new(server.stderr.take().unwrap()).lines();
    let started = Instant::now();
    let mut address = None;
    let mut log = Vec::new();
    let mut answered_meanwhile = false;
    for line in lines {
        let line = line.expect("server log");
        if let Some(rest) = line.strip_prefix("netcl wiki on http://") {
            let a = rest.trim_end_matches('/').to_owned();
            // Asked while the warm-up may still run: the server answers regardless.
            answered_meanwhile = get(&a, "/").starts_with("HTTP/1.1 200");
            address = Some(a);
        }
        let done = line.starts_with("warm-up done");
        log.push(line);
        if done || started.elapsed() > Duration::from_secs(240) {
            break;
        }
    }
    let text = log.join("\n");
    let address = address.unwrap_or_else(|| panic!("no address in:\n{text}"));
    let after = get(&address, "/");
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        answered_meanwhile,
        "the server did not answer during warm-up:\n{text}"
    );
    assert!(after.starts_with("HTTP/1.1 200"), "{after}");
    assert!(
        text.contains("warm-up: running 1 runnable blocks"),
        "{text}"
    );
    assert!(text.contains("warm-up 1/1 index: ok"), "{text}");
    assert!(text.contains("warm-up done: 1/1 blocks ok"), "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&cache).expect("autotune cache written"))
            .expect("cache JSON");
    let keys = json.to_string();
    assert!(
        keys.contains("matmul"),
        "no product decision cached: {keys}"
    );
    let programs = std::fs::read_dir(dir.join("programs")).map_or(0, |d| {
        d.flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "bin"))
            .count()
    });
    assert!(programs > 0, "no program binary kept");
    let _ = std::fs::remove_dir_all(&dir);
}
