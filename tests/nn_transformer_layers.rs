//! The transformer and extra layers: every one builds from its netcl config, runs, and round-trips its state
//! through model files; gradients through each against central finite differences; the KV-cache decode
//! against the full forward; attention with unequal lengths against a host reference; `Linear` over the last
//! dimension; the small GPT preset learning a sequence, equal on the built-in device and OpenCL; the layer
//! registry; parameter files; and the errors of bad input.
//!
//! Tolerances: finite differences in f32 with step 1e-2 agree within 3e-3 + 3e-2 relative; OpenCL against the
//! built-in device within 1e-4 (attention and GEMM orders differ); host references within 1e-5.

mod common;

use std::path::Path;

use common::assert_close;
use netcl::autograd::{Var, no_grad, ops as ag};
use netcl::nn::{
    DecoderBlock, KVCache, LayerConfig, Module, Sequential, build_sequential, gpt_preset,
};
use netcl::optim::Optimizer;
use netcl::{Device, Tensor};
use serde_json::json;

fn cfg(kind: &str, args: serde_json::Value) -> LayerConfig {
    LayerConfig {
        kind: kind.into(),
        args: args.as_object().cloned().unwrap_or_default(),
    }
}

fn vals(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().expect("read")
}

fn tokens(dev: &Device, shape: &[usize], vocab: i32, seed: i32) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<i32> = (0..n as i32).map(|i| (i * 7 + seed) % vocab).collect();
    Tensor::from_slice(dev, &v, shape).expect("tokens")
}

/// (config, input) pairs covering every new layer type.
fn cases(dev: &Device) -> Vec<(Vec<LayerConfig>, Tensor, Vec<usize>)> {
    let x3 = |s: u64| Tensor::randn(dev, &[2, 5, 8], 0.0, 1.0, s).expect("x");
    vec![
        (
            vec![
                cfg(
                    "Conv2d",
                    json!({"in_channels": 2, "out_channels": 4, "kernel_size": 3, "pad": 1}),
                ),
                cfg("PReLU", json!({"num_parameters": 4, "init": 0.1})),
                cfg("AdaptiveAvgPool2d", json!({"output_size": 1})),
                cfg("Flatten", json!({})),
                cfg("Identity", json!({})),
                cfg("Softmax", json!({})),
            ],
            Tensor::randn(dev, &[2, 2, 5, 5], 0.0, 1.0, 1).expect("x"),
            vec![2, 4],
        ),
        (
            vec![
                cfg(
                    "Embedding",
                    json!({"num_embeddings": 11, "embedding_dim": 8}),
                ),
                cfg("PositionalEmbedding", json!({"max_len": 6, "d_model": 8})),
                cfg("RMSNorm", json!({"dim": 8})),
                cfg("TiedLinear", json!({"tied_to": 0})),
            ],
            tokens(dev, &[2, 5], 11, 3),
            vec![2, 5, 11],
        ),
        (
            vec![
                cfg(
                    "MultiheadAttention",
                    json!({"embed_dim": 8, "num_heads": 2}),
                ),
                cfg(
                    "CausalSelfAttention",
                    json!({"embed_dim": 8, "num_heads": 4}),
                ),
                cfg(
                    "TransformerEncoderLayer",
                    json!({"d_model": 8, "nhead": 2, "dim_feedforward": 12}),
                ),
                cfg(
                    "TransformerBlock",
                    json!({"d_model": 8, "num_heads": 2, "activation": "silu"}),
                ),
            ],
            x3(2),
            vec![2, 5, 8],
        ),
        (
            vec![
                cfg("RotaryAttention", json!({"dim": 8, "n_head": 2})),
                cfg("SwiGLU", json!({"dim": 8, "hidden": 12, "bias": true})),
                cfg("DecoderBlock", json!({"dim": 8, "n_head": 2, "hidden": 16})),
                cfg("Linear", json!({"in_features": 8, "out_features": 3})),
            ],
            x3(3),
            vec![2, 5, 3],
        ),
    ]
}

