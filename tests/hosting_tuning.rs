//! The team tuning table: a table in the format `netcl tune export` writes, given to `netcl serve` (config
//! `tuning_table`, flag `--tuning-table` or `NETCL_TUNING_TABLE`), reaches every worker and answers before the
//! shipped tables; a broken table, or a URL (this build reads files only), is reported and ignored.

mod hosting_support;

use std::process::Command;
use std::time::Duration;

use hosting_support::{Replica, cache_env, request, scratch};
use netcl::autotune::{DeviceClass, TuningTable, db};
use serde_json::{Value, json};

const SCRIPT: &str = "let a = randn([24, 16], 1);\nlet b = randn([16, 20], 2);\nlet c = matmul(a, b);\nprint(`c: ${c.shape}`);\n";

/// The product's decision in a run result.
fn matmul_decision(result: &Value) -> Value {
    result["decisions"]
        .as_array()
        .and_then(|d| d.iter().find(|d| d["kernel"] == "matmul"))
        .cloned()
        .unwrap_or_else(|| panic!("no matmul decision in {result}"))
}

#[test]
fn a_team_table_reaches_the_workers_and_a_broken_one_is_ignored() {
    let dir = scratch("tuning");
    let env = cache_env(&dir);
    let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    // Nothing is measured: every choice comes from a table or the heuristic.
    env.push(("NETCL_AUTOTUNE", "off"));
    std::fs::write(dir.join("mm.rhai"), SCRIPT).unwrap();

    // Without a team table: the op's first choice (or a shipped table, when this machine's class has one).
    let mut run = Command::new(env!("CARGO_BIN_EXE_netcl"));
    run.args(["run", "--json"]).arg(dir.join("mm.rhai"));
    for (k, v) in &env {
        run.env(k, v);
    }
    // A URL is not fetched: reported, ignored, and the run goes on.
    run.env("NETCL_TUNING_TABLE", "https://tables.example/team.json");
    let out = run.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("reads tuning tables from files only"),
        "{stderr}"
    );
    let before: Value = serde_json::from_slice(&out.stdout).unwrap();
    let plain = matmul_decision(&before);
    let shipped_covers = plain["source"] == "database";

    // The team table: this device's class, one entry, as `netcl tune export` writes it.
    let device = netcl::Device::select(None).unwrap();
    let entry = format!("matmul::{}", plain["shape_key"].as_str().unwrap());
    let table = TuningTable {
        format: db::FORMAT.into(),
        device: DeviceClass::of(device.info()),
        measured: "a test table".into(),
        entries: [(entry.clone(), plain["winner"].clone())]
            .into_iter()
            .collect(),
        programs: Vec::new(),
    };
    let team = dir.join("team.json");
    std::fs::write(&team, serde_json::to_vec_pretty(&table).unwrap()).unwrap();
    let broken = dir.join("broken.json");
    std::fs::write(&broken, "{\"format\": \"netcl-tuning-1\", \"device\": ").unwrap();

    let config = dir.join("netcl.toml");
    std::fs::write(
        &config,
        format!("tuning_table = {:?}\n", team.display().to_string()),
    )
    .unwrap();
    let server = Replica::start(&config, &[], &env);
    server.wait_ready("", Duration::from_secs(90));
    assert!(
        server
            .log()
            .contains("team tuning table: 1 entries measured on"),
        "{}",
        server.log()
    );
    let local = [("Host", "localhost")];
    let body = json!({ "code": SCRIPT }).to_string();
    let answer = request(&server.addr, "POST", "/api/run", &local, Some(&body)).unwrap();
    let result = answer.json();
    assert_eq!(result["ok"], true, "{}", answer.text());
    let d = matmul_decision(&result);
    assert_eq!(
        d["source"], "database",
        "the worker did not consult the team table: {d}"
    );
    assert_eq!(d["winner"], plain["winner"], "{d}");
    assert!(
        d["note"]
            .as_str()
            .is_some_and(|n| n.contains("tuning table")),
        "{d}"
    );
    if shipped_covers {
        eprintln!(
            "note: a shipped table covers this device class too; the run shows the database either way"
        );
    } else {
        assert_eq!(plain["source"], "heuristic", "{plain}");
    }
    drop(server);

    // A broken table: reported at start, ignored; the server gets ready and runs.
    let server = Replica::start(&config, &["--tuning-table", broken.to_str().unwrap()], &env);
    server.wait_ready("", Duration::from_secs(90));
    assert!(
        server.log().contains("team tuning table ignored"),
        "{}",
        server.log()
    );
    let answer = request(&server.addr, "POST", "/api/run", &local, Some(&body)).unwrap();
    let result = answer.json();
    assert_eq!(result["ok"], true, "{}", answer.text());
    assert_eq!(matmul_decision(&result)["source"], plain["source"]);
    let _ = std::fs::remove_dir_all(&dir);
}
