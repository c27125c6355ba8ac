//! The HTTP server: one dispatcher over prepared pages and the few dynamic routes, with security headers,
//! metrics, JSON errors for the API and 4xx pages for browsers, behind tracing, timeout, body-limit and
//! compression layers.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, Response, StatusCode, header};
use serde_json::json;

use super::assets::{FAVICON, STATIC_FILES, content_type};
use super::config::Config;
use super::content::Content;
use super::engine::{CacheEntry, CacheSnapshot, DeviceInfo, EngineInfo, entry_matches};
use super::health::{self, Health, Monitored};
use super::links::{LinkMode, Linker};
use super::metrics::{Metrics, RouteClass};
use super::playground::Playground;
use super::playground::api::{self, RunRoute};
use super::prepared::Prepared;
use super::query::{self, QueryError};
use super::respond::{
    api_error, html_response, json_response, plain_error, redirect, text_response,
};
use super::search::SearchIndex;
use super::site::{self, llms_txt};
use super::sse;
use super::views::{
    AutotuneView, CandidateView, Chrome, DeviceView, DevicesView, ErrorView, ExampleView, HitView,
    NotFoundView, PlaygroundView, SearchView, SiteSettings, Suggestion, TuneEntryView, human_bytes,
    render,
};
use crate::wiki::error::Result;

/// Results shown for one search.
const SEARCH_LIMIT: usize = 20;
/// Longest requested path echoed back on the 404 page.
const MAX_ECHO_CHARS: usize = 120;

/// The wiki as served: prepared responses by route, the search index and what dynamic pages need.
#[derive(Debug)]
pub struct Site {
    pub content: Content,
    pub settings: SiteSettings,
    pub mode: LinkMode,
    pub index: SearchIndex,
    /// Content problems found while building.
    pub problems: Vec<String>,
    files: HashMap<String, Prepared>,
}

impl Site {
    /// Reads and renders the content directory named by `config`.
    pub fn load(config: &Config) -> Result<Site> {
        let content = Content::load(&config.content_dir)?;
        let settings = SiteSettings {
            title: config.title.clone(),
            edit_url: config.edit_url.clone(),
            playground: config.playground,
        };
        Site::build(content, settings, &config.base_path)
    }

    /// Renders `content` for serving under `base`.
    pub fn build(content: Content, settings: SiteSettings, base: &str) -> Result<Site> {
        let mode = LinkMode::Server {
            base: base.to_string(),
        };
        let built = site::build(&content, &settings, &mode)?;
        let mut files = HashMap::new();
        for page in built.pages {
            let route = if page.path == "index" {
                "/".to_string()
            } else {
                format!("/docs/{}", page.path)
            };
            files.insert(
                route,
                Prepared::new(page.html.into_bytes(), "text/html; charset=utf-8", false),
            );
        }
        for page in content.pages.values() {
            let md = Prepared::new(
                page.source.clone().into_bytes(),
                "text/markdown; charset=utf-8",
                false,
            );
            files.insert(format!("/docs/{}.md", page.path), md);
        }
        for (path, bytes) in &content.assets {
            files.insert(
                format!("/docs/{path}"),
                Prepared::new(bytes.clone(), content_type(path), true),
            );
        }
        for (name, ty, bytes) in STATIC_FILES {
            files.insert(
                format!("/static/{name}"),
                Prepared::new(bytes.to_vec(), ty, true),
            );
        }
        if settings.playground {
            let html = playground_page(&content, &settings, &mode)?;
            files.insert(
                "/playground".into(),
                Prepared::new(html.into_bytes(), "text/html; charset=utf-8", false),
            );
        }
        files.insert(
            "/favicon.ico".into(),
            Prepared::new(FAVICON.to_vec(), "image/x-icon", true),
        );
        let llms = llms_txt(&content, &settings, &Linker::new(&mode, "index"));
        files.insert(
            "/llms.txt".into(),
            Prepared::new(llms.into_bytes(), "text/plain; charset=utf-8", false),
        );
        Ok(Site {
            content,
            settings,
            mode,
            index: built.index,
            problems: built.problems,
            files,
        })
    }

    /// The prepared response for a route below the base path (`/docs/faq`).
    pub fn file(&self, route: &str) -> Option<&Prepared> {
        self.files.get(route)
    }

