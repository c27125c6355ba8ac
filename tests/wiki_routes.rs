//! Route tests of the wiki server: every page and endpoint, errors, hostile requests, caching and base paths.

mod wiki_support;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use netcl::wiki::content::Content;
use wiki_support::{
    FailingEngine, SlowEngine, TestEngine, app, app_with, content_dir, get, get_with, send,
};

/// Whether `html` holds `text` HTML-escaped (askama writes `&#60;`, the Markdown renderer `&lt;`).
fn has_escaped(html: &str, text: &str) -> bool {
    let named = text
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    let numeric = text
        .replace('&', "&#38;")
        .replace('<', "&#60;")
        .replace('>', "&#62;");
    html.contains(&named) || html.contains(&numeric)
}

fn assert_secure(answer: &wiki_support::Answer) {
    let csp = answer.header("content-security-policy");
    assert!(csp.contains("default-src 'self'"), "csp: {csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "csp: {csp}");
    assert!(!csp.contains("unsafe-inline"), "csp: {csp}");
    assert_eq!(answer.header("x-content-type-options"), "nosniff");
    assert!(!answer.header("referrer-policy").is_empty());
}

/// `GET uri`, which must answer 200.
async fn get_ok(app: &axum::Router, uri: &str) -> wiki_support::Answer {
    let answer = get(app, uri).await;
    assert_eq!(answer.status, StatusCode::OK, "{uri}");
    answer
}

#[tokio::test]
async fn every_page_is_served_with_layout_and_headers() {
    let app = app();
    let content = Content::load(&content_dir()).unwrap();
    assert!(content.pages.len() >= 9);
    for page in content.pages.values() {
        let uri = if page.path == "index" {
            "/".to_string()
        } else {
            format!("/docs/{}", page.path)
        };
        let answer = get(&app, &uri).await;
        assert_eq!(answer.status, StatusCode::OK, "{uri}");
        assert_eq!(
            answer.header("content-type"),
            "text/html; charset=utf-8",
            "{uri}"
        );
        assert_secure(&answer);
        let html = answer.text();
        assert!(
            html.contains(&format!("<h1>{}</h1>", page.front.title)),
            "{uri}"
        );
        assert!(html.contains("class=\"sidebar\""), "{uri}");
        assert!(
            html.contains("aria-current=\"page\""),
            "{uri}: current page marked in the navigation"
        );
        assert!(html.contains("Last updated"), "{uri}");
        assert!(!html.contains("<script>"), "{uri}: no inline script");
        assert!(!html.contains(" style=\""), "{uri}: no style attributes");
        let raw = get(&app, &format!("/docs/{}.md", page.path)).await;
        assert_eq!(raw.status, StatusCode::OK);
        assert_eq!(raw.header("content-type"), "text/markdown; charset=utf-8");
        assert_eq!(raw.text(), page.source);
    }
}

#[tokio::test]
async fn pages_have_toc_breadcrumbs_prev_next_and_rendered_features() {
    let app = app();
    let html = get(&app, "/docs/concepts/autotune").await.text();
    assert!(html.contains("<h2>On this page</h2>"));
    assert!(html.contains("href=\"#how-it-works\""));
    assert!(html.contains("<nav class=\"breadcrumbs\""));
    assert!(html.contains("<li>Concepts</li>"));
    assert!(html.contains("rel=\"prev\" href=\"/docs/concepts/device\""));
    assert!(html.contains("rel=\"next\" href=\"/docs/concepts/tensor\""));
    assert!(html.contains("<math>"), "inline math is MathML");
    assert!(html.contains("class=\"copy-btn\""));
    let overview = get(&app, "/docs/architecture/overview").await.text();
    for (want, what) in [
        ("<figure class=\"diagram\"><svg", "inline svg diagram"),
        (
            "src=\"/docs/architecture/modules.svg\"",
            "svg image link rewritten",
        ),
    ] {
        assert!(overview.contains(want), "{what}");
    }
    let svg = get_ok(&app, "/docs/architecture/modules.svg").await;
    assert_eq!(svg.header("content-type"), "image/svg+xml");
    let quickstart = get(&app, "/docs/quickstart").await.text();
    assert!(quickstart.contains("<div class=\"admonition tip\""));
    assert!(quickstart.contains("data-lang=\"sh\""));
}

#[tokio::test]
async fn static_assets_llms_health_and_metrics() {
    let app = app();
    for (path, ty) in [
        ("/static/site.css", "text/css"),
        ("/static/app.js", "text/javascript"),
        ("/static/theme.js", "text/javascript"),
        ("/static/print.css", "text/css"),
    ] {
        let answer = get(&app, path).await;
        assert_eq!(answer.status, StatusCode::OK, "{path}");
        assert!(answer.header("content-type").starts_with(ty), "{path}");
        assert!(answer.header("cache-control").contains("max-age"), "{path}");
    }
    let llms = get_ok(&app, "/llms.txt").await;
    let llms = llms.text();
    for page in Content::load(&content_dir()).unwrap().pages.values() {
        assert!(
            llms.contains(&format!("(/docs/{}.md)", page.path)),
            "llms.txt lists {}",
            page.path
        );
    }
    let health = get_ok(&app, "/healthz").await;
    assert_eq!(health.json()["status"], "ok");
    get(&app, "/docs/nope").await;
    let metrics = get(&app, "/metrics").await.text();
    for line in [
        "netcl_wiki_requests_total{route=\"page\",status=\"2xx\"}",
        "netcl_wiki_requests_total{route=\"not_found\",status=\"4xx\"} 1",
        "netcl_wiki_request_duration_seconds_bucket{le=\"+Inf\"}",
    ] {
        assert!(metrics.contains(line), "{metrics}");
    }
}

#[tokio::test]
async fn search_html_and_json() {
    let app = app();
    let api = get_ok(&app, "/api/search?q=autotune+cache").await;
    let json = api.json();
    let results = json["results"].as_array().unwrap();
    assert!(!results.is_empty());
    assert_eq!(results[0]["page"], "concepts/autotune", "{json}");
    assert!(
        results[0]["snippet_html"]
            .as_str()
            .unwrap()
            .contains("<mark>")
    );
    let typo = get(&app, "/api/search?q=devcie").await.json();
    assert!(
        typo["results"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["page"] == "concepts/device"),
        "{typo}"
    );
    let page = get_ok(&app, "/search?q=devices").await;
    let html = page.text();
    assert!(html.contains("result"), "{html}");
    assert!(html.contains("<mark>"), "{html}");
    assert!(html.contains("value=\"devices\""), "query kept in the box");
    let empty = get(&app, "/api/search").await.json();
    assert_eq!(empty["results"].as_array().unwrap().len(), 0);
}

#[tokio::test]
async fn devices_and_autotune_pages_show_engine_data() {
    let app = app();
    let devices = get_ok(&app, "/devices").await;
    let html = devices.text();
    assert!(
        has_escaped(&html, "Test <b>GPU</b>"),
        "device names are escaped"
    );
    assert!(!html.contains("<b>GPU"));
    assert!(html.contains("8.0 GiB"));
    assert!(html.contains("64.0 KiB (on chip)"), "{html}");
    assert!(
        html.contains("this server&#39;s device") || html.contains("this server's device"),
        "{html}"
    );
    assert!(html.contains("id=\"selected-device\">0: Test"), "{html}");
    let json = get(&app, "/api/devices").await.json();
    assert_eq!(json["devices"][0]["compute_units"], 32);
    assert_eq!(json["devices"][0]["local_mem_dedicated"], true);
    assert_eq!(json["selected"], 0);
    let (other, _) = app_with(Arc::new(TestEngine), |c| c.device = Some("tpu".into()));
    let page = get(&other, "/devices").await.text();
    assert!(page.contains("The selection chooses no device"), "{page}");
    assert_eq!(
        get(&other, "/api/devices").await.json()["selected"],
        serde_json::Value::Null
    );
    let all = get(&app, "/autotune").await.text();
    assert!(all.contains("2 of 2 entries"), "{all}");
    assert!(all.contains("tile=16"));
    assert!(all.contains("class=\"winner\""));
    let filtered = get(&app, "/autotune?q=REDUCE").await.text();
    assert!(filtered.contains("1 of 2 entries"), "{filtered}");
    assert!(!filtered.contains("m64_n64_k64"));
    let api = get(&app, "/api/autotune?q=gemm").await.json();
    assert_eq!(api["total"], 2);
    assert_eq!(api["cache"]["entries"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn engine_failures_are_reported_not_fatal() {
    let (app, _) = app_with(Arc::new(FailingEngine), |_| {});
    let api = get(&app, "/api/devices").await;
    assert_eq!(api.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(api.json()["error"]["kind"], "engine");
    let page = get_ok(&app, "/devices").await;
    assert!(page.text().contains("no OpenCL platform"));
    let tune = get_ok(&app, "/autotune").await;
    assert!(tune.text().contains("cache unreadable"));
    assert_eq!(
        get(&app, "/api/autotune").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
}

#[tokio::test]
async fn not_found_suggests_pages() {
    let app = app();
    let answer = get(&app, "/docs/concepts/autotun").await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert_secure(&answer);
    let html = answer.text();
    assert!(html.contains("Perhaps you meant"), "{html}");
    assert!(html.contains("href=\"/docs/concepts/autotune\""), "{html}");
    let api = get(&app, "/api/nothing").await;
    assert_eq!(api.status, StatusCode::NOT_FOUND);
    assert_eq!(api.json()["error"]["kind"], "not_found");
    // A path that plainly names one page is sent there: a trailing slash, the /docs/ prefix left out, `.html`,
    // other letter case, or only the last segment when no other page ends the same way.
    let lost = [
        ("/docs/faq/", "/docs/faq"),
        ("/concepts/autotune", "/docs/concepts/autotune"),
        ("/docs/concepts/autotune.html", "/docs/concepts/autotune"),
        ("/docs/Concepts/AutoTune/", "/docs/concepts/autotune"),
        ("/faq", "/docs/faq"),
    ];
    let mut answers = Vec::new();
    for (path, _) in lost {
        let a = get(&app, path).await;
        answers.push((path, a.status.as_u16(), a.header("location").to_owned()));
    }
    let expected: Vec<_> = lost
        .iter()
        .map(|(p, to)| (*p, 308, to.to_string()))
        .collect();
    assert_eq!(answers, expected);
    // A last segment two pages end with is not guessed: the 404 page lists both first.
    let device = get(&app, "/device").await;
    assert_eq!(device.status, StatusCode::NOT_FOUND);
    let html = device.text();
    let listed = html.split("Perhaps you meant").nth(1).unwrap_or("");
    for page in ["/docs/concepts/device", "/docs/api/device"] {
        assert!(
            listed.contains(&format!("href=\"{page}\"")),
            "{page}: {listed}"
        );
    }
}

#[tokio::test]
async fn hostile_requests_get_4xx_and_escaped_output() {
    let app = app();
    for uri in [
        "/docs/../../../../etc/passwd",
        "/docs/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "/static/../../Cargo.toml",
        "/static/%2e%2e%2fCargo.toml",
        "/docs/..%2f..%2fCargo.toml",
        "//etc/passwd",
        "/docs/%FF%FE",
    ] {
        let answer = get(&app, uri).await;
        assert_eq!(answer.status, StatusCode::NOT_FOUND, "{uri}");
        let body = answer.text();
        assert!(!body.contains("root:x:0"), "{uri}");
        assert!(!body.contains("[package]"), "{uri}");
    }
    let xss = get_ok(&app, "/search?q=%3Cscript%3Ealert(1)%3C%2Fscript%3E").await;
    let html = xss.text();
    assert!(!html.contains("<script>alert"), "{html}");
    assert!(has_escaped(&html, "<script>alert(1)</script>"), "{html}");
    let xss404 = get(&app, "/docs/%3Cimg%20src=x%20onerror=alert(1)%3E")
        .await
        .text();
    assert!(!xss404.contains("<img src=x"), "{xss404}");
    let huge = format!("/api/search?q={}", "a".repeat(10_000));
    let answer = get(&app, &huge).await;
    assert_eq!(answer.status, StatusCode::URI_TOO_LONG);
    assert_eq!(answer.json()["error"]["kind"], "query_too_long");
    let huge_page = get(&app, &format!("/search?q={}", "a".repeat(10_000))).await;
    assert_eq!(huge_page.status, StatusCode::URI_TOO_LONG);
    assert!(huge_page.header("content-type").starts_with("text/html"));
    let long = get(&app, &format!("/api/search?q={}", "a".repeat(300))).await;
    assert_eq!(long.status, StatusCode::BAD_REQUEST);
    let bad_utf8 = get(&app, "/api/search?q=%FF%FE").await;
    assert_eq!(bad_utf8.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad_utf8.json()["error"]["kind"], "bad_query");
    assert_eq!(
        get(&app, "/search?q=%C3%28").await.status,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        get(&app, "/autotune?q=%FF").await.status,
        StatusCode::BAD_REQUEST
    );
    let post = send(
        &app,
        Request::post("/api/search").body(Body::from("x")).unwrap(),
    )
    .await;
    assert_eq!(post.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(post.json()["error"]["kind"], "method_not_allowed");
    let big = send(
        &app,
        Request::post("/")
            .body(Body::from(vec![b'x'; 1 << 20]))
            .unwrap(),
    )
    .await;
    assert!(big.status.is_client_error(), "{}", big.status);
}

#[tokio::test]
async fn gzip_etag_and_head() {
    let app = app();
    let gz = get_with(&app, "/docs/faq", ("accept-encoding", "gzip")).await;
    assert_eq!(gz.status, StatusCode::OK);
    assert_eq!(gz.header("content-encoding"), "gzip");
    assert_eq!(&gz.body[..2], &[0x1f, 0x8b]);
    let etag = gz.header("etag");
    assert!(!etag.is_empty());
    let again = get_with(&app, "/docs/faq", ("if-none-match", &etag)).await;
    assert_eq!(again.status, StatusCode::NOT_MODIFIED);
    assert!(again.body.is_empty());
    let head = send(
        &app,
        Request::head("/docs/faq").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(head.status, StatusCode::OK);
}

#[tokio::test]
async fn base_path_prefixes_every_route_and_link() {
    let (app, _) = app_with(Arc::new(TestEngine), |c| {
        c.base_path = "/wiki".into();
        c.edit_url = Some("https://example.org/edit/".into());
    });
    let home = get_ok(&app, "/wiki/").await;
    let html = home.text();
    assert!(html.contains("href=\"/wiki/docs/quickstart\""));
    assert!(html.contains("href=\"/wiki/static/site.css\""));
    assert!(html.contains("action=\"/wiki/search\""));
    assert!(html.contains("data-search-api=\"/wiki/api/search\""));
    assert!(
        html.contains("href=\"https://example.org/edit/index.md\""),
        "edit link"
    );
    assert!(
        !html.contains("href=\"/docs/"),
        "no link escapes the base path"
    );
    assert_eq!(get(&app, "/wiki").await.status, StatusCode::OK);
    assert_eq!(get(&app, "/wiki/docs/faq").await.status, StatusCode::OK);
    assert_eq!(get(&app, "/docs/faq").await.status, StatusCode::NOT_FOUND);
    assert_eq!(
        get(&app, "/wikix/docs/faq").await.status,
        StatusCode::NOT_FOUND
    );
    let hits = get(&app, "/wiki/api/search?q=device").await.json();
    assert!(
        hits["results"][0]["url"]
            .as_str()
            .unwrap()
            .starts_with("/wiki/docs/")
    );
}

#[tokio::test]
async fn content_reload_replaces_pages() {
    let dir = wiki_support::scratch("reload");
    let write = |body: &str| {
        std::fs::write(
            dir.join("nav.toml"),
            "[[section]]\ntitle = \"S\"\npages = [\"index\"]\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("index.md"),
            format!("---\ntitle: Home\nstatus: s\nsummary: s\n---\n{body}\n"),
        )
        .unwrap();
    };
    write("first version");
    let (app, state) = app_with(Arc::new(TestEngine), |c| c.content_dir = dir.clone());
    assert!(get(&app, "/").await.text().contains("first version"));
    let before = netcl::wiki::watch::fingerprint(&dir);
    write("second version, longer");
    assert_ne!(
        before,
        netcl::wiki::watch::fingerprint(&dir),
        "a change is noticed"
    );
    state.replace_site(netcl::wiki::server::Site::load(state.config()).unwrap());
    assert!(get(&app, "/").await.text().contains("second version"));
}

#[tokio::test]
async fn slow_engine_calls_time_out_with_json() {
    let (app, _) = app_with(Arc::new(SlowEngine), |c| c.request_timeout_secs = 1);
    let started = std::time::Instant::now();
    let api = get(&app, "/api/autotune").await;
    assert!(started.elapsed() < std::time::Duration::from_millis(2500));
    assert_eq!(api.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        api.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("within 1 s")
    );
    assert_eq!(
        get(&app, "/healthz").await.status,
        StatusCode::OK,
        "pages keep answering"
    );
}

#[tokio::test]
async fn dynamic_answers_are_gzipped_when_accepted() {
    let app = app();
    let request = |uri: &str| {
        Request::get(uri)
            .header("accept-encoding", "gzip")
            .body(Body::empty())
            .unwrap()
    };
    let search = send(&app, request("/search?q=device")).await;
    assert_eq!(search.status, StatusCode::OK);
    assert_eq!(search.header("content-encoding"), "gzip");
    assert_eq!(&search.body[..2], &[0x1f, 0x8b]);
    let small = send(&app, request("/healthz")).await;
    assert!(
        small.header("content-encoding").is_empty(),
        "small answers stay plain"
    );
}

#[tokio::test]
async fn api_pages_anchor_every_item_and_search_finds_items_first() {
    let app = app();
    let html = get(&app, "/docs/api/ops").await.text();
    // Every item of the symbols table has an anchor: its detail heading, or its row.
    let content = Content::load(&content_dir()).unwrap();
    let source = &content.pages["api/ops"].body;
    let symbols = source
        .split("## Symbols")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .unwrap();
    let items: Vec<&str> = symbols
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .collect();
    assert!(items.len() > 100, "{} items", items.len());
    for item in &items {
        assert!(
            html.contains(&format!("id=\"{item}\"")),
            "no anchor for `{item}`"
        );
    }
    // A function's heading carries its name; its table row links to it; its signature is highlighted.
    assert!(
        html.contains(
            "<h3 id=\"conv2d\" class=\"api-item\"><code>conv2d</code> <a class=\"anchor\" href=\"#conv2d\""
        ),
        "conv2d heading"
    );
    assert!(html.contains("<a class=\"item-link\" href=\"#conv2d\"><code>conv2d</code></a>"));
    assert!(html.contains("<code class=\"item-anchor\" id=\"ConvAlgo\">ConvAlgo</code>"));
    assert!(
        html.contains("<code class=\"language-rust\"><span class=\"tok-kw\">pub</span> <span class=\"tok-kw\">fn</span>"),
        "signatures are highlighted as Rust"
    );
    // The table of contents lists the items.
    assert!(html.contains("<a href=\"#conv2d\">conv2d</a>"));

    // Typing an item's name finds the item first, on the server.
    for (query, anchor, page) in [
        ("conv2d", "conv2d", "api/ops"),
        ("depthwise_conv2d", "depthwise_conv2d", "api/ops"),
        ("ConvAlgo", "ConvAlgo", "api/ops"),
        ("Conv2d", "Conv2d", "api/nn"),
        ("matmul", "matmul", "api/ops"),
    ] {
        let json = get(&app, &format!("/api/search?q={query}")).await.json();
        let first = &json["results"][0];
        assert_eq!(
            first["anchor"]
                .as_str()
                .or(first["url"].as_str().and_then(|u| u.split('#').nth(1))),
            Some(anchor),
            "{query}: {json}"
        );
        assert_eq!(first["page"].as_str(), Some(page), "{query}: {json}");
    }
}

#[tokio::test]
async fn site_chrome_details() {
    let app = app();
    let favicon = get_ok(&app, "/favicon.ico").await;
    assert_eq!(favicon.header("content-type"), "image/x-icon");
    let home = get(&app, "/").await.text();
    assert!(
        home.contains("<title>netcl</title>"),
        "home title without a doubled site name"
    );
    let faq = get(&app, "/docs/faq").await.text();
    assert!(faq.contains("<title>FAQ · netcl</title>"));
    assert!(
        faq.contains(&format!("netcl {}", env!("CARGO_PKG_VERSION"))),
        "the version is shown"
    );
    assert!(faq.contains("rel=\"icon\""));
    // One concepts section in the navigation.
    assert_eq!(faq.matches(">Concepts</h2>").count(), 1);
    assert!(!faq.contains("Engine concepts"));
    // Runnable blocks are labelled as the playground's language, not as Rhai.
    let autotune = get(&app, "/docs/concepts/autotune").await.text();
    assert!(autotune.contains("<span class=\"code-lang\">netcl script</span>"));
    assert!(!autotune.contains("<span class=\"code-lang\">Rhai</span>"));
    // The drawer's menu link and the folded table of contents are in every page.
    assert!(autotune.contains("id=\"nav-toggle\" href=\"#nav\""));
    assert!(autotune.contains("<details class=\"toc-fold\">"));
}
