//! The run routes: request parsing, auth, rate limit and admission, and the two answer forms (one JSON object,
//! or server-sent events).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, Response, StatusCode, header};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::Playground;
use super::pool::{Refusal, RunEvent, Ticket};
use super::rate::OpenRun;
use crate::script::files::{MAX_UPLOADS, check_name};
use crate::script::{Limits, RunInputs, UploadedFile};

/// Which run route a path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunRoute {
    /// `/api/run` (streams with `?stream=1`).
    Run,
    /// `/api/run/stream`.
    Stream,
    /// `/api/run/{id}/cancel`.
    Cancel(String),
    /// `/api/run/devices` (GET): the devices a run may name.
    Devices,
}

impl RunRoute {
    /// The run route for `path` (below the base path), if it is one.
    pub fn parse(path: &str) -> Option<RunRoute> {
        match path {
            "/api/run" => Some(RunRoute::Run),
            "/api/run/stream" => Some(RunRoute::Stream),
            "/api/run/devices" => Some(RunRoute::Devices),
            _ => {
                let id = path.strip_prefix("/api/run/")?.strip_suffix("/cancel")?;
                (!id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric()))
                    .then(|| RunRoute::Cancel(id.to_string()))
            }
        }
    }
}

/// Limits a request may ask for; each is lowered to the server's, never raised.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestLimits {
    max_operations: Option<u64>,
    max_tensor_elements: Option<usize>,
    max_run_elements: Option<usize>,
    max_output_bytes: Option<usize>,
    max_file_bytes: Option<usize>,
}

/// The device a run asks for: an index or a selector, as `netcl devices` prints them.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum DeviceField {
    Index(u64),
    Selector(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunRequest {
    code: String,
    #[serde(default)]
    limits: Option<RequestLimits>,
    #[serde(default)]
    device: Option<DeviceField>,
    /// Files for `load_model(name)`: `[{"name": "m.npz", "data": "<Base64>"}]`.
    #[serde(default)]
    files: Vec<UploadedFile>,
}

fn json_answer(status: StatusCode, value: &Value) -> Response<Body> {
    let mut response = Response::new(Body::from(value.to_string()));
    *response.status_mut() = status;
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// A refused request: `{"ok": false, "error": {"kind", "message"}}`.
pub fn refuse(status: StatusCode, kind: &str, message: &str) -> Response<Body> {
    json_answer(
        status,
        &json!({"ok": false, "error": {"kind": kind, "message": message, "line": null, "column": null}}),
    )
}

fn with_retry_after(mut response: Response<Body>, seconds: u64) -> Response<Body> {
    if let Ok(v) = HeaderValue::from_str(&seconds.max(1).to_string()) {
        response.headers_mut().insert(header::RETRY_AFTER, v);
    }
    response
}

/// The run routes when the playground is off: the same 404 JSON as any unknown endpoint.
pub fn disabled() -> Response<Body> {
    refuse(
        StatusCode::NOT_FOUND,
        "not_found",
        "the playground is turned off on this server",
    )
}

/// Answers a request to a run route.
pub async fn handle(
    playground: &Playground,
    route: RunRoute,
    parts: &Parts,
    body: Body,
    max_body: usize,
) -> Response<Body> {
    if route == RunRoute::Devices {
        return devices(playground, parts).await;
    }
    if parts.method != Method::POST {
        let mut r = refuse(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "use POST",
        );
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST"));
        return r;
    }
    if let RunRoute::Cancel(id) = route {
        if let Some(r) = authorise(playground, parts) {
            return r;
        }
        return if playground.pool.cancel(&id) {
            json_answer(StatusCode::OK, &json!({"id": id, "cancelled": true}))
        } else {
            refuse(
                StatusCode::NOT_FOUND,
                "not_found",
                "no run with this id is waiting or running",
            )
        };
    }
    let stream = route == RunRoute::Stream
        || parts
            .uri
            .query()
            .is_some_and(|q| q.split('&').any(|p| p == "stream=1" || p == "stream=true"));
    let request = match read_request(body, max_body).await {
        Ok(r) => r,
        Err(response) => return response,
    };
    let limits = merge(&playground.limits, request.limits.unwrap_or_default());
    if request.code.len() > limits.max_code_bytes {
        return refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            "limit",
            &format!(
                "the code is {} bytes; max_code_bytes is {}",
                request.code.len(),
                limits.max_code_bytes
            ),
        );
    }
    if let Err(message) = check_uploads(&request.files) {
        return refuse(StatusCode::BAD_REQUEST, "bad_file", &message);
    }
    if let Some(r) = authorise(playground, parts) {
        return r;
    }
    let lane = match request.device {
        Some(device) => match lane(playground, device).await {
            Ok(lane) => lane,
            Err(response) => return response,
        },
        None => None,
    };
    let client = client(playground, parts);
    let Some(open) = playground.open.open(&client) else {
        return with_retry_after(
            refuse(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_runs",
                &format!(
                    "this client already has {} runs open (playground_max_runs_per_client); wait for one to finish",
                    playground.open.max()
                ),
            ),
            1,
        );
    };
    if let Err(wait) = playground.rate.check(&client) {
        return with_retry_after(
            refuse(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                "too many runs from this client; try again shortly",
            ),
            wait.as_secs_f64().ceil() as u64,
        );
    }
    let inputs = RunInputs {
        files: request.files,
        ..playground.inputs()
    };
    let ticket = match playground
        .pool
        .submit_with(request.code, limits, lane, inputs)
    {
        Ok(t) => t,
        Err(Refusal::Busy) => {
            let workers = playground.pool.settings().workers.max(1);
            let wait = (playground.pool.in_flight() / workers) as u64 + 1;
            return with_retry_after(
                refuse(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "busy",
                    "every worker is busy and the queue is full; try again shortly",
                ),
                wait,
            );
        }
        Err(Refusal::Closed) => {
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "shutdown",
                "the server is shutting down",
            );
        }
    };
    if stream {
        return event_stream(ticket, open);
    }
    let answer = one_answer(ticket).await;
    drop(open);
    answer
}

