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

/// A replica started in a new scratch folder `name` with the config `text` and the shared kernel cache.
fn start(name: &str, text: &str) -> (std::path::PathBuf, Replica) {
    let dir = scratch(name);
    let cfg = config(&dir, text);
    let env = cache_env(&dir);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let server = Replica::start(&cfg, &[], &env);
    (dir, server)
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
}

#[test]
fn sigterm_fails_readyz_at_once_and_lets_the_run_in_flight_finish() {
    let (dir, mut server) = start(
        "drain",
        "drain_delay_ms = 1500\nshutdown_grace_ms = 10000\nsse_heartbeat_ms = 250\n",
    );
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
        // Each turn of the wait loop makes a small tensor, so the loop counts few script operations however fast
        // the machine is (an empty loop ran past max_operations on a fast one).
        let body = r#"{"code": "let t = timestamp(); for i in 0..3 { while t.elapsed < 0.6 * (i + 1) { let z = randn([64], 1); } progress(i); } print(\"finished\");"}"#;
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
    let (dir, mut server) = start(
        "unready",
        "playground_worker_command = [\"/nonexistent/netcl-worker\"]\nallowed_hosts = [\"docs.example.com\"]\n",
    );
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

/// The image and the unit run as a user other than root, for whom `RLIMIT_NPROC` counts threads and is not
/// waived: a worker must start and run a product there (as the image's CPU flavour sets it up). Needs root to
/// switch users; skipped otherwise.
#[test]
fn a_worker_runs_as_a_user_other_than_root() {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        eprintln!("\n!!!!!!!! SKIPPED: switching to another user needs root !!!!!!!!\n");
        return;
    }
    let Some(setpriv) = hosting_support::tool("setpriv", "apt-get install -y util-linux") else {
        return;
    };
    let dir = scratch("nonroot");
    let cache = dir.join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let _ = std::process::Command::new("chmod")
        .args(["-R", "a+rwX"])
        .arg(&dir)
        .status();
    // A cold PoCL builds several kernels first: the job gets a minute.
    let job = r#"{"id": 1, "code": "let c = matmul(randn([24, 16], 1), randn([16, 20], 2)); sum_all(ones([16])).item()",
        "limits": {"max_code_bytes": 65536, "max_operations": 50000000, "max_tensor_elements": 16777216,
                   "max_run_elements": 134217728, "max_output_bytes": 524288, "timeout_ms": 60000}}"#
        .replace('\n', " ");
    for device in ["builtin", "auto"] {
        let mut child = std::process::Command::new(&setpriv)
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_netcl"))
            .args(["--device", device, "worker"])
            .env("HOME", &cache)
            .env("XDG_CACHE_HOME", &cache)
            .env("POCL_CACHE_DIR", cache.join("pocl"))
            .env("NETCL_PROGRAM_CACHE", cache.join("programs"))
            .env("NETCL_AUTOTUNE", "off")
            .env("NETCL_WORKER_ALLOW_FORK", "1")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(job.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        // Progress lines (the engine reports the kernels it builds) come before the result.
        let last = text
            .lines()
            .rev()
            .find(|l| l.contains("\"event\":\"result\""))
            .unwrap_or("");
        let reply: serde_json::Value = serde_json::from_str(last.trim()).unwrap_or_else(|_| {
            panic!(
                "{device}: no reply: {text}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        assert_eq!(reply["result"]["ok"], true, "{device}: {reply}");
        assert_eq!(reply["result"]["value"], "16.0", "{device}: {reply}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
