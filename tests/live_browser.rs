//! Live documentation in a real browser: a conv example run on every device of the server side by side (on CI
//! PoCL and the built-in reference device), a decision expanded in one device's column, a run on the device the
//! picker names, the columns stacked on a phone, and the training example's loss curve with axes and one line.
//! Screenshots are kept in `artifacts/screenshots/` (`live-*.png`).
//!
//! Needs chromium and chromedriver like `wiki_browser`; under `CI=true` their absence fails the test.

mod wiki_support;

use std::time::Duration;

use serde_json::json;
use wiki_support::browser::*;

const RUN_WAIT: Duration = Duration::from_secs(180);

/// Marks the first runnable block whose code contains `needle` with the id `id`; false when there is none.
fn mark_block(s: &Session, needle: &str, id: &str) -> bool {
    s.call(
        "POST",
        "/execute/sync",
        Some(json!({
            "script": "var b = [...document.querySelectorAll(\".code-block[data-runnable='true']\")].find(b => b.querySelector('pre code').textContent.includes(arguments[0])); if (b) { b.id = arguments[1]; } return !!b;",
            "args": [needle, id]
        })),
    )
    .as_bool()
    .unwrap_or(false)
}

fn js_str(s: &Session, script: &str) -> String {
    s.js(script).as_str().unwrap_or_default().to_string()
}

fn js_num(s: &Session, script: &str) -> f64 {
    s.js(script).as_f64().unwrap_or(f64::NAN)
}

