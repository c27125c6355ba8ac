//! The playground's HTTP API against real worker processes (`netcl worker`): results, script and engine errors
//! with positions, every limit, a timeout that kills and replaces the worker, a crashing worker, busy, rate
//! limit, auth, server-sent progress, cancel, and no worker left after shutdown.

mod wiki_support;

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode};
use netcl::wiki::config::Config;
use netcl::wiki::server::AppState;
use serde_json::{Value, json};
use tower::ServiceExt;
use wiki_support::{Answer, TestEngine, app_with, get, send};

fn worker_command() -> Vec<String> {
    vec![env!("CARGO_BIN_EXE_netcl").into(), "worker".into()]
}

/// A server whose playground runs real workers, with `configure` applied.
fn server(configure: impl FnOnce(&mut Config)) -> (Router, Arc<AppState>) {
    app_with(Arc::new(TestEngine), |c| {
        c.playground_worker_command = Some(worker_command());
        configure(c);
    })
}

fn post_request(uri: &str, body: &Value) -> Request<Body> {
    Request::post(uri)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

/// The response to posting `code` to `uri`, before its body is read (a stream stays open).
async fn open(app: &Router, uri: &str, code: &str) -> axum::response::Response {
    let request = post_request(uri, &json!({ "code": code }));
    app.clone().oneshot(request).await.unwrap()
}

async fn post(app: &Router, uri: &str, body: &Value) -> Answer {
    send(app, post_request(uri, body)).await
}

/// `/api/run` of `code` under the requested `limits`.
async fn run_limited(app: &Router, code: &str, limits: Value) -> Answer {
    post(app, "/api/run", &json!({"code": code, "limits": limits})).await
}

async fn run(app: &Router, code: &str) -> Value {
    let answer = post(app, "/api/run", &json!({ "code": code })).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text());
    answer.json()
}

fn pid_alive(pid: u32) -> bool {
    // Signal 0 checks existence; a zombie has already been reaped by the supervisor's wait.
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

/// Parses a server-sent event stream into `(event, data)` pairs.
fn events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|b| !b.trim().is_empty())
        .map(|block| {
            let mut event = String::new();
            let mut data = Value::Null;
            for line in block.lines() {
                if let Some(e) = line.strip_prefix("event: ") {
                    event = e.to_string();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(d).unwrap();
                }
            }
            (event, data)
        })
        .collect()
}

/// Reads the next chunk of a streaming body.
async fn next_chunk(stream: &mut axum::body::BodyDataStream) -> Option<String> {
    let chunk =
        std::future::poll_fn(|cx| futures_core::Stream::poll_next(Pin::new(&mut *stream), cx))
            .await?;
    Some(String::from_utf8_lossy(&chunk.unwrap()).into_owned())
}

#[tokio::test]
async fn a_run_answers_outputs_value_timings_and_device() {
    let (app, _state) = server(|_| {});
    let code = "let a = tensor([1.0, 2.0, 3.0]);\nprint(\"hello\");\ninspect(a * 2.0, \"a2\");\nsum_all(a).item()";
    let r = run(&app, code).await;
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["value"], "6.0");
    assert_eq!(r["outputs"][0], json!({"kind": "text", "text": "hello"}));
    assert_eq!(r["outputs"][1]["kind"], "tensor");
    assert_eq!(r["outputs"][1]["shape"], json!([3]));
    assert_eq!(r["outputs"][1]["max"], 6.0);
    assert!(r["timings"]["queue_ms"].as_f64().unwrap() >= 0.0);
    assert!(r["timings"]["total_ms"].as_f64().unwrap() > 0.0);
    assert!(!r["device"]["name"].as_str().unwrap().is_empty());
    assert_eq!(r["id"].as_str().unwrap().len(), 32);
    assert_eq!(r["worker_restarted"], false);
}

