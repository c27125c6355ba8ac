//! The wiki in a real browser: headless Chromium driven over WebDriver (chromedriver) loads a page, navigates by
//! the sidebar and by prev/next, toggles dark mode, searches with `/` and opens a result. Screenshots are kept in
//! `artifacts/screenshots/`.
//!
//! Needs Debian's `chromium` and `chromium-driver` (or `NETCL_CHROMIUM` / `NETCL_CHROMEDRIVER` naming the
//! binaries). Under `CI=true` their absence fails the test; elsewhere it is skipped with a message.

mod wiki_support;

use std::time::Duration;

use serde_json::{Value, json};
use wiki_support::browser::*;
use wiki_support::{content_dir, scratch};

#[test]
fn browser_runs_examples_shows_decisions_errors_and_stops_runs() {
    let Some((_driver, s, base)) = browse(|| start_playground_wiki(30_000)) else {
        return;
    };
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
    let code = "let i = 0;\nloop {\n    i += 1;\n    if i % 20000 == 0 { progress(#{step: i, loss: 1000.0 / i}); }\n}";
    run_code(&s, editor, code);
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
    let again = ("a run after stopping", 30);
    run_until(&s, editor, "print(\"again\");\n6 * 7", again, "ok");
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
    assert_no_csp_violations(&s);
}

#[test]
fn browser_navigates_toggles_theme_and_searches() {
    let Some((_driver, s, base)) = browse(start_wiki) else {
        return;
    };

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
    s.type_into("#search-input", "autotune cache");
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
    s.type_into("#autotune-filter", "reduce");
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
    s.type_into("#search-input", "autotune");
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

#[test]
fn browser_layout_fits_a_phone_and_a_desktop() {
    let Some((_driver, s, base)) = browse(start_wiki) else {
        return;
    };
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
