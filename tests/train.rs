//! Training a small CNN on the real digits data, model files, checkpoints, and bad input.

mod common;

use std::sync::Arc;

use netcl::autograd::Var;
use netcl::data::{DataLoader, Digits, Transform};
use netcl::nn::{LayerConfig, Module, build_sequential, preset};
use netcl::optim::Optimizer;
use netcl::train::{FitEvent, FitOptions, fit};
use netcl::{Device, Tensor};

fn loaders(seed: u64) -> (DataLoader, DataLoader) {
    let (train, test) = Digits::load()
        .expect("digits")
        .split(0.2, seed)
        .expect("split");
    let norm = Transform::Normalize {
        mean: vec![0.3],
        std: vec![0.38],
    };
    let train = DataLoader::new(Arc::new(train), 32)
        .expect("loader")
        .shuffle(seed)
        .transform(norm.clone())
        .expect("norm");
    let test = DataLoader::new(Arc::new(test), 256)
        .expect("loader")
        .transform(norm)
        .expect("norm");
    (train, test)
}

/// Every parameter's values, in order.
fn weights(model: &dyn Module) -> Vec<Vec<f32>> {
    model
        .parameters()
        .iter()
        .map(|p| p.value().to_vec().expect("r"))
        .collect()
}

/// `fit` without validation data, with the default options and no progress callback.
fn fit_plain(
    model: &mut netcl::nn::Sequential,
    opt: &mut Optimizer,
    dev: &Device,
    train: &DataLoader,
) -> netcl::Result<Vec<netcl::train::EpochMetrics>> {
    fit(
        model,
        opt,
        dev,
        train,
        None,
        &FitOptions::default(),
        &mut |_| {},
    )
}

