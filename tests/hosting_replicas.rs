//! Two `netcl serve` replicas behind Debian's nginx, configured with the very files of `deploy/nginx/` that
//! the "Hosting for a team" page shows: pages, search and runs through the balancer, single sign-on in front
//! of the playground token (a stand-in answers oauth2-proxy's `/oauth2/auth`), event streams through the
//! proxy, and one replica killed mid-load with every later request answered by the other.
//!
//! The replicas run `deploy/netcl.toml` with one change (a 200 ms heartbeat, so a test sees it). The nginx
//! files are used as they are; only the upstream addresses in `netcl-upstream.conf` are replaced by the test's
//! ports, and the test writes `netcl-token.conf` from `netcl-token.conf.example` with its own token.

mod common;
mod hosting_support;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hosting_support::{
    Replica, cache_env, deploy, free_port, packaged_tool, request, scratch, stream, tool,
};

/// The cookie the oauth2-proxy stand-in accepts as a signed-in reader.
const SIGNED_IN: (&str, &str) = ("Cookie", "_oauth2_proxy=signed-in");

/// A stand-in for oauth2-proxy: `/oauth2/auth` answers 202 for the signed-in cookie and 401 otherwise, and
/// `/oauth2/sign_in` redirects to an identity provider. Returns its address and how many checks it answered.
fn fake_oauth2_proxy() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let checks = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&checks);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let counted = Arc::clone(&counted);
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut first = String::new();
                let _ = reader.read_line(&mut first);
                let mut signed_in = false;
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    if line.to_ascii_lowercase().starts_with("cookie:")
                        && line.contains("_oauth2_proxy=signed-in")
                    {
                        signed_in = true;
                    }
                    line.clear();
                }
                let answer = if first.starts_with("GET /oauth2/auth") {
                    counted.fetch_add(1, Ordering::Relaxed);
                    if signed_in {
                        "HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    } else {
                        "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    }
                } else {
                    "HTTP/1.1 302 Found\r\nLocation: https://idp.example/authorize\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                };
                let _ = conn.write_all(answer.as_bytes());
            });
        }
    });
    (addr, checks)
}

/// nginx serving `deploy/nginx/netcl-locations.conf` on a loopback port, balancing over `replicas`.
struct Nginx {
    child: Child,
    addr: String,
    dir: std::path::PathBuf,
}

