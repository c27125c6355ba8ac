//! The whole models: `resnet18` (netcl 0.3.2's ResNet18) and `mobilenet_v2`.
//!
//! Shapes and parameter counts of the full-width presets, a few training steps lowering the loss, the
//! gradients of narrow variants on the OpenCL device against the built-in device and against central
//! differences, model files, bad arguments, and netcl 0.3.2's ResNet18 parameter files both ways
//! (`tests/fixtures/netcl_resnet18.py`).

mod common;

use std::path::Path;

use netcl::autograd::{Var, no_grad, ops as ag};
use netcl::io::npz::{NpyArray, read_npz, write_npz};
use netcl::nn::{LayerConfig, Module, Sequential, build_sequential, models, preset};
use netcl::optim::Optimizer;
use netcl::{Device, Tensor};

fn numel(model: &Sequential) -> usize {
    model
        .parameters()
        .iter()
        .map(|p| p.shape().iter().product::<usize>())
        .sum()
}

fn labels(dev: &Device, n: usize) -> Tensor {
    let v: Vec<i32> = (0..n as i32).map(|i| (i * 3) % 10).collect();
    Tensor::from_slice(dev, &v, &[n]).expect("labels")
}

fn loss_of(model: &mut Sequential, x: &Tensor, y: &Tensor) -> Var {
    let logits = model.forward(&Var::constant(x.clone())).expect("forward");
    ag::cross_entropy(&logits, y, -100).expect("loss")
}

/// A narrow ResNet-18 (base 4) and a narrow MobileNetV2 (width 0.25, 8-channel minimum rounding).
fn narrow() -> [(&'static str, Vec<LayerConfig>); 2] {
    [
        ("resnet18", models::resnet18(3, 10, 4, true).expect("cfg")),
        (
            "mobilenet_v2",
            models::mobilenet_v2(3, 10, 0.25).expect("cfg"),
        ),
    ]
}

#[test]
fn the_full_presets_have_the_published_sizes_and_give_logits() {
    let dev = common::opencl_device().unwrap_or_else(Device::builtin);
    // netcl 0.3.2's ResNet18(num_classes=10): the CIFAR ResNet-18's 11,173,962 parameters plus 4,800
    // convolution biases.
    let mut r = build_sequential(&dev, &preset("resnet18", 3, 32, 10).expect("p"), 1).expect("b");
    assert_eq!(numel(&r), 11_178_762);
    // MobileNetV2 with 1000 classes has 3,504,872 parameters (torchvision's model card) and 300.8 M
    // multiply-adds at 224×224.
    let m_cfg = preset("mobilenet_v2", 3, 224, 1000).expect("p");
    assert_eq!(
        numel(&build_sequential(&dev, &m_cfg, 1).expect("b")),
        3_504_872
    );
    let flops = models::forward_flops(&m_cfg, [1, 3, 224, 224]).expect("flops");
    assert!((flops / 2.0 / 300.8e6 - 1.0).abs() < 0.01, "{flops}");

    let mut m =
        build_sequential(&dev, &preset("mobilenet_v2", 3, 32, 10).expect("p"), 1).expect("b");
    let x = Tensor::randn(&dev, &[2, 3, 32, 32], 0.0, 1.0, 3).expect("x");
    for (name, model) in [("resnet18", &mut r), ("mobilenet_v2", &mut m)] {
        let y = model.predict(&x).expect("predict");
        assert_eq!(y.shape(), [2, 10], "{name}");
        let v = y.to_vec::<f32>().expect("read");
        assert!(v.iter().all(|a| a.is_finite()), "{name}: {v:?}");
        assert!(v.iter().any(|a| *a != v[0]), "{name}: constant logits");
    }
}

#[test]
fn a_few_training_steps_lower_the_loss_on_a_fixed_batch() {
    let dev = common::opencl_device().unwrap_or_else(Device::builtin);
    // 64×64 leaves MobileNetV2 a 2×2 map at the end, so its last batch norms see 16 values per channel.
    let x = Tensor::randn(&dev, &[4, 3, 64, 64], 0.0, 1.0, 9).expect("x");
    let y = labels(&dev, 4);
    for (name, cfg) in narrow() {
        let mut model = build_sequential(&dev, &cfg, 2).expect("build");
        let mut opt = Optimizer::adam(model.parameters(), 1e-3, 0.0).expect("adam");
        let mut losses = Vec::new();
        for _ in 0..8 {
            opt.zero_grad();
            let loss = loss_of(&mut model, &x, &y);
            losses.push(loss.value().to_vec::<f32>().expect("read")[0]);
            loss.backward().expect("backward");
            opt.step().expect("step");
        }
        assert!(
            losses[7] < 0.7 * losses[0],
            "{name}: losses {losses:?} did not fall by 30 %"
        );
    }
}

/// Every parameter's gradient after one training-mode forward and backward.
fn gradients(dev: &Device, cfg: &[LayerConfig]) -> Vec<Vec<f32>> {
    let mut model = build_sequential(dev, cfg, 4).expect("build");
    let x = Tensor::randn(dev, &[2, 3, 16, 16], 0.0, 1.0, 5).expect("x");
    loss_of(&mut model, &x, &labels(dev, 2))
        .backward()
        .expect("backward");
    model
        .parameters()
        .iter()
        .map(|p| p.grad().expect("grad").to_vec::<f32>().expect("read"))
        .collect()
}

#[test]
fn gradients_on_opencl_match_the_built_in_device() {
    let Some(dev) = common::opencl_device() else {
        return;
    };
    for (name, cfg) in narrow() {
        let (got, want) = (gradients(&dev, &cfg), gradients(&Device::builtin(), &cfg));
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let scale = w.iter().fold(0f32, |m, v| m.max(v.abs()));
            common::assert_close(
                g,
                w,
                1e-4 + 2e-3 * scale,
                1e-2,
                &format!("{name} parameter {i}"),
            );
        }
    }
}