#[test]
fn browser_compares_devices_side_by_side_and_plots_the_loss() {
    let Some((_driver, s, base)) = browse(|| start_playground_wiki(120_000)) else {
        return;
    };

    // The convolution page's conv example, on every device.
    s.go(&format!("{base}/docs/concepts/convolution"));
    assert!(
        mark_block(&s, "conv2d(", "conv-example"),
        "a conv example on the page"
    );
    let block = "#conv-example";
    s.wait_until("the device picker", || {
        s.js(&format!("var p = document.querySelector('{block} .device-picker'); return !!p && !p.hidden && p.options.length > 1"))
            .as_bool()
            .unwrap_or(false)
    });
    let devices = js_num(
        &s,
        &format!("return document.querySelector('{block} .device-picker').options.length"),
    ) as usize;
    let options = js_str(
        &s,
        &format!(
            "return [...document.querySelector('{block} .device-picker').options].map(o => o.textContent).join('\\n')"
        ),
    );
    assert!(options.contains("built-in reference"), "{options}");
    assert!(options.contains("default"), "{options}");
    s.click(&format!("{block} .run-all-btn"));
    s.wait_for("the comparison", RUN_WAIT, || {
        js_str(&s, &format!("var c = document.querySelector('{block} .run-compare'); return c ? (c.getAttribute('data-state') || '') : ''")) == "done"
    });
    let states = js_str(
        &s,
        &format!(
            "return [...document.querySelectorAll('{block} .compare-result')].map(r => r.getAttribute('data-state')).join(',')"
        ),
    );
    assert_eq!(
        states,
        vec!["ok"; devices].join(","),
        "every device answers ok"
    );
    let headings = js_str(
        &s,
        &format!(
            "return [...document.querySelectorAll('{block} .compare-device')].map(h => h.textContent).join('\\n')"
        ),
    );
    assert!(headings.contains("built-in reference"), "{headings}");
    assert_eq!(headings.lines().count(), devices, "{headings}");
    // Each column names the device that ran it, and the same output.
    let metas = js_str(
        &s,
        &format!(
            "return [...document.querySelectorAll('{block} .compare-col .run-meta')].map(m => m.textContent).join('\\n')"
        ),
    );
    assert!(metas.contains("builtin"), "{metas}");
    let outputs = js_str(
        &s,
        &format!(
            "return [...document.querySelectorAll('{block} .compare-col .run-output')].map(o => o.textContent).join('|')"
        ),
    );
    let first = outputs.split('|').next().unwrap_or_default().to_string();
    assert!(first.contains("agrees: true"), "{outputs}");
    assert!(
        outputs.split('|').all(|o| o == first),
        "the same answer everywhere: {outputs}"
    );
    let summary = js_str(
        &s,
        &format!(
            "return [...document.querySelectorAll('{block} .compare-summary tbody tr')].map(r => r.textContent).join('\\n')"
        ),
    );
    assert_eq!(
        summary.lines().filter(|l| l.contains("ok")).count(),
        devices,
        "{summary}"
    );
    assert!(summary.contains(" ms"), "{summary}");
    assert_eq!(
        js_num(
            &s,
            &format!("return document.querySelectorAll('{block} .fastest-badge').length")
        ),
        1.0
    );

    // Expand a decision of an OpenCL device's column: the shape key's fields and the candidates unfold.
    let opened = s.js(&format!("var d = document.querySelector('{block} .compare-col .decision summary'); if (!d) return false; d.id = 'first-decision'; return true;"));
    assert_eq!(opened, json!(true), "an OpenCL column shows decisions");
    s.click("#first-decision");
    s.wait_until("the decision to open", || {
        s.js("return document.getElementById('first-decision').parentElement.open")
            .as_bool()
            .unwrap_or(false)
    });
    let body = js_str(
        &s,
        "return document.getElementById('first-decision').parentElement.querySelector('.decision-body').innerText",
    );
    assert!(body.contains("shape key"), "{body}");
    assert!(
        js_num(
            &s,
            "return document.getElementById('first-decision').parentElement.querySelectorAll('.candidate-bars li').length"
        ) >= 1.0
    );
    s.screenshot("live-01-compare-devices");

    // On a phone the columns stack and nothing scrolls sideways.
    set_viewport(&s, 390, 844);
    let lefts = js_str(
        &s,
        &format!(
            "return [...document.querySelectorAll('{block} .compare-col')].map(c => Math.round(c.getBoundingClientRect().left)).join(',')"
        ),
    );
    let mut distinct: Vec<&str> = lefts.split(',').collect();
    distinct.dedup();
    assert_eq!(distinct.len(), 1, "columns stack at 390 px: {lefts}");
    assert_eq!(overflow(&s), 0, "no sideways scrolling at 390 px");
    s.js(&format!(
        "document.querySelector('{block} .run-compare').scrollIntoView()"
    ));
    s.screenshot("live-02-compare-phone");
    set_viewport(&s, 1280, 900);

    // The picker sends a single run to the device it names: the built-in one here.
    s.js(&format!(
        "var p = document.querySelector('{block} .device-picker'); p.value = [...p.options].find(o => o.textContent.includes('built-in')).value; p.dispatchEvent(new Event('change'));"
    ));
    s.click(&format!("{block} .run-btn"));
    s.wait_for("the run on the built-in device", RUN_WAIT, || {
        js_str(&s, &format!("var r = document.querySelector('{block} > .run-result > .run-meta'); return r ? r.textContent : ''")).contains("builtin")
    });

    // The training example's loss curve: axes with ticks, one line, one x axis across the run.
    s.go(&format!("{base}/docs/concepts/training"));
    assert!(
        mark_block(&s, "fit(", "fit-example"),
        "a training example on the page"
    );
    s.click("#fit-example .run-btn");
    s.wait_for("the training result", RUN_WAIT, || {
        js_str(&s, "var r = document.querySelector('#fit-example .run-result'); return r ? (r.getAttribute('data-state') || '') : ''") == "ok"
    });
    // How many elements of the example's curve match `sel`.
    let count = |sel: &str| {
        js_num(
            &s,
            &format!("return document.querySelectorAll('#fit-example {sel}').length"),
        )
    };
    let lines = count(".run-curve svg polyline");
    assert_eq!(lines, 1.0, "one line: the loss");
    let field = js_str(
        &s,
        "return document.querySelector('#fit-example .run-curve polyline').getAttribute('data-field')",
    );
    assert!(field.ends_with("loss"), "{field}");
    let axes = count(".run-curve-axes > line:not(.tick)");
    assert_eq!(axes, 2.0, "an x and a y axis");
    let ticks = count(".run-curve-axes text");
    assert!(
        ticks >= 10.0,
        "tick labels on both axes and an axis label: {ticks}"
    );
    let points = js_num(
        &s,
        "return document.querySelector('#fit-example .run-curve polyline').getAttribute('points').trim().split(' ').length",
    );
    assert!(points >= 2.0, "the loss has several points: {points}");
    s.js("document.querySelector('#fit-example .run-curve').scrollIntoView()");
    s.screenshot("live-03-loss-curve");

    // Nothing here is refused by the Content-Security-Policy.
    assert_no_csp_violations(&s);
}
