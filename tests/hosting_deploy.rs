//! The packaging under `deploy/`: the Kubernetes manifests validate against the API's schemas (the parts they
//! use, checked in as `tests/fixtures/k8s/schemas.json`, written from the Kubernetes API reference) and agree
//! with the replica config; the Caddyfile validates; the image recipe and the systemd unit fit the config; and
//! the "Hosting for a team" page shows every one of these files exactly as it is.

mod hosting_support;

use std::collections::BTreeMap;
use std::process::Command;

use hosting_support::{deploy, packaged_tool, root};
use netcl::wiki::config::Config;
use netcl::wiki::metrics::Gauges;
use serde_json::Value;

/// Every manifest of `deploy/k8s`, by path.
const MANIFESTS: [&str; 5] = [
    "k8s/cpu/deployment.yaml",
    "k8s/gpu/deployment.yaml",
    "k8s/service.yaml",
    "k8s/pdb.yaml",
    "k8s/hpa.yaml",
];

/// The files the hosting page shows, each in full.
const SHOWN: [&str; 15] = [
    "netcl.toml",
    "nginx/netcl-upstream.conf",
    "nginx/netcl-locations.conf",
    "nginx/netcl-proxy-headers.conf",
    "nginx/netcl-token.conf.example",
    "nginx/netcl-site.conf",
    "caddy/Caddyfile",
    "systemd/netcl-wiki@.service",
    "Containerfile",
    "k8s/cpu/deployment.yaml",
    "k8s/gpu/deployment.yaml",
    "k8s/service.yaml",
    "k8s/pdb.yaml",
    "k8s/hpa.yaml",
    "tuning-team.example.json",
];

