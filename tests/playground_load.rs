//! The playground under load: 50 concurrent runs over real TCP each get a result or a busy answer, documentation
//! pages keep answering meanwhile (their p99 latency is printed), and no worker outlives the server.

mod wiki_support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use netcl::wiki::server::{AppState, router};
use wiki_support::{TestEngine, content_dir};

/// One HTTP/1.1 request; returns the status and the body.
fn request(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[test]
fn fifty_concurrent_runs_get_a_result_or_busy_and_pages_keep_answering() {
    let (tx, rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = std::thread::spawn(move || {
        wiki_support::runtime().block_on(async move {
            let config = netcl::wiki::config::Config {
                content_dir: content_dir(),
                playground_workers: 2,
                playground_queue: 8,
                playground_burst: 1000,
                playground_rate_per_minute: 60_000,
                playground_max_runs_per_client: 1000,
                playground_worker_command: Some(vec![
                    env!("CARGO_BIN_EXE_netcl").into(),
                    "worker".into(),
                ]),
                ..Default::default()
            };
            let state = AppState::new(config, Arc::new(TestEngine)).unwrap();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send((listener.local_addr().unwrap(), Arc::clone(&state)))
                .unwrap();
            axum::serve(
                listener,
                router(state).into_make_service_with_connect_info::<SocketAddr>(),
            )
            .with_graceful_shutdown(async {
                let _ = stop_rx.await;
            })
            .await
            .unwrap();
        });
    });
    let (addr, state) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    // Warm one worker so the device is open before the burst.
    let (status, _) = request(addr, "POST", "/api/run", r#"{"code": "1"}"#);
    assert_eq!(status, 200);

    let code =
        r#"{"code": "let x = randn([64, 64], 1);\nlet y = x * x + 1.0;\nsum_all(y).item()"}"#;
    let runs: Vec<_> = (0..50)
        .map(|_| std::thread::spawn(move || request(addr, "POST", "/api/run", code)))
        .collect();
    let pages = std::thread::spawn(move || {
        let mut times = Vec::new();
        for i in 0..300 {
            let path = [
                "/docs/concepts/autotune",
                "/docs/quickstart",
                "/",
                "/playground",
            ][i % 4];
            let started = Instant::now();
            let (status, _) = request(addr, "GET", path, "");
            times.push(started.elapsed());
            assert_eq!(status, 200, "{path}");
        }
        times
    });
    let (mut ok, mut busy) = (0, 0);
    for run in runs {
        let (status, body) = run.join().unwrap();
        let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
        match status {
            200 => {
                assert_eq!(answer["ok"], true, "{answer}");
                ok += 1;
            }
            503 => {
                assert_eq!(answer["error"]["kind"], "busy");
                busy += 1;
            }
            other => panic!("status {other}: {body}"),
        }
    }
    let mut times = pages.join().unwrap();
    times.sort();
    eprintln!(
        "50 concurrent runs: {ok} results, {busy} busy; pages meanwhile: p50 {:?}, p99 {:?}, max {:?}",
        percentile(&times, 0.5),
        percentile(&times, 0.99),
        times[times.len() - 1]
    );
    assert_eq!(ok + busy, 50);
    assert!(
        ok >= 10,
        "at least the workers and the queue were served ({ok})"
    );
    assert!(percentile(&times, 0.99) < Duration::from_secs(1));

    let pool = state.playground().unwrap().pool();
    let pids = pool.worker_pids();
    state.playground().unwrap().shutdown();
    let _ = stop_tx.send(());
    server.join().unwrap();
    for pid in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .unwrap_or_default()
                    .contains(") Z "),
            "worker {pid} outlived the server"
        );
    }
}
