//! Model files in a real browser: a run that saves a model shows a Download link under its output carrying
//! the model file, and the file chosen with the block's Upload input travels with the next run, where
//! `load_model` finds it by name. A bad upload name is shown as an error, and the page keeps working.
//!
//! Needs Debian's `chromium` and `chromium-driver` (or `NETCL_CHROMIUM` / `NETCL_CHROMEDRIVER`), as the other
//! browser tests; under `CI=true` their absence fails the test.

mod wiki_support;

use std::time::Duration;

use serde_json::json;
use wiki_support::browser::*;
use wiki_support::scratch;

#[test]
fn browser_downloads_a_saved_model_and_uploads_it_again() {
    let Some((_driver, s, base)) = browse(|| start_playground_wiki(30_000)) else {
        return;
    };
    let block = ".code-block[data-runnable='true']";
    s.go(&format!("{base}/docs/concepts/playground"));

    // Save: the result carries the file and the page links it for download.
    let code = "let m = sequential([#{type: \"Linear\", args: #{in_features: 4, out_features: 2}}], 5);\nsave_model(m, \"small.npz\");\nm.forward(ones([1, 4])).sum().item()";
    run_until(&s, block, code, ("the saving run", 60), "ok");
    let link = s.js(&format!(
        "var a = document.querySelector(\"{block} .run-file a.download-btn\"); return a ? [a.getAttribute('download'), a.getAttribute('href'), a.textContent] : null;"
    ));
    assert_eq!(link[0], "small.npz", "{link}");
    let href = link[1].as_str().unwrap_or_default();
    let prefix = "data:application/octet-stream;base64,";
    assert!(href.starts_with(prefix), "{href:.80}");
    let bytes = base64_decode(&href[prefix.len()..]);
    let model =
        netcl::io::ModelBytes::parse(&bytes, "small.npz").expect("the download is a model file");
    assert_eq!(model.configs()[0].kind, "Linear");
    let saved_value = s.text(&format!("{block} .run-value"));
    s.screenshot("playground-files-01-download");

    // Upload: the downloaded file, chosen in the block's file input, loads by name in the next run.
    let dir = scratch("browser-upload");
    let path = dir.join("my model.npz");
    std::fs::write(&path, &bytes).unwrap();
    let input = s.find(&format!("{block} .upload-input"));
    s.call(
        "POST",
        &format!("/element/{input}/value"),
        Some(json!({"text": path.display().to_string()})),
    );
    // The browser's file name is made plain (the space becomes `_`) and listed next to the button.
    s.wait_for("the upload to be read", Duration::from_secs(10), || {
        s.text(&format!("{block} .upload-list")) == "my_model.npz"
    });
    let code = "print(uploads());\nload_model(\"my_model.npz\").forward(ones([1, 4])).sum().item()";
    run_until(&s, block, code, ("the loading run", 60), "ok");
    assert!(
        s.text(&format!("{block} .run-output"))
            .contains("[\"my_model.npz\"]")
    );
    assert_eq!(
        s.text(&format!("{block} .run-value")),
        saved_value,
        "the uploaded model computes what the saved one did"
    );
    s.screenshot("playground-files-02-upload");

    // A name the script may not load is an error shown on the page; the next run works.
    let code = "load_model(\"../my_model.npz\")";
    run_until(&s, block, code, ("the refused load", 30), "error");
    let error = s.text(&format!("{block} .run-error")).to_lowercase();
    assert!(
        error.contains("invalid") && error.contains("plain file name"),
        "{error}"
    );
    let code = "sum_all(ones([3])).item()";
    run_until(&s, block, code, ("a run after the error", 30), "ok");
    assert_no_csp_violations(&s);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn browser_runs_the_character_transformer_tutorial_within_the_limits() {
    // The playground's default wall time: every block of the tutorial must fit it.
    let Some((_driver, s, base)) = browse(|| start_playground_wiki(10_000)) else {
        return;
    };
    s.go(&format!("{base}/docs/tutorials/char-transformer"));
    let count = s
        .js("var b = document.querySelectorAll(\".code-block[data-runnable='true']\"); b.forEach(function (x, i) { x.id = 'tutorial-block-' + i; }); return b.length;")
        .as_u64()
        .unwrap_or(0);
    assert_eq!(count, 4, "the tutorial's runnable blocks");
    let mut times = Vec::new();
    for i in 0..count {
        let block = format!("#tutorial-block-{i}");
        s.click(&format!("{block} .run-btn"));
        s.wait_for(
            &format!("tutorial block {}", i + 1),
            Duration::from_secs(60),
            || matches!(result_state(&s, &block).as_str(), "ok" | "error"),
        );
        let output = s.text(&format!("{block} .run-output"));
        assert_eq!(
            result_state(&s, &block),
            "ok",
            "block {}: {}",
            i + 1,
            s.js(&format!(
                "var e = document.querySelector('{block} .run-error'); return e ? e.textContent : '';"
            ))
        );
        let ms = s.js(&format!(
            "return document.querySelector('{block} .run-result').getAttribute('data-roundtrip-ms')"
        ));
        times.push(format!(
            "block {}: {} ms",
            i + 1,
            ms.as_str().unwrap_or("?")
        ));
        match i {
            1 => {
                // The loss falls, the curve is drawn and the model is offered.
                let losses: Vec<f64> = output
                    .lines()
                    .filter_map(|l| l.split("loss ").nth(1))
                    .filter_map(|v| v.trim().parse().ok())
                    .collect();
                assert!(losses.len() >= 2, "{output}");
                assert!(
                    losses[losses.len() - 1] < losses[0] - 0.5,
                    "the loss falls: {losses:?}"
                );
                assert!(
                    s.js(&format!(
                        "return document.querySelectorAll('{block} .run-image img').length"
                    ))
                    .as_u64()
                        == Some(1)
                );
                assert_eq!(
                    s.js(&format!(
                        "var a = document.querySelector('{block} .run-file a.download-btn'); return a ? a.getAttribute('download') : null;"
                    )),
                    "chargpt-60.npz"
                );
                s.screenshot("char-transformer-training");
            }
            2 => {
                assert!(output.contains("> MENENIUS:"), "{output}");
                s.screenshot("char-transformer-sample");
            }
            3 => {
                assert!(
                    s.js(&format!(
                        "return document.querySelectorAll('{block} .run-image img').length"
                    ))
                    .as_u64()
                        == Some(1)
                );
                s.screenshot("char-transformer-attention");
            }
            _ => {}
        }
    }
    eprintln!("char-transformer in the browser: {}", times.join(", "));
}
