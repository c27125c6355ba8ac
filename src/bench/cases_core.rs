//! Benchmark cases of the foundation ops: broadcast add and the full sum.

use super::{Case, Work};
use crate::ops;
use crate::tensor::Tensor;

fn rows(small: bool) -> usize {
    if small { 1024 } else { 4096 }
}

/// `add_bcast_4096`: a (R×4096) + a row vector (4096), and `sum_all_4096`: the sum of R×4096 elements.
pub(super) fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "add_bcast_4096",
            work: |small| Work::Bytes((2 * rows(small) * 4096 * 4 + 4096 * 4) as f64),
            setup: |dev, small| {
                let a = Tensor::randn(dev, &[rows(small), 4096], 0.0, 1.0, 1)?;
                let b = Tensor::randn(dev, &[4096], 0.0, 1.0, 2)?;
                Ok(Box::new(move || Ok(vec![ops::add(&a, &b)?])))
            },
        },
        Case {
            name: "sum_all_4096",
            work: |small| Work::Bytes((rows(small) * 4096 * 4) as f64),
            setup: |dev, small| {
                let a = Tensor::randn(dev, &[rows(small), 4096], 0.0, 1.0, 3)?;
                Ok(Box::new(move || Ok(vec![ops::sum_all(&a)?])))
            },
        },
    ]
}
