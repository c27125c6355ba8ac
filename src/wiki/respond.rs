//! Building answers: JSON, HTML, plain text and redirects, with the headers every such answer carries.

use axum::body::Body;
use axum::http::{HeaderValue, Response, StatusCode, header};
use serde_json::json;

pub(crate) fn redirect(location: &str) -> Response<Body> {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::PERMANENT_REDIRECT;
    if let Ok(value) = HeaderValue::from_str(location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    response
}

pub(crate) fn html_response(status: StatusCode, html: String) -> Response<Body> {
    let mut response = Response::new(Body::from(html));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

pub(crate) fn text_response(content_type: &'static str, text: String) -> Response<Body> {
    let mut response = Response::new(Body::from(text));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

pub(crate) fn json_response(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    let mut response = Response::new(Body::from(value.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// A JSON error: `{"error": {"kind": …, "message": …}}`.
pub(crate) fn api_error(status: StatusCode, kind: &str, message: &str) -> Response<Body> {
    json_response(
        status,
        &json!({"error": {"kind": kind, "message": message}}),
    )
}

/// Last resort when a template fails: never a 500 page with internals, a short text.
pub(crate) fn plain_error(status: StatusCode, message: &str) -> Response<Body> {
    tracing::error!(%message, "rendering an answer failed");
    let mut response = text_response(
        "text/plain; charset=utf-8",
        "The page could not be rendered.\n".into(),
    );
    *response.status_mut() = status;
    response
}