async fn read_request(body: Body, max_body: usize) -> Result<RunRequest, Response<Body>> {
    let bytes = axum::body::to_bytes(body, max_body).await.map_err(|e| {
        let chain = || std::iter::successors(std::error::Error::source(&e), |s| s.source());
        let timed_out = chain().any(|s| s.is::<tower_http::timeout::TimeoutError>());
        let too_large = chain().any(|s| s.to_string().contains("length limit"));
        if too_large {
            refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                &format!("the request body is larger than {max_body} bytes"),
            )
        } else if timed_out {
            // The body deadline passed: a client sending slowly.
            refuse(
                StatusCode::REQUEST_TIMEOUT,
                "body_timeout",
                "the request body did not arrive within body_timeout_ms",
            )
        } else {
            refuse(
                StatusCode::BAD_REQUEST,
                "bad_request",
                &format!("the request body could not be read: {e}"),
            )
        }
    })?;
    serde_json::from_slice(&bytes).map_err(|e| {
        refuse(
            StatusCode::BAD_REQUEST,
            "bad_request",
            &format!(
                "expected {{\"code\": \"…\", \"limits\"?: {{…}}, \"device\"?: index or selector, \"files\"?: [{{\"name\", \"data\"}}]}}: {e}"
            ),
        )
    })
}

/// Checks the files sent with a run before it is admitted: few, plainly and distinctly named, in Base64.
fn check_uploads(files: &[UploadedFile]) -> Result<(), String> {
    if files.len() > MAX_UPLOADS {
        return Err(format!(
            "{} files were sent with the run; at most {MAX_UPLOADS} may be",
            files.len()
        ));
    }
    for (i, f) in files.iter().enumerate() {
        check_name(&f.name)?;
        if files[..i].iter().any(|g| g.name == f.name) {
            return Err(format!("two files are named `{}`", f.name));
        }
        if crate::codec::base64_decode(&f.data).is_none() {
            return Err(format!(
                "the file `{}` is not standard Base64 (A–Z, a–z, 0–9, +, /, = padding)",
                f.name
            ));
        }
    }
    Ok(())
}

/// `GET /api/run/devices`: the devices a run may name and the one it gets when it names none.
async fn devices(playground: &Playground, parts: &Parts) -> Response<Body> {
    if parts.method != Method::GET && parts.method != Method::HEAD {
        let mut r = refuse(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "use GET",
        );
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    match playground.devices().await {
        Ok(d) => json_answer(StatusCode::OK, &d.to_json()),
        Err(e) => refuse(StatusCode::SERVICE_UNAVAILABLE, "devices_unavailable", &e),
    }
}

/// The pool lane of the device a run names: `None` for the server's own device, or a 4xx naming the choices.
async fn lane(
    playground: &Playground,
    device: DeviceField,
) -> Result<Option<usize>, Response<Body>> {
    let devices = playground
        .devices()
        .await
        .map_err(|e| refuse(StatusCode::SERVICE_UNAVAILABLE, "devices_unavailable", &e))?;
    let selector = match device {
        DeviceField::Index(i) => i.to_string(),
        DeviceField::Selector(s) => s,
    };
    match devices.resolve(&selector) {
        Ok(index) if devices.is_default(index) => Ok(None),
        Ok(index) => Ok(Some(index)),
        Err(message) => Err(json_answer(
            StatusCode::BAD_REQUEST,
            &json!({"ok": false, "error": {
                "kind": "unknown_device",
                "message": message,
                "line": null,
                "column": null,
                "choices": devices.choices(),
            }}),
        )),
    }
}

fn merge(server: &Limits, asked: RequestLimits) -> Limits {
    Limits {
        max_operations: asked
            .max_operations
            .map_or(server.max_operations, |v| v.min(server.max_operations)),
        max_tensor_elements: asked
            .max_tensor_elements
            .map_or(server.max_tensor_elements, |v| {
                v.min(server.max_tensor_elements)
            }),
        max_run_elements: asked
            .max_run_elements
            .map_or(server.max_run_elements, |v| v.min(server.max_run_elements)),
        max_output_bytes: asked
            .max_output_bytes
            .map_or(server.max_output_bytes, |v| v.min(server.max_output_bytes)),
        max_file_bytes: asked
            .max_file_bytes
            .map_or(server.max_file_bytes, |v| v.min(server.max_file_bytes)),
        ..server.clone()
    }
}

/// `None` when the request may run; a 401 otherwise.
fn authorise(playground: &Playground, parts: &Parts) -> Option<Response<Body>> {
    let token = playground.token.as_deref()?;
    let given = parts
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map_or("", |(_, token)| token.trim());
    if constant_time_eq(given.as_bytes(), token.as_bytes()) {
        return None;
    }
    let mut r = refuse(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "this server needs `Authorization: Bearer <token>` to run code",
    );
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"netcl playground\""),
    );
    Some(r)
}