    pub(crate) fn linker(&self) -> Linker {
        Linker::new(&self.mode, "index")
    }

    fn chrome(&self, current: &str) -> Chrome {
        Chrome::new(&self.content, &self.settings, &self.linker(), current)
    }
}

/// The standalone playground page: an empty editor, then every runnable example in navigation order.
fn playground_page(content: &Content, settings: &SiteSettings, mode: &LinkMode) -> Result<String> {
    let linker = Linker::new(mode, "index");
    let examples = content
        .ordered()
        .iter()
        .filter_map(|path| content.pages.get(*path))
        .flat_map(|page| {
            super::markdown::runnable_blocks(&page.body)
                .into_iter()
                .map(|code| ExampleView {
                    title: page.front.title.clone(),
                    page_url: linker.page(&page.path),
                    code,
                })
        })
        .collect();
    render(&PlaygroundView {
        chrome: Chrome::new(content, settings, &linker, "route:playground"),
        examples,
    })
}

/// The headers every answer carries.
#[derive(Debug, Clone)]
struct SecurityHeaders(Vec<(header::HeaderName, HeaderValue)>);

impl Default for SecurityHeaders {
    fn default() -> SecurityHeaders {
        let csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";
        SecurityHeaders(vec![
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(csp),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (
                header::REFERRER_POLICY,
                HeaderValue::from_static("strict-origin-when-cross-origin"),
            ),
            (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        ])
    }
}

/// The devices and which of them this server's selection chooses; read once, devices do not come and go.
#[derive(Debug, Clone)]
struct DeviceList {
    devices: Vec<DeviceInfo>,
    selected: std::result::Result<usize, String>,
}

/// Shared state of the running server.
pub struct AppState {
    site: RwLock<Arc<Site>>,
    engine: Arc<dyn EngineInfo>,
    devices: tokio::sync::OnceCell<std::result::Result<DeviceList, String>>,
    metrics: Metrics,
    config: Config,
    headers: SecurityHeaders,
    playground: Option<Arc<Playground>>,
    health: Health,
}

impl AppState {
    /// Builds the state: reads and renders the content once.
    pub fn new(config: Config, engine: Arc<dyn EngineInfo>) -> Result<Arc<AppState>> {
        AppState::with_workers(config, engine, false)
    }

    /// Like [`AppState::new`]; `eager` starts the playground's workers now rather than with the first run.
    pub fn with_workers(
        config: Config,
        engine: Arc<dyn EngineInfo>,
        eager: bool,
    ) -> Result<Arc<AppState>> {
        let site = Site::load(&config)?;
        let playground = if config.playground {
            Some(Arc::new(Playground::new(&config, eager)?))
        } else {
            None
        };
        Ok(Arc::new(AppState {
            site: RwLock::new(Arc::new(site)),
            engine,
            devices: tokio::sync::OnceCell::new(),
            metrics: Metrics::default(),
            config,
            headers: SecurityHeaders::default(),
            playground,
            health: Health::default(),
        }))
    }

    /// The site as rendered now.
    pub fn site(&self) -> Arc<Site> {
        match self.site.read() {
            Ok(site) => Arc::clone(&site),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Replaces the rendered site (after a content change).
    pub fn replace_site(&self, site: Site) {
        match self.site.write() {
            Ok(mut slot) => *slot = Arc::new(site),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(site),
        }
    }

    /// The playground, when it is on.
    pub fn playground(&self) -> Option<&Arc<Playground>> {
        self.playground.as_ref()
    }

    /// The configuration the server runs with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The server's health: the drain flag and the last readiness check (see [`health`]).
    pub fn health(&self) -> &Health {
        &self.health
    }

    /// Where the server's engine data comes from.
    pub fn engine(&self) -> &Arc<dyn EngineInfo> {
        &self.engine
    }
}

impl Monitored for AppState {
    fn health(&self) -> &Health {
        AppState::health(self)
    }

    fn playground(&self) -> Option<&Arc<Playground>> {
        AppState::playground(self)
    }

    fn engine(&self) -> &Arc<dyn EngineInfo> {
        AppState::engine(self)
    }

    fn device_selection(&self) -> Option<String> {
        self.config.device.clone()
    }
}

/// Routes probes and scrapers call by address (a pod IP, `localhost`), so the `Host` check spares them.
const PROBE_ROUTES: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

/// The router. Deliberately thin: prepared pages are answered by [`dispatch`] directly, which also does the
/// logging, metrics, security headers, the Host and Origin checks, the body limit and the compression of
/// dynamic answers. Timeouts apply where time can go: the request body (a `tower-http` deadline), the engine
/// calls (see [`engine_call`]) and the playground's runs; the connection's own timeouts are in
/// [`super::listen`]. A panic in a handler answers a plain 500 rather than dropping the connection, and the
/// `Authorization` header is marked sensitive so no log shows it.
pub fn router(state: Arc<AppState>) -> Router {
    let body_deadline = Duration::from_millis(state.config.body_timeout_ms);
    Router::new()
        .fallback(dispatch)
        .with_state(state)
        .layer(tower_http::timeout::RequestBodyDeadlineLayer::new(
            body_deadline,
        ))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            |_: Box<dyn std::any::Any + Send>| {
                api_error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "the server failed to answer this request",
                )
            },
        ))
        .layer(
            tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer::new([
                header::AUTHORIZATION,
                header::COOKIE,
            ]),
        )
}

