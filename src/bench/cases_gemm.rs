//! FP32 products past the square powers of two: `matmul_8192` (8192³), `matmul_odd_4097` (4097×4093 times
//! 4093×4095: no dimension a multiple of 4, so rows are not 16-byte aligned and every tile edge is ragged),
//! `matmul_1000` (1000³: aligned rows, partial tiles), and two batched products through `ops::bmm`:
//! `bmm_64x512` (64 products of 512³) and `bmm_96x1024x64` (96 products of 1024×64 times 64×1024, the shape of
//! attention scores at B·H = 96, D = 64). Work is 2·m·n·k FLOPs per product. `--small` shrinks each to a
//! CPU-sized product of the same kind (odd stays odd, batched stays batched); `bench/peer_matmul_tc.py` runs
//! the same shapes on PyTorch.

use super::{Case, Runner, Work};
use crate::Result;
use crate::device::Device;
use crate::ops;
use crate::tensor::Tensor;

/// (batch, m, k, n) of a case at full size and under `--small`.
fn dims(name: &str, small: bool) -> (usize, usize, usize, usize) {
    match (name, small) {
        ("matmul_8192", false) => (1, 8192, 8192, 8192),
        ("matmul_8192", true) => (1, 1024, 1024, 1024),
        ("matmul_odd_4097", false) => (1, 4097, 4093, 4095),
        ("matmul_odd_4097", true) => (1, 513, 509, 511),
        ("matmul_1000", _) => (1, 1000, 1000, 1000),
        ("bmm_64x512", false) => (64, 512, 512, 512),
        ("bmm_64x512", true) => (8, 256, 256, 256),
        ("bmm_96x1024x64", false) => (96, 1024, 64, 1024),
        ("bmm_96x1024x64", true) => (8, 256, 64, 256),
        _ => unreachable!("not a GEMM shape case: {name}"),
    }
}

fn flops(name: &str, small: bool) -> Work {
    let (b, m, k, n) = dims(name, small);
    Work::Flops(2.0 * (b * m * k * n) as f64)
}

fn setup(dev: &Device, name: &str, small: bool) -> Result<Runner> {
    let (b, m, k, n) = dims(name, small);
    if b == 1 {
        let a = Tensor::randn(dev, &[m, k], 0.0, 1.0, 11)?;
        let w = Tensor::randn(dev, &[k, n], 0.0, 1.0, 12)?;
        return Ok(Box::new(move || Ok(vec![ops::matmul(&a, &w)?])));
    }
    let a = Tensor::randn(dev, &[b, m, k], 0.0, 1.0, 11)?;
    let w = Tensor::randn(dev, &[b, k, n], 0.0, 1.0, 12)?;
    Ok(Box::new(move || Ok(vec![ops::bmm(&a, &w, false, false)?])))
}

/// A case of this family named `$name`, its shape found by [`dims`].
macro_rules! shape_case {
    ($name:literal) => {
        Case {
            name: $name,
            work: |s| flops($name, s),
            setup: |d, s| setup(d, $name, s),
        }
    };
}

/// The GEMM shape cases.
pub(super) fn cases() -> Vec<Case> {
    vec![
        shape_case!("matmul_8192"),
        shape_case!("matmul_odd_4097"),
        shape_case!("matmul_1000"),
        shape_case!("bmm_64x512"),
        shape_case!("bmm_96x1024x64"),
    ]
}