#[test]
fn a_basic_block_s_gradients_match_central_differences() {
    // A block with batch norms and a strided projection, on the built-in device. (Whole networks are compared
    // with the built-in device above: through many ReLU kinks a central difference is no reference.)
    let dev = Device::builtin();
    let mut block = models::BasicBlock::new(&dev, 4, 8, 2, true, true, 1).expect("block");
    let x = Var::constant(Tensor::randn(&dev, &[2, 4, 8, 8], 0.0, 1.0, 7).expect("x"));
    let w = Var::constant(Tensor::randn(&dev, &[2, 8, 4, 4], 0.0, 1.0, 3).expect("w"));
    let loss = |b: &mut models::BasicBlock| {
        ag::sum_all(&ag::mul(&b.forward(&x).expect("forward"), &w).expect("mul")).expect("sum")
    };
    loss(&mut block).backward().expect("backward");
    for (pi, p) in block.parameters().iter().enumerate() {
        let base = p.value().to_vec::<f32>().expect("read");
        let g = p.grad().expect("grad").to_vec::<f32>().expect("read");
        for i in [0, base.len() / 2] {
            let fd = common::central_difference(p, &base, i, 1e-3, || {
                no_grad(|| loss(&mut block))
                    .value()
                    .to_vec::<f32>()
                    .expect("read")[0]
            });
            assert!(
                (fd - g[i]).abs() <= 2e-3 + 1e-2 * g[i].abs(),
                "parameter {pi} {:?} entry {i}: backward {} vs central difference {fd}",
                p.shape(),
                g[i]
            );
        }
    }
}

#[test]
fn inference_with_one_kernel_per_batch_norm_matches_the_layers_path() {
    // Without a graph, an evaluation-mode block folds each batch norm that follows a convolution into the
    // convolution's weights and bias (ReLU into its epilogue), and applies the others with their activation as
    // one kernel; with a graph it runs the layers' own ops. Both must give the same logits, after a training
    // step has moved the running statistics and γ, β away from their initial values.
    let dev = common::opencl_device().unwrap_or_else(Device::builtin);
    let x = Tensor::randn(&dev, &[2, 3, 32, 32], 0.0, 1.0, 10).expect("x");
    for (name, cfg) in narrow() {
        let mut model = build_sequential(&dev, &cfg, 5).expect("build");
        let mut opt = Optimizer::sgd(model.parameters(), 0.1, 0.0, 0.0).expect("sgd");
        loss_of(&mut model, &x, &labels(&dev, 2))
            .backward()
            .expect("backward");
        opt.step().expect("step");
        model.set_training(false);
        let fused = no_grad(|| model.forward(&Var::constant(x.clone()))).expect("no_grad");
        let layered = model.forward(&Var::constant(x.clone())).expect("graph");
        common::assert_tensors_close(fused.value(), layered.value(), 1e-4, 1e-4, name);
    }
}