/// A refusal that applies before routing: a foreign `Host`, a run from another origin or without a JSON body.
fn refused_early(
    config: &Config,
    parts: &Parts,
    rest: Option<&str>,
    run_route: Option<&RunRoute>,
) -> Option<Response<Body>> {
    let probe = rest.is_some_and(|r| PROBE_ROUTES.contains(&r));
    let host = parts
        .headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| parts.uri.authority().map(|a| a.as_str()));
    if let Some(host) = host
        && !probe
        && !config.host_allowed(host)
    {
        // DNS rebinding: a page of another site that resolves its own name to this server.
        return Some(api_error(
            StatusCode::MISDIRECTED_REQUEST,
            "forbidden_host",
            "this server does not answer for that host name (see allowed_hosts)",
        ));
    }
    let run = run_route?;
    if parts.method != Method::POST {
        return None;
    }
    if let Some(origin) = parts.headers.get(header::ORIGIN)
        && !origin
            .to_str()
            .is_ok_and(|o| config.origin_allowed(o, host))
    {
        return Some(api::refuse(
            StatusCode::FORBIDDEN,
            "forbidden_origin",
            "runs from pages of another origin are refused (see allowed_origins)",
        ));
    }
    // A cross-site form or `text/plain` fetch cannot send JSON without a preflight; requiring it closes that
    // door even for browsers that send no Origin. Cancel has no body and needs no type.
    if !matches!(run, RunRoute::Cancel(_)) {
        let json = parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
        if !json {
            return Some(api::refuse(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "send the run as `Content-Type: application/json`",
            ));
        }
    }
    None
}

/// Dynamic answers smaller than this are sent uncompressed.
const GZIP_DYNAMIC_MIN_BYTES: usize = 1024;

