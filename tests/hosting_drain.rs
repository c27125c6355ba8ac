//! Readiness and the drain of one `netcl serve`: `/readyz` answers 200 only once a check run finished on a
//! worker, names the reason otherwise, and fails at once on SIGTERM while a run in flight finishes; the server
//! stops accepting after its drain delay and exits when the run is done. `/metrics` carries the run-queue
//! gauge the autoscaler reads. Probes are answered whatever `Host` they send.

mod hosting_support;

use std::time::{Duration, Instant};

use hosting_support::{Replica, cache_env, connect, request, scratch};

fn config(dir: &std::path::Path, text: &str) -> std::path::PathBuf {
    let path = dir.join("netcl.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
}

#[test]
fn sigterm_fails_readyz_at_once_and_lets_the_run_in_flight_finish() {
    let dir = scratch("drain");
    let cfg = config(
        &dir,
        "drain_delay_ms = 1500\nshutdown_grace_ms = 10000\nsse_heartbeat_ms = 250\n",
    );
    let env = cache_env(&dir);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut server = Replica::start(&cfg, &[], &env);
    let ready = server.wait_ready("", Duration::from_secs(90));
    assert_eq!(ready["ready"], true, "{ready}");
    assert!(
        ready["device"].as_str().is_some_and(|d| !d.is_empty()),
        "{ready}"
    );
    let local = [("Host", "localhost")];
    let metrics = request(&server.addr, "GET", "/metrics", &local, None)
        .unwrap()
        .text();
    assert_eq!(metric(&metrics, "netcl_wiki_ready"), Some(1.0), "{metrics}");
    assert_eq!(
        metric(&metrics, "netcl_wiki_run_queue"),
        Some(0.0),
        "{metrics}"
    );
    assert_eq!(
        metric(&metrics, "netcl_wiki_run_queue_capacity"),
        Some(17.0),
        "{metrics}"
    );

    // A run of about 1.8 s, read as it streams; SIGTERM after its first progress event.
    let addr = server.addr.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let runner = std::thread::spawn(move || {
        use std::io::{BufRead, BufReader, Write};
        let body = r#"{"code": "let t = timestamp(); for i in 0..3 { while t.elapsed < 0.6 * (i + 1) { } progress(i); } print(\"finished\");"}"#;
        let mut s = connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.write_all(
            hosting_support::head(
                "POST",
                "/api/run/stream",
                &[("Host", "localhost")],
                Some(body),
            )
            .as_bytes(),
        )
        .unwrap();
        let mut lines = Vec::new();
        for line in BufReader::new(s).lines().map_while(Result::ok) {
            if line == "event: progress" && !lines.iter().any(|l| l == "event: progress") {
                let _ = tx.send(());
            }
            lines.push(line);
        }
        (lines, Instant::now())
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("the run reported progress");
    server.terminate();
    let signalled = Instant::now();
    // Draining: readiness fails at once, liveness holds, the gauges say so and the run is still in flight.
    // The signal is delivered asynchronously: readiness must fail within moments of it.
    let readyz = loop {
        let a = request(&server.addr, "GET", "/readyz", &local, None).unwrap();
        if a.status != 200 || signalled.elapsed() > Duration::from_millis(500) {
            break a;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    eprintln!("readyz failed {:?} after SIGTERM", signalled.elapsed());
    assert_eq!(readyz.status, 503, "{}", readyz.text());
    assert!(
        readyz.json()["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("draining")),
        "{}",
        readyz.text()
    );
    assert_eq!(readyz.header("connection"), Some("close"));
    let healthz = request(&server.addr, "GET", "/healthz", &local, None).unwrap();
    assert_eq!(healthz.status, 200, "{}", healthz.text());
    assert_eq!(healthz.json()["draining"], true);
    let metrics = request(&server.addr, "GET", "/metrics", &local, None)
        .unwrap()
        .text();
    assert_eq!(
        metric(&metrics, "netcl_wiki_draining"),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(metric(&metrics, "netcl_wiki_ready"), Some(0.0), "{metrics}");
    assert_eq!(
        metric(&metrics, "netcl_wiki_run_queue"),
        Some(1.0),
        "{metrics}"
    );
    // Past the drain delay the listener is closed.
    std::thread::sleep(
        Duration::from_millis(1500).saturating_sub(signalled.elapsed())
            + Duration::from_millis(300),
    );
    assert!(
        connect(&server.addr).is_err(),
        "still accepting after the drain delay"
    );
    let (lines, finished) = runner.join().unwrap();
    let text = lines.join("\n");
    assert!(
        text.contains("event: result") && text.contains("\"ok\":true") && text.contains("finished"),
        "{text}"
    );
    assert!(text.contains(": heartbeat"), "{text}");
    let status = server
        .wait_exit(Duration::from_secs(15))
        .expect("the server exited after the drain");
    assert!(status.success(), "{status:?}\n{}", server.log());
    assert!(Instant::now() >= finished);
    assert!(server.log().contains("draining"), "{}", server.log());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn readyz_names_the_reason_when_no_worker_can_start_and_probes_skip_the_host_check() {
    let dir = scratch("unready");
    let cfg = config(
        &dir,
        "playground_worker_command = [\"/nonexistent/netcl-worker\"]\nallowed_hosts = [\"docs.example.com\"]\n",
    );
    let env = cache_env(&dir);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut server = Replica::start(&cfg, &[], &env);
    // A probe by address, as the kubelet sends it.
    let by_ip = [("Host", "10.1.2.3:8080")];
    let start = Instant::now();
    let mut last = serde_json::Value::Null;
    while start.elapsed() < Duration::from_secs(20) {
        let a = request(&server.addr, "GET", "/readyz", &by_ip, None).unwrap();
        assert_eq!(a.status, 503, "{}", a.text());
        last = a.json();
        if last["reason"]
            .as_str()
            .is_some_and(|r| !r.starts_with("starting"))
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let reason = last["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("worker") && reason.contains("worker_unavailable"),
        "{last}"
    );
    assert_eq!(last["ready"], false);
    let healthz = request(&server.addr, "GET", "/healthz", &by_ip, None).unwrap();
    assert_eq!(healthz.status, 200, "{}", healthz.text());
    let metrics = request(&server.addr, "GET", "/metrics", &by_ip, None).unwrap();
    assert_eq!(metrics.status, 200);
    assert_eq!(metric(&metrics.text(), "netcl_wiki_ready"), Some(0.0));
    // Pages still check the name.
    let page = request(&server.addr, "GET", "/", &by_ip, None).unwrap();
    assert_eq!(page.status, 421, "{}", page.text());
    // Without a drain delay SIGTERM stops it promptly.
    server.terminate();
    let status = server.wait_exit(Duration::from_secs(10)).expect("exited");
    assert!(status.success(), "{status:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
