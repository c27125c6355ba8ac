//! f16-storage versions of the bandwidth cases, named `<f32 case>_f16`, and the f32 cases they are compared
//! with where the suite had none (a unary op and the two norms).
//!
//! The work is the compulsory traffic counted in the bytes the tensors really hold: 2 per f16 element, 4 per
//! f32 element (every input read once, every output written once; a reduction's f32 output at 4). With half
//! the bytes per element, the f16 case reaches the f32 case's GB/s when it processes elements twice as fast,
//! so "f16 throughput in elements per second ÷ f32's" is `2 × gbps(f16) / gbps(f32)` from one run.

use super::cases_core::large;
use super::{Case, Runner, Work};
use crate::Result;
use crate::device::Device;
use crate::ops;
use crate::tensor::{DType, Tensor};

fn big(small: bool) -> f64 {
    let [r, c] = large(small);
    (r * c) as f64
}

fn cols(small: bool) -> f64 {
    large(small)[1] as f64
}

fn rows(small: bool) -> f64 {
    large(small)[0] as f64
}

/// Seeded normal values of `shape` stored as `dtype` (made in f32, cast on the device).
fn input(dev: &Device, shape: &[usize], seed: u64, dtype: DType) -> Result<Tensor> {
    Tensor::randn(dev, shape, 0.0, 1.0, seed)?.cast(dtype)
}

fn copy(dev: &Device, small: bool, dt: DType) -> Result<Runner> {
    let a = input(dev, &large(small), 4, dt)?;
    Ok(Box::new(move || Ok(vec![ops::elementwise::copy(&a)?])))
}

fn add_bcast(dev: &Device, small: bool, dt: DType) -> Result<Runner> {
    let a = input(dev, &large(small), 5, dt)?;
    let b = input(dev, &[large(small)[1]], 6, dt)?;
    Ok(Box::new(move || Ok(vec![ops::add(&a, &b)?])))
}

fn gelu(dev: &Device, small: bool, dt: DType) -> Result<Runner> {
    let a = input(dev, &large(small), 7, dt)?;
    Ok(Box::new(move || Ok(vec![ops::gelu(&a, true)?])))
}

fn chain(dev: &Device, small: bool, dt: DType) -> Result<Runner> {
    let a = input(dev, &large(small), 16, dt)?;
    let b = input(dev, &large(small), 17, dt)?;
    let c = input(dev, &[large(small)[1]], 18, dt)?;
    Ok(Box::new(move || {
        Ok(vec![ops::fused("max(x0 * x1 + x2, 0)", &[&a, &b, &c])?])
    }))
}

fn sum_axis1(dev: &Device, small: bool, dt: DType) -> Result<Runner> {
    let a = input(dev, &large(small), 31, dt)?;
    Ok(Box::new(move || Ok(vec![ops::sum(&a, Some(&[1]), false)?])))
}

fn softmax(dev: &Device, small: bool, dt: DType) -> Result<Runner> {
    let a = input(dev, &large(small), 15, dt)?;
    Ok(Box::new(move || Ok(vec![ops::softmax(&a, -1)?])))
}

/// γ and β stay f32 (parameters are f32 master weights under the mixed policy).
fn layer_norm(dev: &Device, small: bool, dt: DType) -> Result<Runner> {
    let x = input(dev, &large(small), 19, dt)?;
    let g = Tensor::ones(dev, &[large(small)[1]])?;
    let b = Tensor::zeros(dev, &[large(small)[1]])?;
    Ok(Box::new(move || {
        Ok(vec![ops::layer_norm(&x, 1, Some(&g), Some(&b), 1e-5)?.y])
    }))
}

fn rms_norm(dev: &Device, small: bool, dt: DType) -> Result<Runner> {
    let x = input(dev, &large(small), 20, dt)?;
    let g = Tensor::ones(dev, &[large(small)[1]])?;
    Ok(Box::new(move || {
        Ok(vec![ops::rms_norm(&x, Some(&g), 1e-5)?.y])
    }))
}

/// `(name, bytes per element, runner)` for f32 and f16 of one family, as two cases.
macro_rules! pair {
    ($f32:literal, $f16:literal, $bytes:expr, $setup:ident) => {
        [
            Case {
                name: $f32,
                work: |s| Work::Bytes($bytes(s, 4.0)),
                setup: |dev, s| $setup(dev, s, DType::F32),
            },
            Case {
                name: $f16,
                work: |s| Work::Bytes($bytes(s, 2.0)),
                setup: |dev, s| $setup(dev, s, DType::F16),
            },
        ]
    };
}

/// The f16 twins of `copy_large`, `add_bcast_large`, `fused_chain_large`, `sum_axis1_large` and
/// `softmax_rows_large`, and f32/f16 pairs for a unary op (`gelu_large`), `layer_norm_large` and
/// `rms_norm_large` (one read and one write per element; their statistics are per row).
pub(super) fn cases() -> Vec<Case> {
    let mut v = vec![
        Case {
            name: "copy_large_f16",
            work: |s| Work::Bytes(2.0 * 2.0 * big(s)),
            setup: |dev, s| copy(dev, s, DType::F16),
        },
        Case {
            name: "add_bcast_large_f16",
            work: |s| Work::Bytes(2.0 * (2.0 * big(s) + cols(s))),
            setup: |dev, s| add_bcast(dev, s, DType::F16),
        },
        Case {
            name: "fused_chain_large_f16",
            work: |s| Work::Bytes(2.0 * (3.0 * big(s) + cols(s))),
            setup: |dev, s| chain(dev, s, DType::F16),
        },
        Case {
            name: "sum_axis1_large_f16",
            work: |s| Work::Bytes(2.0 * big(s) + 4.0 * rows(s)),
            setup: |dev, s| sum_axis1(dev, s, DType::F16),
        },
        Case {
            name: "softmax_rows_large_f16",
            work: |s| Work::Bytes(2.0 * 2.0 * big(s)),
            setup: |dev, s| softmax(dev, s, DType::F16),
        },
    ];
    v.extend(pair!(
        "gelu_large",
        "gelu_large_f16",
        |s, b| 2.0 * b * big(s),
        gelu
    ));
    v.extend(pair!(
        "layer_norm_large",
        "layer_norm_large_f16",
        |s, b| 2.0 * b * big(s) + 8.0 * cols(s),
        layer_norm
    ));
    v.extend(pair!(
        "rms_norm_large",
        "rms_norm_large_f16",
        |s, b| 2.0 * b * big(s) + 4.0 * cols(s),
        rms_norm
    ));
    v
}