async fn dispatch(State(state): State<Arc<AppState>>, request: Request) -> Response<Body> {
    let started = Instant::now();
    let (parts, body) = request.into_parts();
    let rest = below_base(&state.config.base_path, parts.uri.path());
    let run_route = rest.and_then(RunRoute::parse);
    // A declared body over the limit is refused before it is read; one that only turns out too large while
    // being read is refused by the run routes themselves. Either way the answer is JSON for the API.
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let too_large = declared.is_some_and(|n| n > state.config.max_body_bytes as u64);
    let mut early = refused_early(&state.config, &parts, rest, run_route.as_ref());
    if early.is_none()
        && parts
            .uri
            .query()
            .is_some_and(|q| q.len() > query::MAX_QUERY_BYTES)
    {
        // Every route, not only those that read a query.
        let api = rest.is_none_or(|r| r.starts_with("/api/"));
        early = Some(query_error(&state.site(), api, QueryError::TooLong));
    }
    let (class, mut response) = match run_route {
        _ if too_large => {
            let api = rest.is_some_and(|r| r.starts_with("/api/"));
            let message = format!(
                "the request body is larger than {} bytes",
                state.config.max_body_bytes
            );
            let response = if api {
                api_error(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large", &message)
            } else {
                error(
                    &state.site(),
                    false,
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "payload too large",
                    &message,
                )
            };
            (RouteClass::Api, response)
        }
        _ if early.is_some() => (
            if run_route.is_some() {
                RouteClass::Run
            } else {
                RouteClass::Api
            },
            early.unwrap_or_default(),
        ),
        Some(run) => (
            RouteClass::Run,
            match &state.playground {
                Some(pg) => {
                    let r = api::handle(pg, run, &parts, body, state.config.max_body_bytes).await;
                    if sse::is_event_stream(&r) {
                        let every = Duration::from_millis(state.config.sse_heartbeat_ms);
                        sse::with_heartbeat(r, every)
                    } else {
                        r
                    }
                }
                None => api::disabled(),
            },
        ),
        None => route(&state, &parts).await,
    };
    if !matches!(
        class,
        RouteClass::Page | RouteClass::Raw | RouteClass::Static | RouteClass::Run
    ) {
        response = compress_dynamic(&parts.headers, response).await;
    }
    let headers = response.headers_mut();
    for (name, value) in &state.headers.0 {
        headers.insert(name.clone(), value.clone());
    }
    if state.health.draining() {
        // A proxy's kept-alive connection is closed after this answer, so its next request goes elsewhere.
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    let elapsed = started.elapsed();
    let status = response.status().as_u16();
    state.metrics.record(class, status, elapsed);
    tracing::info!(
        method = %parts.method,
        path = %parts.uri.path(),
        status,
        micros = elapsed.as_micros() as u64,
        "request"
    );
    response
}

/// Gzips a rendered dynamic answer when the client accepts it and it is worth it.
async fn compress_dynamic(
    request: &axum::http::HeaderMap,
    response: Response<Body>,
) -> Response<Body> {
    if !super::prepared::accepts_gzip(request)
        || response.headers().contains_key(header::CONTENT_ENCODING)
    {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return Response::from_parts(parts, Body::empty());
    };
    if bytes.len() < GZIP_DYNAMIC_MIN_BYTES {
        return Response::from_parts(parts, Body::from(bytes));
    }
    match super::prepared::gzip(&bytes, flate2::Compression::fast()) {
        Some(gz) => {
            parts
                .headers
                .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            parts
                .headers
                .insert(header::VARY, HeaderValue::from_static("accept-encoding"));
            parts.headers.remove(header::CONTENT_LENGTH);
            Response::from_parts(parts, Body::from(gz))
        }
        None => Response::from_parts(parts, Body::from(bytes)),
    }
}

/// Runs a blocking engine call off the async threads, bounded by the configured request timeout.
async fn engine_call<T: Send + 'static>(
    state: &Arc<AppState>,
    call: impl FnOnce(&dyn EngineInfo) -> crate::Result<T> + Send + 'static,
) -> std::result::Result<T, String> {
    let engine = Arc::clone(&state.engine);
    let limit = Duration::from_secs(state.config.request_timeout_secs);
    let task =
        tokio::task::spawn_blocking(move || call(engine.as_ref()).map_err(|e| e.to_string()));
    match tokio::time::timeout(limit, task).await {
        Ok(Ok(result)) => result,
        Ok(Err(e)) => Err(format!("the engine call stopped: {e}")),
        Err(_) => Err(format!(
            "the engine did not answer within {} s",
            limit.as_secs()
        )),
    }
}

/// The part of `path` below the base path `base`, or `None` when `path` is outside it.
fn below_base<'a>(base: &str, path: &'a str) -> Option<&'a str> {
    if base.is_empty() {
        Some(path)
    } else if path == base {
        Some("/")
    } else {
        path.strip_prefix(base).filter(|r| r.starts_with('/'))
    }
}

