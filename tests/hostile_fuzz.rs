//! Fuzzing with proptest, bounded in cases and time: `/api/run` bodies (arbitrary bytes, JSON of the wrong
//! shape, and well-formed requests with arbitrary code and limits) always get a JSON answer with a 2xx or 4xx
//! status, and the Markdown renderer never panics on arbitrary text.

mod wiki_support;

use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::http::Request;
use netcl::wiki::content::Content;
use netcl::wiki::links::{LinkMode, Linker};
use proptest::prelude::*;
use wiki_support::{TestEngine, app_with, send};

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(wiki_support::runtime)
}

fn app() -> &'static axum::Router {
    static APP: OnceLock<axum::Router> = OnceLock::new();
    APP.get_or_init(|| {
        let _guard = runtime().enter();
        app_with(Arc::new(TestEngine), |c| {
            c.playground_worker_command = Some(vec![
                env!("CARGO_BIN_EXE_netcl").into(),
                "--device".into(),
                "builtin".into(),
                "worker".into(),
            ]);
            c.playground_rate_per_minute = 1_000_000;
            c.playground_burst = 1_000_000;
            c.playground_timeout_ms = 5_000;
            c.playground_limits.max_operations = 100_000;
        })
        .0
    })
}

fn post(body: Vec<u8>) -> (u16, serde_json::Value) {
    runtime().block_on(async {
        let request = Request::post("/api/run")
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap();
        let answer = send(app(), request).await;
        let json = serde_json::from_slice(&answer.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", answer.text()));
        (answer.status.as_u16(), json)
    })
}

/// Rhai-ish code: fragments of the playground's language glued at random.
fn code() -> impl Strategy<Value = String> {
    glued(
        vec![
            "ones([",
            "rand([",
            "randn([",
            "matmul(",
            "reshape(",
            "sequential([#{type: \"Linear\", args: #{in_features: ",
            "}}], 0)",
            "-1",
            "0",
            "9223372036854775807",
            "65536",
            ", ",
            "]",
            ")",
            ";",
            "let x = ",
            "x",
            " + ",
            " * ",
            "progress(",
            "print(",
            "loop { }",
            "\"",
            "{",
            "}",
            "sum_all(",
            "softmax(",
        ],
        "[a-z0-9_ ]{0,8}",
        24,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, max_shrink_iters: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_get_a_json_4xx(body in prop::collection::vec(any::<u8>(), 0..512)) {
        let (status, json) = post(body);
        prop_assert!((400..500).contains(&status), "{status} {json}");
        prop_assert_eq!(json["ok"].clone(), serde_json::json!(false));
    }

    #[test]
    fn run_requests_with_arbitrary_code_and_limits_are_answered(
        code in code(),
        limits in prop::option::of((any::<u64>(), any::<u32>(), any::<u32>(), any::<u32>())),
    ) {
        let mut body = serde_json::json!({"code": code});
        if let Some((ops, tensor, run, out)) = limits {
            body["limits"] = serde_json::json!({
                "max_operations": ops, "max_tensor_elements": tensor,
                "max_run_elements": run, "max_output_bytes": out,
            });
        }
        let (status, json) = post(body.to_string().into_bytes());
        prop_assert!(status == 200 || (400..500).contains(&status), "{status} {json}");
        if status == 200 {
            // Scripts fail with their own errors, never a crashed worker.
            let kind = json["error"]["kind"].as_str().unwrap_or("");
            prop_assert!(kind != "worker_crashed" && kind != "internal", "{json}");
        }
    }
}

fn content() -> &'static Content {
    static CONTENT: OnceLock<Content> = OnceLock::new();
    CONTENT.get_or_init(|| Content::load(&wiki_support::content_dir()).unwrap())
}

/// Up to `max` pieces glued together, each one of `tokens` or a match of the regex `free`.
fn glued(
    tokens: Vec<&'static str>,
    free: &'static str,
    max: usize,
) -> impl Strategy<Value = String> {
    let piece = prop_oneof![prop::sample::select(tokens).prop_map(String::from), free];
    prop::collection::vec(piece, 0..max).prop_map(|v| v.concat())
}

/// Markdown-ish text: the syntax the renderer handles, glued at random.
fn markdown() -> impl Strategy<Value = String> {
    glued(
        vec![
            "# ",
            "## ",
            "\n",
            "\n\n",
            "```",
            "```rhai run\n",
            "`",
            "$",
            "$$",
            "\\frac{",
            "}",
            "^",
            "_",
            "[link](",
            ")",
            "](../api/tensor.md#x)",
            "![",
            "| a | b |\n|---|---|\n",
            "> [!NOTE]\n> ",
            "- ",
            "1. ",
            "<script>",
            "&amp;",
            "*",
            "**",
            "~~",
            "[^1]",
            "\t",
            "é🙂",
        ],
        "[ -~]{0,12}",
        40,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn the_markdown_renderer_never_panics(text in markdown()) {
        let linker = Linker::new(&LinkMode::Server { base: String::new() }, "concepts/fuzz");
        let rendered = netcl::wiki::markdown::render(&text, "concepts/fuzz", content(), &linker);
        prop_assert!(!rendered.html.contains("<script>"), "{}", rendered.html);
    }
}
