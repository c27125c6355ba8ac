//! Whole-model benchmark cases: the `resnet18` and `mobilenet_v2` presets, inference and one training step,
//! at batch 32 × 224×224 (`_224`) and batch 128 × 112×112 (`_112`). `--small` shapes, for a CPU:
//!
//! | case | resnet18 | mobilenet_v2 |
//! |---|---|---|
//! | `_224` | batch 2 × 32×32 | batch 4 × 64×64 |
//! | `_112` | batch 8 × 16×16 | batch 16 × 32×32 |
//!
//! (ResNet-18 here is netcl's CIFAR-style network, which keeps full resolution through its first stage;
//! MobileNetV2 divides the side by 32, so its small inputs are larger, leaving its last batch norms at least
//! 8 values per channel.)
//!
//! - `<model>_infer_<size>`: one forward pass in evaluation mode (running statistics, no dropout) without a
//!   graph; the output is the logits.
//! - `<model>_train_<size>`: one training step: `zero_grad`, forward in training mode, softmax cross-entropy
//!   against fixed labels, backward, and SGD with momentum 0.9 (lr 0.01); the output is the step's loss.
//!
//! Work per call is the convolutions' and the Linear head's FLOPs ([`crate::nn::models::forward_flops`]); a
//! training step counts three times the forward. Inputs are 3-channel images drawn from a seeded normal
//! distribution, ten classes, labels `i mod 10`; the model is initialised from seed 1, so every device starts
//! from the same weights and the reference check compares like with like.

use super::{Case, Runner, Work};
use crate::autograd::{Var, no_grad, ops as ag};
use crate::device::Device;
use crate::error::Result;
use crate::nn::{LayerConfig, Module, build_sequential, models};
use crate::optim::Optimizer;
use crate::tensor::Tensor;

/// (batch, side) of a model's case at full scale and with `--small`.
fn shape(model: &str, size: u32, small: bool) -> (usize, usize) {
    match (size, small, model == "resnet18") {
        (224, false, _) => (32, 224),
        (_, false, _) => (128, 112),
        (224, true, true) => (2, 32),
        (_, true, true) => (8, 16),
        (224, true, false) => (4, 64),
        (_, true, false) => (16, 32),
    }
}

fn config(model: &str) -> Result<Vec<LayerConfig>> {
    if model == "resnet18" {
        models::resnet18(3, 10, 64, true)
    } else {
        models::mobilenet_v2(3, 10, 1.0)
    }
}

fn forward_flops(model: &str, size: u32, small: bool) -> f64 {
    let (n, hw) = shape(model, size, small);
    config(model)
        .and_then(|c| models::forward_flops(&c, [n, 3, hw, hw]))
        .unwrap_or(0.0)
}

fn setup(dev: &Device, model: &str, size: u32, small: bool, train: bool) -> Result<Runner> {
    let (n, hw) = shape(model, size, small);
    let mut net = build_sequential(dev, &config(model)?, 1)?;
    let x = Var::constant(Tensor::randn(dev, &[n, 3, hw, hw], 0.0, 1.0, 5)?);
    if !train {
        net.set_training(false);
        return Ok(Box::new(move || {
            Ok(vec![no_grad(|| net.forward(&x))?.value().clone()])
        }));
    }
    let labels: Vec<i32> = (0..n as i32).map(|i| i % 10).collect();
    let labels = Tensor::from_slice(dev, &labels, &[n])?;
    let mut opt = Optimizer::sgd(net.parameters(), 0.01, 0.9, 0.0)?;
    Ok(Box::new(move || {
        opt.zero_grad();
        let loss = ag::cross_entropy(&net.forward(&x)?, &labels, -100)?;
        loss.backward()?;
        opt.step()?;
        Ok(vec![loss.value().clone()])
    }))
}

macro_rules! model_cases {
    ($($name:literal => $model:literal, $size:literal, $train:literal;)*) => {
        vec![$(Case {
            name: $name,
            work: |small| Work::Flops(forward_flops($model, $size, small) * if $train { 3.0 } else { 1.0 }),
            setup: |dev, small| setup(dev, $model, $size, small, $train),
        }),*]
    };
}

/// The eight whole-model cases.
pub(super) fn cases() -> Vec<Case> {
    model_cases! {
        "resnet18_infer_224" => "resnet18", 224, false;
        "resnet18_train_224" => "resnet18", 224, true;
        "resnet18_infer_112" => "resnet18", 112, false;
        "resnet18_train_112" => "resnet18", 112, true;
        "mobilenet_v2_infer_224" => "mobilenet_v2", 224, false;
        "mobilenet_v2_train_224" => "mobilenet_v2", 224, true;
        "mobilenet_v2_infer_112" => "mobilenet_v2", 112, false;
        "mobilenet_v2_train_112" => "mobilenet_v2", 112, true;
    }
}
