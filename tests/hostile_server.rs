//! The server against hostile clients, over real TCP connections on 127.0.0.1: a stream client that stops
//! reading, slow and idle connections, a shutdown with a half-sent request open, a second server on a busy
//! port, foreign origins and hosts, an idle worker that died, and the small refusals (long queries, cache path,
//! bearer case, cancelling a queued run). Every test bounds its own time and stops its server.

mod wiki_support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use netcl::wiki::config::Config;
use serde_json::{Value, json};
use wiki_support::{Served, TestEngine, app_with, get_with, send};

fn worker_command() -> Vec<String> {
    vec![env!("CARGO_BIN_EXE_netcl").into(), "worker".into()]
}

/// A server on 127.0.0.1 with its own runtime thread; stopped (with its workers) when dropped.
struct Server(Served);

impl std::ops::Deref for Server {
    type Target = Served;
    fn deref(&self) -> &Served {
        &self.0
    }
}

impl Server {
    fn start(configure: impl FnOnce(&mut Config)) -> Server {
        let (app, state) = app_with(Arc::new(TestEngine), |c| {
            c.playground_worker_command = Some(worker_command());
            configure(c);
        });
        Server(Served::start(app, state))
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    /// One request on a fresh connection; the answer's status and body.
    fn request(&self, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        http(self.addr, method, path, body, Duration::from_secs(20))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.0.stop();
        if let Some(p) = self.state.playground() {
            p.shutdown();
        }
    }
}

/// A plain HTTP/1.1 request with `Connection: close`; the status and the body.
fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    timeout: Duration,
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(timeout)).unwrap();
    let body = body.unwrap_or("");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer)
        .unwrap_or_else(|e| panic!("{method} {path}: no answer within {timeout:?}: {e}"));
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

/// Whether the server closed `s` within `within` (EOF or reset), having read and discarded what came.
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let start = Instant::now();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut buf = [0u8; 4096];
    while start.elapsed() < within {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return true,
        }
    }
    false
}

