//! Dropout with a counter-based device generator: element `i` is kept when `rng::uniform(seed, i) ≥ p`,
//! computed on the device with the same hash as [`crate::rng`], so masks are seeded, reproducible and identical
//! on every device. The backward applies the same mask to the gradient.

use super::limit;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

use super::policy::{OpClass, expect_float, output_dtype};

fn check(x: &Tensor, p: f32, op: &str) -> Result<f32> {
    expect_float(x, op)?;
    if !(0.0..1.0).contains(&p) {
        return Err(Error::Invalid(format!("{op}: p = {p} must be in [0, 1)")));
    }
    limit(x, op)?;
    Ok(1.0 / (1.0 - p))
}

fn apply(x: &Tensor, p: f32, seed: u64, op: &str) -> Result<Tensor> {
    check(x, p, op)?;
    let out = Tensor::empty(
        x.device(),
        x.shape(),
        output_dtype(OpClass::Store16, &[x], op)?,
    )?;
    if out.numel() > 0 {
        x.device().backend().dropout_apply(x, p, seed, &out)?;
    }
    Ok(out)
}

/// Zeroes each element with probability `p` (from `seed` and its index) and scales the rest by 1/(1−p).
pub fn dropout(x: &Tensor, p: f32, seed: u64) -> Result<Tensor> {
    apply(x, p, seed, "dropout")
}

/// The gradient of [`dropout`] with the same `p` and `seed`: the same mask and scale applied to `grad`.
pub fn dropout_backward(grad: &Tensor, p: f32, seed: u64) -> Result<Tensor> {
    apply(grad, p, seed, "dropout_backward")
}
