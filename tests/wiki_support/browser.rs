//! WebDriver helpers of the browser tests: a wiki server on a free port, chromedriver and headless Chromium, a
//! session with find, click, keys, script and screenshots (kept in `artifacts/screenshots/`), and layout probes.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{TestEngine, content_dir, scratch};
use serde_json::{Value, json};

pub const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";
pub const WAIT: Duration = Duration::from_secs(10);

pub fn binary(env: &str, default: &str) -> Option<PathBuf> {
    let path = std::env::var_os(env)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default));
    path.is_file().then_some(path)
}

/// Starts the wiki on a free loopback port in a background runtime.
pub fn start_wiki() -> SocketAddr {
    start_wiki_with(|_| {})
}

/// Like [`start_wiki`], with `configure` applied to the config.
pub fn start_wiki_with(
    configure: impl FnOnce(&mut netcl::wiki::config::Config) + Send + 'static,
) -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        super::runtime().block_on(async move {
            let mut config = netcl::wiki::config::Config {
                content_dir: content_dir(),
                ..Default::default()
            };
            configure(&mut config);
            let state = netcl::wiki::server::AppState::new(config, Arc::new(TestEngine)).unwrap();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            axum::serve(listener, netcl::wiki::server::router(state))
                .await
                .unwrap();
        });
    });
    rx.recv_timeout(WAIT).expect("wiki server did not start")
}

/// The wiki with real playground workers (this package's `netcl worker`), runs of at most `timeout_ms` and no
/// operation limit.
pub fn start_playground_wiki(timeout_ms: u64) -> SocketAddr {
    start_wiki_with(move |c| {
        c.playground_worker_command =
            Some(vec![env!("CARGO_BIN_EXE_netcl").into(), "worker".into()]);
        c.playground_timeout_ms = timeout_ms;
        c.playground_limits.max_operations = u64::MAX;
    })
}

/// Asserts that the browser's log holds no Content-Security-Policy refusal.
pub fn assert_no_csp_violations(s: &Session) {
    let log = s.call("POST", "/se/log", Some(json!({"type": "browser"})));
    let refused: Vec<String> = log
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["message"].as_str())
        .filter(|m| m.contains("Content Security Policy"))
        .map(str::to_string)
        .collect();
    assert!(refused.is_empty(), "CSP violations: {refused:?}");
}

/// chromedriver, stopped when dropped.
pub struct Driver {
    child: Child,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One HTTP/1.1 request to chromedriver; returns the decoded JSON body.
pub fn http(port: u16, method: &str, path: &str, body: Option<&Value>) -> std::io::Result<Value> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let payload = body.map(|b| b.to_string()).unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{payload}",
        payload.len()
    )?;
    // chromedriver may keep the connection open: read the head, then exactly Content-Length bytes (or chunks).
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Err(std::io::Error::other(
                "connection closed before the response head",
            ));
        }
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).to_ascii_lowercase();
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok());
    let chunked = head.contains("transfer-encoding: chunked");
    while length.is_some_and(|n| raw.len() < head_end + n)
        || (chunked && !raw.ends_with(b"0\r\n\r\n"))
    {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&raw[head_end..]).into_owned();
    let mut body: &str = &text;
    let decoded;
    if chunked {
        let mut out = String::new();
        while let Some((size, rest)) = body.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 || rest.len() < n {
                break;
            }
            out.push_str(&rest[..n]);
            body = rest[n..].trim_start_matches("\r\n");
        }
        decoded = out;
        body = &decoded;
    }
    serde_json::from_str(body).map_err(|e| std::io::Error::other(format!("{e}: {body}")))
}

pub struct Session {
    pub port: u16,
    pub id: String,
}

