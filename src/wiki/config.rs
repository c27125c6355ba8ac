//! Settings of a served wiki: from a TOML file for hosted use, overridden by command-line flags.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::script::Limits;
use crate::wiki::error::{Result, WikiError};

/// Everything `netcl serve` needs to know.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address to listen on.
    pub bind: SocketAddr,
    /// Path prefix the wiki is served under (`/wiki`), or empty.
    pub base_path: String,
    /// Markdown content directory.
    pub content_dir: PathBuf,
    /// Site name in the header and titles.
    pub title: String,
    /// Prefix of "edit this page" links; the page's `<path>.md` is appended. No link when absent.
    pub edit_url: Option<String>,
    /// Whether runnable blocks may be run from pages.
    pub playground: bool,
    /// Reload content when files change.
    pub watch: bool,
    /// Largest accepted request body, in bytes.
    pub max_body_bytes: usize,
    /// Seconds an engine call (device list, autotune cache) may take before the answer is a 503.
    pub request_timeout_secs: u64,
    /// Device selection passed to the engine (`NETCL_DEVICE` syntax).
    pub device: Option<String>,
    /// Playground worker processes (each holds the device open between runs).
    pub playground_workers: usize,
    /// Runs that may wait for a worker; beyond them a run is answered 503.
    pub playground_queue: usize,
    /// Wall time of one run in milliseconds; past it the worker is killed and restarted.
    pub playground_timeout_ms: u64,
    /// Compile time (the engine building kernels on a first run) not counted against
    /// `playground_timeout_ms`, at most this many milliseconds per run.
    pub playground_compile_allowance_ms: u64,
    /// When set, runs need `Authorization: Bearer <token>`.
    pub playground_token: Option<String>,
    /// Runs one client may start per minute, on average.
    pub playground_rate_per_minute: u32,
    /// Runs one client may start at once before the rate applies.
    pub playground_burst: u32,
    /// Runs one client may have open at once (queued, running, or with an answer it has not read yet); past
    /// them its runs are answered 429 `too_many_runs`.
    pub playground_max_runs_per_client: usize,
    /// Take the client address from `X-Forwarded-For` (only behind a proxy that sets it).
    pub playground_trust_forwarded: bool,
    /// The most a run may use; a request may ask for less.
    pub playground_limits: Limits,
    /// The folder `load_model(name)` reads model files from; by default `data` inside the content directory.
    pub playground_data_dir: Option<PathBuf>,
    /// The worker command (program, then arguments); by default this binary with `worker`.
    pub playground_worker_command: Option<Vec<String>>,
    /// Milliseconds a client of an event stream may read nothing before its run is stopped.
    pub playground_stall_timeout_ms: u64,
    /// A worker's address-space limit in MiB (`RLIMIT_AS`); 0 leaves it unlimited (some GPU drivers reserve
    /// more address space than any sensible limit).
    pub playground_worker_address_space_mb: u64,
    /// Files a worker may hold open (`RLIMIT_NOFILE`); 0 keeps the inherited limit.
    pub playground_worker_open_files: u64,
    /// Milliseconds a client has to send a complete request head, counted from the connection's start or from
    /// the end of the previous answer; so it is also how long an idle kept-alive connection stays open.
    pub header_timeout_ms: u64,
    /// Milliseconds a client has to send a whole request body.
    pub body_timeout_ms: u64,
    /// Milliseconds a write to a client may make no progress (a client that stopped reading) before the
    /// connection is closed.
    pub write_timeout_ms: u64,
    /// Connections served at once; further ones wait in the listen backlog. Lowered to fit the process's
    /// open-file limit.
    pub max_connections: usize,
    /// Milliseconds open requests get to finish after SIGTERM or Ctrl-C before their connections are closed
    /// (after [`Config::drain_delay_ms`]); runs in flight finish within it.
    pub shutdown_grace_ms: u64,
    /// Milliseconds the server keeps listening after SIGTERM or Ctrl-C, answering `/readyz` with 503, so load
    /// balancers and Kubernetes endpoints take it out of rotation before it stops accepting connections.
    pub drain_delay_ms: u64,
    /// Milliseconds between comment lines on an event stream that has nothing else to send, so proxies and
    /// browsers do not close a quiet run as idle.
    pub sse_heartbeat_ms: u64,
    /// A team tuning table: a file in the format `netcl tune export` writes, consulted before the shipped
    /// tables (passed to the workers as `NETCL_TUNING_TABLE`). One that cannot be read is reported and ignored.
    pub tuning_table: Option<String>,
    /// `Host` names (without port) the server answers; others get 421. By default the localhost names when
    /// bound to a loopback address, and any name otherwise. `*` allows any.
    pub allowed_hosts: Option<Vec<String>>,
    /// Origins (`https://docs.example`) besides the server's own from which a browser may start runs; `*`
    /// allows any. Requests without `Origin` (curl, scripts) are not affected.
    pub allowed_origins: Vec<String>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            base_path: String::new(),
            content_dir: PathBuf::from("web-wiki/content"),
            title: "netcl".into(),
            edit_url: None,
            playground: true,
            watch: false,
            max_body_bytes: 64 * 1024,
            request_timeout_secs: 30,
            device: None,
            playground_workers: 1,
            playground_queue: 16,
            playground_timeout_ms: 10_000,
            playground_compile_allowance_ms: 30_000,
            playground_token: None,
            playground_rate_per_minute: 60,
            playground_burst: 10,
            playground_max_runs_per_client: 2,
            playground_trust_forwarded: false,
            playground_limits: Limits::default(),
            playground_data_dir: None,
            playground_worker_command: None,
            playground_stall_timeout_ms: 3_000,
            playground_worker_address_space_mb: 16 * 1024,
            playground_worker_open_files: 256,
            header_timeout_ms: 15_000,
            body_timeout_ms: 15_000,
            write_timeout_ms: 15_000,
            max_connections: 512,
            shutdown_grace_ms: 5_000,
            drain_delay_ms: 0,
            sse_heartbeat_ms: 15_000,
            tuning_table: None,
            allowed_hosts: None,
            allowed_origins: Vec::new(),
        }
    }
}