async fn route(state: &Arc<AppState>, request: &Parts) -> (RouteClass, Response<Body>) {
    let site = state.site();
    let base = state.config.base_path.as_str();
    let path = request.uri.path();
    let Some(rest) = below_base(base, path) else {
        return (RouteClass::NotFound, not_found(&site, path));
    };
    let api = rest.starts_with("/api/");
    if request.method != Method::GET && request.method != Method::HEAD {
        let mut response = error(
            &site,
            api,
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed",
            "use GET or HEAD",
        );
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return (
            if api {
                RouteClass::Api
            } else {
                RouteClass::NotFound
            },
            response,
        );
    }
    let headers = &request.headers;
    let query = request.uri.query();
    if let Some(file) = site.file(rest) {
        let class = match rest {
            r if r.starts_with("/static/") => RouteClass::Static,
            r if r.ends_with(".md") || r == "/llms.txt" => RouteClass::Raw,
            _ => RouteClass::Page,
        };
        return (class, file.respond(headers));
    }
    match rest {
        "/healthz" => (
            RouteClass::Health,
            json_response(
                StatusCode::OK,
                &json!({"status": "ok", "pages": site.content.pages.len(),
                        "draining": state.health.draining()}),
            ),
        ),
        "/readyz" => (RouteClass::Health, health::readyz(state.as_ref())),
        "/metrics" => (
            RouteClass::Metrics,
            text_response(
                "text/plain; version=0.0.4",
                state.metrics.render() + health::gauges(state.as_ref()).render().as_str(),
            ),
        ),
        "/search" => (RouteClass::Search, search_page(&site, query)),
        "/api/search" => (RouteClass::Api, search_api(&site, query)),
        "/devices" => (RouteClass::Engine, devices_page(state, &site).await),
        "/api/devices" => (RouteClass::Api, devices_api(state).await),
        "/autotune" => (RouteClass::Engine, autotune_page(state, &site, query).await),
        "/api/autotune" => (RouteClass::Api, autotune_api(state, query).await),
        "/docs" | "/docs/" | "/docs/index" => (RouteClass::Page, redirect(&format!("{base}/"))),
        r if r.len() > 1 && r.ends_with('/') && site.file(r.trim_end_matches('/')).is_some() => (
            RouteClass::Page,
            redirect(&format!("{base}{}", r.trim_end_matches('/'))),
        ),
        _ if api => (
            RouteClass::Api,
            api_error(StatusCode::NOT_FOUND, "not_found", "no such API endpoint"),
        ),
        _ => match super::lost::plain_meaning(&site.content, &site.linker(), rest) {
            Some(url) => (RouteClass::Page, redirect(&url)),
            None => (RouteClass::NotFound, not_found(&site, path)),
        },
    }
}

/// An error as JSON for API routes and as a page otherwise.
fn error(
    site: &Site,
    api: bool,
    status: StatusCode,
    heading: &str,
    message: &str,
) -> Response<Body> {
    if api {
        return api_error(status, &heading.replace(' ', "_"), message);
    }
    let view = ErrorView {
        chrome: site.chrome(""),
        heading: capitalise(heading),
        message: message.to_string(),
    };
    match render(&view) {
        Ok(html) => html_response(status, html),
        Err(e) => plain_error(status, &e.to_string()),
    }
}

