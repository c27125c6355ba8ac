//! Model files through the playground against hostile requests: a saved model comes back in the result and
//! loads again as an upload; oversized uploads, bad and duplicate names, bad Base64, path escapes (by name and
//! by a link in the data folder) and corrupt or oversized model files are each a structured refusal or a
//! structured script error, and the server keeps answering runs after every one of them.

mod wiki_support;

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use netcl::codec::{base64, base64_decode};
use netcl::io::ModelBytes;
use serde_json::{Value, json};
use wiki_support::{TestEngine, app_with, runtime, scratch, send};

fn worker_command() -> Vec<String> {
    vec![env!("CARGO_BIN_EXE_netcl").into(), "worker".into()]
}

async fn run(app: &Router, body: &Value) -> (StatusCode, Value) {
    let text = body.to_string();
    let request = Request::post("/api/run")
        .header("content-type", "application/json")
        .header("host", "localhost")
        .body(Body::from(text))
        .unwrap();
    let answer = send(app, request).await;
    (answer.status, answer.json())
}

/// The kind of a run's script error, and its message; panics when the run succeeded.
fn script_error(answer: &(StatusCode, Value)) -> (String, String) {
    assert_eq!(answer.0, StatusCode::OK, "{}", answer.1);
    assert_eq!(answer.1["ok"], false, "{}", answer.1);
    (
        answer.1["error"]["kind"].as_str().unwrap_or("").to_string(),
        answer.1["error"]["message"]
            .as_str()
            .unwrap_or("")
            .to_string(),
    )
}

/// A refusal before the run: its status and error kind.
fn refusal(answer: &(StatusCode, Value)) -> (StatusCode, String) {
    assert_eq!(answer.1["ok"], false, "{}", answer.1);
    (
        answer.0,
        answer.1["error"]["kind"].as_str().unwrap_or("").to_string(),
    )
}

const TINY: &str =
    r#"let m = sequential([#{type: "Linear", args: #{in_features: 4, out_features: 2}}], 3);"#;

