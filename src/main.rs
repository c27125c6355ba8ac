//! The `netcl` command-line interface: devices, autotune cache, benchmarks, and the wiki server.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use netcl::autotune;
use netcl::bench::{self, BenchOptions};
use netcl::{Device, DeviceInfo};

#[derive(Parser)]
#[command(
    name = "netcl",
    version,
    about = "A deep-learning engine on OpenCL, with a live documentation wiki"
)]
struct Cli {
    /// Device selector: an index from `netcl devices`, `gpu`, `cpu`, `builtin`, or a name substring.
    #[arg(long, global = true, env = "NETCL_DEVICE")]
    device: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Lists every OpenCL platform and device, and the built-in CPU device.
    Devices {
        /// One JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Serves the documentation wiki over HTTP.
    Serve(netcl::wiki::cli::ServeArgs),
    /// Writes the documentation wiki as static files.
    Export(netcl::wiki::cli::ExportArgs),
    /// Reads or clears the autotune cache.
    Tune {
        #[command(subcommand)]
        action: TuneAction,
    },
    /// Runs benchmark cases and prints one JSON object per line.
    Bench {
        /// CPU-sized shapes (batch /4, matmul 1024).
        #[arg(long)]
        small: bool,
        /// JSON lines (the default and only format; accepted for symmetry with the peer script).
        #[arg(long)]
        json: bool,
        /// Timed repetitions per case after two warm-ups.
        #[arg(long, default_value_t = 10)]
        reps: usize,
        /// Skip the comparison against the built-in device.
        #[arg(long)]
        no_check: bool,
        /// Add to each line where the device time of a call goes, kernel by kernel (`profile`).
        #[arg(long)]
        profile: bool,
        /// List the case names and exit.
        #[arg(long)]
        list: bool,
        /// Case names to run (all when empty).
        cases: Vec<String>,
    },
    /// Runs a playground snippet (Rhai with the engine bound in) and prints its output.
    Run {
        /// The snippet file (`-` for standard input).
        file: String,
        /// The whole result as JSON (outputs, decisions, launches, timings, error).
        #[arg(long)]
        json: bool,
        /// Wall-time limit in milliseconds. Checked between script operations; a single device call still
        /// running a second past it ends the process with exit status 124.
        #[arg(long, default_value_t = 60_000)]
        timeout_ms: u64,
        /// The folder `load_model(name)` reads model files from (the wiki's is `web-wiki/content/data`).
        #[arg(long)]
        data: Option<std::path::PathBuf>,
    },
    /// Serves playground jobs over stdin/stdout as JSON lines (started by `netcl serve`).
    Worker,
    /// Builds OpenCL programs named on stdin into the on-disk program cache (started by netcl itself while a
    /// process runs a quick kernel in their place).
    #[command(hide = true)]
    BuildPrograms,
    /// Trains a preset CNN on the UCI 8×8 digits and prints the metrics of each epoch.
    Train {
        /// The model preset (tiny_cnn, fast_cnn, fast_bn_cnn, example_cnn, example_mlp, digits_cnn, resnet18,
        /// mobilenet_v2).
        #[arg(long, default_value = "digits_cnn")]
        preset: String,
        /// Passes over the training data.
        #[arg(long, default_value_t = 12)]
        epochs: usize,
        /// Samples per batch.
        #[arg(long, default_value_t = 32)]
        batch: usize,
        /// Learning rate.
        #[arg(long, default_value_t = 0.002)]
        lr: f32,
        /// sgd (momentum 0.9), adam or adamw.
        #[arg(long, default_value = "adam")]
        optimizer: String,
        /// Seed of the split, the shuffle and the initial weights.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Write the trained model to this file (netcl's single-file format).
        #[arg(long)]
        save: Option<std::path::PathBuf>,
        /// One JSON object per epoch instead of a progress bar.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum TuneAction {
    /// Every cached decision: key, winner and whether candidate times were recorded.
    List {
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// The entries whose key contains FILTER, with every candidate's time.
    Show {
        /// A substring of the key (kernel name, device or shape).
        filter: String,
    },
    /// Deletes the cache file.
    Clear,
    /// Prints the cache file's path.
    Path,
    /// Measures every tuning candidate of the given snippets (or of every runnable block of the documentation)
    /// now, so later runs here and in the wiki's workers answer from the cache.
    Warm {
        /// Snippet files to run; every runnable block of the content when none is given.
        files: Vec<std::path::PathBuf>,
        /// The documentation's content directory (when no files are given).
        #[arg(long)]
        content: Option<std::path::PathBuf>,
        /// Wall-time limit of each snippet, in seconds.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
    },
    /// Writes the cache's winners for the selected device as a tuning table (the format of `tuning/*.json`).
    Export {
        /// The file to write (atomically); standard output when absent.
        #[arg(long)]
        out: Option<std::path::PathBuf>,
    },
    /// Adds the programs of recorded tables (`tune export` output, the parts of a workload recorded in separate
    /// processes) to a tuning table of the same device class, keeping its winners.
    Merge {
        /// The table whose winners are kept.
        base: std::path::PathBuf,
        /// Tables whose programs are added.
        #[arg(required = true)]
        parts: Vec<std::path::PathBuf>,
        /// Replaces the base table's `measured` text (say how the programs were recorded).
        #[arg(long)]
        measured: Option<String>,
        /// The file to write (atomically); standard output when absent.
        #[arg(long)]
        out: Option<std::path::PathBuf>,
    },
}

/// Writes `table` atomically to `out` (and says what it wrote), or prints it on standard output.
fn write_table(
    table: &autotune::db::TuningTable,
    out: Option<&std::path::Path>,
) -> netcl::Result<()> {
    let text = table.to_json()?;
    match out {
        Some(path) => {
            netcl::fsio::write_atomic(path, &text).map_err(|e| netcl::Error::io(path, e))?;
            eprintln!(
                "wrote {} entries and {} programs to {}",
                table.entries.len(),
                table.programs.len(),
                path.display()
            );
        }
        None => print!("{}", String::from_utf8_lossy(&text)),
    }
    Ok(())
}

/// Prints `v` as pretty JSON on standard output.
fn print_json(v: &impl serde::Serialize) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("NETCL_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    // This executable answers `build-programs`, whatever its file is called: its ops may start helpers that
    // are this executable.
    netcl::program::serve_builds_from_here();
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What the command line reports: an engine failure, or one of the documentation wiki.
#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error(transparent)]
    Engine(#[from] netcl::Error),
    #[error(transparent)]
    Wiki(#[from] netcl::wiki::error::WikiError),
}

fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Devices { json } => Ok(devices(cli.device.as_deref(), json)?),
        Command::Run {
            file,
            json,
            timeout_ms,
            data,
        } => Ok(run_file(
            cli.device.as_deref(),
            &file,
            json,
            timeout_ms,
            data,
        )?),
        Command::Train {
            preset,
            epochs,
            batch,
            lr,
            optimizer,
            seed,
            save,
            json,
        } => Ok(train_digits(
            cli.device.as_deref(),
            &preset,
            epochs,
            batch,
            lr,
            &optimizer,
            seed,
            save.as_deref(),
            json,
        )?),
        Command::Worker => Ok(netcl::script::worker::serve(&Device::select(
            cli.device.as_deref(),
        )?)?),
        Command::BuildPrograms => Ok(netcl::program::serve_builds(
            &Device::select(cli.device.as_deref())?,
            std::io::stdin().lock(),
            std::io::stdout().lock(),
        )?),
        Command::Tune { action } => {
            quiet_broken_pipe();
            Ok(tune(cli.device.as_deref(), action)?)
        }
        Command::Serve(mut args) => {
            args.device = cli.device;
            netcl::wiki::cli::serve(args).map_err(CliError::from)
        }
        Command::Export(args) => netcl::wiki::cli::export(args).map_err(CliError::from),
        Command::Bench {
            small,
            json: _,
            reps,
            no_check,
            profile,
            list,
            cases,
        } => {
            let all = bench::cases();
            if list {
                for c in &all {
                    println!("{}", c.name);
                }
                return Ok(());
            }
            for name in &cases {
                if !all.iter().any(|c| c.name == name) {
                    return Err(netcl::Error::Invalid(format!(
                        "no benchmark case `{name}`; `netcl bench --list` names them"
                    ))
                    .into());
                }
            }
            let device = Device::select(cli.device.as_deref())?;
            let opts = BenchOptions {
                small,
                reps,
                check: !no_check,
                profile,
            };
            println!(
                "{}",
                serde_json::json!({"device": device.name(), "platform": device.info().platform})
            );
            for case in all
                .iter()
                .filter(|c| cases.is_empty() || cases.iter().any(|n| n == c.name))
            {
                match bench::run_case(case, &device, &opts) {
                    Ok(line) => println!("{}", serde_json::to_string(&line).unwrap_or_default()),
                    Err(e) => println!(
                        "{}",
                        serde_json::json!({"case": case.name, "impl": "netcl", "error": e.to_string()})
                    ),
                }
            }
            Ok(())
        }
    }
}

/// Lets a listing end quietly when its reader goes away (`netcl tune list | head -1`): with the default
/// action of SIGPIPE the process ends as other command-line tools do, where Rust's ignored signal would make
/// `println!` panic. Only for commands that write to standard output and hold no other connections.
fn quiet_broken_pipe() {
    #[cfg(unix)]
    // SAFETY: restoring a signal's default disposition affects no Rust state; it runs before any output.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn devices(selector: Option<&str>, json: bool) -> netcl::Result<()> {
    quiet_broken_pipe();
    // A selector that matches no device is an error, before anything is listed.
    let chosen = match selector {
        Some(sel) => Some(Device::select(Some(sel))?.info().index),
        None => None,
    };
    let list = netcl::list_devices()?;
    if json {
        print_json(&list);
        return Ok(());
    }
    let default = chosen.or_else(|| Device::select(None).map(|d| d.info().index).ok());
    println!(
        "{:<3} {:<28} {:<11} {:<10} {:>4} {:>6} {:>9} {:>8} {:>9} {:>6} {:<14} {:<9} platform / OpenCL C",
        "#",
        "name",
        "kind",
        "driver",
        "CUs",
        "MHz",
        "global",
        "local",
        "max alloc",
        "max WG",
        "max items",
        "fp16/64",
    );
    for d in &list {
        println!("{}", row(d, default == Some(d.index)));
    }
    println!(
        "\nselect with --device or NETCL_DEVICE (index, gpu, cpu, builtin, or a name substring); * marks the {}",
        if chosen.is_some() {
            "selected device"
        } else {
            "default"
        }
    );
    Ok(())
}

fn row(d: &DeviceInfo, default: bool) -> String {
    let mib = |b: u64| {
        if b >= 1 << 30 {
            format!("{:.1}G", b as f64 / (1u64 << 30) as f64)
        } else {
            format!("{}K", b >> 10)
        }
    };
    let items: Vec<String> = d
        .max_work_item_sizes
        .iter()
        .map(|x| x.to_string())
        .collect();
    format!(
        "{:<3} {:<28} {:<11} {:<10} {:>4} {:>6} {:>9} {:>8} {:>9} {:>6} {:<14} {:<9} {} / {}{}",
        format!("{}{}", d.index, if default { "*" } else { "" }),
        truncate(&d.name, 28),
        d.kind,
        truncate(&d.driver, 10),
        d.compute_units,
        d.max_clock_mhz,
        mib(d.global_mem_bytes),
        mib(d.local_mem_bytes),
        mib(d.max_alloc_bytes),
        d.max_work_group_size,
        items.join("×"),
        format!("{}/{}", yn(d.fp16), yn(d.fp64)),
        d.platform,
        d.opencl_c_version,
        if d.unified_memory {
            " (unified memory)"
        } else {
            ""
        }
    )
}

fn yn(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        s.chars().take(n - 1).chain(['…']).collect()
    }
}

fn tune(device: Option<&str>, action: TuneAction) -> netcl::Result<()> {
    match action {
        TuneAction::Warm {
            files,
            content,
            timeout,
        } => {
            let snippets: Vec<(String, String)> = if files.is_empty() {
                let dir = match content {
                    Some(d) => d,
                    None => netcl::wiki::cli::default_content_dir()
                        .map_err(|e| netcl::Error::Invalid(e.to_string()))?,
                };
                netcl::wiki::warm::content_blocks(&dir)
                    .map_err(|e| netcl::Error::Invalid(e.to_string()))?
            } else {
                files
                    .iter()
                    .map(|f| {
                        std::fs::read_to_string(f)
                            .map(|code| (f.display().to_string(), code))
                            .map_err(|e| netcl::Error::io(f, e))
                    })
                    .collect::<netcl::Result<_>>()?
            };
            let dev = Device::select(device)?;
            let n = snippets.len();
            eprintln!(
                "tune warm: {n} snippets on {}, every candidate measured (cache {})",
                dev.name(),
                autotune::cache_path().display()
            );
            let done =
                netcl::wiki::warm::tune_warm(&dev, &snippets, timeout * 1000, |i, w| {
                    match &w.error {
                        None => eprintln!(
                            "{}/{n} {}: ok in {:.0} ms ({} measured, {} answered)",
                            i + 1,
                            w.source,
                            w.ms,
                            w.measured,
                            w.answered
                        ),
                        Some(e) => eprintln!(
                            "{}/{n} {}: failed after {:.0} ms: {e}",
                            i + 1,
                            w.source,
                            w.ms
                        ),
                    }
                });
            let failed = done.iter().filter(|w| !w.ok).count();
            let measured: usize = done.iter().map(|w| w.measured).sum();
            eprintln!(
                "tune warm: {} of {n} ok, {measured} decisions measured",
                n - failed
            );
            if failed > 0 {
                return Err(netcl::Error::Invalid(format!(
                    "{failed} of {n} snippets failed"
                )));
            }
        }
        TuneAction::Export { out } => {
            let dev = Device::select(device)?;
            let mut table = autotune::export_table(&dev)?;
            table.programs = netcl::program::built_programs(&dev);
            write_table(&table, out.as_deref())?;
        }
        TuneAction::Merge {
            base,
            parts,
            measured,
            out,
        } => {
            use autotune::db::TuningTable;
            let mut table = TuningTable::read(&base, &base.display().to_string())?;
            let parts = parts
                .iter()
                .map(|p| {
                    Ok((
                        p.display().to_string(),
                        TuningTable::read(p, &p.display().to_string())?,
                    ))
                })
                .collect::<netcl::Result<Vec<_>>>()?;
            let added = autotune::db::merge_programs(&mut table, &parts)?;
            if let Some(m) = measured {
                table.measured = m;
            }
            eprintln!("{added} programs added");
            write_table(&table, out.as_deref())?;
        }
        TuneAction::Path => println!("{}", autotune::cache_path().display()),
        TuneAction::Clear => {
            let path = autotune::cache_path();
            autotune::clear_cache()?;
            println!("cleared {}", path.display());
        }
        TuneAction::List { json } => {
            let snap = autotune::cache_snapshot()?;
            if json {
                print_json(&snap);
                return Ok(());
            }
            println!(
                "{} ({}; {} entries)",
                snap.path.display(),
                snap.status,
                snap.entries.len()
            );
            for e in &snap.entries {
                println!(
                    "{:<34} {:<28} {:<24} {}",
                    e.kernel,
                    e.shape_key,
                    autotune::label(&e.winner),
                    if e.candidates.is_some() { "timed" } else { "" }
                );
            }
        }
        TuneAction::Show { filter } => {
            let snap = autotune::cache_snapshot()?;
            let hits: Vec<_> = snap
                .entries
                .iter()
                .filter(|e| e.key.contains(&filter))
                .collect();
            if hits.is_empty() {
                return Err(netcl::Error::Invalid(format!(
                    "no cache entry matches `{filter}` in {}",
                    snap.path.display()
                )));
            }
            for e in hits {
                println!("{}\n  winner: {}", e.key, autotune::label(&e.winner));
                for c in e.candidates.iter().flatten() {
                    match (c.ms, &c.error) {
                        (Some(ms), _) => println!(
                            "  {:<28} {:>10.4} ms (median {:.4})",
                            c.label,
                            ms,
                            c.median_ms.unwrap_or(ms)
                        ),
                        (None, Some(err)) => println!("  {:<28} failed: {err}", c.label),
                        _ => println!("  {:<28} not run", c.label),
                    }
                }
            }
        }
    }
    Ok(())
}

fn run_file(
    device: Option<&str>,
    file: &str,
    json: bool,
    timeout_ms: u64,
    data: Option<std::path::PathBuf>,
) -> netcl::Result<()> {
    use netcl::script::{Limits, Output};
    let code = if file == "-" {
        std::io::read_to_string(std::io::stdin()).map_err(|e| netcl::Error::io("<stdin>", e))?
    } else {
        std::fs::read_to_string(file).map_err(|e| netcl::Error::io(file, e))?
    };
    let device = Device::select(device)?;
    let limits = Limits {
        timeout_ms,
        ..Limits::default()
    };
    // The script's own limit is checked between its operations; the watchdog also stops a run stuck in one
    // long device call.
    let watchdog = netcl::script::worker::Watchdog::start(|ms| {
        format!(
            "error: timeout: the run exceeded its time limit of {ms} ms (inside a device call); stopped"
        )
    })?;
    watchdog.arm_for(&limits, netcl::script::worker::WATCHDOG_GRACE_MS);
    let progress: Box<dyn FnMut(&serde_json::Value)> = if json {
        Box::new(|_| {})
    } else {
        // The engine's own activity (kernels built, candidates measured) is a status, shown on a terminal only.
        let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
        Box::new(move |v| match v.get("netcl").and_then(|k| k.as_str()) {
            Some("building") if terminal => eprintln!(
                "building kernel {} ({} so far)",
                v["kernel"].as_str().unwrap_or("?"),
                v["built"]
            ),
            Some("measuring") if terminal => eprintln!(
                "measuring {} candidate {}/{}",
                v["op"].as_str().unwrap_or("?"),
                v["index"],
                v["of"]
            ),
            Some(_) => {}
            None => eprintln!("progress: {v}"),
        })
    };
    let inputs = netcl::script::RunInputs {
        files: Vec::new(),
        data_dir: data,
    };
    let r = netcl::script::run_with_inputs(&device, &code, &limits, inputs, progress);
    watchdog.disarm();
    if json {
        print_json(&r);
    } else {
        for o in &r.outputs {
            match o {
                Output::Text { text } => println!("{text}"),
                Output::Tensor(s) => println!("{}", s.line()),
                Output::Image {
                    title,
                    width,
                    height,
                    ..
                } => println!("[image {title} {width}×{height}]"),
                Output::File { .. } => println!("{}", o.text()),
            }
        }
        if let Some(v) = &r.value {
            println!("{v}");
        }
        for d in &r.decisions {
            let times: Vec<String> = d
                .candidates
                .iter()
                .map(|c| {
                    format!(
                        "{}={}",
                        c.label,
                        c.ms.map_or("failed".into(), |m| format!("{m:.4}ms"))
                    )
                })
                .collect();
            println!(
                "decision {} {} → {} ({:?}) {}",
                d.kernel,
                d.shape_key,
                d.winner_label,
                d.source,
                times.join(" ")
            );
        }
        println!(
            "device {} | total {:.1} ms (parse {:.1}, build {:.1}, tune {:.1}, run {:.1}; device {:.3})",
            r.device.name,
            r.timings.total_ms,
            r.timings.parse_ms,
            r.timings.build_ms,
            r.timings.tune_ms,
            r.timings.run_ms,
            r.timings.device_ms
        );
    }
    match r.error {
        Some(e) => Err(netcl::Error::Invalid(format!(
            "{} error{}: {}",
            e.kind,
            e.line
                .map(|l| format!(" at line {l}, column {}", e.column.unwrap_or(0)))
                .unwrap_or_default(),
            e.message
        ))),
        None => Ok(()),
    }
}

#[allow(clippy::too_many_arguments)]
fn train_digits(
    device: Option<&str>,
    preset: &str,
    epochs: usize,
    batch: usize,
    lr: f32,
    optimizer: &str,
    seed: u64,
    save: Option<&std::path::Path>,
    json: bool,
) -> netcl::Result<()> {
    use netcl::nn::Module;
    let device = Device::select(device)?;
    let (train, test) = netcl::data::Digits::load()?.split(0.2, seed)?;
    let samples = netcl::data::Dataset::len(&train);
    let norm = netcl::data::Transform::Normalize {
        mean: vec![0.3],
        std: vec![0.38],
    };
    let train = netcl::data::DataLoader::new(std::sync::Arc::new(train), batch)?
        .shuffle(seed)
        .transform(norm.clone())?;
    let test = netcl::data::DataLoader::new(std::sync::Arc::new(test), 256)?.transform(norm)?;
    let mut model =
        netcl::nn::build_sequential(&device, &netcl::nn::preset(preset, 1, 8, 10)?, seed)?;
    let params = model.parameters();
    let mut opt = match optimizer {
        "sgd" => netcl::optim::Optimizer::sgd(params, lr, 0.9, 0.0)?,
        "adam" => netcl::optim::Optimizer::adam(params, lr, 0.0)?,
        "adamw" => netcl::optim::Optimizer::adamw(params, lr, 0.01)?,
        o => {
            return Err(netcl::Error::Invalid(format!(
                "unknown optimizer `{o}` (sgd, adam, adamw)"
            )));
        }
    };
    if !json {
        eprintln!(
            "training {preset} on the UCI digits (1,437 train / 360 test) on {}",
            device.name()
        );
    }
    use std::io::IsTerminal;
    quiet_broken_pipe();
    let interactive = !json && std::io::stderr().is_terminal();
    let opts = netcl::train::FitOptions {
        epochs,
        progress_bar: false,
        ..Default::default()
    };
    let bar = interactive.then(|| {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "epoch {prefix} [{bar:30}] {pos}/{len} batches, {msg} ({elapsed}, eta {eta})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar
    });
    let mut meter = Throughput::new(batch, samples);
    let mut last_line = std::time::Instant::now();
    let mut on_event = |e: &netcl::train::FitEvent| match e {
        netcl::train::FitEvent::Step {
            epoch,
            step,
            steps,
            loss,
        } => {
            meter.step(*epoch, *step, *steps);
            if let Some(bar) = &bar {
                if *step == 1 {
                    bar.reset();
                    bar.set_length(*steps as u64);
                    bar.set_prefix(format!("{epoch}/{epochs}"));
                }
                bar.set_position(*step as u64);
                bar.set_message(format!("loss {loss:.4}"));
            } else if !json && (last_line.elapsed().as_secs_f64() >= 2.0 || *step == 1) {
                // Not a terminal: a line every two seconds, so a log shows the run is alive.
                last_line = std::time::Instant::now();
                eprintln!("epoch {epoch}/{epochs}: batch {step}/{steps}, loss {loss:.4}");
            }
        }
        netcl::train::FitEvent::Epoch(m) => {
            if let Some(bar) = &bar {
                bar.finish_and_clear();
            }
            if json {
                println!("{}", serde_json::to_string(m).unwrap_or_default());
            } else {
                println!(
                    "epoch {}: loss {:.4} acc {:.2}%, test loss {:.4} acc {:.2}% ({})",
                    m.epoch,
                    m.train_loss,
                    m.train_accuracy * 100.0,
                    m.val_loss.unwrap_or(f32::NAN),
                    m.val_accuracy.unwrap_or(0.0) * 100.0,
                    meter.describe(m.epoch, m.samples_per_second)
                );
            }
        }
    };
    let history = netcl::train::fit(
        &mut model,
        &mut opt,
        &device,
        &train,
        Some(&test),
        &opts,
        &mut on_event,
    )?;
    if let Some(last) = history.last()
        && !json
    {
        println!(
            "final: train loss {:.4}, train accuracy {:.2}%, test loss {:.4}, test accuracy {:.2}%",
            last.train_loss,
            last.train_accuracy * 100.0,
            last.val_loss.unwrap_or(f32::NAN),
            last.val_accuracy.unwrap_or(0.0) * 100.0
        );
    }
    if let Some(path) = save {
        netcl::io::save_model(&model, path)?;
        if !json {
            println!("saved {}", path.display());
        }
    }
    Ok(())
}

/// Training throughput measured after warm-up: the first batches of the first epoch build kernels and run the
/// autotuner, so they are left out; later epochs are measured from the end of their first batch.
struct Throughput {
    batch: usize,
    samples: usize,
    /// The epoch being measured, when its measurement started, and the batches before that point.
    current: Option<(usize, std::time::Instant, usize)>,
    /// Samples per second of each finished epoch, after warm-up.
    rates: Vec<(usize, f64)>,
}

impl Throughput {
    /// Batches of the first epoch treated as warm-up (at most half the epoch).
    const WARMUP_BATCHES: usize = 5;

    fn new(batch: usize, samples: usize) -> Throughput {
        Throughput {
            batch,
            samples,
            current: None,
            rates: Vec::new(),
        }
    }

    fn step(&mut self, epoch: usize, step: usize, steps: usize) {
        let warmup = if epoch == 1 {
            Self::WARMUP_BATCHES.min(steps / 2).max(1)
        } else {
            1
        };
        let now = std::time::Instant::now();
        if step == warmup && step < steps {
            self.current = Some((epoch, now, warmup));
        }
        if step == steps
            && let Some((e, start, skipped)) = self.current.take()
            && e == epoch
        {
            // Every batch but the last is full, so the measured batches hold the samples the skipped ones do not.
            let measured = self.samples.saturating_sub(skipped * self.batch);
            let seconds = now.duration_since(start).as_secs_f64();
            if seconds > 0.0 && measured > 0 {
                self.rates.push((epoch, measured as f64 / seconds));
            }
        }
    }

    /// The epoch's throughput after warm-up, with the whole epoch's (validation included) beside it.
    fn describe(&self, epoch: usize, whole: f64) -> String {
        match self.rates.iter().find(|(e, _)| *e == epoch) {
            Some((_, rate)) => {
                format!("{rate:.0} samples/s after warm-up; {whole:.0} over the whole epoch")
            }
            None => format!("{whole:.0} samples/s"),
        }
    }
}