fn capitalise(s: &str) -> String {
    let mut chars = s.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

fn query_error(site: &Site, api: bool, e: QueryError) -> Response<Body> {
    let status = if e == QueryError::TooLong {
        StatusCode::URI_TOO_LONG
    } else {
        StatusCode::BAD_REQUEST
    };
    if api {
        let kind = if e == QueryError::TooLong {
            "query_too_long"
        } else {
            "bad_query"
        };
        return api_error(status, kind, &e.message());
    }
    error(site, false, status, "bad request", &e.message())
}

fn not_found(site: &Site, path: &str) -> Response<Body> {
    let linker = site.linker();
    let requested: String = path.chars().take(MAX_ECHO_CHARS).collect();
    let words = percent_encoding::percent_decode_str(&requested)
        .decode_utf8_lossy()
        .replace(['/', '-', '_', '.'], " ")
        .split_whitespace()
        .filter(|w| !matches!(*w, "docs" | "html" | "md" | "concepts" | "api"))
        .collect::<Vec<_>>()
        .join(" ");
    let mut near = super::lost::near_pages(&site.content, &requested, 5);
    for hit in site.index.suggest(&words, 5) {
        if near.len() < 5 && !near.iter().any(|(p, _)| *p == hit.0) {
            near.push(hit);
        }
    }
    let suggestions = near
        .into_iter()
        .map(|(page, title)| Suggestion {
            url: linker.page(&page),
            title,
        })
        .collect();
    let view = NotFoundView {
        chrome: site.chrome(""),
        requested,
        suggestions,
    };
    match render(&view) {
        Ok(html) => html_response(StatusCode::NOT_FOUND, html),
        Err(e) => plain_error(StatusCode::NOT_FOUND, &e.to_string()),
    }
}

fn search_page(site: &Site, query: Option<&str>) -> Response<Body> {
    let q = match query::param(query, "q") {
        Ok(q) => q,
        Err(e) => return query_error(site, false, e),
    };
    let linker = site.linker();
    let hits = site
        .index
        .search(&q, SEARCH_LIMIT)
        .into_iter()
        .map(|h| HitView {
            url: hit_url(&linker, &h.page, &h.anchor),
            title: h.title,
            heading: h.heading,
            snippet_html: h.snippet_html,
        })
        .collect();
    let mut chrome = site.chrome("route:search");
    chrome.query = q;
    let view = SearchView {
        chrome,
        hits,
        message: None,
        offline: false,
    };
    match render(&view) {
        Ok(html) => html_response(StatusCode::OK, html),
        Err(e) => plain_error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

fn hit_url(linker: &Linker, page: &str, anchor: &str) -> String {
    if anchor.is_empty() {
        linker.page(page)
    } else {
        format!("{}#{anchor}", linker.page(page))
    }
}

fn search_api(site: &Site, query: Option<&str>) -> Response<Body> {
    let q = match query::param(query, "q") {
        Ok(q) => q,
        Err(e) => return query_error(site, true, e),
    };
    let linker = site.linker();
    let results: Vec<serde_json::Value> = site
        .index
        .search(&q, SEARCH_LIMIT)
        .into_iter()
        .map(|h| {
            json!({
                "url": hit_url(&linker, &h.page, &h.anchor),
                "page": h.page,
                "title": h.title,
                "heading": h.heading,
                "snippet_html": h.snippet_html,
                "score": h.score,
            })
        })
        .collect();
    json_response(StatusCode::OK, &json!({"query": q, "results": results}))
}

async fn devices(state: &Arc<AppState>) -> std::result::Result<DeviceList, String> {
    state
        .devices
        .get_or_init(|| async {
            let devices = engine_call(state, |engine| engine.devices()).await?;
            let selector = state.config.device.clone();
            let selected =
                engine_call(state, move |engine| engine.selected(selector.as_deref())).await;
            Ok(DeviceList { devices, selected })
        })
        .await
        .clone()
}

async fn devices_page(state: &Arc<AppState>, site: &Site) -> Response<Body> {
    let (list, error) = match devices(state).await {
        Ok(list) => (Some(list), None),
        Err(e) => (None, Some(e)),
    };
    let selected = list
        .as_ref()
        .and_then(|l| l.selected.as_ref().ok().copied());
    let view = DevicesView {
        chrome: site.chrome("route:devices"),
        devices: list
            .as_ref()
            .map(|l| {
                l.devices
                    .iter()
                    .map(|d| device_view(d, selected == Some(d.index)))
                    .collect()
            })
            .unwrap_or_default(),
        selection: state.config.device.clone(),
        selected: list.as_ref().and_then(|l| {
            let index = l.selected.as_ref().ok()?;
            l.devices
                .iter()
                .find(|d| d.index == *index)
                .map(|d| format!("{}: {}", d.index, d.name))
        }),
        selection_error: list
            .as_ref()
            .and_then(|l| l.selected.as_ref().err().cloned()),
        error,
        json_url: site.linker().route("api/devices").unwrap_or_default(),
    };
    match render(&view) {
        Ok(html) => html_response(StatusCode::OK, html),
        Err(e) => plain_error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

fn device_view(d: &DeviceInfo, selected: bool) -> DeviceView {
    DeviceView {
        index: d.index,
        selected,
        name: d.name.clone(),
        kind: d.kind.to_string(),
        platform: d.platform.clone(),
        vendor: d.vendor.clone(),
        driver: d.driver.clone(),
        version: d.version.clone(),
        opencl_c_version: d.opencl_c_version.clone(),
        compute_units: d.compute_units,
        max_clock_mhz: d.max_clock_mhz,
        global_mem: human_bytes(d.global_mem_bytes),
        local_mem: format!(
            "{} ({})",
            human_bytes(d.local_mem_bytes),
            if d.local_mem_dedicated {
                "on chip"
            } else {
                "in global memory"
            }
        ),
        max_alloc: human_bytes(d.max_alloc_bytes),
        max_work_group_size: d.max_work_group_size,
        work_item_sizes: d
            .max_work_item_sizes
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(" × "),
        fp16: yes_no(d.fp16),
        fp64: yes_no(d.fp64),
        unified_memory: yes_no(d.unified_memory),
    }
}

async fn devices_api(state: &Arc<AppState>) -> Response<Body> {
    match devices(state).await {
        Ok(list) => json_response(
            StatusCode::OK,
            &json!({
                "selection": state.config.device,
                "selected": list.selected.as_ref().ok(),
                "selection_error": list.selected.as_ref().err(),
                "devices": list.devices,
            }),
        ),
        Err(e) => api_error(StatusCode::SERVICE_UNAVAILABLE, "engine", &e),
    }
}

async fn snapshot(state: &Arc<AppState>) -> std::result::Result<CacheSnapshot, String> {
    engine_call(state, |engine| engine.autotune()).await
}

async fn autotune_page(state: &Arc<AppState>, site: &Site, query: Option<&str>) -> Response<Body> {
    let filter = match query::param(query, "q") {
        Ok(q) => q,
        Err(e) => return query_error(site, false, e),
    };
    let needle = filter.to_lowercase();
    let (snapshot, error) = match snapshot(state).await {
        Ok(s) => (Some(s), None),
        Err(e) => (None, Some(e)),
    };
    let all = snapshot.as_ref().map_or(&[][..], |s| &s.entries[..]);
    let entries: Vec<TuneEntryView> = all
        .iter()
        .filter(|e| entry_matches(e, &needle))
        .map(tune_entry_view)
        .collect();
    let linker = site.linker();
    let view = AutotuneView {
        chrome: site.chrome("route:autotune"),
        path: snapshot
            .as_ref()
            .map(|s| cache_file_name(&s.path))
            .unwrap_or_default(),
        status: snapshot
            .as_ref()
            .map(|s| s.status.clone())
            .unwrap_or_else(|| "unreadable".into()),
        error,
        shown: entries.len(),
        total: all.len(),
        filter,
        entries,
        self_url: linker.route("autotune").unwrap_or_default(),
        json_url: linker.route("api/autotune").unwrap_or_default(),
    };
    match render(&view) {
        Ok(html) => html_response(StatusCode::OK, html),
        Err(e) => plain_error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// The cache file's name without its directories.
fn cache_file_name(path: &std::path::Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn format_ms(ms: Option<f64>) -> String {
    ms.map_or_else(|| "–".into(), |v| format!("{v:.4}"))
}

fn tune_entry_view(e: &CacheEntry) -> TuneEntryView {
    let candidates = e.candidates.as_deref().unwrap_or(&[]);
    let slowest = candidates
        .iter()
        .filter_map(|c| c.ms)
        .fold(0.0_f64, f64::max);
    TuneEntryView {
        kernel: e.kernel.clone(),
        shape_key: e.shape_key.clone(),
        device: e.device.clone(),
        winner: e.winner.to_string(),
        candidates: candidates
            .iter()
            .map(|c| CandidateView {
                label: c.label.clone(),
                ms: format_ms(c.ms),
                median_ms: format_ms(c.median_ms),
                error: c.error.clone(),
                fraction: format!(
                    "{:.3}",
                    c.ms.map_or(0.0, |ms| if slowest > 0.0 { ms / slowest } else { 0.0 })
                ),
                winner: c.candidate == e.winner,
            })
            .collect(),
        filter_text: format!("{} {} {} {}", e.key, e.kernel, e.shape_key, e.device).to_lowercase(),
    }
}

async fn autotune_api(state: &Arc<AppState>, query: Option<&str>) -> Response<Body> {
    let filter = match query::param(query, "q") {
        Ok(q) => q.to_lowercase(),
        Err(e) => {
            let site = state.site();
            return query_error(&site, true, e);
        }
    };
    match snapshot(state).await {
        Ok(mut s) => {
            let total = s.entries.len();
            s.entries.retain(|e| entry_matches(e, &filter));
            // The server's directories are no business of a reader.
            s.path = std::path::PathBuf::from(cache_file_name(&s.path));
            json_response(
                StatusCode::OK,
                &json!({"total": total, "filter": filter, "cache": s}),
            )
        }
        Err(e) => api_error(StatusCode::SERVICE_UNAVAILABLE, "engine", &e),
    }
}