#[test]
fn a_stream_client_that_stops_reading_blocks_no_other_run() {
    let server = Server::start(|c| {
        c.playground_workers = 1;
        c.playground_queue = 4;
        c.playground_timeout_ms = 60_000;
        c.playground_stall_timeout_ms = 1_000;
        c.write_timeout_ms = 1_000;
        c.playground_limits.max_operations = u64::MAX;
    });
    // Reports 16 KB of progress as fast as it can, forever; the client reads none of it.
    let code = r#"let s = "xxxxxxxxxxxxxxxx"; for i in 0..10 { s += s; } loop { progress(s); }"#;
    let body = json!({ "code": code }).to_string();
    let mut stalled = server.connect();
    write!(
        stalled,
        "POST /api/run/stream HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    // Let the run start and fill every buffer between the worker and the client.
    std::thread::sleep(Duration::from_millis(1500));
    let started = Instant::now();
    let (status, answer) = server.request("POST", "/api/run", Some(r#"{"code": "1 + 2"}"#));
    let waited = started.elapsed();
    assert_eq!(status, 200, "{answer}");
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["value"], "3", "{answer}");
    assert!(
        waited < Duration::from_secs(10),
        "the small run waited {waited:?}"
    );
    // The stalled client lost its stream, and its run's worker was replaced.
    assert!(closed_within(&mut stalled, Duration::from_secs(10)));
    assert!(server.state.playground().unwrap().pool().restarts() >= 1);
}

#[test]
fn one_client_holds_at_most_its_share_of_runs() {
    let server = Server::start(|c| {
        c.playground_workers = 2;
        c.playground_queue = 8;
        c.playground_max_runs_per_client = 1;
        c.playground_limits.max_operations = u64::MAX;
    });
    // A stream that never ends holds the client's one open run.
    let code = r#"loop { progress(1); sum_all(ones([256, 256])); }"#;
    let body = json!({ "code": code }).to_string();
    let mut first = server.connect();
    write!(
        first,
        "POST /api/run/stream HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut head = String::new();
    BufReader::new(first.try_clone().unwrap())
        .read_line(&mut head)
        .unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // A second run of the same client is refused at once with a structured 429, not queued.
    let started = Instant::now();
    let (status, answer) = server.request("POST", "/api/run", Some(r#"{"code": "1 + 2"}"#));
    assert_eq!(status, 429, "{answer}");
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["ok"], false);
    assert_eq!(answer["error"]["kind"], "too_many_runs", "{answer}");
    assert!(started.elapsed() < Duration::from_secs(2));
    // Once the first run's client goes away its place is given back.
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, answer) = server.request("POST", "/api/run", Some(r#"{"code": "1 + 2"}"#));
        if status == 200 {
            let answer: Value = serde_json::from_str(&answer).unwrap();
            assert_eq!(answer["value"], "3", "{answer}");
            break;
        }
        assert_eq!(status, 429, "{answer}");
        assert!(
            Instant::now() < deadline,
            "the client's run place was not given back"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn slow_and_idle_connections_are_closed() {
    let server = Server::start(|c| {
        c.header_timeout_ms = 500;
        c.body_timeout_ms = 500;
    });
    // Says nothing at all.
    let mut silent = server.connect();
    // Sends half a request head.
    let mut half = server.connect();
    half.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n")
        .unwrap();
    // Is answered once, then keeps the connection idle.
    let mut idle = server.connect();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut line = String::new();
    BufReader::new(idle.try_clone().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    for (name, s) in [
        ("silent", &mut silent),
        ("half head", &mut half),
        ("idle", &mut idle),
    ] {
        assert!(
            closed_within(s, Duration::from_secs(5)),
            "{name} connection still open"
        );
    }
    // A body that never arrives whole is answered 408.
    let mut slow = server.connect();
    slow.write_all(
        b"POST /api/run HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"code\":",
    )
    .unwrap();
    let mut answer = String::new();
    let started = Instant::now();
    let _ = slow.read_to_string(&mut answer);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("body_timeout"), "{answer}");
    // Pages are still served.
    assert_eq!(server.request("GET", "/healthz", None).0, 200);
}

#[test]
fn an_idle_worker_that_died_costs_no_run() {
    let server = Server::start(|c| c.playground_workers = 1);
    let (status, first) = server.request("POST", "/api/run", Some(r#"{"code": "1"}"#));
    assert_eq!(status, 200, "{first}");
    let pool = server.state.playground().unwrap().pool();
    let pids = pool.worker_pids();
    assert_eq!(pids.len(), 1);
    // SAFETY: kills the worker process this test's server started.
    unsafe { libc::kill(pids[0] as i32, libc::SIGKILL) };
    std::thread::sleep(Duration::from_millis(200));
    let (status, answer) = server.request("POST", "/api/run", Some(r#"{"code": "2 + 3"}"#));
    assert_eq!(status, 200);
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(
        (answer["ok"].clone(), answer["value"].clone()),
        (json!(true), json!("5")),
        "{answer}"
    );
    assert_ne!(pool.worker_pids(), pids);
}

#[test]
fn a_cancelled_queued_run_answers_at_once() {
    let server = Server::start(|c| {
        c.playground_workers = 1;
        c.playground_queue = 2;
        c.playground_timeout_ms = 30_000;
        c.playground_limits.max_operations = u64::MAX;
    });
    let stream = |code: &str| {
        let mut s = server.connect();
        let body = json!({ "code": code }).to_string();
        write!(
            s,
            "POST /api/run/stream HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut reader = BufReader::new(s);
        let mut id = String::new();
        let mut line = String::new();
        while id.is_empty() {
            line.clear();
            assert!(reader.read_line(&mut line).unwrap() > 0);
            if let Some(data) = line.strip_prefix("data: ") {
                let v: Value = serde_json::from_str(data).unwrap();
                id = v["id"].as_str().unwrap_or_default().to_string();
            }
        }
        (reader, id)
    };
    let (_busy, _) = stream("loop {}");
    let (mut queued, id) = stream("1");
    let started = Instant::now();
    let (status, answer) = server.request("POST", &format!("/api/run/{id}/cancel"), None);
    assert_eq!(status, 200, "{answer}");
    let mut rest = String::new();
    let mut line = String::new();
    while !rest.contains("event: result") {
        line.clear();
        if queued.read_line(&mut line).unwrap() == 0 {
            break;
        }
        rest.push_str(&line);
    }
    line.clear();
    queued.read_line(&mut line).unwrap();
    assert!(line.contains("\"cancelled\""), "{rest}{line}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

fn serve_command(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_netcl"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .arg("serve")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Reads the server's stderr until it says where it listens.
fn listening_address(child: &mut Child) -> (SocketAddr, BufReader<std::process::ChildStderr>) {
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "the server stopped before listening"
        );
        if let Some(rest) = line.trim().strip_prefix("netcl wiki on http://") {
            return (rest.trim_end_matches('/').parse().unwrap(), err);
        }
    }
}

fn wait_exit(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < within {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[test]
fn sigterm_finishes_with_a_half_sent_request_open() {
    let dir = wiki_support::scratch("sigterm");
    let config = dir.join("wiki.toml");
    std::fs::write(
        &config,
        "header_timeout_ms = 60000\nshutdown_grace_ms = 300\n",
    )
    .unwrap();
    let mut child = serve_command(&[
        "--bind",
        "127.0.0.1:0",
        "--no-playground",
        "--config",
        config.to_str().unwrap(),
    ]);
    let (addr, _err) = listening_address(&mut child);
    let mut half = TcpStream::connect(addr).unwrap();
    half.write_all(b"GET / HTTP/1.1\r\nHost: loc").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: signals the server process this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = wait_exit(&mut child, Duration::from_secs(10));
    assert!(
        status.is_some(),
        "the server did not stop within 10 s of SIGTERM"
    );
}

#[test]
fn a_second_server_on_a_busy_port_refuses_to_start() {
    let mut first = serve_command(&["--bind", "127.0.0.1:0", "--no-playground"]);
    let (addr, _err) = listening_address(&mut first);
    let mut second = serve_command(&["--bind", &addr.to_string(), "--no-playground"]);
    let status = wait_exit(&mut second, Duration::from_secs(20));
    let mut message = String::new();
    let _ = second.stderr.take().unwrap().read_to_string(&mut message);
    let _ = first.kill();
    let _ = first.wait();
    let status = status.expect("the second server kept running on a busy port");
    assert!(!status.success());
    assert!(message.contains("already in use"), "{message}");
}

fn run_request(headers: &[(&str, &str)], body: &str) -> Request<Body> {
    let mut r = Request::post("/api/run");
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    r.body(Body::from(body.to_string())).unwrap()
}

#[tokio::test]
async fn cross_origin_runs_and_foreign_hosts_are_refused() {
    let (app, _state) = app_with(Arc::new(TestEngine), |c| {
        c.playground_worker_command = Some(worker_command());
    });
    let body = r#"{"code": "1 + 1"}"#;
    let a = send(&app, run_request(&[("content-type", "text/plain")], body)).await;
    assert_eq!(a.status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{}", a.text());
    let a = send(
        &app,
        run_request(
            &[
                ("content-type", "application/json"),
                ("host", "localhost:8080"),
                ("origin", "http://evil.example"),
            ],
            body,
        ),
    )
    .await;
    assert_eq!(a.status, StatusCode::FORBIDDEN, "{}", a.text());
    assert_eq!(a.json()["error"]["kind"], "forbidden_origin");
    let a = send(
        &app,
        run_request(
            &[
                ("content-type", "application/json"),
                ("host", "evil.example:8080"),
            ],
            body,
        ),
    )
    .await;
    assert_eq!(a.status, StatusCode::MISDIRECTED_REQUEST, "{}", a.text());
    let page = get_with(&app, "/", ("host", "evil.example")).await;
    assert_eq!(page.status, StatusCode::MISDIRECTED_REQUEST);
    // The wiki's own page, same origin: runs.
    let a = send(
        &app,
        run_request(
            &[
                ("content-type", "application/json; charset=utf-8"),
                ("host", "localhost:8080"),
                ("origin", "http://localhost:8080"),
            ],
            body,
        ),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    assert_eq!(a.json()["value"], "2");
    // A configured origin and host.
    let (app, _state) = app_with(Arc::new(TestEngine), |c| {
        c.playground_worker_command = Some(worker_command());
        c.allowed_origins = vec!["https://docs.example".into()];
        c.allowed_hosts = Some(vec!["wiki.example".into()]);
    });
    let a = send(
        &app,
        run_request(
            &[
                ("content-type", "application/json"),
                ("host", "wiki.example"),
                ("origin", "https://docs.example"),
            ],
            body,
        ),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
}

#[tokio::test]
async fn long_queries_bearer_case_and_the_cache_path() {
    let (app, _state) = app_with(Arc::new(TestEngine), |c| {
        c.playground_worker_command = Some(worker_command());
        c.playground_token = Some("s3cret".into());
    });
    let long = "x".repeat(2100);
    for route in [
        "/",
        "/docs/faq",
        "/static/wiki.css",
        "/healthz",
        "/api/devices",
        "/nope",
    ] {
        let a = wiki_support::get(&app, &format!("{route}?q={long}")).await;
        assert_eq!(a.status, StatusCode::URI_TOO_LONG, "{route}");
    }
    let a = wiki_support::get(&app, "/api/autotune").await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.json()["cache"]["path"], "autotune.json");
    assert!(!a.text().contains("/tmp/"), "{}", a.text());
    let a = send(
        &app,
        run_request(
            &[
                ("content-type", "application/json"),
                ("authorization", "bearer s3cret"),
            ],
            r#"{"code": "4"}"#,
        ),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
}
