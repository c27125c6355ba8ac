//! Settings of a served wiki: from a TOML file for hosted use, overridden by command-line flags.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::script::Limits;
use crate::{Error, Result};

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
    /// When set, runs need `Authorization: Bearer <token>`.
    pub playground_token: Option<String>,
    /// Runs one client may start per minute, on average.
    pub playground_rate_per_minute: u32,
    /// Runs one client may start at once before the rate applies.
    pub playground_burst: u32,
    /// Take the client address from `X-Forwarded-For` (only behind a proxy that sets it).
    pub playground_trust_forwarded: bool,
    /// The most a run may use; a request may ask for less.
    pub playground_limits: Limits,
    /// The worker command (program, then arguments); by default this binary with `worker`.
    pub playground_worker_command: Option<Vec<String>>,
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
            playground_token: None,
            playground_rate_per_minute: 60,
            playground_burst: 10,
            playground_trust_forwarded: false,
            playground_limits: Limits::default(),
            playground_worker_command: None,
        }
    }
}

impl Config {
    /// Reads a TOML config file; fields it leaves out keep their defaults.
    pub fn from_file(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Wiki(format!("{}: {e}", path.display())))?;
        let config: Config = basic_toml::from_str(&text)
            .map_err(|e| Error::Wiki(format!("{}: {e}", path.display())))?;
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
            return Err(Error::Wiki(format!(
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
            return Err(Error::Wiki(
                "max_body_bytes and request_timeout_secs must be positive".into(),
            ));
        }
        if self.playground_workers == 0
            || self.playground_timeout_ms == 0
            || self.playground_rate_per_minute == 0
            || self.playground_burst == 0
        {
            return Err(Error::Wiki(
                "playground_workers, playground_timeout_ms, playground_rate_per_minute and playground_burst must be positive".into(),
            ));
        }
        if self
            .playground_worker_command
            .as_ref()
            .is_some_and(|c| c.is_empty())
        {
            return Err(Error::Wiki(
                "playground_worker_command needs at least the program".into(),
            ));
        }
        Ok(self)
    }
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