#[test]
fn every_new_layer_builds_runs_and_round_trips_through_a_model_file() {
    let dev = Device::builtin();
    let dir = std::env::temp_dir().join(format!("netcl-tlayers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    for (k, (config, x, want)) in cases(&dev).into_iter().enumerate() {
        let mut m = build_sequential(&dev, &config, 7).expect("build");
        let y = m.predict(&x).expect("forward");
        assert_eq!(y.shape(), want, "case {k}");
        assert!(vals(&y).iter().all(|v| v.is_finite()), "case {k}");
        // The configs written back rebuild the same architecture.
        assert_eq!(
            m.configs()
                .iter()
                .map(|c| c.kind.clone())
                .collect::<Vec<_>>(),
            config.iter().map(|c| c.kind.clone()).collect::<Vec<_>>()
        );
        let path = dir.join(format!("m{k}.netcl"));
        netcl::io::save_model(&m, &path).expect("save");
        let mut back = netcl::io::load_model(&dev, &path).expect("load");
        assert_eq!(
            vals(&back.predict(&x).expect("again")),
            vals(&y),
            "case {k}"
        );
        // A model of another seed differs until it takes the state.
        let mut other = build_sequential(&dev, &m.configs(), 99).expect("other");
        if !m.parameters().is_empty() {
            assert_ne!(vals(&other.predict(&x).expect("o")), vals(&y), "case {k}");
        }
        other.load_state_dict(&m.state_dict()).expect("state");
        assert_eq!(vals(&other.predict(&x).expect("o")), vals(&y), "case {k}");
    }
}

/// Central differences of `loss(model)` in a few entries of `p`, against its gradient.
fn check_grad(model: &mut dyn Module, x: &Var, p: &Var, what: &str) {
    let dev = p.value().device().clone();
    let w = Tensor::randn(&dev, model.forward(x).expect("f").shape(), 0.0, 1.0, 5).expect("w");
    let loss = |m: &mut dyn Module| -> Var {
        ag::sum_all(&ag::mul(&m.forward(x).expect("fwd"), &Var::constant(w.clone())).expect("mul"))
            .expect("sum")
    };
    model.parameters().iter().for_each(|q| q.zero_grad());
    x.zero_grad();
    loss(model).backward().expect("backward");
    let g = vals(&p.grad().expect("a gradient"));
    let base = vals(p.value());
    let n = base.len();
    for idx in [0, n / 3, n / 2, n - 1] {
        let fd = common::central_difference(p, &base, idx, 5e-4, || {
            let l = no_grad(|| loss(model));
            vals(l.value())[0]
        });
        assert!(
            (fd - g[idx]).abs() <= 1e-2 + 3e-2 * fd.abs().max(g[idx].abs()),
            "{what}[{idx}]: finite difference {fd}, gradient {}",
            g[idx]
        );
    }
}

#[test]
fn gradients_of_every_layer_match_finite_differences() {
    let dev = Device::builtin();
    for (k, (config, x, _)) in cases(&dev).into_iter().enumerate() {
        for (i, c) in config.iter().enumerate() {
            if c.kind == "TiedLinear" {
                continue;
            }
            let mut m = build_sequential(&dev, &config[..=i], 11).expect("build");
            m.set_training(false);
            let xin = if x.dtype() == netcl::DType::F32 {
                Var::param(x.clone())
            } else {
                Var::constant(x.clone())
            };
            // The last layer's parameters (earlier layers were checked as the last of a shorter stack).
            let before = m.layers()[..i]
                .iter()
                .map(|l| l.parameters().len())
                .sum::<usize>();
            for (j, p) in m.parameters().iter().enumerate().skip(before) {
                check_grad(
                    &mut m,
                    &xin,
                    p,
                    &format!("case {k} {} parameter {j}", c.kind),
                );
            }
            if xin.requires_grad() {
                check_grad(&mut m, &xin, &xin, &format!("case {k} {} input", c.kind));
            }
        }
    }
}

#[test]
fn decoding_with_the_kv_cache_equals_the_full_forward() {
    let dev = Device::builtin();
    let mut block =
        DecoderBlock::new(&dev, 16, 2, Some(24), 0.0, 10000.0, 1e-6, true, 3).expect("b");
    block.set_training(false);
    let x = Tensor::randn(&dev, &[1, 7, 16], 0.0, 1.0, 4).expect("x");
    let full = vals(
        block
            .forward(&Var::constant(x.clone()))
            .expect("full")
            .value(),
    );
    let mut cache = KVCache::new(&dev, 1, 1, 2, 8, 10).expect("cache");
    assert_eq!(cache.bytes(), 2 * 2 * 10 * 8 * 4);
    let prefill = netcl::ops::narrow(&x, 1, 0, 3).expect("n");
    let mut got = vals(
        block
            .forward_cached(&Var::constant(prefill), &mut cache, 0)
            .expect("p")
            .value(),
    );
    cache.advance(3).expect("adv");
    for s in 3..7 {
        let step = netcl::ops::narrow(&x, 1, s, 1).expect("n");
        got.extend(vals(
            block
                .forward_cached(&Var::constant(step), &mut cache, 0)
                .expect("step")
                .value(),
        ));
        cache.advance(1).expect("adv");
    }
    assert_close(&got, &full, 1e-5, 1e-5, "cached decode");
    // A full cache and a second prefill are refused.
    let one = Var::constant(Tensor::zeros(&dev, &[1, 2, 16]).expect("z"));
    common::assert_refused(
        block.forward_cached(&one, &mut cache, 0),
        "refused",
        "prefill",
    );
    cache.advance(3).expect("fills the cache");
    common::assert_refused(
        block.forward_cached(&one, &mut cache, 0),
        "full",
        "capacity",
    );
}

#[test]
fn module_lists_and_dicts_share_parameters_and_state_but_are_not_callable() {
    let dev = Device::builtin();
    let lin = json!({"type": "Linear", "args": {"in_features": 3, "out_features": 2}});
    let norm = json!({"type": "RMSNorm", "args": {"dim": 2}});
    let mut list =
        netcl::nn::build_layer(&dev, &cfg("ModuleList", json!({"modules": [lin, norm]})), 1)
            .expect("list");
    let names: Vec<String> = list.state_dict().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["0.weight", "0.bias", "1.gamma"]);
    assert_eq!(list.parameters().len(), 3);
    common::assert_refused(
        list.forward(&Var::constant(Tensor::zeros(&dev, &[1, 3]).expect("z"))),
        "not callable",
        "not callable",
    );
    let dict = netcl::nn::build_layer(
        &dev,
        &cfg(
            "ModuleDict",
            json!({"modules": {"head": lin, "norm": norm}}),
        ),
        1,
    )
    .expect("dict");
    let names: Vec<String> = dict.state_dict().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["head.weight", "head.bias", "norm.gamma"]);
    // Configs written back rebuild the same containers.
    let again = netcl::nn::build_layer(&dev, &dict.config(), 2).expect("rebuilt");
    assert_eq!(again.state_dict().len(), 3);
}

