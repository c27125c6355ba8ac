//! The tuner's configuration, read from the environment once per process (and again only on an explicit
//! [`reload_config`], which tests and long-lived tools call after changing a variable).
//!
//! | variable | meaning |
//! |---|---|
//! | `NETCL_AUTOTUNE` | `background` (default), `sync` (`1`, `on`), `off` (`0`, `false`, `no`) |
//! | `NETCL_AUTOTUNE_CACHE` | the cache file; else `$XDG_CACHE_HOME/netcl/autotune.json`, else `~/.cache/…` |
//! | `NETCL_AUTOTUNE_REPS` | timed runs per candidate after one warm-up, 1–100 (default 5) |
//! | `NETCL_AUTOTUNE_FORCE` | `kernel=label;…`: force a candidate by its label |
//! | `NETCL_AUTOTUNE_BUDGET_MS` | background measurement allowed per logging scope, in ms (default 1000), beyond a tenth of the scope's running time |
//! | `NETCL_TUNING_DIR` | a directory of extra tuning tables (`*.json`), consulted after the shipped ones |

use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// When the tuner measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Every candidate of a new shape is measured before the call returns (benchmarks use this).
    Sync,
    /// A new shape is answered at once from the tuning database or the heuristic; its candidates are measured
    /// on later calls of the same shape, a bounded amount per call, and those calls switch to the winner.
    Background,
    /// Nothing is measured: the database or heuristic choice is used.
    Off,
}

impl Mode {
    /// Parses `NETCL_AUTOTUNE`'s value.
    pub fn parse(v: &str) -> Option<Mode> {
        match v.trim().to_ascii_lowercase().as_str() {
            "sync" | "1" | "on" | "true" | "yes" => Some(Mode::Sync),
            "background" | "bg" => Some(Mode::Background),
            "off" | "0" | "false" | "no" => Some(Mode::Off),
            _ => None,
        }
    }
}

/// The tuner's settings, as read from the environment.
#[derive(Debug, Clone)]
pub struct TuneConfig {
    /// When candidates are measured.
    pub mode: Mode,
    /// Whether `NETCL_AUTOTUNE` named the mode (otherwise a program's preferred mode applies).
    pub mode_from_env: bool,
    /// The cache file.
    pub cache_path: PathBuf,
    /// Timed runs per candidate.
    pub reps: usize,
    /// Forced labels, `(kernel, label)`.
    pub force: Vec<(String, String)>,
    /// Background measurement allowed per logging scope, in milliseconds.
    pub budget_ms: f64,
    /// A directory of extra tuning tables.
    pub tuning_dir: Option<PathBuf>,
    /// What was wrong with the environment, if anything (reported by every tuning call).
    pub problem: Option<String>,
}

impl TuneConfig {
    /// Reads the configuration from the environment now.
    pub fn from_env() -> TuneConfig {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let mut problem = None;
        let (mode, mode_from_env) = match var("NETCL_AUTOTUNE") {
            None => (preferred_mode(), false),
            Some(v) => match Mode::parse(&v) {
                Some(m) => (m, true),
                None => {
                    problem = Some(format!(
                        "NETCL_AUTOTUNE=`{v}` is not a tuning mode; use sync, background or off (1 and 0 mean sync and off)"
                    ));
                    (preferred_mode(), false)
                }
            },
        };
        let reps = match var("NETCL_AUTOTUNE_REPS") {
            None => 5,
            Some(v) => match v.trim().parse::<usize>() {
                Ok(n) if (1..=100).contains(&n) => n,
                _ => {
                    problem.get_or_insert(format!(
                        "NETCL_AUTOTUNE_REPS=`{v}` is not a number of repetitions from 1 to 100"
                    ));
                    5
                }
            },
        };
        let budget_ms = match var("NETCL_AUTOTUNE_BUDGET_MS") {
            None => 1000.0,
            Some(v) => match v.trim().parse::<f64>() {
                Ok(n) if n.is_finite() && n >= 0.0 => n,
                _ => {
                    problem.get_or_insert(format!(
                        "NETCL_AUTOTUNE_BUDGET_MS=`{v}` is not a non-negative number of milliseconds"
                    ));
                    1000.0
                }
            },
        };
        let force = var("NETCL_AUTOTUNE_FORCE")
            .map(|v| {
                v.split(';')
                    .filter_map(|entry| {
                        let (k, l) = entry.split_once('=')?;
                        Some((k.trim().to_owned(), l.trim().to_owned()))
                    })
                    .collect()
            })
            .unwrap_or_default();
        TuneConfig {
            mode,
            mode_from_env,
            cache_path: cache_path_from_env(),
            reps,
            force,
            budget_ms,
            tuning_dir: std::env::var_os("NETCL_TUNING_DIR")
                .filter(|p| !p.is_empty())
                .map(PathBuf::from),
            problem,
        }
    }

    /// The label `NETCL_AUTOTUNE_FORCE` names for `kernel`, if any.
    pub fn forced_label(&self, kernel: &str) -> Option<&str> {
        self.force
            .iter()
            .find(|(k, _)| k == kernel)
            .map(|(_, l)| l.as_str())
    }
}

fn cache_path_from_env() -> PathBuf {
    if let Some(p) = std::env::var_os("NETCL_AUTOTUNE_CACHE").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("netcl").join("autotune.json")
}

static CONFIG: RwLock<Option<Arc<TuneConfig>>> = RwLock::new(None);
/// Bumped on every (re)load: answers kept under an older configuration are stale.
static GENERATION: AtomicU64 = AtomicU64::new(1);
/// The mode a program prefers when `NETCL_AUTOTUNE` is unset (0 = background, 1 = sync, 2 = off).
static PREFERRED: AtomicU8 = AtomicU8::new(0);

fn preferred_mode() -> Mode {
    match PREFERRED.load(Ordering::SeqCst) {
        1 => Mode::Sync,
        2 => Mode::Off,
        _ => Mode::Background,
    }
}

/// The configuration, read from the environment on first use.
pub fn config() -> Arc<TuneConfig> {
    if let Ok(c) = CONFIG.read()
        && let Some(c) = c.as_ref()
    {
        return c.clone();
    }
    reload_config()
}

/// Reads the environment again and replaces the configuration.
pub fn reload_config() -> Arc<TuneConfig> {
    let c = Arc::new(TuneConfig::from_env());
    if let Ok(mut slot) = CONFIG.write() {
        *slot = Some(c.clone());
    }
    GENERATION.fetch_add(1, Ordering::SeqCst);
    c
}

/// Sets the mode used when `NETCL_AUTOTUNE` is unset (benchmarks prefer `sync`) and reloads the configuration.
pub fn prefer_mode(mode: Mode) {
    PREFERRED.store(
        match mode {
            Mode::Background => 0,
            Mode::Sync => 1,
            Mode::Off => 2,
        },
        Ordering::SeqCst,
    );
    reload_config();
}

/// The configuration's generation (changes on every reload).
pub(crate) fn generation() -> u64 {
    GENERATION.load(Ordering::SeqCst)
}