#[test]
fn a_small_cnn_learns_the_digits() {
    let dev = common::opencl_device().unwrap_or_else(Device::builtin);
    let (train, test) = loaders(0);
    let mut model =
        build_sequential(&dev, &preset("digits_cnn", 1, 8, 10).expect("preset"), 0).expect("model");
    let mut opt = Optimizer::adam(model.parameters(), 0.002, 0.0).expect("adam");
    let mut steps = 0;
    let history = fit(
        &mut model,
        &mut opt,
        &dev,
        &train,
        Some(&test),
        &FitOptions {
            epochs: 6,
            ..Default::default()
        },
        &mut |e| {
            if let FitEvent::Step { .. } = e {
                steps += 1;
            }
        },
    )
    .expect("fit");
    assert_eq!(steps, 6 * train.len());
    let last = history.last().expect("metrics");
    assert!(
        history[0].train_loss > last.train_loss,
        "the loss falls: {history:?}"
    );
    let acc = last.val_accuracy.expect("val");
    assert!(acc >= 0.95, "test accuracy {acc} below 95%: {history:?}");
    eprintln!(
        "digits test accuracy after 6 epochs on {}: {:.2}%",
        dev.name(),
        acc * 100.0
    );

    // The trained model survives a save/load round trip bit for bit.
    let dir = std::env::temp_dir().join(format!("netcl-train-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("digits.netcl");
    netcl::io::save_model(&model, &path).expect("save");
    let mut loaded = netcl::io::load_model(&dev, &path).expect("load");
    // Every parameter and buffer comes back with the same bits.
    let state = |m: &netcl::nn::Sequential| -> Vec<(String, Vec<u32>)> {
        m.state_dict()
            .into_iter()
            .map(|(k, t)| {
                let bits = t
                    .to_vec::<f32>()
                    .expect("read")
                    .iter()
                    .map(|v| v.to_bits())
                    .collect();
                (k, bits)
            })
            .collect()
    };
    assert_eq!(state(&model), state(&loaded));
    // And it predicts the same. Not bit for bit: the two calls may run different autotune candidates (a winner
    // measured between them), whose sums round differently.
    let x = Tensor::randn(&dev, &[4, 1, 8, 8], 0.0, 1.0, 5).expect("x");
    let (a, b) = (
        model.predict(&x).expect("p").to_vec::<f32>().expect("r"),
        loaded.predict(&x).expect("p").to_vec::<f32>().expect("r"),
    );
    let worst = a
        .iter()
        .zip(&b)
        .map(|(p, q)| (p - q).abs() / (1.0 + p.abs()))
        .fold(0.0f32, f32::max);
    assert!(worst < 1e-5, "predictions differ by {worst}: {a:?} {b:?}");
    // Without the extension, netcl's `path.netcl` fallback finds the file.
    assert!(netcl::io::load_model(&dev, &dir.join("digits")).is_ok());
}

#[test]
fn checkpoints_restore_the_optimizer() {
    let dev = Device::builtin();
    let (train, _) = loaders(1);
    let mut model = build_sequential(&dev, &preset("example_mlp", 1, 8, 10).expect("preset"), 3)
        .expect("model");
    let mut opt = Optimizer::adamw(model.parameters(), 0.01, 0.01).expect("adamw");
    fit_plain(&mut model, &mut opt, &dev, &train).expect("fit");
    let path = std::env::temp_dir().join(format!("netcl-ckpt-{}.npz", std::process::id()));
    netcl::io::save_checkpoint(&model, &opt, &path).expect("save");
    let (mut m2, state) = netcl::io::load_checkpoint(&dev, &path).expect("load");
    let mut o2 = Optimizer::adamw(m2.parameters(), 0.5, 0.0).expect("o2");
    o2.load_state_dict(&state).expect("state");
    assert_eq!((o2.steps(), o2.lr()), (opt.steps(), opt.lr()));
    // One more identical step on both gives identical weights.
    let b = train.epoch(9).next().expect("batch");
    for (m, o) in [(&mut model, &mut opt), (&mut m2, &mut o2)] {
        let x = Var::constant(Tensor::from_slice(&dev, &b.x, &b.x_shape).expect("x"));
        let y = Tensor::from_slice(&dev, &b.y, &[b.y.len()]).expect("y");
        let loss = netcl::autograd::ops::cross_entropy(&m.forward(&x).expect("fwd"), &y, -100)
            .expect("loss");
        loss.backward().expect("bwd");
        o.step().expect("step");
        o.zero_grad();
    }
    let w1 = weights(&model);
    let w2 = weights(&m2);
    assert_eq!(w1, w2);
}

#[test]
fn bad_models_and_files_are_clear_errors() {
    let dev = Device::builtin();
    let mut model =
        build_sequential(&dev, &preset("tiny_cnn", 1, 8, 10).expect("preset"), 0).expect("model");
    let e = model
        .forward(&Var::constant(
            Tensor::zeros(&dev, &[2, 3, 8, 8]).expect("x"),
        ))
        .expect_err("3 channels into a 1-channel conv");
    assert!(
        e.to_string().contains("layer 0") && e.to_string().contains("Conv2d"),
        "{e}"
    );
    let e = model
        .forward(&Var::constant(
            Tensor::zeros(&dev, &[2, 1, 12, 12]).expect("x"),
        ))
        .expect_err("wrong size for the Linear");
    assert!(e.to_string().contains("Linear"), "{e}");
    assert!(
        build_sequential(
            &dev,
            &[LayerConfig {
                kind: "Nope".into(),
                args: Default::default()
            }],
            0
        )
        .is_err()
    );
    assert!(
        netcl::nn::configs_from_json("[{\"type\": \"Conv2d\", \"args\": {\"in_channels\": 1}}]")
            .and_then(|c| build_sequential(&dev, &c, 0).map(|_| ()))
            .is_err()
    );

    let dir = std::env::temp_dir().join(format!("netcl-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let good = dir.join("m.netcl");
    netcl::io::save_model(&model, &good).expect("save");
    let bytes = std::fs::read(&good).expect("read");
    let truncated = dir.join("t.netcl");
    std::fs::write(&truncated, &bytes[..bytes.len() - 100]).expect("write");
    assert!(matches!(
        netcl::io::load_model(&dev, &truncated),
        Err(netcl::Error::Format { .. })
    ));
    // A model file missing one tensor, and one with a misshapen tensor.
    let mut members: Vec<(String, netcl::io::npz::NpyArray)> = netcl::io::npz::read_npz(&good)
        .expect("members")
        .into_iter()
        .filter(|(k, _)| k != "3:bias")
        .collect();
    let missing = dir.join("missing.netcl");
    netcl::io::npz::write_npz(&missing, &members).expect("write");
    let e = netcl::io::load_model(&dev, &missing).expect_err("missing tensor");
    assert!(e.to_string().contains("3:bias"), "{e}");
    for (k, v) in members.iter_mut() {
        if k == "0:weight" {
            *v = netcl::io::npz::NpyArray::f32(&[8, 1, 3, 2], vec![0.0; 48]);
        }
    }
    members.push((
        "3:bias".into(),
        netcl::io::npz::NpyArray::f32(&[8], vec![0.0; 8]),
    ));
    let misshapen = dir.join("misshapen.netcl");
    netcl::io::npz::write_npz(&misshapen, &members).expect("write");
    let e = netcl::io::load_model(&dev, &misshapen).expect_err("misshapen tensor");
    assert!(e.to_string().contains("0:weight"), "{e}");
    // Out-of-range labels stop training with a clear error and change nothing.
    let before = weights(&model);
    let bad = netcl::data::InMemory::new(vec![0.0; 2 * 64], &[1, 8, 8], vec![3, 12]).expect("data");
    let loader = DataLoader::new(Arc::new(bad), 2).expect("loader");
    let mut opt = Optimizer::sgd(model.parameters(), 0.1, 0.0, 0.0).expect("sgd");
    let e = fit_plain(&mut model, &mut opt, &dev, &loader).expect_err("label 12");
    assert!(e.to_string().contains("label 12"), "{e}");
    let after = weights(&model);
    assert_eq!(before, after);
}
