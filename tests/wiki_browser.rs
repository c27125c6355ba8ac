//! The wiki in a real browser: headless Chromium driven over WebDriver (chromedriver) loads a page, navigates by
//! the sidebar and by prev/next, toggles dark mode, searches with `/` and opens a result. Screenshots are kept in
//! `artifacts/screenshots/`.
//!
//! Needs Debian's `chromium` and `chromium-driver` (or `NETCL_CHROMIUM` / `NETCL_CHROMEDRIVER` naming the
//! binaries). Under `CI=true` their absence fails the test; elsewhere it is skipped with a message.

mod wiki_support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wiki_support::{TestEngine, content_dir, scratch};

const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";
const WAIT: Duration = Duration::from_secs(10);

fn binary(env: &str, default: &str) -> Option<PathBuf> {
    let path = std::env::var_os(env)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default));
    path.is_file().then_some(path)
}

/// Starts the wiki on a free loopback port in a background runtime.
fn start_wiki() -> SocketAddr {
    start_wiki_with(|_| {})
}

/// Like [`start_wiki`], with `configure` applied to the config.
fn start_wiki_with(
    configure: impl FnOnce(&mut netcl::wiki::config::Config) + Send + 'static,
) -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
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

/// chromedriver, stopped when dropped.
struct Driver {
    child: Child,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One HTTP/1.1 request to chromedriver; returns the decoded JSON body.
fn http(port: u16, method: &str, path: &str, body: Option<&Value>) -> std::io::Result<Value> {
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

struct Session {
    port: u16,
    id: String,
}

impl Session {
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let url = format!("/session/{}{path}", self.id);
        let answer = http(self.port, method, &url, body.as_ref())
            .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
        if answer["value"]["error"].is_string() {
            panic!("{method} {url}: {}", answer["value"]);
        }
        answer["value"].clone()
    }

    fn go(&self, url: &str) {
        self.call("POST", "/url", Some(json!({"url": url})));
    }

    fn url(&self) -> String {
        self.call("GET", "/url", None)
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    fn js(&self, script: &str) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
    }

    fn find(&self, css: &str) -> String {
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

    fn click(&self, css: &str) {
        let id = self.find(css);
        // Centre the element first: the sticky header would otherwise cover one scrolled to the top edge.
        self.call(
            "POST",
            "/execute/sync",
            Some(json!({"script": "arguments[0].scrollIntoView({block: 'center'});", "args": [{ELEMENT_KEY: id}]})),
        );
        self.call("POST", &format!("/element/{id}/click"), Some(json!({})));
    }

    fn text(&self, css: &str) -> String {
        let id = self.find(css);
        self.call("GET", &format!("/element/{id}/text"), None)
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    fn keys(&self, keys: &[&str]) {
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

    fn wait_until(&self, what: &str, check: impl Fn() -> bool) {
        self.wait_for(what, WAIT, check);
    }

    fn wait_for(&self, what: &str, wait: Duration, check: impl Fn() -> bool) {
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

    fn screenshot(&self, name: &str) {
        let data = self.call("GET", "/screenshot", None);
        let png = base64_decode(data.as_str().unwrap_or_default());
        assert!(png.starts_with(b"\x89PNG"), "screenshot is a PNG");
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("artifacts/screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        let name = if name.starts_with("playground-") {
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

fn base64_decode(text: &str) -> Vec<u8> {
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

fn open_session(chromium: &std::path::Path, chromedriver: &std::path::Path) -> (Driver, Session) {
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

/// The browser binaries, or `None` (skipped) outside CI when they are missing.
fn browsers() -> Option<(PathBuf, PathBuf)> {
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
fn set_code(s: &Session, block: &str, code: &str) {
    s.call(
        "POST",
        "/execute/sync",
        Some(json!({
            "script": "var t = document.querySelector(arguments[0] + ' textarea'); t.value = arguments[1]; t.dispatchEvent(new Event('input')); t.focus();",
            "args": [block, code]
        })),
    );
}

fn result_state(s: &Session, block: &str) -> String {
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

#[test]
fn browser_runs_examples_shows_decisions_errors_and_stops_runs() {
    let Some((chromium, chromedriver)) = browsers() else {
        return;
    };
    let addr = start_wiki_with(|c| {
        c.playground_worker_command =
            Some(vec![env!("CARGO_BIN_EXE_netcl").into(), "worker".into()]);
        c.playground_timeout_ms = 30_000;
        c.playground_limits.max_operations = u64::MAX;
    });
    let (_driver, s) = open_session(&chromium, &chromedriver);
    let base = format!("http://{addr}");
    let block = ".code-block[data-runnable='true']";

    // The autotune page's pointwise-convolution example runs and shows its output, decision table, timings and
    // device.
    s.go(&format!("{base}/docs/concepts/autotune"));
    s.click(&format!("{block} .run-btn"));
    s.wait_for("the example's result", Duration::from_secs(60), || {
        result_state(&s, block) == "ok"
    });
    assert!(
        s.text(&format!("{block} .run-output"))
            .contains("y: [8, 64, 28, 28]")
    );
    let decisions = s.js(&format!(
        "return [...document.querySelectorAll(\"{block} .run-decisions .decision\")].map(d => d.getAttribute('data-kernel') + ' ' + d.textContent).join('\\n')"
    ));
    let decisions = decisions.as_str().unwrap_or_default().to_string();
    assert!(
        decisions.contains("conv2d_pointwise_fwd_select"),
        "{decisions}"
    );
    assert!(
        ["measured", "cache", "database", "heuristic"]
            .iter()
            .any(|src| decisions.contains(src)),
        "each decision names where it came from: {decisions}"
    );
    assert!(
        s.js("return document.querySelectorAll('.run-decisions .candidate-bars li .cand-fill').length")
            .as_u64()
            .unwrap_or(0)
            >= 2,
        "each candidate's time is a bar"
    );
    // A decision opens to show its shape key and its candidates.
    s.click(&format!("{block} .run-decisions .decision summary"));
    assert!(
        s.js(&format!(
            "return document.querySelector(\"{block} .run-decisions .decision\").open"
        ))
        .as_bool()
        .unwrap_or(false),
        "a decision unfolds on click"
    );
    let meta = s.text(&format!("{block} .run-meta"));
    assert!(
        meta.contains("device ") && meta.contains("queue ") && meta.contains("tune "),
        "{meta}"
    );
    s.screenshot("playground-01-autotune-result");

    // Run again: the decision now comes from the cache; the round trip is what a reader waits.
    s.click(&format!("{block} .run-btn"));
    s.wait_for("the second result", Duration::from_secs(30), || {
        result_state(&s, block) == "ok"
            && s.text(&format!("{block} .run-status")).starts_with("done")
    });
    let badges = s.js(&format!(
        "return [...document.querySelectorAll(\"{block} .run-decisions .badge\")].map(b => b.textContent).join(' ')"
    ));
    // Under the default background tuning the second run may still be measuring (`heuristic`, `database`)
    // or already answer from the cache.
    assert!(
        ["cache", "heuristic", "database"]
            .iter()
            .any(|src| badges.as_str().unwrap_or_default().contains(src)),
        "the second run's decisions name their source: {badges}"
    );
    eprintln!("second-run decision sources: {badges}");
    let roundtrip = s.js(
        "return document.querySelector('.code-block[data-runnable] .run-result').getAttribute('data-roundtrip-ms')",
    );
    eprintln!("cached example round trip in the browser: {roundtrip} ms");

    // A shape error is shown with its kind and marked at its line; Ctrl+Enter runs.
    set_code(
        &s,
        block,
        "let x = zeros([2, 3]);\nlet y = zeros([4, 3]);\nlet z = x + y;",
    );
    s.call(
        "POST",
        "/actions",
        Some(
            json!({"actions": [{"type": "key", "id": "keyboard", "actions": [
                {"type": "keyDown", "value": "\u{E009}"}, {"type": "keyDown", "value": "\u{E007}"},
                {"type": "keyUp", "value": "\u{E007}"}, {"type": "keyUp", "value": "\u{E009}"}
            ]}]}),
        ),
    );
    s.wait_for("the shape error", Duration::from_secs(30), || {
        result_state(&s, block) == "error"
    });
    let error = s.text(&format!("{block} .run-error")).to_lowercase();
    assert!(
        error.contains("shape") && error.contains("line 3"),
        "{error}"
    );
    assert_eq!(s.text(&format!("{block} .editor-gutter .error-line")), "3");
    s.screenshot("playground-02-shape-error");

    // Reset brings the example back.
    s.click(&format!("{block} .reset-btn"));
    let code = s.js("return document.querySelector('.code-block[data-runnable] textarea').value");
    assert!(code.as_str().unwrap_or("").contains("conv2d(x, w)"));

    // A long run streams progress as a curve, and Stop ends it.
    s.go(&format!("{base}/playground"));
    let editor = ".playground-editor";
    set_code(
        &s,
        editor,
        "let i = 0;\nloop {\n    i += 1;\n    if i % 20000 == 0 { progress(#{step: i, loss: 1000.0 / i}); }\n}",
    );
    s.click(&format!("{editor} .run-btn"));
    s.wait_for("a progress curve", Duration::from_secs(30), || {
        s.js("return document.querySelectorAll('.playground-editor .run-curve polyline').length")
            .as_u64()
            .unwrap_or(0)
            > 0
    });
    s.screenshot("playground-03-progress");
    s.click(&format!("{editor} .stop-btn"));
    s.wait_until("the run to stop", || result_state(&s, editor) == "error");
    // The kind is shown in capitals (CSS); the text compares case-insensitively.
    let stopped = s.text(&format!("{editor} .run-error")).to_lowercase();
    assert!(stopped.contains("cancelled"), "{stopped}");
    s.screenshot("playground-04-stopped");

    // The next run gets a fresh worker; Share makes a link that reproduces the snippet.
    set_code(&s, editor, "print(\"again\");\n6 * 7");
    s.click(&format!("{editor} .run-btn"));
    s.wait_for("a run after stopping", Duration::from_secs(30), || {
        result_state(&s, editor) == "ok"
    });
    assert!(s.text(&format!("{editor} .run-output")).contains("42"));
    s.click(&format!("{editor} .share-btn"));
    let link = s
        .js("return document.querySelector('.playground-editor .share-link').href")
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(link.contains("/playground#code="), "{link}");
    s.go(&format!("{base}/docs/faq"));
    s.go(&link);
    s.wait_until("the shared code in the editor", || {
        s.js("var t = document.querySelector('.playground-editor textarea'); return t ? t.value : ''")
            .as_str()
            .unwrap_or("")
            == "print(\"again\");\n6 * 7"
    });

    // Nothing the playground does is refused by the Content-Security-Policy.
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

#[test]
fn browser_navigates_toggles_theme_and_searches() {
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
        return;
    };
    let addr = start_wiki();
    let (_driver, s) = open_session(&chromium, &chromedriver);
    let base = format!("http://{addr}");

    // A page loads with its layout.
    s.go(&format!("{base}/docs/quickstart"));
    assert_eq!(s.text("article h1"), "Quickstart");
    assert!(
        s.js("return document.querySelectorAll('.toc a').length")
            .as_u64()
            .unwrap_or(0)
            >= 3
    );
    assert_eq!(
        s.js("return document.querySelector('.copy-btn').hidden"),
        json!(false),
        "script enhanced the page"
    );
    s.screenshot("01-quickstart");

    // Sidebar navigation.
    s.click(".sidebar a[href='/docs/concepts/device']");
    s.wait_until("the device page", || {
        s.url().ends_with("/docs/concepts/device")
    });
    assert_eq!(s.text("article h1"), "Device");
    assert_eq!(s.text(".sidebar a.current"), "Device");

    // Prev/next.
    s.click(".prev-next a.next");
    s.wait_until("the next page", || {
        s.url().ends_with("/docs/concepts/autotune")
    });
    assert_eq!(s.text("article h1"), "Autotune");
    s.click(".prev-next a.prev");
    s.wait_until("the previous page", || {
        s.url().ends_with("/docs/concepts/device")
    });
    s.screenshot("02-device");

    // Dark mode: toggled, applied, and remembered across a reload.
    let before = s.js("return getComputedStyle(document.body).backgroundColor");
    let effective = s.js("return document.documentElement.dataset.theme || (matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light')");
    s.click("#theme-toggle");
    let toggled = s.js("return document.documentElement.dataset.theme");
    assert_ne!(toggled, effective, "theme toggled");
    let after = s.js("return getComputedStyle(document.body).backgroundColor");
    assert_ne!(before, after, "colours changed");
    s.go(&format!("{base}/docs/faq"));
    assert_eq!(
        s.js("return document.documentElement.dataset.theme"),
        toggled,
        "theme persisted"
    );
    s.screenshot("03-theme-toggled");

    // Search: `/` focuses the box, results appear as you type, arrows and Enter open one.
    s.keys(&["/"]);
    assert_eq!(
        s.js("return document.activeElement.id"),
        json!("search-input")
    );
    let input = s.find("#search-input");
    s.call(
        "POST",
        &format!("/element/{input}/value"),
        Some(json!({"text": "autotune cache"})),
    );
    s.wait_until("search results", || {
        s.js("return document.querySelectorAll('#search-results a').length")
            .as_u64()
            .unwrap_or(0)
            > 0
    });
    assert!(
        s.js("return document.querySelector('#search-results mark') !== null") == json!(true),
        "matches are marked"
    );
    s.screenshot("04-search");
    s.keys(&["\u{E015}", "\u{E007}"]);
    s.wait_until("the search result", || {
        s.url().contains("/docs/concepts/autotune")
    });
    assert_eq!(s.text("article h1"), "Autotune");
    s.screenshot("05-result");

    // The autotune page filters on the server and, as you type, in the page.
    s.go(&format!("{base}/autotune"));
    assert_eq!(
        s.js("return document.querySelectorAll('.tune-entry:not([hidden])').length"),
        json!(2)
    );
    let filter = s.find("#autotune-filter");
    s.call(
        "POST",
        &format!("/element/{filter}/value"),
        Some(json!({"text": "reduce"})),
    );
    s.wait_until("the client-side filter", || {
        s.js("return document.querySelectorAll('.tune-entry:not([hidden])').length") == json!(1)
    });
    assert_eq!(s.text("#autotune-count"), "1 of 2 entries shown.");
    s.screenshot("06-autotune");
    s.go(&format!("{base}/devices"));
    assert!(
        s.text("main").contains("Test <b>GPU</b>"),
        "markup in engine data shows as text"
    );
    s.go(&format!("{base}/docs/architecture/overview"));
    assert_eq!(
        s.js("return document.querySelectorAll('figure.diagram svg, img[src$=\".svg\"]').length"),
        json!(2)
    );
    assert!(
        s.js("return document.querySelector('img[src$=\".svg\"]').naturalWidth")
            .as_u64()
            .unwrap_or(0)
            > 0,
        "svg image loads"
    );
    s.screenshot("07-architecture");

    // Nothing the pages do is refused by the Content-Security-Policy.
    let log = s.call("POST", "/se/log", Some(json!({"type": "browser"})));
    let refused: Vec<&Value> = log
        .as_array()
        .map(|entries| {
            entries
                .iter()
                .filter(|e| {
                    e["message"]
                        .as_str()
                        .unwrap_or("")
                        .contains("Content Security Policy")
                })
                .collect()
        })
        .unwrap_or_default();
    assert!(refused.is_empty(), "CSP violations: {refused:?}");

    // An exported copy works from disk: navigation by relative links, and search over the offline index.
    let export = scratch("browser-export");
    let content = netcl::wiki::content::Content::load(&content_dir()).unwrap();
    let settings = netcl::wiki::views::SiteSettings {
        title: "netcl".into(),
        edit_url: None,
        playground: false,
    };
    netcl::wiki::export::export(&content, &settings, &export).unwrap();
    s.go(&format!("file://{}/index.html", export.display()));
    s.click(".sidebar a[href='concepts/device/index.html']");
    s.wait_until("the exported device page", || {
        s.url().ends_with("/concepts/device/index.html")
    });
    assert_eq!(s.text("article h1"), "Device");
    s.keys(&["/"]);
    let input = s.find("#search-input");
    s.call(
        "POST",
        &format!("/element/{input}/value"),
        Some(json!({"text": "autotune"})),
    );
    s.wait_until("offline search results", || {
        s.js("var a = document.querySelector('#search-results a'); return a ? a.getAttribute('href') : ''")
            .as_str()
            .unwrap_or("")
            .contains("concepts/autotune/index.html")
    });
    s.screenshot("08-export-search");
    s.keys(&["\u{E007}"]);
    s.wait_until("the exported result", || {
        s.url().contains("/concepts/autotune/index.html")
    });

    // The exported page ranks exactly as the server does (one BM25 index, built in Rust), and an item's name
    // finds the item first.
    let index =
        netcl::wiki::site::build(&content, &settings, &netcl::wiki::links::LinkMode::Export)
            .unwrap()
            .index;
    for query in [
        "conv2d",
        "autotune cache",
        "depthwise kernel",
        "Tensor",
        "broadcast",
    ] {
        let expected: Vec<String> = index
            .search(query, 20)
            .iter()
            .map(|h| {
                let page = if h.page == "index" {
                    "index.html".to_string()
                } else {
                    format!("{}/index.html", h.page)
                };
                if h.anchor.is_empty() {
                    page
                } else {
                    format!("{page}#{}", h.anchor)
                }
            })
            .collect();
        let input = s.find("#search-input");
        s.call("POST", &format!("/element/{input}/clear"), Some(json!({})));
        s.call(
            "POST",
            &format!("/element/{input}/value"),
            Some(json!({"text": query})),
        );
        let root = format!("file://{}/", export.display());
        let shown = || -> Vec<String> {
            s.js("return Array.from(document.querySelectorAll('#search-results a')).map(a => a.href)")
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str())
                .map(|h| h.strip_prefix(root.as_str()).unwrap_or(h).to_string())
                .collect()
        };
        s.wait_until("the offline ranking", || shown() == expected);
        if query == "conv2d" {
            assert!(
                expected[0].starts_with("api/") && expected[0].ends_with("#conv2d"),
                "{expected:?}"
            );
        }
    }
    s.go(&format!(
        "file://{}/search/index.html?q=device",
        export.display()
    ));
    s.wait_until("the offline results page", || {
        s.js("return document.querySelectorAll('#search-hits li').length")
            .as_u64()
            .unwrap_or(0)
            > 0
    });

    // The results page works as a plain form submission too.
    s.go(&format!("{base}/search?q=device"));
    assert!(s.text("#search-status").contains("for “device”"));
    let violations = s.js("return performance.getEntriesByType('resource').filter(e => !e.name.startsWith(location.origin)).length");
    assert_eq!(violations, json!(0), "nothing is loaded from elsewhere");
}

/// Sets the browser window to `width`×`height` CSS pixels of viewport (the window frame, if any, is added).
fn set_viewport(s: &Session, width: i64, height: i64) {
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
fn overflow(s: &Session) -> i64 {
    s.js("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        .as_i64()
        .unwrap_or(i64::MAX)
}

fn rect(s: &Session, css: &str, field: &str) -> f64 {
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

fn visible(s: &Session, css: &str) -> bool {
    s.call(
        "POST",
        "/execute/sync",
        Some(json!({
            "script": "var e = document.querySelector(arguments[0]); if (!e) { return false; } var st = getComputedStyle(e); var r = e.getBoundingClientRect(); return st.display !== 'none' && st.visibility !== 'hidden' && r.width > 0 && r.right > 0 && r.left < window.innerWidth;",
            "args": [css]
        })),
    ) == json!(true)
}

#[test]
fn browser_layout_fits_a_phone_and_a_desktop() {
    let Some((chromium, chromedriver)) = browsers() else {
        return;
    };
    let addr = start_wiki();
    let (_driver, s) = open_session(&chromium, &chromedriver);
    let base = format!("http://{addr}");
    let content = netcl::wiki::content::Content::load(&content_dir()).unwrap();
    let mut routes: Vec<String> = content
        .ordered()
        .iter()
        .map(|p| {
            if *p == "index" {
                "/".to_string()
            } else {
                format!("/docs/{p}")
            }
        })
        .collect();
    routes.extend(
        [
            "/search?q=conv2d",
            "/devices",
            "/autotune",
            "/playground",
            "/no-such-page",
        ]
        .map(String::from),
    );

    // 390 px: a phone. No page scrolls sideways; wide tables and code scroll inside their own box.
    set_viewport(&s, 390, 844);
    let mut too_wide = Vec::new();
    for route in &routes {
        s.go(&format!("{base}{route}"));
        let over = overflow(&s);
        if over > 0 {
            too_wide.push(format!("{route}: {over} px"));
        }
    }
    assert!(too_wide.is_empty(), "pages wider than 390 px: {too_wide:?}");

    // The content starts on the first screen; the navigation waits in a closed drawer.
    s.go(&format!("{base}/docs/concepts/convolution"));
    let top = rect(&s, "article h1", "top");
    assert!(top < 400.0, "the title starts {top} px down");
    assert!(!visible(&s, "#nav"), "the drawer starts closed");
    assert!(visible(&s, "#nav-toggle"), "the menu button shows");
    assert!(
        !visible(&s, "aside.toc"),
        "the side table of contents is folded away"
    );
    assert!(
        visible(&s, ".toc-fold"),
        "the folded table of contents shows"
    );
    s.screenshot("mobile-01-convolution");
    s.click(".toc-fold summary");
    s.wait_until("the folded contents to open", || {
        visible(&s, ".toc-fold a[href='#overview']")
    });
    s.screenshot("mobile-02-toc-open");
    s.click(".toc-fold summary");

    // The menu button opens the drawer over the page; a link in it navigates and closes it.
    s.click("#nav-toggle");
    s.wait_until("the drawer to open", || {
        visible(&s, "#nav") && rect(&s, "#nav", "left") >= 0.0
    });
    assert_eq!(
        s.js("return document.getElementById('nav-toggle').getAttribute('aria-expanded')"),
        json!("true")
    );
    assert!(visible(&s, "#nav a[href='/docs/api/ops']"));
    s.screenshot("mobile-03-drawer");
    s.keys(&["\u{E00C}"]);
    s.wait_until("Escape to close the drawer", || !visible(&s, "#nav"));
    s.click("#nav-toggle");
    s.wait_until("the drawer to reopen", || {
        rect(&s, "#nav", "left") >= 0.0 && visible(&s, "#nav a[href='/docs/api/ops']")
    });
    s.click("#nav a[href='/docs/api/ops']");
    s.wait_until("the API page", || s.url().ends_with("/docs/api/ops"));
    assert!(!visible(&s, "#nav"), "the drawer is closed on the new page");
    assert!(rect(&s, "article h1", "top") < 400.0);
    s.screenshot("mobile-04-api-ops");

    // Without script the drawer opens through the #nav fragment the menu link points at.
    s.go(&format!("{base}/docs/faq#nav"));
    s.wait_until("the :target drawer to slide in", || {
        visible(&s, "#nav") && rect(&s, "#nav", "left") >= 0.0
    });
    s.go(&format!("{base}/docs/benchmarks"));
    s.screenshot("mobile-05-benchmarks");

    // 1,280 px: three columns, no menu button, nothing clipped.
    set_viewport(&s, 1280, 900);
    for route in [
        "/docs/api/ops",
        "/docs/concepts/convolution",
        "/docs/benchmarks",
        "/",
    ] {
        s.go(&format!("{base}{route}"));
        assert_eq!(overflow(&s), 0, "{route} scrolls sideways at 1,280 px");
    }
    s.go(&format!("{base}/docs/api/ops"));
    assert!(visible(&s, "#nav"), "the sidebar shows");
    assert!(visible(&s, "aside.toc"), "the table of contents shows");
    assert!(!visible(&s, "#nav-toggle"), "no menu button");
    assert!(!visible(&s, ".toc-fold"));
    let table_right = rect(&s, ".doc table", "right");
    let main_right = rect(&s, "main", "right");
    assert!(
        table_right <= main_right + 1.0,
        "the symbols table ends inside the content column ({table_right} > {main_right})"
    );
    s.screenshot("desktop-01-api-ops");
    s.go(&format!("{base}/docs/benchmarks"));
    s.screenshot("desktop-02-benchmarks");

    // Diagrams are inverted in dark mode instead of glaring.
    s.go(&format!("{base}/docs/architecture/overview"));
    s.js("document.documentElement.setAttribute('data-theme', 'light')");
    assert_eq!(
        s.js("return getComputedStyle(document.querySelector('figure.diagram svg')).filter"),
        json!("none")
    );
    s.js("document.documentElement.setAttribute('data-theme', 'dark')");
    let filter =
        s.js("return getComputedStyle(document.querySelector('figure.diagram svg')).filter");
    assert!(filter.as_str().unwrap_or("").contains("invert"), "{filter}");
    s.screenshot("desktop-03-dark-diagram");
}