#[test]
fn multihead_attention_over_keys_of_another_length_matches_a_host_reference() {
    let dev = Device::builtin();
    let mut mha = netcl::nn::MultiheadAttention::new(&dev, 4, 2, false, 5).expect("mha");
    // Identity projections, so the result is plain attention per head.
    let eye: Vec<f32> = (0..16)
        .map(|i| if i % 5 == 0 { 1.0 } else { 0.0 })
        .collect();
    for l in [&mha.q_proj, &mha.k_proj, &mha.v_proj, &mha.out_proj] {
        l.weight
            .value()
            .assign(&Tensor::from_slice(&dev, &eye, &[4, 4]).expect("eye"))
            .expect("assign");
    }
    let q = Tensor::randn(&dev, &[1, 3, 4], 0.0, 1.0, 1).expect("q");
    let kv = Tensor::randn(&dev, &[1, 5, 4], 0.0, 1.0, 2).expect("kv");
    let y = vals(
        mha.attend(
            &Var::constant(q.clone()),
            &Var::constant(kv.clone()),
            &Var::constant(kv.clone()),
        )
        .expect("attend")
        .value(),
    );
    let (qv, kvv) = (vals(&q), vals(&kv));
    let mut want = vec![0.0f32; 12];
    for h in 0..2 {
        for i in 0..3 {
            let s: Vec<f32> = (0..5)
                .map(|j| {
                    (0..2)
                        .map(|d| qv[i * 4 + h * 2 + d] * kvv[j * 4 + h * 2 + d])
                        .sum::<f32>()
                        / 2f32.sqrt()
                })
                .collect();
            let mx = s.iter().cloned().fold(f32::MIN, f32::max);
            let e: Vec<f32> = s.iter().map(|v| (v - mx).exp()).collect();
            let z: f32 = e.iter().sum();
            for d in 0..2 {
                want[i * 4 + h * 2 + d] = (0..5).map(|j| e[j] / z * kvv[j * 4 + h * 2 + d]).sum();
            }
        }
    }
    assert_close(
        &y,
        &want,
        1e-5,
        1e-5,
        "attention with 3 queries over 5 keys",
    );
    assert_eq!(
        mha.forward(&Var::constant(q)).expect("self").shape(),
        [1, 3, 4]
    );
}

