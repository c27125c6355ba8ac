//! The `netcl` command-line interface: devices, autotune cache, benchmarks, and the wiki server.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use netcl::autotune;
use netcl::bench::{self, BenchOptions};
use netcl::{Device, DeviceInfo};

#[derive(Parser)]
#[command(name = "netcl", version, about = "A deep-learning engine on OpenCL, with a live documentation wiki")]
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
        /// List the case names and exit.
        #[arg(long)]
        list: bool,
        /// Case names to run (all when empty).
        cases: Vec<String>,
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
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("NETCL_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> netcl::Result<()> {
    match cli.command {
        Command::Devices { json } => devices(json),
        Command::Tune { action } => tune(action),
        Command::Bench { small, json: _, reps, no_check, list, cases } => {
            let all = bench::cases();
            if list {
                for c in &all {
                    println!("{}", c.name);
                }
                return Ok(());
            }
            for name in &cases {
                if !all.iter().any(|c| c.name == name) {
                    return Err(netcl::Error::Invalid(format!("no benchmark case `{name}`; `netcl bench --list` names them")));
                }
            }
            let device = Device::select(cli.device.as_deref())?;
            let opts = BenchOptions { small, reps, check: !no_check };
            println!("{}", serde_json::json!({"device": device.name(), "platform": device.info().platform}));
            for case in all.iter().filter(|c| cases.is_empty() || cases.iter().any(|n| n == c.name)) {
                match bench::run_case(case, &device, &opts) {
                    Ok(line) => println!("{}", serde_json::to_string(&line).unwrap_or_default()),
                    Err(e) => println!("{}", serde_json::json!({"case": case.name, "impl": "netcl", "error": e.to_string()})),
                }
            }
            Ok(())
        }
    }
}

fn devices(json: bool) -> netcl::Result<()> {
    let list = netcl::device::list_devices()?;
    if json {
        println!("{}", serde_json::to_string_pretty(&list).unwrap_or_default());
        return Ok(());
    }
    let default = Device::select(None).map(|d| d.info().index).ok();
    println!(
        "{:<3} {:<28} {:<11} {:<10} {:>4} {:>6} {:>9} {:>8} {:>9} {:>6} {:<14} {:<9} {}",
        "#", "name", "kind", "driver", "CUs", "MHz", "global", "local", "max alloc", "max WG", "max items", "fp16/64", "platform / OpenCL C"
    );
    for d in &list {
        println!("{}", row(d, default == Some(d.index)));
    }
    println!("\nselect with --device or NETCL_DEVICE (index, gpu, cpu, builtin, or a name substring); * marks the default");
    Ok(())
}

fn row(d: &DeviceInfo, default: bool) -> String {
    let mib = |b: u64| if b >= 1 << 30 { format!("{:.1}G", b as f64 / (1u64 << 30) as f64) } else { format!("{}K", b >> 10) };
    let items: Vec<String> = d.max_work_item_sizes.iter().map(|x| x.to_string()).collect();
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
        if d.unified_memory { " (unified memory)" } else { "" }
    )
}

fn yn(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_owned() } else { s.chars().take(n - 1).chain(['…']).collect() }
}

fn tune(action: TuneAction) -> netcl::Result<()> {
    match action {
        TuneAction::Path => println!("{}", autotune::cache_path().display()),
        TuneAction::Clear => {
            let path = autotune::cache_path();
            autotune::clear_cache()?;
            println!("cleared {}", path.display());
        }
        TuneAction::List { json } => {
            let snap = autotune::cache_snapshot()?;
            if json {
                println!("{}", serde_json::to_string_pretty(&snap).unwrap_or_default());
                return Ok(());
            }
            println!("{} ({}; {} entries)", snap.path.display(), snap.status, snap.entries.len());
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
            let hits: Vec<_> = snap.entries.iter().filter(|e| e.key.contains(&filter)).collect();
            if hits.is_empty() {
                return Err(netcl::Error::Invalid(format!("no cache entry matches `{filter}` in {}", snap.path.display())));
            }
            for e in hits {
                println!("{}\n  winner: {}", e.key, autotune::label(&e.winner));
                for c in e.candidates.iter().flatten() {
                    match (c.ms, &c.error) {
                        (Some(ms), _) => println!("  {:<28} {:>10.4} ms (median {:.4})", c.label, ms, c.median_ms.unwrap_or(ms)),
                        (None, Some(err)) => println!("  {:<28} failed: {err}", c.label),
                        _ => println!("  {:<28} not run", c.label),
                    }
                }
            }
        }
    }
    Ok(())
}