impl Config {
    /// The folder `load_model(name)` reads from: `playground_data_dir`, else `data` in the content directory,
    /// made absolute so a worker finds it wherever it runs.
    pub fn playground_data_dir(&self) -> PathBuf {
        let dir = self
            .playground_data_dir
            .clone()
            .unwrap_or_else(|| self.content_dir.join("data"));
        std::path::absolute(&dir).unwrap_or(dir)
    }

    /// Reads a TOML config file; fields it leaves out keep their defaults.
    pub fn from_file(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| WikiError::Site(format!("{}: {e}", path.display())))?;
        let config: Config = basic_toml::from_str(&text)
            .map_err(|e| WikiError::Site(format!("{}: {e}", path.display())))?;
        config.validated()
    }

    /// Normalises the base path (`wiki/` → `/wiki`) and checks it holds only plain path characters.
    pub fn validated(mut self) -> Result<Config> {
        let base = self.base_path.trim().trim_matches('/');
        if !base
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '/' | '.'))
            || base.contains("..")
        {
            return Err(WikiError::Site(format!(
                "base_path `{}` may hold only letters, digits, -, _, . and /",
                self.base_path
            )));
        }
        self.base_path = if base.is_empty() {
            String::new()
        } else {
            format!("/{base}")
        };
        if self.max_body_bytes == 0 || self.request_timeout_secs == 0 {
            return Err(WikiError::Site(
                "max_body_bytes and request_timeout_secs must be positive".into(),
            ));
        }
        if self.playground_workers == 0
            || self.playground_timeout_ms == 0
            || self.playground_rate_per_minute == 0
            || self.playground_burst == 0
            || self.playground_max_runs_per_client == 0
        {
            return Err(WikiError::Site(
                "playground_workers, playground_timeout_ms, playground_rate_per_minute, playground_burst and playground_max_runs_per_client must be positive".into(),
            ));
        }
        if self.playground_stall_timeout_ms == 0
            || self.header_timeout_ms == 0
            || self.body_timeout_ms == 0
            || self.write_timeout_ms == 0
            || self.max_connections == 0
            || self.sse_heartbeat_ms == 0
        {
            return Err(WikiError::Site(
                "playground_stall_timeout_ms, header_timeout_ms, body_timeout_ms, write_timeout_ms, max_connections and sse_heartbeat_ms must be positive".into(),
            ));
        }
        self.tuning_table = self.tuning_table.filter(|t| !t.trim().is_empty());
        if self
            .playground_worker_command
            .as_ref()
            .is_some_and(|c| c.is_empty())
        {
            return Err(WikiError::Site(
                "playground_worker_command needs at least the program".into(),
            ));
        }
        Ok(self)
    }

    /// Whether a request for `host` (the `Host` header, port included or not) is answered.
    pub fn host_allowed(&self, host: &str) -> bool {
        let name = host_name(host);
        match &self.allowed_hosts {
            Some(list) => list
                .iter()
                .any(|h| h == "*" || h.eq_ignore_ascii_case(name)),
            None if self.bind.ip().is_loopback() => {
                let lower = name.to_ascii_lowercase();
                lower == "localhost"
                    || lower.ends_with(".localhost")
                    || lower
                        .trim_start_matches('[')
                        .trim_end_matches(']')
                        .parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_loopback())
            }
            None => true,
        }
    }

    /// Whether a browser page from `origin` may start runs on a server reached as `host`.
    pub fn origin_allowed(&self, origin: &str, host: Option<&str>) -> bool {
        let origin = origin.trim_end_matches('/');
        if self
            .allowed_origins
            .iter()
            .any(|o| o == "*" || o.trim_end_matches('/').eq_ignore_ascii_case(origin))
        {
            return true;
        }
        // Same origin: the origin's authority is the host the request was sent to.
        let authority = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        matches!((authority, host), (Some(a), Some(h)) if a.eq_ignore_ascii_case(h))
    }
}

