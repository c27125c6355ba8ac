//! Responses prepared once: the bytes, a gzip variant, an ETag and the headers, so answering a request for a
//! page or asset is a map lookup and a reference-count increment.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::io::Write;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use flate2::Compression;
use flate2::write::GzEncoder;

/// Bodies smaller than this are not worth compressing.
const GZIP_MIN_BYTES: usize = 512;

/// A fixed response.
#[derive(Debug, Clone)]
pub struct Prepared {
    body: Bytes,
    gzip: Option<Bytes>,
    etag: HeaderValue,
    content_type: HeaderValue,
    cache_control: HeaderValue,
}

impl Prepared {
    /// Prepares `body`; `immutable`-style caching is used for static assets, revalidation for pages.
    pub fn new(body: Vec<u8>, content_type: &'static str, long_cache: bool) -> Prepared {
        let mut hasher = DefaultHasher::new();
        body.hash(&mut hasher);
        let etag = HeaderValue::from_str(&format!("\"{:016x}\"", hasher.finish()))
            .unwrap_or_else(|_| HeaderValue::from_static("\"0\""));
        let gzip = (body.len() >= GZIP_MIN_BYTES && compressible(content_type))
            .then(|| gzip(&body, Compression::best()))
            .flatten();
        Prepared {
            body: Bytes::from(body),
            gzip: gzip.map(Bytes::from),
            etag,
            content_type: HeaderValue::from_static(content_type),
            cache_control: HeaderValue::from_static(if long_cache {
                "public, max-age=3600"
            } else {
                "no-cache"
            }),
        }
    }

    /// The answer to a request with `headers`: 304 when the ETag matches, gzip when accepted.
    pub fn respond(&self, headers: &HeaderMap) -> Response<Body> {
        let not_modified = headers
            .get(header::IF_NONE_MATCH)
            .is_some_and(|v| v.as_bytes() == self.etag.as_bytes());
        let wants_gzip = headers
            .get(header::ACCEPT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.split(',')
                    .any(|e| e.trim().starts_with("gzip") && !e.contains("q=0"))
            });
        let (status, body, gzipped) = match (&self.gzip, not_modified) {
            (_, true) => (StatusCode::NOT_MODIFIED, Bytes::new(), false),
            (Some(gz), false) if wants_gzip => (StatusCode::OK, gz.clone(), true),
            _ => (StatusCode::OK, self.body.clone(), false),
        };
        let mut response = Response::new(Body::from(body));
        *response.status_mut() = status;
        let h = response.headers_mut();
        h.insert(header::CONTENT_TYPE, self.content_type.clone());
        h.insert(header::ETAG, self.etag.clone());
        h.insert(header::CACHE_CONTROL, self.cache_control.clone());
        if self.gzip.is_some() {
            h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
        }
        if gzipped {
            h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        }
        response
    }
}

fn compressible(content_type: &str) -> bool {
    content_type.starts_with("text/")
        || content_type.contains("json")
        || content_type.contains("svg")
}

/// Whether a request's `Accept-Encoding` allows gzip.
pub fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',').any(|item| {
                let mut params = item.split(';').map(str::trim);
                let coding = params.next().unwrap_or("");
                let quality = params
                    .find_map(|p| p.strip_prefix("q="))
                    .map_or(1.0, |q| q.parse::<f32>().unwrap_or(0.0));
                (coding == "gzip" || coding == "*") && quality > 0.0
            })
        })
}

/// `bytes` gzip-compressed at `level`.
pub fn gzip(bytes: &[u8], level: Compression) -> Option<Vec<u8>> {
    let mut encoder = GzEncoder::new(Vec::with_capacity(bytes.len() / 3), level);
    encoder.write_all(bytes).ok()?;
    encoder.finish().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_etag_and_not_modified() {
        let p = Prepared::new(
            "<p>hello</p>".repeat(100).into_bytes(),
            "text/html; charset=utf-8",
            false,
        );
        let plain = p.respond(&HeaderMap::new());
        assert_eq!(plain.status(), StatusCode::OK);
        assert!(plain.headers().get(header::CONTENT_ENCODING).is_none());
        let mut h = HeaderMap::new();
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("br, gzip"),
        );
        let gz = p.respond(&h);
        assert_eq!(gz.headers()[header::CONTENT_ENCODING], "gzip");
        for (value, accepted) in [
            ("gzip;q=0", false),
            ("gzip; q=0.5", true),
            ("identity", false),
            ("*", true),
        ] {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT_ENCODING, HeaderValue::from_static(value));
            assert_eq!(accepts_gzip(&h), accepted, "{value}");
        }
        let etag = plain.headers()[header::ETAG].clone();
        let mut h = HeaderMap::new();
        h.insert(header::IF_NONE_MATCH, etag);
        assert_eq!(p.respond(&h).status(), StatusCode::NOT_MODIFIED);
    }
}
