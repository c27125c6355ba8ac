//! A load measurement, not a CI test (`cargo test --release --test hostile_load -- --ignored --nocapture`):
//! 64 readers fetching pages over kept-alive connections plus 16 hostile clients (8 event-stream clients that
//! never read, 8 that send their request a byte a second) against a server on 127.0.0.1, for
//! `NETCL_LOAD_SECS` seconds (60 by default), while one client starts a small run every second. It prints the
//! page latency percentiles, how many small runs were answered, and the server's memory at start and end.

mod wiki_support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use netcl::wiki::listen::{self, ConnLimits};
use wiki_support::{TestEngine, app_with};

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Reads one answer (head and `Content-Length` body) from a kept-alive connection; its status.
fn read_answer(r: &mut BufReader<TcpStream>) -> Option<u16> {
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let status = line.split(' ').nth(1)?.parse().ok()?;
    let mut length = 0usize;
    loop {
        line.clear();
        r.read_line(&mut line).ok()?;
        if line == "\r\n" || line.is_empty() {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().ok()?;
        }
    }
    let mut body = vec![0u8; length];
    r.read_exact(&mut body).ok()?;
    Some(status)
}

#[test]
#[ignore = "a 60 s measurement; run by hand"]
fn pages_stay_fast_under_hostile_clients() {
    let secs: u64 = std::env::var("NETCL_LOAD_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let (app, state) = app_with(Arc::new(TestEngine), |c| {
        c.playground_worker_command =
            Some(vec![env!("CARGO_BIN_EXE_netcl").into(), "worker".into()]);
        c.playground_workers = 2;
        // Every client here shares 127.0.0.1, so the per-client rate is raised for the measurement.
        c.playground_rate_per_minute = 6000;
        c.playground_burst = 100;
        c.playground_limits.max_operations = u64::MAX;
    });
    let listener = listen::bind(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = ConnLimits::from_config(state.config());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            listener.set_nonblocking(true).unwrap();
            let l = tokio::net::TcpListener::from_std(listener).unwrap();
            let conns = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
            listen::serve_listener(l, app, limits, conns, async move {
                let _ = stop_rx.await;
            })
            .await;
        });
    });
    let me = std::process::id();
    std::thread::sleep(Duration::from_millis(500));
    let rss_start = rss_kib(me);
    let done = Arc::new(AtomicBool::new(false));
    let pages = [
        "/",
        "/docs/faq",
        "/docs/concepts/device",
        "/search?q=conv",
        "/api/search?q=gemm",
    ];
    let mut readers = Vec::new();
    for i in 0..64 {
        let done = Arc::clone(&done);
        readers.push(std::thread::spawn(move || {
            let mut latencies = Vec::new();
            let mut errors = 0u64;
            let mut n = i;
            while !done.load(Ordering::Relaxed) {
                let Ok(s) = TcpStream::connect(addr) else {
                    errors += 1;
                    continue;
                };
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let mut w = s.try_clone().unwrap();
                let mut r = BufReader::new(s);
                while !done.load(Ordering::Relaxed) {
                    let path = pages[n % pages.len()];
                    n += 1;
                    let t = Instant::now();
                    if write!(w, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").is_err() {
                        errors += 1;
                        break;
                    }
                    match read_answer(&mut r) {
                        Some(200) => latencies.push(t.elapsed()),
                        _ => {
                            errors += 1;
                            break;
                        }
                    }
                }
            }
            (latencies, errors)
        }));
    }
    let mut hostile = Vec::new();
    let spew = r#"{"code": "let s = \"xxxxxxxxxxxxxxxx\"; for i in 0..10 { s += s; } loop { progress(s); }"}"#;
    for i in 0..16 {
        let done = Arc::clone(&done);
        hostile.push(std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                let Ok(mut s) = TcpStream::connect(addr) else { continue };
                if i < 8 {
                    // Starts a stream of progress and never reads it.
                    let _ = write!(
                        s,
                        "POST /api/run/stream HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{spew}",
                        spew.len()
                    );
                    let start = Instant::now();
                    // Holds the connection until the server closes it (it cannot tell without reading).
                    while !done.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(30) {
                        std::thread::sleep(Duration::from_millis(500));
                        let _ = s.set_nonblocking(true);
                        let mut b = [0u8; 1];
                        if let Ok(0) = s.peek(&mut b) {
                            break;
                        }
                    }
                } else {
                    // Sends a request head a byte a second.
                    for b in b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n" {
                        if done.load(Ordering::Relaxed) || s.write_all(&[*b]).is_err() {
                            break;
                        }
                        std::thread::sleep(Duration::from_secs(1));
                    }
                }
            }
        }));
    }
    let runs_done = Arc::clone(&done);
    let runner = std::thread::spawn(move || {
        let (mut asked, mut answered, mut worst) = (0u64, 0u64, Duration::ZERO);
        while !runs_done.load(Ordering::Relaxed) {
            asked += 1;
            let t = Instant::now();
            let Ok(mut s) = TcpStream::connect(addr) else {
                continue;
            };
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let body = r#"{"code": "sum_all(ones([64, 64]))"}"#;
            let _ = write!(
                s,
                "POST /api/run HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            let mut answer = String::new();
            let _ = s.read_to_string(&mut answer);
            if answer.starts_with("HTTP/1.1 200") && answer.contains("\"ok\":true") {
                answered += 1;
                worst = worst.max(t.elapsed());
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        (asked, answered, worst)
    });
    let mut rss_peak = rss_start;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(Duration::from_secs(1));
        rss_peak = rss_peak.max(rss_kib(me));
    }
    let rss_end = rss_kib(me);
    done.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    let mut errors = 0;
    for r in readers {
        let (l, e) = r.join().unwrap();
        all.extend(l);
        errors += e;
    }
    let (asked, answered, worst) = runner.join().unwrap();
    for h in hostile {
        let _ = h.join();
    }
    all.sort();
    let pct = |p: f64| all[((all.len() as f64 * p) as usize).min(all.len() - 1)];
    println!(
        "{secs} s, 64 readers + 16 hostile clients: {} pages ({:.0}/s), errors {errors}, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        all.len(),
        all.len() as f64 / secs as f64,
        pct(0.5).as_secs_f64() * 1e3,
        pct(0.99).as_secs_f64() * 1e3,
        pct(1.0).as_secs_f64() * 1e3,
    );
    println!(
        "small runs: {answered} of {asked} answered, slowest {:.0} ms",
        worst.as_secs_f64() * 1e3
    );
    println!(
        "server process RSS: start {} MiB, peak {} MiB, end {} MiB; workers replaced {}",
        rss_start / 1024,
        rss_peak / 1024,
        rss_end / 1024,
        state.playground().unwrap().pool().restarts()
    );
    let _ = stop_tx.send(());
    let _ = server.join();
    state.playground().unwrap().shutdown();
    assert!(answered > 0);
}
