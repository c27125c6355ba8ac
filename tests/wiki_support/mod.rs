//! Shared helpers of the wiki integration tests: a test engine, scratch directories and request helpers.
#![allow(dead_code)]

pub mod browser;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use netcl::wiki::config::Config;
use netcl::wiki::engine::{CacheEntry, CacheSnapshot, CandidateTime, DeviceInfo, EngineInfo};
use netcl::wiki::server::{AppState, router};
use tower::ServiceExt;

/// The repository's documentation.
pub fn content_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("web-wiki/content")
}

/// A fresh empty directory under the system temp dir.
pub fn scratch(name: &str) -> PathBuf {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let dir =
        std::env::temp_dir().join(format!("netcl-wiki-test-{}-{name}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// An engine with one made-up GPU (its name carries markup, to check escaping) and two cache entries.
pub struct TestEngine;

impl EngineInfo for TestEngine {
    fn devices(&self) -> netcl::Result<Vec<DeviceInfo>> {
        Ok(vec![DeviceInfo {
            index: 0,
            platform: "Test Platform".into(),
            name: "Test <b>GPU</b>".into(),
            vendor: "Test Vendor".into(),
            driver: "1.0".into(),
            version: "OpenCL 3.0".into(),
            opencl_c_version: "OpenCL C 1.2".into(),
            kind: netcl::DeviceType::Gpu,
            compute_units: 32,
            max_clock_mhz: 1500,
            global_mem_bytes: 8 << 30,
            local_mem_bytes: 64 << 10,
            local_mem_dedicated: true,
            max_alloc_bytes: 2 << 30,
            max_work_group_size: 1024,
            max_work_item_sizes: vec![1024, 1024, 64],
            fp16: true,
            fp64: false,
            unified_memory: false,
        }])
    }

    fn autotune(&self) -> netcl::Result<CacheSnapshot> {
        let candidate = |tile: u32, ms: f64| CandidateTime {
            candidate: serde_json::json!({"tile": tile}),
            label: format!("tile={tile}"),
            ms: Some(ms),
            median_ms: Some(ms * 1.1),
            error: None,
        };
        Ok(CacheSnapshot {
            path: PathBuf::from("/tmp/autotune.json"),
            status: "ok".into(),
            entries: vec![
                CacheEntry {
                    key: "Test GPU|1.0::gemm::m64_n64_k64".into(),
                    device: "Test GPU|1.0".into(),
                    kernel: "gemm".into(),
                    shape_key: "m64_n64_k64".into(),
                    winner: serde_json::json!({"tile": 16}),
                    candidates: Some(vec![candidate(8, 0.5), candidate(16, 0.25)]),
                },
                CacheEntry {
                    key: "Test GPU|1.0::reduce::n1024".into(),
                    device: "Test GPU|1.0".into(),
                    kernel: "reduce".into(),
                    shape_key: "n1024".into(),
                    winner: serde_json::json!({"wg": 256}),
                    candidates: None,
                },
            ],
        })
    }

    fn selected(&self, selector: Option<&str>) -> netcl::Result<usize> {
        match selector {
            None | Some("0" | "gpu") => Ok(0),
            Some(other) => Err(netcl::Error::Device(format!(
                "selector `{other}` matches no device"
            ))),
        }
    }
}

/// An engine that takes longer than any test's timeout to answer.
pub struct SlowEngine;

impl EngineInfo for SlowEngine {
    fn devices(&self) -> netcl::Result<Vec<DeviceInfo>> {
        std::thread::sleep(std::time::Duration::from_secs(2));
        TestEngine.devices()
    }
    fn autotune(&self) -> netcl::Result<CacheSnapshot> {
        std::thread::sleep(std::time::Duration::from_secs(2));
        TestEngine.autotune()
    }
    fn selected(&self, selector: Option<&str>) -> netcl::Result<usize> {
        TestEngine.selected(selector)
    }
}

/// An engine whose every call fails.
pub struct FailingEngine;

impl EngineInfo for FailingEngine {
    fn devices(&self) -> netcl::Result<Vec<DeviceInfo>> {
        Err(netcl::Error::Device("no OpenCL platform".into()))
    }
    fn autotune(&self) -> netcl::Result<CacheSnapshot> {
        Err(netcl::Error::Unsupported("cache unreadable".into()))
    }
    fn selected(&self, _selector: Option<&str>) -> netcl::Result<usize> {
        Err(netcl::Error::Device("no OpenCL platform".into()))
    }
}

/// The router over the repository's content with `configure` applied to the default config.
pub fn app_with(
    engine: Arc<dyn EngineInfo>,
    configure: impl FnOnce(&mut Config),
) -> (Router, Arc<AppState>) {
    let mut config = Config {
        content_dir: content_dir(),
        ..Config::default()
    };
    configure(&mut config);
    let state = AppState::new(config.validated().unwrap(), engine).unwrap();
    (router(Arc::clone(&state)), state)
}

/// A multi-thread runtime of two workers, the size the server tests run the wiki on.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// `app` served over real TCP on 127.0.0.1 by the server's own listener (its connection limits from `state`),
/// on a runtime thread of its own; stopped when dropped (or by [`Served::stop`]). The state's playground
/// workers are left to the caller.
pub struct Served {
    pub addr: std::net::SocketAddr,
    pub state: Arc<AppState>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Served {
    pub fn start(app: Router, state: Arc<AppState>) -> Served {
        use netcl::wiki::listen::{self, ConnLimits};
        let listener = listen::bind(std::net::SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
        let addr = listener.local_addr().unwrap();
        let limits = ConnLimits::from_config(state.config());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            runtime().block_on(async move {
                listener.set_nonblocking(true).unwrap();
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let connections = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
                listen::serve_listener(listener, app, limits, connections, async move {
                    let _ = stopped.await;
                })
                .await;
            });
        });
        Served {
            addr,
            state,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Stops accepting and waits for the runtime thread to end.
    pub fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The router over the repository's content, with the test engine.
pub fn app() -> Router {
    app_with(Arc::new(TestEngine), |_| {}).0
}

/// A response, read whole.
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
    pub fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap_or("").to_string())
            .unwrap_or_default()
    }
}

/// Sends one request through the router.
pub async fn send(app: &Router, request: Request<Body>) -> Answer {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = axum::body::to_bytes(response.into_body(), 16 << 20)
        .await
        .unwrap()
        .to_vec();
    Answer {
        status,
        headers,
        body,
    }
}

/// `GET uri`.
pub async fn get(app: &Router, uri: &str) -> Answer {
    send(app, Request::get(uri).body(Body::empty()).unwrap()).await
}

/// `GET uri` with the one header `name: value`.
pub async fn get_with(app: &Router, uri: &str, (name, value): (&str, &str)) -> Answer {
    send(
        app,
        Request::get(uri)
            .header(name, value)
            .body(Body::empty())
            .unwrap(),
    )
    .await
}