impl Nginx {
    fn start(nginx: &Path, dir: &Path, replicas: [&str; 2], oauth2: &str, token: &str) -> Nginx {
        let conf = dir.join("conf");
        std::fs::create_dir_all(conf.join("tmp")).unwrap();
        for file in ["netcl-locations.conf", "netcl-proxy-headers.conf"] {
            std::fs::write(conf.join(file), deploy(&format!("nginx/{file}"))).unwrap();
        }
        let mut upstream = deploy("nginx/netcl-upstream.conf");
        for (from, to) in [
            ("127.0.0.1:8081", replicas[0]),
            ("127.0.0.1:8082", replicas[1]),
            ("127.0.0.1:4180", oauth2),
        ] {
            assert_eq!(
                upstream.matches(from).count(),
                1,
                "{from} in netcl-upstream.conf"
            );
            upstream = upstream.replace(from, to);
        }
        std::fs::write(conf.join("netcl-upstream.conf"), upstream).unwrap();
        let example = deploy("nginx/netcl-token.conf.example");
        assert!(example.contains("REPLACE-WITH-THE-TOKEN"), "{example}");
        std::fs::write(
            conf.join("netcl-token.conf"),
            example.replace("REPLACE-WITH-THE-TOKEN", token),
        )
        .unwrap();
        let port = free_port();
        let d = conf.display();
        let main = format!(
            "daemon off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log info;\n\
             events {{ worker_connections 512; }}\n\
             http {{\n\
             log_format hosting '$msec $status $upstream_addr $request_method $request_uri';\n\
             access_log {d}/access.log hosting;\n\
             client_body_temp_path {d}/tmp/body;\nproxy_temp_path {d}/tmp/proxy;\n\
             fastcgi_temp_path {d}/tmp/fastcgi;\nuwsgi_temp_path {d}/tmp/uwsgi;\nscgi_temp_path {d}/tmp/scgi;\n\
             include netcl-upstream.conf;\n\
             server {{\n  listen 127.0.0.1:{port};\n  server_name docs.example.com;\n  include netcl-locations.conf;\n}}\n\
             }}\n"
        );
        std::fs::write(conf.join("nginx.conf"), main).unwrap();
        // Workers may run as another user: they write the temporary files.
        let _ = Command::new("chmod")
            .args(["-R", "a+rwX"])
            .arg(&conf)
            .status();
        let child = Command::new(nginx)
            .arg("-p")
            .arg(&conf)
            .arg("-c")
            .arg(conf.join("nginx.conf"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start nginx");
        let addr = format!("127.0.0.1:{port}");
        let start = Instant::now();
        while hosting_support::connect(&addr).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "nginx did not listen: {}",
                std::fs::read_to_string(conf.join("error.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Nginx {
            child,
            addr,
            dir: conf,
        }
    }

    /// Access-log lines: (time, status, upstream addresses tried, method, uri).
    fn log(&self) -> Vec<(f64, u16, String, String, String)> {
        std::fs::read_to_string(self.dir.join("access.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                let n = f.len();
                (n >= 5).then(|| {
                    (
                        f[0].parse().unwrap_or(0.0),
                        f[1].parse().unwrap_or(0),
                        f[2..n - 2].join(" "),
                        f[n - 2].to_string(),
                        f[n - 1].to_string(),
                    )
                })
            })
            .collect()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The replica config: `deploy/netcl.toml` with a 200 ms heartbeat.
fn replica_config(dir: &Path) -> std::path::PathBuf {
    let text = deploy("netcl.toml");
    assert!(text.contains("\nsse_heartbeat_ms = 15000\n"), "{text}");
    let path = dir.join("netcl.toml");
    std::fs::write(
        &path,
        text.replace("\nsse_heartbeat_ms = 15000\n", "\nsse_heartbeat_ms = 200\n"),
    )
    .unwrap();
    path
}

/// A run that reports progress three times, 400 ms apart.
const PACED: &str = r#"{"code": "let t = timestamp(); for i in 0..3 { while t.elapsed < 0.4 * (i + 1) { } progress(i); } print(\"paced\");"}"#;
/// A small run.
const SMALL: &str = r#"{"code": "let s = sum_all(ones([64])); print(`sum ${s.item()}`);"}"#;

/// One request of the load: when it started and ended (from the load's start), what it was, and its status
/// (0: no answer at all).
#[derive(Debug, Clone)]
struct Rec {
    start: Duration,
    end: Duration,
    what: String,
    status: u16,
    complete: bool,
}

const PAGES: [&str; 6] = [
    "/wiki/",
    "/wiki/docs/faq",
    "/wiki/docs/concepts/device",
    "/wiki/search?q=conv",
    "/wiki/api/search?q=gemm",
    "/wiki/playground",
];

#[test]
fn two_replicas_behind_nginx_answer_alike_and_one_dying_loses_only_its_in_flight_requests() {
    let Some(nginx) = packaged_tool("nginx") else {
        return;
    };
    let dir = scratch("replicas");
    let config = replica_config(&dir);
    let token = format!(
        "t{:x}{:x}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let mut env = cache_env(&dir);
    env.push(("NETCL_PLAYGROUND_TOKEN".into(), token.clone()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut a = Replica::start(&config, &[], &env);
    let b = Replica::start(&config, &[], &env);
    let ready_a = a.wait_ready("/wiki", Duration::from_secs(90));
    let ready_b = b.wait_ready("/wiki", Duration::from_secs(90));
    assert_eq!(ready_a["device"], ready_b["device"], "{ready_a} {ready_b}");
    let (oauth2, checks) = fake_oauth2_proxy();
    let proxy = Nginx::start(&nginx, &dir, [&a.addr, &b.addr], &oauth2, &token);
    let via = proxy.addr.clone();

    // Replicas answer alike: every page, search and asset byte for byte, with the same ETag, directly and
    // through the proxy.
    for path in PAGES
        .iter()
        .chain(&["/wiki/static/playground.js", "/wiki/llms.txt"])
    {
        let one = request(&a.addr, "GET", path, &[], None).unwrap();
        let two = request(&b.addr, "GET", path, &[], None).unwrap();
        let proxied = request(&via, "GET", path, &[SIGNED_IN], None).unwrap();
        assert_eq!(one.status, 200, "{path}: {}", one.text());
        assert_eq!(one.body, two.body, "{path} differs between replicas");
        assert_eq!(one.header("etag"), two.header("etag"), "{path}");
        assert_eq!(
            proxied.status,
            200,
            "{path} through nginx: {}",
            proxied.text()
        );
        assert_eq!(proxied.body, one.body, "{path} through nginx");
    }
    // Share links carry the code in the URL fragment, which no server sees: the playground page that opens
    // them is the same bytes everywhere (checked above), so a link made on one replica opens on any.

    // Single sign-on: signed-out readers are sent to sign in, for pages and runs alike; the replicas want the
    // token, which only the proxy adds.
    let out = request(&via, "GET", "/wiki/docs/faq", &[], None).unwrap();
    assert_eq!(out.status, 302, "{}", out.text());
    assert!(
        out.header("location")
            .is_some_and(|l| l.contains("/oauth2/sign_in?rd=")),
        "{:?}",
        out.headers
    );
    let out = request(&via, "POST", "/wiki/api/run", &[], Some(SMALL)).unwrap();
    assert_eq!(out.status, 302, "a signed-out run: {}", out.text());
    let direct = request(&a.addr, "POST", "/wiki/api/run", &[], Some(SMALL)).unwrap();
    assert_eq!(
        direct.status,
        401,
        "a run without the token: {}",
        direct.text()
    );
    let run = request(&via, "POST", "/wiki/api/run", &[SIGNED_IN], Some(SMALL)).unwrap();
    assert_eq!(run.status, 200, "{}", run.text());
    assert_eq!(run.json()["ok"], true, "{}", run.text());
    assert!(run.text().contains("sum 64"), "{}", run.text());
    assert!(
        checks.load(Ordering::Relaxed) > 0,
        "nginx never asked the sign-on proxy"
    );

    // An event stream through the proxy arrives as it is written: progress 400 ms apart arrives 400 ms apart,
    // with heartbeats in the gaps, and the result last.
    let (status, lines) = stream(&via, "/wiki/api/run/stream", &[SIGNED_IN], PACED).unwrap();
    assert_eq!(status, 200, "{lines:?}");
    let at = |name: &str| -> Vec<Duration> {
        lines
            .iter()
            .filter(|(_, l)| l == name)
            .map(|(t, _)| *t)
            .collect()
    };
    let progress = at("event: progress");
    let results = at("event: result");
    assert_eq!(progress.len(), 3, "{lines:?}");
    assert_eq!(results.len(), 1, "{lines:?}");
    for pair in progress.windows(2) {
        assert!(
            pair[1] - pair[0] > Duration::from_millis(250),
            "progress events arrived together (buffered by the proxy): {lines:?}"
        );
    }
    assert!(
        results[0] > progress[0] + Duration::from_millis(600),
        "{lines:?}"
    );
    assert!(
        !at(": heartbeat").is_empty(),
        "no heartbeat through the proxy: {lines:?}"
    );
    eprintln!(
        "stream through nginx: progress at {:?}, result at {:?}, {} heartbeats",
        progress,
        results[0],
        at(": heartbeat").len()
    );

    // Load through the proxy: readers, a runner and a streamer; replica A is killed mid-load.
    let records = Arc::new(Mutex::new(Vec::<Rec>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    // A client thread repeats its probe (the request's name, status and whether it completed), recording
    // each request, until stopped.
    let client = |pause: u64, mut probe: Box<dyn FnMut() -> (String, u16, bool) + Send>| {
        let (records, stop) = (Arc::clone(&records), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let start = t0.elapsed();
                let (what, status, complete) = probe();
                let end = t0.elapsed();
                let rec = Rec {
                    start,
                    end,
                    what,
                    status,
                    complete,
                };
                records.lock().unwrap().push(rec);
                std::thread::sleep(Duration::from_millis(pause));
            }
        })
    };
    let mut clients = Vec::new();
    for i in 0..3 {
        let (via, mut n) = (via.clone(), i);
        clients.push(client(
            5,
            Box::new(move || {
                let path = PAGES[n % PAGES.len()];
                n += 1;
                match request(&via, "GET", path, &[SIGNED_IN], None) {
                    Ok(a) => (format!("GET {path}"), a.status, !a.body.is_empty()),
                    Err(_) => (format!("GET {path}"), 0, false),
                }
            }),
        ));
    }
    let runner = via.clone();
    clients.push(client(
        400,
        Box::new(move || {
            let answer = request(&runner, "POST", "/wiki/api/run", &[SIGNED_IN], Some(SMALL));
            let (status, complete) = match &answer {
                Ok(a) => (a.status, a.json()["ok"] == true),
                Err(_) => (0, false),
            };
            ("POST /wiki/api/run".into(), status, complete)
        }),
    ));
    let streamer = via.clone();
    clients.push(client(
        0,
        Box::new(move || {
            let (status, complete) =
                match stream(&streamer, "/wiki/api/run/stream", &[SIGNED_IN], PACED) {
                    Ok((s, lines)) => (s, lines.iter().any(|(_, l)| l == "event: result")),
                    Err(_) => (0, false),
                };
            ("POST /wiki/api/run/stream".into(), status, complete)
        }),
    ));
    std::thread::sleep(Duration::from_millis(2500));
    let killed_at_wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let kill_start = t0.elapsed();
    a.kill();
    let killed = t0.elapsed();
    std::thread::sleep(Duration::from_millis(3500));
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let records = records.lock().unwrap().clone();
    let failed = |r: &Rec| r.status == 0 || r.status >= 500 || !r.complete;
    let before: Vec<&Rec> = records.iter().filter(|r| r.end < kill_start).collect();
    let in_flight: Vec<&Rec> = records
        .iter()
        .filter(|r| r.start <= killed && r.end >= kill_start)
        .collect();
    let after: Vec<&Rec> = records.iter().filter(|r| r.start > killed).collect();
    let in_flight_failed: Vec<&&Rec> = in_flight.iter().filter(|r| failed(r)).collect();
    eprintln!(
        "load through nginx: {} requests ({} before the kill, {} in flight at it, {} after); in flight and lost: {:?}",
        records.len(),
        before.len(),
        in_flight.len(),
        after.len(),
        in_flight_failed
            .iter()
            .map(|r| format!("{} -> {}", r.what, r.status))
            .collect::<Vec<_>>()
    );
    let before_failed: Vec<&&Rec> = before.iter().filter(|r| failed(r)).collect();
    assert!(
        before_failed.is_empty(),
        "failures before the kill: {before_failed:?}"
    );
    let after_failed: Vec<&&Rec> = after.iter().filter(|r| failed(r)).collect();
    assert!(
        after_failed.is_empty(),
        "failures after the kill: {after_failed:?}"
    );
    for kind in ["GET", "POST /wiki/api/run", "POST /wiki/api/run/stream"] {
        assert!(
            after.iter().any(|r| r.what.starts_with(kind)),
            "no {kind} after the kill: {after:?}"
        );
    }
    // The balancer used both replicas before the kill, and only B after it.
    let log = proxy.log();
    let used = |addr: &str, from: f64, to: f64| {
        log.iter()
            .filter(|(t, _, up, _, _)| *t >= from && *t < to && up.split(", ").last() == Some(addr))
            .count()
    };
    assert!(
        used(&a.addr, 0.0, killed_at_wall) > 0 && used(&b.addr, 0.0, killed_at_wall) > 0,
        "{log:?}"
    );
    let settled = killed_at_wall + (killed - kill_start).as_secs_f64() + 0.05;
    assert_eq!(
        used(&a.addr, settled, f64::MAX),
        0,
        "answers from the killed replica: {log:?}"
    );
    assert!(used(&b.addr, settled, f64::MAX) > 0, "{log:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The TLS site file of the page passes `nginx -t` with the other files beside it (a self-signed certificate
/// stands in for the real one).
#[test]
fn the_tls_site_config_passes_nginx_t() {
    let Some(nginx) = packaged_tool("nginx") else {
        return;
    };
    let Some(openssl) = tool("openssl", "apt-get install -y openssl") else {
        return;
    };
    let dir = scratch("nginx-t");
    let conf = dir.join("conf");
    std::fs::create_dir_all(conf.join("tmp")).unwrap();
    common::output_ok(
        Command::new(openssl)
            .args([
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "1",
                "-subj",
                "/CN=docs.example.com",
                "-keyout",
            ])
            .arg(dir.join("privkey.pem"))
            .arg("-out")
            .arg(dir.join("fullchain.pem")),
    );
    for file in [
        "netcl-locations.conf",
        "netcl-proxy-headers.conf",
        "netcl-upstream.conf",
    ] {
        std::fs::write(conf.join(file), deploy(&format!("nginx/{file}"))).unwrap();
    }
    std::fs::write(
        conf.join("netcl-token.conf"),
        deploy("nginx/netcl-token.conf.example"),
    )
    .unwrap();
    let site = deploy("nginx/netcl-site.conf")
        .replace("/etc/ssl/docs.example.com", &dir.display().to_string());
    std::fs::write(conf.join("netcl-site.conf"), site).unwrap();
    let d = conf.display();
    std::fs::write(
        conf.join("nginx.conf"),
        format!(
            "pid {d}/nginx.pid;\nerror_log {d}/error.log;\nevents {{}}\nhttp {{\n\
             client_body_temp_path {d}/tmp/body;\nproxy_temp_path {d}/tmp/proxy;\n\
             include netcl-upstream.conf;\ninclude netcl-site.conf;\n}}\n"
        ),
    )
    .unwrap();
    let out = Command::new(nginx)
        .arg("-t")
        .arg("-p")
        .arg(&conf)
        .arg("-c")
        .arg(conf.join("nginx.conf"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && text.contains("test is successful"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
