//! The `serve` and `export` subcommands: their arguments and what they run.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

use super::config::Config;
use super::content::Content;
use super::engine::{Engine, EngineInfo};
use super::export::export as export_site;
use super::server::{AppState, router};
use super::views::SiteSettings;
use super::{health, listen, warm, watch};
use crate::wiki::error::{Result, WikiError};

/// `netcl serve`: the documentation wiki over HTTP.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on (default 127.0.0.1:8080).
    #[arg(long, visible_alias = "addr", env = "NETCL_WIKI_BIND")]
    pub bind: Option<SocketAddr>,
    /// Markdown content directory (default: web-wiki/content in the working directory, else beside the binary
    /// or in the source tree it was built from).
    #[arg(long, env = "NETCL_WIKI_CONTENT")]
    pub content: Option<PathBuf>,
    /// TOML config file for hosted use; flags given here override it.
    #[arg(long, env = "NETCL_WIKI_CONFIG")]
    pub config: Option<PathBuf>,
    /// Path prefix to serve under, such as /wiki.
    #[arg(long)]
    pub base_path: Option<String>,
    /// Device selection shown by the wiki; the caller fills it from the global `--device` / `NETCL_DEVICE`.
    #[arg(skip)]
    pub device: Option<String>,
    /// Re-render the content when its files change.
    #[arg(long)]
    pub watch: bool,
    /// Prefix of "edit this page" links.
    #[arg(long)]
    pub edit_url: Option<String>,
    /// Turn the playground off.
    #[arg(long)]
    pub no_playground: bool,
    /// Run every runnable block of the content once in the background at start, so readers' first runs find
    /// kernels built and tuned (progress is logged; the server answers meanwhile).
    #[arg(long)]
    pub warm: bool,
    /// A team tuning table (a file `netcl tune export` wrote), consulted before the shipped tables by every
    /// worker; one that cannot be read is reported and ignored.
    #[arg(long, env = "NETCL_TUNING_TABLE")]
    pub tuning_table: Option<String>,
    /// The bearer token runs need (set it from a secret through the environment rather than a flag, which
    /// other users of the machine can see).
    #[arg(long, env = "NETCL_PLAYGROUND_TOKEN", hide_env_values = true)]
    pub playground_token: Option<String>,
}

/// `netcl export`: the wiki as static files.
#[derive(Debug, Clone, Args)]
pub struct ExportArgs {
    /// Directory to write to (created when missing).
    pub dir: PathBuf,
    /// Markdown content directory (default: web-wiki/content in the working directory, else beside the binary
    /// or in the source tree it was built from).
    #[arg(long, env = "NETCL_WIKI_CONTENT")]
    pub content: Option<PathBuf>,
    /// Site name in the header and titles.
    #[arg(long, default_value = "netcl")]
    pub title: String,
    /// Prefix of "edit this page" links.
    #[arg(long)]
    pub edit_url: Option<String>,
    /// Fail when the content has problems (broken links, missing front matter, pages outside the manifest).
    #[arg(long)]
    pub strict: bool,
}

impl ServeArgs {
    /// The configuration: defaults, then the config file, then flags.
    pub fn to_config(&self) -> Result<Config> {
        let mut config = match &self.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        if let Some(bind) = self.bind {
            config.bind = bind;
        }
        if let Some(content) = &self.content {
            config.content_dir = content.clone();
        } else if config.content_dir == Config::default().content_dir {
            config.content_dir = default_content_dir()?;
        }
        if let Some(base) = &self.base_path {
            config.base_path = base.clone();
        }
        if self.device.is_some() {
            config.device = self.device.clone();
        }
        if self.edit_url.is_some() {
            config.edit_url = self.edit_url.clone();
        }
        if self.tuning_table.is_some() {
            config.tuning_table = self.tuning_table.clone();
        }
        if self.playground_token.is_some() {
            config.playground_token = self.playground_token.clone();
        }
        config.watch |= self.watch;
        config.playground &= !self.no_playground;
        config.validated()
    }
}

/// Runs the server with this process's engine until Ctrl-C.
pub fn serve(args: ServeArgs) -> Result<()> {
    serve_with(args, Arc::new(Engine))
}