fn schemas() -> Value {
    let text = std::fs::read_to_string(root().join("tests/fixtures/k8s/schemas.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn manifest(path: &str) -> Value {
    serde_yaml::from_str(&deploy(path)).unwrap_or_else(|e| panic!("deploy/{path}: {e}"))
}

/// Checks `value` against `schema` (JSON Schema: `$ref`, `anyOf`, `type`, `enum`, `properties`, `required`,
/// `additionalProperties`, `items`), appending every violation with its path to `errors`.
fn check(root: &Value, schema: &Value, value: &Value, at: &str, errors: &mut Vec<String>) {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.trim_start_matches("#/definitions/");
        return check(root, &root["definitions"][name], value, at, errors);
    }
    if let Some(options) = schema["anyOf"].as_array() {
        if !options.iter().any(|s| {
            let mut e = Vec::new();
            check(root, s, value, at, &mut e);
            e.is_empty()
        }) {
            errors.push(format!("{at}: {value} matches none of {}", schema["anyOf"]));
        }
        return;
    }
    if let Some(ty) = schema["type"].as_str() {
        let ok = match ty {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            _ => false,
        };
        if !ok {
            errors.push(format!("{at}: {value} is not of type {ty}"));
            return;
        }
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        errors.push(format!("{at}: {value} is not one of {allowed:?}"));
    }
    if let Some(object) = value.as_object() {
        for name in schema["required"].as_array().into_iter().flatten() {
            if let Some(name) = name.as_str()
                && !object.contains_key(name)
            {
                errors.push(format!("{at}: the required field `{name}` is missing"));
            }
        }
        for (name, v) in object {
            let field = format!("{at}.{name}");
            match schema["properties"].get(name) {
                Some(s) => check(root, s, v, &field, errors),
                None => match &schema["additionalProperties"] {
                    Value::Bool(false) => errors.push(format!("{field}: no such field")),
                    Value::Object(_) => {
                        check(root, &schema["additionalProperties"], v, &field, errors)
                    }
                    _ => {}
                },
            }
        }
    }
    if let (Some(items), Some(list)) = (schema.get("items"), value.as_array()) {
        for (i, v) in list.iter().enumerate() {
            check(root, items, v, &format!("{at}[{i}]"), errors);
        }
    }
}

/// The violations of one manifest.
fn violations(schemas: &Value, doc: &Value) -> Vec<String> {
    let key = format!(
        "{}/{}",
        doc["apiVersion"].as_str().unwrap_or("?"),
        doc["kind"].as_str().unwrap_or("?")
    );
    let Some(schema) = schemas["kinds"].get(&key) else {
        return vec![format!("no schema for {key}")];
    };
    let mut errors = Vec::new();
    check(schemas, schema, doc, &key, &mut errors);
    errors
}

#[test]
fn the_manifests_validate_against_the_kubernetes_schemas() {
    let schemas = schemas();
    for path in MANIFESTS {
        let errors = violations(&schemas, &manifest(path));
        assert!(errors.is_empty(), "deploy/{path}:\n{}", errors.join("\n"));
    }
    // The checker refuses what the API server would: a misspelt field, a wrong type, a missing field, a value
    // outside an enumeration.
    let deployment = manifest("k8s/cpu/deployment.yaml");
    let hpa = manifest("k8s/hpa.yaml");
    let mutations: Vec<(&str, Value)> = vec![
        ("misspelt probe", {
            let mut d = deployment.clone();
            let c = &mut d["spec"]["template"]["spec"]["containers"][0];
            let probe = c["readinessProbe"].take();
            c.as_object_mut().unwrap().remove("readinessProbe");
            c["readinesProbe"] = probe;
            d
        }),
        ("port as a string", {
            let mut d = deployment.clone();
            d["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] =
                Value::String("8080".into());
            d
        }),
        ("no maxReplicas", {
            let mut h = hpa.clone();
            h["spec"].as_object_mut().unwrap().remove("maxReplicas");
            h
        }),
        ("unknown target type", {
            let mut h = hpa.clone();
            h["spec"]["metrics"][0]["pods"]["target"]["type"] = Value::String("Average".into());
            h
        }),
    ];
    for (what, doc) in mutations {
        assert!(
            !violations(&schemas, &doc).is_empty(),
            "{what} passed the check"
        );
    }
}

fn container(d: &Value) -> &Value {
    &d["spec"]["template"]["spec"]["containers"][0]
}

#[test]
fn the_manifests_image_and_unit_agree_with_the_replica_config() {
    let config = Config::from_file(&root().join("deploy/netcl.toml")).expect("deploy/netcl.toml");
    let base = config.base_path.clone();
    assert_eq!(base, "/wiki");
    let stop_ms = config.drain_delay_ms + config.shutdown_grace_ms;
    assert!(
        config.shutdown_grace_ms >= config.playground_timeout_ms,
        "a run in flight must be able to finish within the grace period"
    );
    let gauges = Gauges::default().render();
    let cpu = manifest("k8s/cpu/deployment.yaml");
    let gpu = manifest("k8s/gpu/deployment.yaml");
    for d in [&cpu, &gpu] {
        let c = container(d);
        let pod = &d["spec"]["template"];
        assert_eq!(
            c["readinessProbe"]["httpGet"]["path"],
            format!("{base}/readyz")
        );
        assert_eq!(
            c["livenessProbe"]["httpGet"]["path"],
            format!("{base}/healthz")
        );
        assert_eq!(
            c["ports"][0]["containerPort"].as_u64(),
            Some(u64::from(config.bind.port()))
        );
        assert_eq!(
            pod["metadata"]["annotations"]["prometheus.io/path"],
            format!("{base}/metrics")
        );
        let grace = pod["spec"]["terminationGracePeriodSeconds"]
            .as_u64()
            .unwrap();
        assert!(
            grace * 1000 >= stop_ms + 5000,
            "{grace} s is too short for {stop_ms} ms"
        );
        assert_eq!(
            d["spec"]["selector"]["matchLabels"],
            pod["metadata"]["labels"]
        );
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
        assert_eq!(pod["spec"]["securityContext"]["runAsNonRoot"], true);
        assert_eq!(pod["spec"]["securityContext"]["runAsUser"], 10001);
        assert!(c["resources"]["requests"]["cpu"].is_string());
        let mounts: Vec<&str> = c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m["mountPath"].as_str())
            .collect();
        assert!(
            mounts.contains(&"/var/cache/netcl") && mounts.contains(&"/tmp"),
            "{mounts:?}"
        );
    }
    assert_eq!(container(&gpu)["resources"]["limits"]["nvidia.com/gpu"], 1);
    assert!(gpu["spec"]["template"]["spec"]["nodeSelector"].is_object());
    assert!(
        container(&cpu)["resources"]["limits"]
            .get("nvidia.com/gpu")
            .is_none()
    );
    let labels = &cpu["spec"]["template"]["metadata"]["labels"];
    let service = manifest("k8s/service.yaml");
    assert_eq!(&service["spec"]["selector"], labels);
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "http");
    let pdb = manifest("k8s/pdb.yaml");
    assert_eq!(&pdb["spec"]["selector"]["matchLabels"], labels);
    let hpa = manifest("k8s/hpa.yaml");
    assert_eq!(
        hpa["spec"]["scaleTargetRef"]["name"],
        cpu["metadata"]["name"]
    );
    assert_eq!(cpu["metadata"]["name"], gpu["metadata"]["name"]);
    let metric = hpa["spec"]["metrics"][0]["pods"]["metric"]["name"]
        .as_str()
        .unwrap();
    assert!(
        gauges.contains(&format!("# TYPE {metric} gauge\n")),
        "{metric} is not a gauge of /metrics:\n{gauges}"
    );

    // The image: both flavours, a non-root user (the manifests' uid), the caches where the volumes go, PoCL
    // in the CPU flavour, the NVIDIA ICD registered in the other.
    let image = deploy("Containerfile");
    for needed in [
        "AS cpu",
        "AS nvidia",
        "USER 10001:10001",
        "pocl-opencl-icd",
        "libnvidia-opencl.so.1",
        "/etc/OpenCL/vendors/nvidia.icd",
        "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
        "NETCL_AUTOTUNE_CACHE=/var/cache/netcl/autotune.json",
        "COPY deploy/netcl.toml /etc/netcl/netcl.toml",
    ] {
        assert!(image.contains(needed), "Containerfile lacks {needed}");
    }
    assert!(
        image.trim_end().ends_with("USER 10001:10001"),
        "the last stage runs as root"
    );
    // The unit: the config, and a stop timeout that covers the drain.
    let unit = deploy("systemd/netcl-wiki@.service");
    assert!(
        unit.contains("--config /etc/netcl/netcl.toml --bind 127.0.0.1:%i"),
        "{unit}"
    );
    let timeout: u64 = unit
        .lines()
        .find_map(|l| l.strip_prefix("TimeoutStopSec="))
        .and_then(|v| v.parse().ok())
        .expect("TimeoutStopSec");
    assert!(timeout * 1000 >= stop_ms + 5000, "TimeoutStopSec={timeout}");
}

