//! Shared helpers of the hosting tests: `netcl serve` replicas started from the built binary, a plain HTTP/1.1
//! client (one connection per request), and the repository's deploy files.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A deploy file's text.
pub fn deploy(path: &str) -> String {
    std::fs::read_to_string(root().join("deploy").join(path))
        .unwrap_or_else(|e| panic!("deploy/{path}: {e}"))
}

/// A fresh empty directory under the system temp dir.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("netcl-hosting-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Whether the tests run under CI, where a missing tool is a failure rather than a skip.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// `program` when it is installed (on `PATH` or in the sbin directories), else `None` after a loud skip
/// message; under CI a missing program fails the test.
pub fn tool(program: &str, install: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"])
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file());
    if found.is_none() {
        let msg = format!("{program} is not installed ({install})");
        assert!(
            !under_ci(),
            "{msg}; under CI=true a missing {program} is a failure"
        );
        eprintln!("\n!!!!!!!! SKIPPED: {msg} !!!!!!!!\n");
    }
    found
}

/// `program` as [`tool`] finds it, installed by Debian's package of that name and the test dependencies.
pub fn packaged_tool(program: &str) -> Option<PathBuf> {
    tool(
        program,
        &format!("apt-get install -y {program}; scripts/install-deps.sh --test"),
    )
}

/// An answer: status, headers (names in lower case) and the body (chunked bodies decoded).
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    /// The first header named `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON (`Null` when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// Sends one request on a new connection and reads the answer to its end. `headers` are sent as given, after
/// `Host: docs.example.com` unless they name a host themselves.
pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> std::io::Result<Answer> {
    let mut stream = connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    stream.write_all(head(method, path, headers, body).as_bytes())?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    parse(&raw)
}

/// Connects with a short timeout.
pub fn connect(addr: &str) -> std::io::Result<TcpStream> {
    let sock: SocketAddr = addr
        .parse()
        .map_err(|e| std::io::Error::other(format!("{addr}: {e}")))?;
    let s = TcpStream::connect_timeout(&sock, Duration::from_secs(5))?;
    let _ = s.set_nodelay(true);
    Ok(s)
}

/// A request head (and body) in one string.
pub fn head(method: &str, path: &str, headers: &[(&str, &str)], body: Option<&str>) -> String {
    let mut text = format!("{method} {path} HTTP/1.1\r\n");
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        text.push_str("Host: docs.example.com\r\n");
    }
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("Connection: close\r\n");
    if let Some(body) = body {
        text.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    text.push_str("\r\n");
    if let Some(body) = body {
        text.push_str(body);
    }
    text
}

/// Parses a whole answer read to the connection's end.
pub fn parse(raw: &[u8]) -> std::io::Result<Answer> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other(format!("no answer head in {} bytes", raw.len())))?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line in {head}")))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"))
    {
        body = dechunk(&body);
    }
    Ok(Answer {
        status,
        headers,
        body,
    })
}

/// Decodes a chunked body (as much of it as arrived).
pub fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size = std::str::from_utf8(&raw[..eol])
            .ok()
            .and_then(|s| usize::from_str_radix(s.split(';').next().unwrap_or("").trim(), 16).ok());
        let Some(size) = size else { return out };
        if size == 0 || raw.len() < eol + 2 + size {
            out.extend_from_slice(&raw[(eol + 2).min(raw.len())..(eol + 2 + size).min(raw.len())]);
            return out;
        }
        out.extend_from_slice(&raw[eol + 2..eol + 2 + size]);
        raw = &raw[(eol + 4 + size).min(raw.len())..];
    }
}

/// One event-stream line as it arrived: the time since the request was sent and the line.
pub type Timed = (Duration, String);

/// Posts `body` to the event-stream route `path` and returns every `event:` and comment line with its arrival
/// time, and the status. Lines are read from the raw stream as they come (chunk sizes are skipped).
pub fn stream(
    addr: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> std::io::Result<(u16, Vec<Timed>)> {
    let mut s = connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let start = Instant::now();
    s.write_all(head("POST", path, headers, Some(body)).as_bytes())?;
    let mut reader = BufReader::new(s);
    let mut status = 0;
    let mut lines = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if lines.is_empty() && status == 0 => return Err(e),
            Err(_) => break,
        }
        let t = line.trim_end().to_string();
        if status == 0 {
            status = t
                .split(' ')
                .nth(1)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
        } else if t.starts_with("event:") || t.starts_with(':') || t.starts_with("data:") {
            lines.push((start.elapsed(), t));
        }
    }
    Ok((status, lines))
}

/// A `netcl serve` process.
pub struct Replica {
    child: Child,
    /// `127.0.0.1:port`.
    pub addr: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Replica {
    /// Starts `netcl serve --config <config> --bind 127.0.0.1:0` over the repository's content with `env`
    /// added, and waits for its address.
    pub fn start(config: &Path, args: &[&str], env: &[(&str, &str)]) -> Replica {
        let mut command = Command::new(env!("CARGO_BIN_EXE_netcl"));
        command
            .args(["serve", "--bind", "127.0.0.1:0", "--config"])
            .arg(config)
            .arg("--content")
            .arg(root().join("web-wiki/content"))
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("start netcl serve");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("netcl wiki on http://") {
                    let addr = rest.split('/').next().unwrap_or("").to_string();
                    let _ = tx.send(addr);
                }
                sink.lock().unwrap().push(line);
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| {
                let _ = child.kill();
                panic!(
                    "netcl serve did not start:\n{}",
                    log.lock().unwrap().join("\n")
                )
            });
        Replica { child, addr, log }
    }

    /// Everything the replica wrote to stderr so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// The process id.
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Polls `<base>/readyz` until it answers 200; its JSON. Panics with the last answer after `limit`.
    pub fn wait_ready(&self, base: &str, limit: Duration) -> serde_json::Value {
        let start = Instant::now();
        let mut last = String::new();
        while start.elapsed() < limit {
            match request(&self.addr, "GET", &format!("{base}/readyz"), &[], None) {
                Ok(a) if a.status == 200 => return a.json(),
                Ok(a) => last = format!("{} {}", a.status, a.text()),
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!(
            "{} not ready after {limit:?}: {last}\n{}",
            self.addr,
            self.log()
        );
    }

    /// Sends SIGTERM (the drain).
    pub fn terminate(&self) {
        // SAFETY: kill with a signal number on our own child's pid.
        unsafe {
            libc::kill(self.pid(), libc::SIGTERM);
        }
    }

    /// Kills the process at once (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits up to `limit` for the process to exit; its exit status.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The replicas' environment: caches in `dir`, shared by both (they are safe under concurrent processes).
pub fn cache_env(dir: &Path) -> Vec<(String, String)> {
    vec![
        (
            "NETCL_AUTOTUNE_CACHE".into(),
            dir.join("autotune.json").display().to_string(),
        ),
        (
            "NETCL_PROGRAM_CACHE".into(),
            dir.join("programs").display().to_string(),
        ),
        (
            "XDG_CACHE_HOME".into(),
            dir.join("xdg").display().to_string(),
        ),
    ]
}

/// A loopback port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}
