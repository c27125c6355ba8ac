//! Benchmark cases of the foundation ops: broadcast add, the full sum, and the device copy that measures the
//! memory bandwidth the memory-bound cases are compared with.

use super::{Case, Work};
use crate::ops;
use crate::tensor::Tensor;

fn rows(small: bool) -> usize {
    if small { 1024 } else { 4096 }
}

/// The `_large` shape: 8192×16384 f32 (512 MB), 1024×2048 with `--small`.
pub(super) fn large(small: bool) -> [usize; 2] {
    if small { [1024, 2048] } else { [8192, 16384] }
}

fn large_bytes(small: bool) -> f64 {
    (large(small)[0] * large(small)[1] * 4) as f64
}

/// `add_bcast_4096`: a (R×4096) + a row vector (4096), and `sum_all_4096`: the sum of R×4096 elements; `add_1k`:
/// the sum of two 1024-element vectors, whose time is the cost of one call (launch and synchronisation); the
/// `_large` broadcast add; `copy_large`: a kernel copy of the large shape (read and write counted).
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
        Case {
            name: "add_1k",
            work: |_| Work::Bytes((3 * 1024 * 4) as f64),
            setup: |dev, _| {
                let a = Tensor::randn(dev, &[1024], 0.0, 1.0, 7)?;
                let b = Tensor::randn(dev, &[1024], 0.0, 1.0, 8)?;
                Ok(Box::new(move || Ok(vec![ops::add(&a, &b)?])))
            },
        },
        Case {
            name: "copy_large",
            work: |small| Work::Bytes(2.0 * large_bytes(small)),
            setup: |dev, small| {
                let a = Tensor::randn(dev, &large(small), 0.0, 1.0, 4)?;
                Ok(Box::new(move || Ok(vec![ops::elementwise::copy(&a)?])))
            },
        },
        Case {
            name: "add_bcast_large",
            work: |small| Work::Bytes(2.0 * large_bytes(small) + (large(small)[1] * 4) as f64),
            setup: |dev, small| {
                let a = Tensor::randn(dev, &large(small), 0.0, 1.0, 5)?;
                let b = Tensor::randn(dev, &[large(small)[1]], 0.0, 1.0, 6)?;
                Ok(Box::new(move || Ok(vec![ops::add(&a, &b)?])))
            },
        },
    ]
}