/// The name part of a `Host` header: `[::1]:8080` → `[::1]`, `example.org:80` → `example.org`.
fn host_name(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |i| &host[..=i]);
    }
    host.rsplit_once(':').map_or(host, |(name, _)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_path_is_normalised_and_checked() {
        let c = Config {
            base_path: "wiki/".into(),
            ..Config::default()
        }
        .validated()
        .unwrap();
        assert_eq!(c.base_path, "/wiki");
        assert!(
            Config {
                base_path: "/a\"b".into(),
                ..Config::default()
            }
            .validated()
            .is_err()
        );
        assert!(
            Config {
                base_path: "/../x".into(),
                ..Config::default()
            }
            .validated()
            .is_err()
        );
    }

    #[test]
    fn hosts_and_origins() {
        let c = Config::default();
        for ok in [
            "localhost:8080",
            "127.0.0.1:8080",
            "[::1]:8080",
            "wiki.localhost",
            "LOCALHOST",
        ] {
            assert!(c.host_allowed(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8080",
            "127.0.0.1.evil.example",
        ] {
            assert!(!c.host_allowed(bad), "{bad}");
        }
        let open = Config {
            bind: SocketAddr::from(([0, 0, 0, 0], 8080)),
            ..Config::default()
        };
        assert!(open.host_allowed("docs.example"));
        let listed = Config {
            allowed_hosts: Some(vec!["docs.example".into()]),
            ..Config::default()
        };
        assert!(listed.host_allowed("docs.example:443") && !listed.host_allowed("localhost"));
        assert!(c.origin_allowed("http://localhost:8080", Some("localhost:8080")));
        assert!(!c.origin_allowed("http://evil.example", Some("localhost:8080")));
        assert!(!c.origin_allowed("null", Some("localhost:8080")));
        let trusted = Config {
            allowed_origins: vec!["https://docs.example".into()],
            ..Config::default()
        };
        assert!(trusted.origin_allowed("https://docs.example", Some("localhost:8080")));
    }

    #[test]
    fn toml_fields_override_defaults() {
        let c: Config = basic_toml::from_str(
            "bind = \"127.0.0.1:9000\"\nplayground = false\nedit_url = \"https://e/\"",
        )
        .unwrap();
        assert_eq!(c.bind.port(), 9000);
        assert!(!c.playground);
        assert_eq!(c.title, "netcl");
        assert!(basic_toml::from_str::<Config>("unknown = 1").is_err());
    }
}