#[test]
fn attention_dropout_acts_in_training_only() {
    let dev = Device::builtin();
    let c = [cfg(
        "CausalSelfAttention",
        json!({"embed_dim": 8, "num_heads": 2, "dropout": 0.5}),
    )];
    let mut m = build_sequential(&dev, &c, 1).expect("m");
    let x = Var::constant(Tensor::randn(&dev, &[2, 4, 8], 0.0, 1.0, 9).expect("x"));
    let eval1 = vals(&m.predict(x.value()).expect("e"));
    m.set_training(true);
    let t1 = vals(m.forward(&x).expect("t1").value());
    let t2 = vals(m.forward(&x).expect("t2").value());
    assert_ne!(t1, eval1);
    assert_ne!(t1, t2, "a new mask per call");
    assert_eq!(vals(&m.predict(x.value()).expect("e")), eval1);
}

#[test]
fn linear_maps_the_last_dimension_of_a_4d_input_as_netcl_does() {
    let dev = Device::builtin();
    let mut m = build_sequential(
        &dev,
        &[cfg("Linear", json!({"in_features": 8, "out_features": 5}))],
        1,
    )
    .expect("m");
    let x = Tensor::randn(&dev, &[2, 3, 4, 8], 0.0, 1.0, 2).expect("x");
    let y = m.predict(&x).expect("4-D input");
    assert_eq!(y.shape(), [2, 3, 4, 5]);
    let flat = m.predict(&x.reshape(&[24, 8]).expect("r")).expect("2-D");
    assert_eq!(vals(&y), vals(&flat));
    // (N, C, H, W) whose product is in_features still flattens, as before.
    let z = m
        .predict(&Tensor::randn(&dev, &[3, 2, 2, 2], 0.0, 1.0, 3).expect("z"))
        .expect("flat");
    assert_eq!(z.shape(), [3, 5]);
}

fn gpt_step_losses(dev: &Device, steps: usize) -> (Vec<f32>, Vec<f32>) {
    let cfg = gpt_preset(12, 8, 16, 2, 1).expect("preset");
    let mut m = build_sequential(dev, &cfg, 5).expect("gpt");
    let mut opt = Optimizer::adam(m.parameters(), 1e-2, 0.0).expect("adam");
    let seq: Vec<i32> = (0..16).map(|i| (i * 5) % 12).collect();
    let x = Tensor::from_slice(dev, &seq[..14], &[2, 7]).expect("x");
    let mut y = seq[1..8].to_vec();
    y.extend(&seq[8..15]);
    let y = Tensor::from_slice(dev, &y, &[14]).expect("y");
    let mut losses = Vec::new();
    let mut logits = Vec::new();
    for _ in 0..steps {
        let out = m.forward(&Var::constant(x.clone())).expect("fwd");
        if logits.is_empty() {
            logits = vals(out.value());
        }
        let loss =
            ag::cross_entropy(&ag::reshape(&out, &[14, 12]).expect("r"), &y, -100).expect("ce");
        losses.push(vals(loss.value())[0]);
        loss.backward().expect("bwd");
        opt.step().expect("step");
        opt.zero_grad();
    }
    (losses, logits)
}