#[test]
fn model_files_survive_hostile_requests() {
    let data = scratch("model-files");
    let outside = scratch("model-files-outside");
    let rt = runtime();
    rt.block_on(async {
        let (app, state) = app_with(Arc::new(TestEngine), |c| {
            c.playground_worker_command = Some(worker_command());
            c.playground_burst = 1000;
            c.playground_rate_per_minute = 6000;
            c.playground_data_dir = Some(data.clone());
        });
        let alive = || async {
            let (status, r) = run(&app, &json!({"code": "sum_all(ones([4])).item()"})).await;
            assert_eq!(status, StatusCode::OK, "{r}");
            assert_eq!(r["ok"], true, "the server stopped answering runs: {r}");
        };

        // A saved model comes back in the result, as an output line and as Base64 bytes.
        let (status, saved) = run(
            &app,
            &json!({"code": format!("{TINY} save_model(m, \"tiny.npz\"); m.forward(ones([1, 4])).sum().item()")}),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{saved}");
        assert_eq!(saved["ok"], true, "{saved}");
        let file = &saved["files"][0];
        assert_eq!(file["name"], "tiny.npz");
        let bytes = base64_decode(file["data"].as_str().unwrap()).unwrap();
        assert_eq!(file["bytes"].as_u64(), Some(bytes.len() as u64));
        assert!(
            saved["outputs"]
                .as_array()
                .unwrap()
                .iter()
                .any(|o| o["kind"] == "file" && o["name"] == "tiny.npz"),
            "{saved}"
        );
        let parsed = ModelBytes::parse(&bytes, "tiny.npz").unwrap();
        assert_eq!(parsed.configs()[0].kind, "Linear");

        // Uploaded again, it loads and computes what the saved model computed.
        let upload = json!([{"name": "mine.npz", "data": file["data"]}]);
        let (_, loaded) = run(
            &app,
            &json!({"code": "print(uploads()); load_model(\"mine.npz\").forward(ones([1, 4])).sum().item()", "files": upload}),
        )
        .await;
        assert_eq!(loaded["ok"], true, "{loaded}");
        assert_eq!(loaded["value"], saved["value"], "{loaded}");
        assert_eq!(loaded["outputs"][0]["text"], "[\"mine.npz\"]");
        // The same file from the data folder.
        std::fs::write(data.join("tiny.npz"), &bytes).unwrap();
        let (_, from_data) = run(
            &app,
            &json!({"code": "load_model(\"tiny.npz\").forward(ones([1, 4])).sum().item()"}),
        )
        .await;
        assert_eq!(from_data["value"], saved["value"], "{from_data}");

        // An upload larger than the body limit: 413, before any run.
        let big = base64(&vec![7u8; 80 * 1024]);
        let answer = run(
            &app,
            &json!({"code": "1", "files": [{"name": "big.npz", "data": big}]}),
        )
        .await;
        assert_eq!(
            refusal(&answer),
            (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large".into())
        );
        alive().await;

        // Names that are not plain, duplicates, bad Base64, too many files: 400 `bad_file`.
        let ok_data = file["data"].clone();
        let bad_requests = [
            json!([{"name": "../escape.npz", "data": ok_data}]),
            json!([{"name": "/etc/passwd", "data": ok_data}]),
            json!([{"name": "a/b.npz", "data": ok_data}]),
            json!([{"name": ".hidden", "data": ok_data}]),
            json!([{"name": "x".repeat(65), "data": ok_data}]),
            json!([{"name": "", "data": ok_data}]),
            json!([{"name": "two.npz", "data": ok_data}, {"name": "two.npz", "data": ok_data}]),
            json!([{"name": "b64.npz", "data": "not base64!"}]),
            json!((0..9)
                .map(|i| json!({"name": format!("f{i}.npz"), "data": "AAAA"}))
                .collect::<Vec<_>>()),
        ];
        for files in bad_requests {
            let answer = run(&app, &json!({"code": "1", "files": files})).await;
            assert_eq!(
                refusal(&answer),
                (StatusCode::BAD_REQUEST, "bad_file".into()),
                "{files}"
            );
        }
        // A file entry with an unknown field is not a run request.
        let answer = run(
            &app,
            &json!({"code": "1", "files": [{"name": "a.npz", "data": "", "path": "/etc"}]}),
        )
        .await;
        assert_eq!(
            refusal(&answer),
            (StatusCode::BAD_REQUEST, "bad_request".into())
        );
        alive().await;

        // Path escapes by name from the script, and through a link in the data folder.
        for name in ["../../etc/passwd", "/etc/passwd", "..", "a/../../b"] {
            let (kind, message) =
                script_error(&run(&app, &json!({"code": format!("load_model({name:?})")})).await);
            assert_eq!(kind, "invalid", "{name}: {message}");
            assert!(message.contains("plain file name"), "{name}: {message}");
        }
        std::fs::write(outside.join("secret.npz"), &bytes).unwrap();
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(outside.join("secret.npz"), data.join("link.npz")).unwrap();
            let (kind, message) =
                script_error(&run(&app, &json!({"code": "load_model(\"link.npz\")"})).await);
            assert_eq!(kind, "invalid", "{message}");
            assert!(message.contains("outside the data folder"), "{message}");
        }
        let (kind, message) =
            script_error(&run(&app, &json!({"code": "load_model(\"missing.npz\")"})).await);
        assert_eq!(kind, "not_found", "{message}");
        let (kind, _) =
            script_error(&run(&app, &json!({"code": format!("{TINY} save_model(m, \"../x.npz\")")})).await);
        assert_eq!(kind, "invalid");
        alive().await;

        // Corrupt model files: garbage, a truncated model, a zip without the metadata, a member claiming a huge
        // size, and a model whose config asks for more parameters than a run may have.
        let truncated = base64(&bytes[..bytes.len() / 2]);
        let mut huge_claim = bytes.clone();
        // The central directory's uncompressed size of the first member (offset 24 of its entry).
        if let Some(cd) = huge_claim.windows(4).position(|w| w == [0x50, 0x4b, 0x01, 0x02]) {
            huge_claim[cd + 10] = 8; // deflate
            huge_claim[cd + 24..cd + 28].copy_from_slice(&u32::MAX.to_le_bytes());
        }
        let no_meta = {
            let arr = netcl::io::npz::NpyArray::f32(&[2], vec![1.0, 2.0]);
            netcl::io::npz::npz_bytes(&[("0:weight".to_string(), arr)]).unwrap()
        };
        let giant = {
            let meta = json!({"type": "Sequential", "version": 2, "format": "netcl.single-file",
                "config": [{"type": "Linear", "args": {"in_features": 100000, "out_features": 100000}}]});
            let arr = netcl::io::npz::NpyArray::string(&meta.to_string());
            netcl::io::npz::npz_bytes(&[(netcl::io::model::META_KEY.to_string(), arr)]).unwrap()
        };
        let cases = [
            ("garbage.npz", base64(b"this is not a zip archive at all"), "format"),
            ("truncated.npz", truncated, "format"),
            ("huge.npz", base64(&huge_claim), "format"),
            ("nometa.npz", base64(&no_meta), "format"),
            ("giant.npz", base64(&giant), "limit"),
        ];
        for (name, data, want) in cases {
            let answer = run(
                &app,
                &json!({"code": format!("load_model({name:?})"), "files": [{"name": name, "data": data}]}),
            )
            .await;
            let (kind, message) = script_error(&answer);
            assert_eq!(kind, want, "{name}: {message}");
            assert!(!message.is_empty(), "{name}");
            alive().await;
        }

        // A run may offer at most max_file_bytes of files.
        let (kind, message) = script_error(
            &run(
                &app,
                &json!({"code": format!("{TINY} save_model(m, \"a.npz\")"), "limits": {"max_file_bytes": 100}}),
            )
            .await,
        );
        assert_eq!(kind, "limit", "{message}");
        assert!(message.contains("max_file_bytes"), "{message}");
        alive().await;
        if let Some(p) = state.playground() {
            p.shutdown();
        }
    });
    let _ = std::fs::remove_dir_all(&data);
    let _ = std::fs::remove_dir_all(&outside);
}
