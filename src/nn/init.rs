//! Seeded initialisers: the values depend only on the seed, so a model starts identically on every device.

use crate::device::Device;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// Uniform in ±√(6/(fan_in + fan_out)) (Glorot).
pub fn xavier_uniform(
    device: &Device,
    shape: &[usize],
    fan_in: usize,
    fan_out: usize,
    seed: u64,
) -> Result<Tensor> {
    let bound = (6.0 / (fan_in + fan_out).max(1) as f32).sqrt();
    Tensor::rand_uniform(device, shape, -bound, bound, seed)
}

/// He-uniform with negative slope `a`: bound = √(6 / ((1 + a²)·fan_in)); `a = √5` gives 1/√fan_in.
pub fn kaiming_uniform(
    device: &Device,
    shape: &[usize],
    fan_in: usize,
    a: f32,
    seed: u64,
) -> Result<Tensor> {
    if !a.is_finite() {
        return Err(Error::Invalid(format!(
            "kaiming_uniform: slope {a} must be finite"
        )));
    }
    let bound = (6.0 / ((1.0 + a * a) * fan_in.max(1) as f32)).sqrt();
    Tensor::rand_uniform(device, shape, -bound, bound, seed)
}

/// Normal with `mean` and `std`.
pub fn normal(device: &Device, shape: &[usize], mean: f32, std: f32, seed: u64) -> Result<Tensor> {
    Tensor::randn(device, shape, mean, std, seed)
}

/// Every element `value`.
pub fn constant(device: &Device, shape: &[usize], value: f32) -> Result<Tensor> {
    if !value.is_finite() {
        return Err(Error::Invalid(format!("constant: {value} is not finite")));
    }
    Tensor::full(device, shape, value)
}