/// Compares without stopping at the first difference, so timing does not reveal the token.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for (i, x) in a.iter().enumerate() {
        diff |= usize::from(x ^ b.get(i % b.len().max(1)).copied().unwrap_or(0));
    }
    diff == 0
}

/// The rate-limit key: the peer address, or the first `X-Forwarded-For` entry behind a trusted proxy.
fn client(playground: &Playground, parts: &Parts) -> String {
    if playground.trust_forwarded
        && let Some(first) = parts
            .headers
            .get("x-forwarded-for")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(',').next())
    {
        return first.trim().chars().take(64).collect();
    }
    parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map_or_else(|| "local".into(), |c| c.0.ip().to_string())
}

async fn one_answer(mut ticket: Ticket) -> Response<Body> {
    while let Some(event) = ticket.events.recv().await {
        if let RunEvent::Result(result) = event {
            return json_answer(StatusCode::OK, &result);
        }
    }
    refuse(
        StatusCode::SERVICE_UNAVAILABLE,
        "internal",
        "the run ended without an answer",
    )
}

/// Server-sent events: `queued` (with the run id), `started`, `progress`…, then `result`.
fn event_stream(ticket: Ticket, open: OpenRun) -> Response<Body> {
    let id = ticket.id.clone();
    let stream = Events {
        first: Some(sse("queued", &json!({"id": id}))),
        ticket,
        done: false,
        open: Some(open),
    };
    let mut response = Response::new(Body::from_stream(stream));
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    if let Ok(v) = HeaderValue::from_str(&id) {
        h.insert("x-run-id", v);
    }
    response
}

fn sse(event: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {event}\ndata: {data}\n\n"))
}

/// The event stream of one run; dropping it (the client went away) drops the ticket, which stops the run.
/// The client's open run is given back once the result is handed over, or with the stream.
struct Events {
    first: Option<Bytes>,
    ticket: Ticket,
    done: bool,
    open: Option<OpenRun>,
}

impl futures_core::Stream for Events {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(Ok(first)));
        }
        if self.done {
            return Poll::Ready(None);
        }
        let events: &mut mpsc::Receiver<RunEvent> = &mut self.ticket.events;
        match events.poll_recv(cx) {
            Poll::Ready(Some(event)) => {
                let bytes = match event {
                    RunEvent::Started { queue_ms } => {
                        sse("started", &json!({"queue_ms": queue_ms}))
                    }
                    RunEvent::Progress(data) => sse("progress", &data),
                    RunEvent::Result(result) => {
                        self.done = true;
                        self.open.take();
                        sse("result", &result)
                    }
                };
                Poll::Ready(Some(Ok(bytes)))
            }
            Poll::Ready(None) => {
                self.open.take();
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_parse() {
        assert_eq!(RunRoute::parse("/api/run"), Some(RunRoute::Run));
        assert_eq!(RunRoute::parse("/api/run/stream"), Some(RunRoute::Stream));
        assert_eq!(RunRoute::parse("/api/run/devices"), Some(RunRoute::Devices));
        assert_eq!(
            RunRoute::parse("/api/run/ab12/cancel"),
            Some(RunRoute::Cancel("ab12".into()))
        );
        assert_eq!(RunRoute::parse("/api/run/a-b/cancel"), None);
        assert_eq!(RunRoute::parse("/api/runs"), None);
    }

    #[test]
    fn token_comparison() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secreT", b"secret"));
        assert!(!constant_time_eq(b"", b"secret"));
        assert!(!constant_time_eq(b"secret1", b"secret"));
    }
}