#[test]
fn block_models_round_trip_through_model_files() {
    let dev = Device::builtin();
    let dir = std::env::temp_dir().join(format!("netcl-models-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let x = Tensor::randn(&dev, &[2, 3, 16, 16], 0.0, 1.0, 8).expect("x");
    for (name, cfg) in narrow() {
        let mut model = build_sequential(&dev, &cfg, 3).expect("build");
        // One training step, so the running statistics are not the initial ones.
        loss_of(&mut model, &x, &labels(&dev, 2))
            .backward()
            .expect("backward");
        let path = dir.join(format!("{name}.netcl"));
        netcl::io::save_model(&model, &path).expect("save");
        let mut back = netcl::io::load_model(&dev, &path).expect("load");
        assert_eq!(back.configs(), model.configs(), "{name}");
        let (a, b) = (model.predict(&x).expect("p"), back.predict(&x).expect("p"));
        common::assert_tensors_close(&b, &a, 0.0, 0.0, name);
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_arguments_are_refused_with_their_names() {
    let dev = Device::builtin();
    common::assert_refused(
        models::mobilenet_v2(3, 10, 0.0),
        "width 0",
        "width multiplier",
    );
    common::assert_refused(
        models::resnet18(3, 0, 64, true),
        "no classes",
        "num_classes",
    );
    let mut block = models::BasicBlock::new(&dev, 4, 8, 2, true, true, 1).expect("block");
    let x = Var::constant(Tensor::zeros(&dev, &[1, 3, 8, 8]).expect("x"));
    common::assert_refused(
        block.forward(&x),
        "3 channels into a 4-channel block",
        "[1, 3, 8, 8]",
    );
    let tiny = build_sequential(&dev, &preset("tiny_cnn", 1, 8, 10).expect("p"), 1).expect("b");
    common::assert_refused(
        models::resnet18_netcl032_parameters(&tiny),
        "a tiny_cnn",
        "resnet18 preset",
    );
    let bad = netcl::nn::configs_from_json(
        r#"[{"type": "InvertedResidual", "args": {"in_channels": 8, "out_channels": 8, "expand_ratio": 0}}]"#,
    )
    .expect("json");
    common::assert_refused(
        build_sequential(&dev, &bad, 1),
        "expansion 0",
        "expand_ratio",
    );
}

/// The narrow ResNet-18 of the netcl 0.3.2 fixtures (base 4, 10 classes).
fn netcl_resnet(dev: &Device) -> Sequential {
    build_sequential(dev, &models::resnet18(3, 10, 4, true).expect("cfg"), 1).expect("build")
}

/// Training-mode logits: netcl 0.3.2's ResNet18 always normalises with the batch's statistics.
fn batch_stat_logits(model: &mut Sequential, x: &Tensor) -> Tensor {
    no_grad(|| model.forward(&Var::constant(x.clone())))
        .expect("forward")
        .value()
        .clone()
}

#[test]
fn a_resnet18_saved_by_netcl_032_gives_the_same_logits_here() {
    let io = read_npz(Path::new("tests/fixtures/netcl032_resnet18_io.npz")).expect("io");
    let mut devs = vec![Device::builtin()];
    devs.extend(common::opencl_device());
    for dev in devs {
        let mut model = netcl_resnet(&dev);
        let params = models::resnet18_netcl032_parameters(&model).expect("order");
        assert_eq!(params.len(), 82);
        netcl::io::load_params(
            &params,
            Path::new("tests/fixtures/netcl032_resnet18_params.npz"),
            None,
        )
        .expect("load");
        let x = Tensor::from_slice(&dev, &io["x"].to_f32().expect("x"), &io["x"].shape).expect("x");
        let got = batch_stat_logits(&mut model, &x)
            .to_vec::<f32>()
            .expect("read");
        common::assert_close(
            &got,
            &io["y"].to_f32().expect("y"),
            1e-4,
            1e-4,
            &format!("netcl 0.3.2 ResNet18 on {}", dev.name()),
        );
    }
}

#[test]
fn a_resnet18_saved_here_loads_in_netcl_032() {
    if !common::has_netcl() {
        return;
    }
    let dev = Device::builtin();
    let mut model = netcl_resnet(&dev);
    let dir = std::env::temp_dir().join(format!("netcl-resnet-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let x = Tensor::randn(&dev, &[2, 3, 16, 16], 0.0, 1.0, 12).expect("x");
    let y = batch_stat_logits(&mut model, &x);
    let params = models::resnet18_netcl032_parameters(&model).expect("order");
    let written = netcl::io::save_params(&params, &dir.join("params"), None).expect("save");
    let io = dir.join("io.npz");
    write_npz(
        &io,
        &[
            ("x".into(), NpyArray::f32(x.shape(), x.to_vec().expect("x"))),
            ("y".into(), NpyArray::f32(y.shape(), y.to_vec().expect("y"))),
        ],
    )
    .expect("io");
    common::python_check_passes(
        "tests/fixtures/netcl_resnet18.py",
        [Path::new("check"), written.as_path(), io.as_path()],
    );
    std::fs::remove_dir_all(&dir).ok();
}

fn layer(kind: &str, args: serde_json::Value) -> LayerConfig {
    LayerConfig {
        kind: kind.into(),
        args: args.as_object().cloned().unwrap_or_default(),
    }
}

/// A Sequential runs a BatchNorm2d and the ReLU or HardTanh right after it as one step in training (the
/// activation's gradient inside the normalisation's backward): its gradients and running statistics are those
/// of the same layers kept apart by an identity (Dropout with p = 0), on the built-in device and on OpenCL.
#[test]
fn a_batch_norm_and_its_activation_as_one_step_give_the_layers_gradients() {
    // The same layers at the same indices (so the same initial weights), with the identity after each
    // activation (fused) or between the batch norm and its activation (apart).
    let cfg = |apart: bool| -> Vec<LayerConfig> {
        let conv = |i: usize, o: usize| {
            layer(
                "Conv2d",
                serde_json::json!({"in_channels": i, "out_channels": o, "kernel_size": 3, "pad": 1}),
            )
        };
        let bn = |c: usize| layer("BatchNorm2d", serde_json::json!({"num_features": c}));
        let gap = || layer("Dropout", serde_json::json!({"p": 0.0}));
        let pair = |act: LayerConfig| if apart { [gap(), act] } else { [act, gap()] };
        let mut v = vec![conv(3, 6), bn(6)];
        v.extend(pair(layer("ReLU", serde_json::json!({}))));
        v.extend([conv(6, 5), bn(5)]);
        v.extend(pair(layer(
            "HardTanh",
            serde_json::json!({"min_val": 0.0, "max_val": 0.3}),
        )));
        v.extend([
            layer("GlobalAvgPool2d", serde_json::json!({})),
            layer("Flatten", serde_json::json!({})),
            layer(
                "Linear",
                serde_json::json!({"in_features": 5, "out_features": 10}),
            ),
        ]);
        v
    };
    let mut devices = vec![Device::builtin()];
    devices.extend(common::opencl_device());
    for dev in devices {
        let run = |apart: bool| -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
            let mut model = build_sequential(&dev, &cfg(apart), 4).expect("build");
            let x = Tensor::randn(&dev, &[3, 3, 9, 7], 0.5, 1.0, 5).expect("x");
            loss_of(&mut model, &x, &labels(&dev, 3))
                .backward()
                .expect("backward");
            let grads = model
                .parameters()
                .iter()
                .map(|p| p.grad().expect("grad").to_vec::<f32>().expect("read"))
                .collect();
            let state = model
                .state_dict()
                .iter()
                .filter(|(n, _)| n.contains("running"))
                .map(|(_, t)| t.to_vec::<f32>().expect("read"))
                .collect();
            (grads, state)
        };
        let (g1, s1) = run(false);
        let (g2, s2) = run(true);
        assert_eq!(g1.len(), g2.len());
        for (i, (a, b)) in g1.iter().zip(&g2).enumerate() {
            common::assert_close(a, b, 1e-5, 1e-4, &format!("{} parameter {i}", dev.name()));
        }
        assert_eq!(s1.len(), 4, "running statistics");
        for (a, b) in s1.iter().zip(&s2) {
            common::assert_close(
                a,
                b,
                1e-6,
                1e-5,
                &format!("{} running statistics", dev.name()),
            );
        }
    }
}