#[test]
fn the_caddyfile_validates() {
    let Some(caddy) = packaged_tool("caddy") else {
        return;
    };
    let out = Command::new(caddy)
        .args(["validate", "--adapter", "caddyfile", "--config"])
        .arg(root().join("deploy/caddy/Caddyfile"))
        .env("HOME", std::env::temp_dir())
        .env("XDG_DATA_HOME", std::env::temp_dir())
        .env("XDG_CONFIG_HOME", std::env::temp_dir())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains("Valid configuration"),
        "{text}"
    );
}

/// The fenced blocks of a Markdown page, by their text.
fn fenced_blocks(page: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in page.lines() {
        match current.as_mut() {
            None if line.starts_with("```") => current = Some(String::new()),
            None => {}
            Some(block) if line == "```" => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
        }
    }
    blocks
}

#[test]
fn the_hosting_page_shows_every_deploy_file_as_it_is() {
    let page = std::fs::read_to_string(root().join("web-wiki/content/hosting.md")).unwrap();
    let blocks = fenced_blocks(&page);
    let mut missing = BTreeMap::new();
    for file in SHOWN {
        let text = deploy(file);
        if !blocks.contains(&text) {
            missing.insert(file, text);
        }
        assert!(
            page.contains(&format!("`deploy/{file}`")),
            "the page does not name deploy/{file}"
        );
    }
    assert!(
        missing.is_empty(),
        "blocks of web-wiki/content/hosting.md differ from {:?}",
        missing.keys()
    );
    // The example team table is what `netcl tune export` writes.
    let table: netcl::autotune::TuningTable =
        serde_json::from_str(&deploy("tuning-team.example.json")).expect("the example parses");
    assert_eq!(table.format, netcl::autotune::db::FORMAT);
}
