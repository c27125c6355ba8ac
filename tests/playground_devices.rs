//! The playground's device choice against real workers: `GET /api/run/devices` lists the server's devices, a run
//! names one by index or selector and runs there on a worker of its own, an unknown device is a 400 naming the
//! choices, and shutdown stops every device's worker.

mod wiki_support;

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use netcl::wiki::server::AppState;
use serde_json::{Value, json};
use wiki_support::{Answer, TestEngine, app_with, get, send};

fn server() -> (Router, Arc<AppState>) {
    app_with(Arc::new(TestEngine), |c| {
        c.playground_worker_command =
            Some(vec![env!("CARGO_BIN_EXE_netcl").into(), "worker".into()]);
        c.playground_workers = 1;
    })
}

async fn post(app: &Router, body: &Value) -> Answer {
    let request = Request::post("/api/run")
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    send(app, request).await
}

async fn listed(app: &Router) -> Value {
    let answer = get(app, "/api/run/devices").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text());
    answer.json()
}

const CODE: &str = "let x = tensor([1.0, 2.0, 3.0]);\nsum_all(x * 2.0).item()";

#[tokio::test]
async fn the_device_list_names_every_device_and_the_default() {
    let (app, _state) = server();
    let list = listed(&app).await;
    let devices = list["devices"].as_array().unwrap();
    let builtin = devices.last().unwrap();
    assert_eq!(builtin["kind"], "builtin", "{list}");
    assert_eq!(builtin["index"].as_u64(), Some(devices.len() as u64 - 1));
    let default = list["default"].as_u64().expect("a default device");
    let marked: Vec<u64> = devices
        .iter()
        .filter(|d| d["default"] == true)
        .map(|d| d["index"].as_u64().unwrap())
        .collect();
    assert_eq!(marked, vec![default]);
    let other = post_method(&app).await;
    assert_eq!(other, StatusCode::METHOD_NOT_ALLOWED);
}

async fn post_method(app: &Router) -> StatusCode {
    let request = Request::post("/api/run/devices")
        .header("content-type", "application/json")
        .body(Body::from("{}"))
        .unwrap();
    send(app, request).await.status
}

#[tokio::test]
async fn a_run_goes_to_the_device_it_names() {
    let (app, state) = server();
    let list = listed(&app).await;
    let default = list["default"].as_u64().unwrap();
    let devices = list["devices"].as_array().unwrap().clone();
    let name_of = |i: u64| devices[i as usize]["name"].as_str().unwrap().to_string();

    // No device, and the default's own index, both run on the default device's workers.
    let plain = post(&app, &json!({"code": CODE})).await.json();
    assert_eq!(plain["ok"], true, "{plain}");
    assert_eq!(plain["value"], "12.0");
    assert_eq!(plain["device"]["name"], name_of(default));
    let same = post(&app, &json!({"code": CODE, "device": default}))
        .await
        .json();
    assert_eq!(same["device"]["name"], name_of(default));
    let pool = state.playground().unwrap().pool();
    assert!(pool.device_lanes().is_empty(), "{:?}", pool.device_lanes());

    // The built-in device by selector: its own lane, the same answer.
    let builtin = devices.len() as u64 - 1;
    let on_builtin = post(&app, &json!({"code": CODE, "device": "builtin"}))
        .await
        .json();
    assert_eq!(on_builtin["ok"], true, "{on_builtin}");
    assert_eq!(on_builtin["value"], "12.0");
    assert_eq!(on_builtin["device"]["kind"], "builtin");
    if builtin == default {
        eprintln!("only the built-in device here: no second lane to check");
        return;
    }
    assert_eq!(pool.device_lanes(), vec![builtin as usize]);
    // A second run reuses the lane and its worker: one default worker and one built-in worker.
    let again = post(&app, &json!({"code": CODE, "device": builtin}))
        .await
        .json();
    assert_eq!(again["device"]["kind"], "builtin");
    assert_eq!(pool.device_lanes(), vec![builtin as usize]);
    let pids = pool.worker_pids();
    assert_eq!(pids.len(), 2, "{pids:?}");
    state.playground().unwrap().shutdown();
    assert!(pool.worker_pids().is_empty());
}

#[tokio::test]
async fn an_unknown_device_is_refused_naming_the_choices() {
    let (app, state) = server();
    for device in [json!(99), json!("no-such-device"), json!("")] {
        let answer = post(&app, &json!({"code": CODE, "device": device})).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.text());
        let body = answer.json();
        assert_eq!(body["ok"], false);
        assert_eq!(body["error"]["kind"], "unknown_device", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("built-in"), "{message}");
        let choices = body["error"]["choices"].as_array().unwrap();
        assert!(choices.iter().any(|c| c["kind"] == "builtin"), "{body}");
    }
    let wrong_type = post(&app, &json!({"code": CODE, "device": [1]})).await;
    assert_eq!(wrong_type.status, StatusCode::BAD_REQUEST);
    assert_eq!(wrong_type.json()["error"]["kind"], "bad_request");
    // Nothing was started for a refused device.
    let pool = state.playground().unwrap().pool();
    assert!(pool.device_lanes().is_empty());
    assert!(pool.worker_pids().is_empty());
}