/// Runs the server with engine data from `engine` until Ctrl-C.
pub fn serve_with(args: ServeArgs, engine: Arc<dyn EngineInfo>) -> Result<()> {
    let config = args.to_config()?;
    use_team_table(config.tuning_table.as_deref());
    let state = AppState::with_workers(config.clone(), engine, true)?;
    for problem in &state.site().problems {
        tracing::warn!(%problem, "content problem");
    }
    if config.watch {
        watch::spawn(Arc::clone(&state));
    }
    if args.warm {
        match state.playground() {
            Some(playground) => {
                warm::spawn(Arc::clone(playground), state.site())
                    .map_err(|e| WikiError::Site(format!("starting the warm-up: {e}")))?;
            }
            None => eprintln!("--warm ignored: the playground is off"),
        }
    }
    health::spawn_checks(Arc::clone(&state))
        .map_err(|e| WikiError::Site(format!("starting the readiness checks: {e}")))?;
    let base = config.base_path.clone();
    let draining = Arc::clone(&state);
    let served = listen::serve_on_threads(
        config.bind,
        listen::default_threads(),
        router(Arc::clone(&state)),
        listen::ConnLimits::from_config(&config),
        |address| {
            tracing::info!(%address, base = %base, "wiki listening");
            eprintln!("netcl wiki on http://{address}{base}/");
        },
        move || {
            draining.health().start_drain();
            eprintln!("netcl wiki draining: /readyz answers 503, open runs are finishing");
        },
    );
    // No worker outlives the server.
    if let Some(playground) = state.playground() {
        playground.shutdown();
    }
    served
}

/// Makes `table` (the config's team tuning table) the one this process and its workers consult, and reports
/// what it holds; a table that cannot be read is reported and ignored, never fatal.
fn use_team_table(table: Option<&str>) {
    if let Some(table) = table {
        // SAFETY: called before the server starts any thread (the playground's supervisor, the accept loops),
        // so nothing reads the environment concurrently. The workers inherit it.
        unsafe { std::env::set_var("NETCL_TUNING_TABLE", table) };
        crate::autotune::reload_config();
    }
    match crate::autotune::db::team_table() {
        None => {}
        Some(Ok(t)) => {
            tracing::info!(entries = t.entries.len(), device = %t.device.name, "team tuning table loaded");
            eprintln!(
                "team tuning table: {} entries measured on {} ({})",
                t.entries.len(),
                t.device.name,
                t.device.kind
            );
        }
        Some(Err(e)) => {
            tracing::warn!(error = %e, "team tuning table ignored");
            eprintln!("team tuning table ignored: {e}");
        }
    }
}

/// Writes the static site; content problems are printed, and fail the export with `--strict`.
pub fn export(args: ExportArgs) -> Result<()> {
    let dir = match args.content {
        Some(dir) => dir,
        None => default_content_dir()?,
    };
    let content = Content::load(&dir)?;
    let settings = SiteSettings {
        title: args.title,
        edit_url: args.edit_url,
        playground: false,
    };
    let report = export_site(&content, &settings, &args.dir)?;
    for problem in &report.problems {
        eprintln!("content problem: {problem}");
    }
    if args.strict && !report.problems.is_empty() {
        return Err(WikiError::Site(format!(
            "{} content problems",
            report.problems.len()
        )));
    }
    eprintln!("wrote {} files to {}", report.files, args.dir.display());
    Ok(())
}

/// The content directory when none is given: `web-wiki/content` in the working directory, else the first
/// `web-wiki/content` (or `share/netcl/content`) found beside the binary or in a directory above it (a binary
/// under `target/release` finds its source tree's), else the source tree this binary was built from. An error
/// names the places looked at and `--content`.
pub fn default_content_dir() -> Result<PathBuf> {
    let relative = Config::default().content_dir;
    let mut candidates = vec![relative.clone()];
    if let Ok(exe) = std::env::current_exe() {
        let exe = exe.canonicalize().unwrap_or(exe);
        for dir in exe.ancestors().skip(1) {
            candidates.push(dir.join(&relative));
            candidates.push(dir.join("share/netcl/content"));
        }
    }
    candidates.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(&relative));
    candidates
        .iter()
        .find(|dir| dir.join("nav.toml").is_file())
        .cloned()
        .ok_or_else(|| {
            WikiError::Site(format!(
                "no documentation content found (looked for {} in the working directory, beside the netcl binary and \
                 in the directories above it); pass --content DIR or set NETCL_WIKI_CONTENT",
                relative.display()
            ))
        })
}