impl Session {
    pub fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let url = format!("/session/{}{path}", self.id);
        let answer = http(self.port, method, &url, body.as_ref())
            .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
        if answer["value"]["error"].is_string() {
            panic!("{method} {url}: {}", answer["value"]);
        }
        answer["value"].clone()
    }

    pub fn go(&self, url: &str) {
        self.call("POST", "/url", Some(json!({"url": url})));
    }

    pub fn url(&self) -> String {
        self.call("GET", "/url", None)
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    pub fn js(&self, script: &str) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
    }

    pub fn find(&self, css: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let answer = http(
                self.port,
                "POST",
                &format!("/session/{}/element", self.id),
                Some(&json!({"using": "css selector", "value": css})),
            )
            .unwrap();
            if let Some(id) = answer["value"][ELEMENT_KEY].as_str() {
                return id.to_string();
            }
            assert!(
                Instant::now() < deadline,
                "no element `{css}`: {}",
                answer["value"]
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn click(&self, css: &str) {
        let id = self.find(css);
        // Centre the element first: the sticky header would otherwise cover one scrolled to the top edge.
        self.call(
            "POST",
            "/execute/sync",
            Some(json!({"script": "arguments[0].scrollIntoView({block: 'center'});", "args": [{ELEMENT_KEY: id}]})),
        );
        self.call("POST", &format!("/element/{id}/click"), Some(json!({})));
    }

    pub fn text(&self, css: &str) -> String {
        let id = self.find(css);
        self.call("GET", &format!("/element/{id}/text"), None)
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    pub fn keys(&self, keys: &[&str]) {
        let mut actions = Vec::new();
        for key in keys {
            actions.push(json!({"type": "keyDown", "value": key}));
            actions.push(json!({"type": "keyUp", "value": key}));
        }
        self.call(
            "POST",
            "/actions",
            Some(json!({"actions": [{"type": "key", "id": "keyboard", "actions": actions}]})),
        );
    }

    pub fn wait_until(&self, what: &str, check: impl Fn() -> bool) {
        self.wait_for(what, WAIT, check);
    }

    /// Types `text` into the element `selector`.
    pub fn type_into(&self, selector: &str, text: &str) {
        let el = self.find(selector);
        self.call(
            "POST",
            &format!("/element/{el}/value"),
            Some(json!({ "text": text })),
        );
    }

    pub fn wait_for(&self, what: &str, wait: Duration, check: impl Fn() -> bool) {
        let deadline = Instant::now() + wait;
        while !check() {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what} (at {})",
                self.url()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn screenshot(&self, name: &str) {
        let data = self.call("GET", "/screenshot", None);
        let png = base64_decode(data.as_str().unwrap_or_default());
        assert!(png.starts_with(b"\x89PNG"), "screenshot is a PNG");
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("artifacts/screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        let name = if name.starts_with("playground-") || name.starts_with("live-") {
            name.to_string()
        } else {
            format!("wiki-{name}")
        };
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = http(self.port, "DELETE", &format!("/session/{}", self.id), None);
    }
}

pub fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let digits: Vec<u8> = text.bytes().filter_map(value).collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, d)| acc | (u32::from(*d) << (18 - 6 * i)));
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..chunk.len().saturating_sub(1)]);
    }
    out
}