#[test]
fn the_small_gpt_preset_learns_a_sequence_alike_on_both_devices() {
    let (cpu_losses, cpu_logits) = gpt_step_losses(&Device::builtin(), 25);
    assert!(
        cpu_losses[24] < 0.5 * cpu_losses[0],
        "the loss falls: {cpu_losses:?}"
    );
    let cfg = gpt_preset(12, 8, 16, 2, 1).expect("preset");
    let kinds: Vec<&str> = cfg.iter().map(|c| c.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "Embedding",
            "PositionalEmbedding",
            "TransformerBlock",
            "LayerNorm",
            "TiedLinear"
        ]
    );
    let m = build_sequential(&Device::builtin(), &cfg, 5).expect("gpt");
    // The tied head owns nothing: the table is counted once.
    let n: usize = m.parameters().iter().map(|p| p.value().numel()).sum();
    assert_eq!(
        n,
        12 * 16
            + 8 * 16
            + (2 * 16 + 16 * 48 + 48 + 16 * 16 + 16 + 2 * 16 + 16 * 64 + 64 + 64 * 16 + 16)
            + 2 * 16
    );
    if let Some(dev) = common::opencl_device() {
        let (cl_losses, cl_logits) = gpt_step_losses(&dev, 3);
        assert_close(&cl_logits, &cpu_logits, 1e-4, 1e-4, "gpt logits on OpenCL");
        assert_close(
            &cl_losses,
            &cpu_losses[..3],
            1e-4,
            1e-4,
            "gpt losses on OpenCL",
        );
    }
}

struct Scale {
    k: f32,
    w: Var,
}

impl Module for Scale {
    fn type_name(&self) -> &'static str {
        "ScaleByTest"
    }
    fn forward(&mut self, x: &Var) -> netcl::Result<Var> {
        ag::mul_scalar(&ag::mul(x, &self.w)?, self.k)
    }
    fn parameters(&self) -> Vec<Var> {
        vec![self.w.clone()]
    }
    fn set_training(&mut self, _on: bool) {}
    fn is_training(&self) -> bool {
        false
    }
    fn state_dict(&self) -> Vec<(String, Tensor)> {
        vec![("w".into(), self.w.value().clone())]
    }
    fn config_args(&self) -> serde_json::Map<String, serde_json::Value> {
        json!({"k": self.k, "n": self.w.shape()[0]})
            .as_object()
            .cloned()
            .unwrap_or_default()
    }
}

#[test]
fn layer_types_registered_from_outside_build_save_and_load() {
    netcl::nn::register_layer(
        "ScaleByTest",
        |dev, a, seed| {
            let n = a["n"].as_u64().unwrap_or(1) as usize;
            Ok(Box::new(Scale {
                k: a.get("k").and_then(|v| v.as_f64()).unwrap_or(1.0) as f32,
                w: Var::param(Tensor::randn(dev, &[n], 0.0, 1.0, seed)?),
            }))
        },
        &["n"],
    )
    .expect("register");
    assert!(netcl::nn::registered_layers().contains(&"ScaleByTest".to_string()));
    let dev = Device::builtin();
    let c = [
        cfg("ScaleByTest", json!({"n": 3, "k": 2.0})),
        cfg("Softmax", json!({})),
    ];
    let mut m: Sequential = build_sequential(&dev, &c, 1).expect("build");
    let x = Tensor::randn(&dev, &[2, 3], 0.0, 1.0, 4).expect("x");
    let y = vals(&m.predict(&x).expect("y"));
    let path = std::env::temp_dir().join(format!("netcl-registered-{}.netcl", std::process::id()));
    netcl::io::save_model(&m, &path).expect("save");
    let mut back = netcl::io::load_model(&dev, &path).expect("load");
    assert_eq!(vals(&back.predict(&x).expect("y")), y);
    common::assert_refused(
        build_sequential(&dev, &[cfg("ScaleByTest", json!({"k": 1.0}))], 1),
        "missing n",
        "`n`",
    );
}