#[tokio::test]
async fn script_and_engine_errors_carry_kind_line_and_column() {
    let (app, _state) = server(|_| {});
    let r = run(&app, "let x = 1;\nlet y = ;").await;
    assert_eq!(r["ok"], false);
    assert_eq!(r["error"]["kind"], "syntax");
    assert_eq!(r["error"]["line"], 2);
    let r = run(
        &app,
        "let x = zeros([2, 3]);\nlet y = zeros([4, 3]);\nlet z = x + y;",
    )
    .await;
    assert_eq!(
        (
            &r["error"]["kind"],
            &r["error"]["line"],
            &r["error"]["column"]
        ),
        (&json!("shape"), &json!(3), &json!(11)),
        "{r}"
    );
    assert!(r["error"]["message"].as_str().unwrap().contains("[4, 3]"));
    let r = run(&app, "no_such_function(1)").await;
    assert_eq!(r["error"]["kind"], "runtime");
}

#[tokio::test]
async fn every_limit_is_enforced() {
    let (app, _state) = server(|c| {
        c.max_body_bytes = 4096;
        c.playground_limits.max_code_bytes = 200;
    });
    let big = post(&app, "/api/run", &json!({"code": "1;".repeat(150)})).await;
    assert_eq!(big.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(big.json()["error"]["kind"], "limit");
    let body = post(&app, "/api/run", &json!({"code": "x".repeat(5000)})).await;
    assert_eq!(body.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(body.json()["error"]["kind"], "body_too_large");
    let raw = |header: (&str, &str), body: Body| {
        let request = Request::post("/api/run").header(header.0, header.1);
        send(&app, request.body(body).unwrap())
    };
    let declared = raw(
        ("content-length", "100000"),
        Body::from("x".repeat(100_000)),
    )
    .await;
    assert_eq!(declared.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(declared.json()["error"]["kind"], "body_too_large");
    let bad = raw(("content-type", "application/json"), Body::from("{code")).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad.json()["error"]["kind"], "bad_request");
    // Each limit stops its run; the elements limits are named in the message.
    let loop_forever = "let i = 0; loop { i += 1; }";
    let many_tensors = "for i in 0..10 { let t = zeros([100]); }";
    for (code, limits, named) in [
        (loop_forever, json!({"max_operations": 1000}), None),
        (
            "zeros([100, 100])",
            json!({"max_tensor_elements": 1000}),
            Some("max_tensor_elements"),
        ),
        (
            many_tensors,
            json!({"max_run_elements": 500}),
            Some("max_run_elements"),
        ),
    ] {
        let r = run_limited(&app, code, limits).await.json();
        assert_eq!(r["error"]["kind"], "limit", "{r}");
        let message = r["error"]["message"].as_str().unwrap_or_default();
        assert!(named.is_none_or(|n| message.contains(n)), "{r}");
    }
    let r = run_limited(
        &app,
        "for i in 0..100 { print(\"line of output\"); }",
        json!({"max_output_bytes": 300}),
    )
    .await
    .json();
    assert_eq!(r["ok"], true);
    assert_eq!(r["truncated"], true);
    let last = r["outputs"].as_array().unwrap().last().unwrap().clone();
    assert!(
        last["text"].as_str().unwrap().contains("truncated"),
        "{last}"
    );
    // A request cannot raise a limit above the server's.
    let r = run_limited(&app, "1", json!({"max_operations": u64::MAX})).await;
    assert_eq!(r.status, StatusCode::OK);
}

#[tokio::test]
async fn a_run_past_its_wall_time_kills_and_replaces_its_worker() {
    let (app, state) = server(|c| {
        c.playground_timeout_ms = 1500;
        c.playground_limits.max_operations = u64::MAX;
    });
    let r = run(&app, "1 + 1").await;
    assert_eq!(r["ok"], true);
    let pool = state.playground().unwrap().pool();
    let before = pool.worker_pids();
    assert_eq!(before.len(), 1);
    let started = Instant::now();
    let r = run(&app, "let i = 0;\nloop { i += 1; }").await;
    let took = started.elapsed();
    assert_eq!(r["ok"], false);
    assert_eq!(r["error"]["kind"], "timeout", "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("1500 ms"));
    assert_eq!(r["worker_restarted"], true);
    assert!(
        took >= Duration::from_millis(1400) && took < Duration::from_secs(6),
        "{took:?}"
    );
    assert!(!pid_alive(before[0]), "the timed-out worker was killed");
    assert_eq!(pool.restarts(), 1);
    let r = run(&app, "2 + 3").await;
    assert_eq!(
        (r["ok"].clone(), r["value"].clone()),
        (json!(true), json!("5"))
    );
    assert_ne!(pool.worker_pids(), before, "a new worker serves");
}

#[tokio::test]
async fn a_crashing_worker_answers_a_structured_error_and_the_server_lives() {
    let (app, state) = server(|c| {
        c.playground_worker_command =
            Some(vec!["sh".into(), "-c".into(), "read line; exit 3".into()]);
    });
    for _ in 0..2 {
        let r = run(&app, "1").await;
        assert_eq!(r["error"]["kind"], "worker_crashed", "{r}");
        assert!(r["error"]["message"].as_str().unwrap().contains("exit"));
        assert_eq!(r["worker_restarted"], true);
    }
    assert_eq!(get(&app, "/healthz").await.status, StatusCode::OK);
    assert!(state.playground().unwrap().pool().restarts() >= 2);
    let (app, _state) = server(|c| {
        c.playground_worker_command = Some(vec!["/nonexistent/netcl-worker".into()]);
    });
    let r = run(&app, "1").await;
    assert_eq!(r["error"]["kind"], "worker_unavailable", "{r}");
}

#[tokio::test]
async fn a_full_queue_answers_busy_and_a_run_can_be_cancelled() {
    let (app, state) = server(|c| {
        c.playground_workers = 1;
        c.playground_queue = 0;
        c.playground_limits.max_operations = u64::MAX;
    });
    let response = open(&app, "/api/run/stream", "let i = 0;\nloop { i += 1; }").await;
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut stream = response.into_body().into_data_stream();
    let first = next_chunk(&mut stream).await.unwrap();
    let (event, data) = events(&first).remove(0);
    assert_eq!(event, "queued");
    let id = data["id"].as_str().unwrap().to_string();
    let busy = post(&app, "/api/run", &json!({"code": "1"})).await;
    assert_eq!(busy.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(busy.json()["error"]["kind"], "busy");
    assert!(busy.header("retry-after").parse::<u64>().unwrap() >= 1);
    let pids = state.playground().unwrap().pool().worker_pids();
    let cancel = post(&app, &format!("/api/run/{id}/cancel"), &json!({})).await;
    assert_eq!(cancel.status, StatusCode::OK, "{}", cancel.text());
    let mut rest = String::new();
    while let Some(chunk) = next_chunk(&mut stream).await {
        rest.push_str(&chunk);
    }
    let last = events(&rest).pop().unwrap();
    assert_eq!(last.0, "result");
    assert_eq!(last.1["error"]["kind"], "cancelled");
    for pid in pids {
        assert!(!pid_alive(pid), "the cancelled run's worker was killed");
    }
    let unknown = post(&app, "/api/run/abc/cancel", &json!({})).await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    let r = run(&app, "40 + 2").await;
    assert_eq!(r["value"], "42");
}

#[tokio::test]
async fn closing_the_stream_stops_the_run() {
    let (app, state) = server(|c| c.playground_limits.max_operations = u64::MAX);
    let response = open(&app, "/api/run?stream=1", "loop { }").await;
    let mut stream = response.into_body().into_data_stream();
    next_chunk(&mut stream).await.unwrap();
    let pool = state.playground().unwrap().pool();
    let deadline = Instant::now() + Duration::from_secs(10);
    while pool.worker_pids().is_empty() {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(stream);
    let deadline = Instant::now() + Duration::from_secs(10);
    while pool.restarts() == 0 {
        assert!(Instant::now() < deadline, "closing the stream ends the run");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(pool.in_flight(), 0);
}

#[tokio::test]
async fn progress_streams_as_server_sent_events() {
    let (app, _state) = server(|_| {});
    let answer = post(
        &app,
        "/api/run/stream",
        &json!({"code": "for i in 0..5 { progress(#{step: i, loss: 1.0 / (i + 1)}); }\nprint(\"done\");"}),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK);
    let evs = events(&answer.text());
    let names: Vec<&str> = evs.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(
        names,
        [
            "queued", "started", "progress", "progress", "progress", "progress", "progress",
            "result"
        ]
    );
    assert_eq!(evs[4].1, json!({"step": 2, "loss": 1.0 / 3.0}));
    assert_eq!(evs[7].1["ok"], true);
    assert_eq!(evs[7].1["outputs"][0]["text"], "done");
}

#[tokio::test]
async fn the_rate_limit_answers_429_per_client() {
    let (app, _state) = server(|c| {
        c.playground_rate_per_minute = 1;
        c.playground_burst = 2;
    });
    let from = |ip: [u8; 4]| {
        let mut r = post_request("/api/run", &json!({"code": "1"}));
        r.extensions_mut()
            .insert(ConnectInfo(SocketAddr::from((ip, 4000))));
        r
    };
    for _ in 0..2 {
        assert_eq!(send(&app, from([10, 0, 0, 1])).await.status, StatusCode::OK);
    }
    let limited = send(&app, from([10, 0, 0, 1])).await;
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(limited.json()["error"]["kind"], "rate_limited");
    let wait: u64 = limited.header("retry-after").parse().unwrap();
    assert!((1..=60).contains(&wait), "{wait}");
    assert_eq!(send(&app, from([10, 0, 0, 2])).await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_configured_token_is_required() {
    let (app, _state) = server(|c| c.playground_token = Some("s3cret".into()));
    let none = post(&app, "/api/run", &json!({"code": "1"})).await;
    assert_eq!(none.status, StatusCode::UNAUTHORIZED);
    assert_eq!(none.json()["error"]["kind"], "unauthorized");
    assert!(none.header("www-authenticate").starts_with("Bearer"));
    let with = |token: &str| {
        Request::post("/api/run")
            .header("content-type", "application/json")
            .header("authorization", format!("Bearer {token}"))
            .body(Body::from(json!({"code": "1"}).to_string()))
            .unwrap()
    };
    assert_eq!(
        send(&app, with("wrong")).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(send(&app, with("s3cret")).await.status, StatusCode::OK);
}

#[tokio::test]
async fn routes_refuse_other_methods_and_vanish_when_turned_off() {
    let (app, _state) = server(|_| {});
    let answer = get(&app, "/api/run").await;
    assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(answer.header("allow"), "POST");
    assert_eq!(answer.json()["error"]["kind"], "method_not_allowed");
    let (off, state) = server(|c| c.playground = false);
    assert!(state.playground().is_none());
    let answer = post(&off, "/api/run", &json!({"code": "1"})).await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert_eq!(answer.json()["error"]["kind"], "not_found");
    let page = get(&off, "/docs/concepts/autotune").await.text();
    assert!(page.contains("data-playground=\"off\""));
    assert!(!page.contains("playground.js") && !page.contains("data-run-api"));
    assert_eq!(get(&off, "/playground").await.status, StatusCode::NOT_FOUND);
    let page = get(&app, "/docs/concepts/autotune").await.text();
    assert!(page.contains("data-run-api=\"/api/run\"") && page.contains("playground.js"));
    assert!(page.contains("data-runnable=\"true\""));
    assert!(
        page.contains("class=\"recorded-output\""),
        "the recorded output stays for readers without JS"
    );
    let playground = get(&app, "/playground").await;
    assert_eq!(playground.status, StatusCode::OK);
    let html = playground.text();
    assert!(html.contains("class=\"code-block runnable playground-editor\""));
    assert!(
        html.matches("class=\"example\"").count() >= 3,
        "every runnable example is listed"
    );
}

#[tokio::test]
async fn shutdown_leaves_no_worker_behind() {
    let (app, state) = server(|c| c.playground_workers = 2);
    let (a, b) = tokio::join!(run(&app, "1"), run(&app, "2"));
    assert_eq!(
        (a["ok"].clone(), b["ok"].clone()),
        (json!(true), json!(true))
    );
    let pool = state.playground().unwrap().pool();
    let pids = pool.worker_pids();
    assert!(!pids.is_empty());
    assert!(pids.iter().all(|p| pid_alive(*p)));
    state.playground().unwrap().shutdown();
    assert!(pool.worker_pids().is_empty());
    for pid in pids {
        assert!(!pid_alive(pid), "worker {pid} outlived the shutdown");
    }
    let after = post(&app, "/api/run", &json!({"code": "1"})).await;
    assert_eq!(after.status, StatusCode::SERVICE_UNAVAILABLE);
}