pub fn open_session(
    chromium: &std::path::Path,
    chromedriver: &std::path::Path,
) -> (Driver, Session) {
    let port = free_port();
    let child = Command::new(chromedriver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let driver = Driver { child };
    let deadline = Instant::now() + WAIT;
    while !http(port, "GET", "/status", None).is_ok_and(|s| s["value"]["ready"] == true) {
        assert!(
            Instant::now() < deadline,
            "chromedriver did not become ready"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let profile = scratch("chromium-profile");
    let args = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        &format!("--user-data-dir={}", profile.display()),
    ];
    let capabilities = json!({"capabilities": {"alwaysMatch": {
        "browserName": "chrome",
        "goog:chromeOptions": {"binary": chromium.display().to_string(), "args": args},
        "goog:loggingPrefs": {"browser": "ALL"}
    }}});
    let answer = http(port, "POST", "/session", Some(&capabilities)).expect("new session");
    let id = answer["value"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("no session: {answer}"))
        .to_string();
    (driver, Session { port, id })
}

/// A browser session on a wiki that `start` serves (it returns the address), with the wiki's base URL; `None`
/// where [`browsers`] finds none.
pub fn browse(start: impl FnOnce() -> SocketAddr) -> Option<(Driver, Session, String)> {
    let (chromium, chromedriver) = browsers()?;
    let addr = start();
    let (driver, s) = open_session(&chromium, &chromedriver);
    Some((driver, s, format!("http://{addr}")))
}

/// The browser binaries, or `None` (skipped) outside CI when they are missing.
pub fn browsers() -> Option<(PathBuf, PathBuf)> {
    let (Some(chromium), Some(chromedriver)) = (
        binary("NETCL_CHROMIUM", "/usr/bin/chromium"),
        binary("NETCL_CHROMEDRIVER", "/usr/bin/chromedriver"),
    ) else {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!(
                "CI=true but chromium or chromedriver is missing: apt-get install chromium chromium-driver"
            );
        }
        eprintln!(
            "\n*** SKIPPED wiki browser test: /usr/bin/chromium or /usr/bin/chromedriver is missing ***\n"
        );
        return None;
    };
    Some((chromium, chromedriver))
}

/// Sets the editor's code in the first runnable block matching `block` (as typing would).
pub fn set_code(s: &Session, block: &str, code: &str) {
    s.call(
        "POST",
        "/execute/sync",
        Some(json!({
            "script": "var t = document.querySelector(arguments[0] + ' textarea'); t.value = arguments[1]; t.dispatchEvent(new Event('input')); t.focus();",
            "args": [block, code]
        })),
    );
}

/// Puts `code` in the runnable block `block` and starts it.
pub fn run_code(s: &Session, block: &str, code: &str) {
    set_code(s, block, code);
    s.click(&format!("{block} .run-btn"));
}

/// [`run_code`], then waits up to `secs` seconds for the block's result to be `state` (`ok`, `error`); `what`
/// names the run in a timeout.
pub fn run_until(s: &Session, block: &str, code: &str, (what, secs): (&str, u64), state: &str) {
    run_code(s, block, code);
    s.wait_for(what, Duration::from_secs(secs), || {
        result_state(s, block) == state
    });
}

pub fn result_state(s: &Session, block: &str) -> String {
    s.call(
        "POST",
        "/execute/sync",
        Some(json!({
            "script": "var r = document.querySelector(arguments[0] + ' .run-result'); return r ? (r.getAttribute('data-state') || '') : '';",
            "args": [block]
        })),
    )
    .as_str()
    .unwrap_or_default()
    .to_string()
}

/// Sets the browser window to `width`×`height` CSS pixels of viewport (the window frame, if any, is added).
pub fn set_viewport(s: &Session, width: i64, height: i64) {
    s.call(
        "POST",
        "/window/rect",
        Some(json!({"width": width, "height": height})),
    );
    let inner = s.js("return [window.innerWidth, window.innerHeight]");
    let (iw, ih) = (
        inner[0].as_i64().unwrap_or(0),
        inner[1].as_i64().unwrap_or(0),
    );
    if iw != width || ih != height {
        s.call(
            "POST",
            "/window/rect",
            Some(json!({"width": 2 * width - iw, "height": 2 * height - ih})),
        );
    }
    assert_eq!(
        s.js("return window.innerWidth"),
        json!(width),
        "viewport width"
    );
}

/// How far the page is wider than the viewport, in CSS pixels (0: no horizontal scroll).
pub fn overflow(s: &Session) -> i64 {
    s.js("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        .as_i64()
        .unwrap_or(i64::MAX)
}

pub fn rect(s: &Session, css: &str, field: &str) -> f64 {
    s.call(
        "POST",
        "/execute/sync",
        Some(json!({
            "script": "var e = document.querySelector(arguments[0]); return e ? e.getBoundingClientRect()[arguments[1]] : null;",
            "args": [css, field]
        })),
    )
    .as_f64()
    .unwrap_or_else(|| panic!("no element `{css}`"))
}

pub fn visible(s: &Session, css: &str) -> bool {
    s.call(
        "POST",
        "/execute/sync",
        Some(json!({
            "script": "var e = document.querySelector(arguments[0]); if (!e) { return false; } var st = getComputedStyle(e); var r = e.getBoundingClientRect(); return st.display !== 'none' && st.visibility !== 'hidden' && r.width > 0 && r.right > 0 && r.left < window.innerWidth;",
            "args": [css]
        })),
    ) == json!(true)
}