#[test]
fn parameter_files_follow_numpy_and_netcl_naming_and_refuse_mismatches() {
    let dev = Device::builtin();
    let m = build_sequential(&dev, &cases(&dev)[1].0, 3).expect("m");
    let base = std::env::temp_dir().join(format!("netcl-params-{}", std::process::id()));
    let written = netcl::io::save_params(&m.parameters(), &base, None).expect("save");
    assert_eq!(written, base.with_extension("npz"));
    let members = netcl::io::npz::read_npz(&written).expect("read");
    assert_eq!(
        members.keys().cloned().collect::<Vec<_>>(),
        ["p0", "p1", "p2"]
    );
    let other = build_sequential(&dev, &cases(&dev)[1].0, 4).expect("other");
    netcl::io::load_params(&other.parameters(), &base, None).expect("load by the bare path");
    for (a, b) in m.parameters().iter().zip(other.parameters()) {
        assert_eq!(vals(a.value()), vals(b.value()));
    }
    // A shape mismatch changes nothing.
    let small = build_sequential(&dev, &[cfg("RMSNorm", json!({"dim": 4}))], 1).expect("s");
    let before = vals(small.parameters()[0].value());
    common::assert_refused(
        netcl::io::load_params(&small.parameters(), &written, None),
        "mismatch",
        "p0",
    );
    assert_eq!(vals(small.parameters()[0].value()), before);
    // A netcl parameter file without a config cannot rebuild a model, and says what to use.
    common::assert_refused(
        netcl::io::read_checkpoint(&dev, &written),
        "no config",
        "load_params",
    );
}

#[test]
fn bad_layer_arguments_and_padded_pools_in_model_files_are_refused_clearly() {
    let dev = Device::builtin();
    for (c, needle) in [
        (
            cfg(
                "MultiheadAttention",
                json!({"embed_dim": 10, "num_heads": 3}),
            ),
            "multiple",
        ),
        (
            cfg("RotaryAttention", json!({"dim": 6, "n_head": 2})),
            "even",
        ),
        (
            cfg("AdaptiveAvgPool2d", json!({"output_size": 2})),
            "only 1",
        ),
        (
            cfg(
                "TransformerBlock",
                json!({"d_model": 8, "num_heads": 2, "activation": "tanh"}),
            ),
            "activation",
        ),
        (
            cfg("Embedding", json!({"num_embeddings": 4})),
            "embedding_dim",
        ),
        (cfg("TiedLinear", json!({"tied_to": 3})), "tied_to"),
        (
            cfg(
                "CausalSelfAttention",
                json!({"embed_dim": 8, "num_heads": 2, "dropout": 1.5}),
            ),
            "dropout",
        ),
    ] {
        let e = build_sequential(&dev, &[c], 1)
            .map(|_| ())
            .expect_err("refused");
        assert!(e.to_string().contains(needle), "{e}");
    }
    let mut emb = build_sequential(
        &dev,
        &[cfg(
            "Embedding",
            json!({"num_embeddings": 4, "embedding_dim": 2}),
        )],
        1,
    )
    .expect("e");
    common::assert_refused(
        emb.predict(&Tensor::from_slice(&dev, &[1.5f32], &[1]).expect("t")),
        "not an index",
        "token index",
    );
    common::assert_refused(
        emb.predict(&Tensor::from_slice(&dev, &[9i32], &[1]).expect("t")),
        "range",
        "outside",
    );
    let pooled = build_sequential(
        &dev,
        &[cfg(
            "MaxPool2d",
            json!({"kernel_size": 3, "stride": 1, "padding": 1}),
        )],
        1,
    )
    .expect("p");
    let path = std::env::temp_dir().join(format!("netcl-padpool-{}.netcl", std::process::id()));
    common::assert_refused(netcl::io::save_model(&pooled, &path), "refused", "padding");
    assert!(!Path::new(&path).exists(), "nothing written");
}
