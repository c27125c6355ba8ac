//! Benchmark cases of reductions, softmax and elementwise chains (GB/s of compulsory traffic).

use super::{Case, Work};
use crate::ops;
use crate::tensor::Tensor;

fn rows(small: bool) -> usize {
    if small { 1024 } else { 4096 }
}

fn nchw(small: bool) -> [usize; 4] {
    [if small { 8 } else { 32 }, 64, 56, 56]
}

/// `sum_axis1_4096` (the peer script's case: reduce_sum over axis 1 of 4096×4096 in every size), the sum
/// of every element of 4096×4096, a bias gradient N×C×H×W → C through `reduce_to_shape`, a row softmax and a
/// fused multiply-add-ReLU chain over three inputs, and a training batch_norm2d (the compulsory traffic: read x,
/// write y).
pub(super) fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "sum_axis1_4096",
            work: |_| Work::Bytes((4096 * 4096 * 4 + 4096 * 4) as f64),
            setup: |dev, _| {
                let a = Tensor::randn(dev, &[4096, 4096], 0.0, 1.0, 11)?;
                Ok(Box::new(move || Ok(vec![ops::sum(&a, Some(&[1]), false)?])))
            },
        },
        Case {
            name: "sum_axis0_4096",
            work: |_| Work::Bytes((4096 * 4096 * 4 + 4096 * 4) as f64),
            setup: |dev, _| {
                let a = Tensor::randn(dev, &[4096, 4096], 0.0, 1.0, 12)?;
                Ok(Box::new(move || Ok(vec![ops::sum(&a, Some(&[0]), false)?])))
            },
        },
        Case {
            name: "sum_full_4096",
            work: |_| Work::Bytes((4096 * 4096 * 4) as f64),
            setup: |dev, _| {
                let a = Tensor::randn(dev, &[4096, 4096], 0.0, 1.0, 13)?;
                Ok(Box::new(move || Ok(vec![ops::sum(&a, None, false)?])))
            },
        },
        Case {
            name: "reduce_to_shape_bias_nchw",
            work: |small| Work::Bytes((nchw(small).iter().product::<usize>() * 4 + 64 * 4) as f64),
            setup: |dev, small| {
                let g = Tensor::randn(dev, &nchw(small), 0.0, 1.0, 14)?;
                Ok(Box::new(move || {
                    Ok(vec![ops::reduce_to_shape(&g, &[1, 64, 1, 1])?])
                }))
            },
        },
        Case {
            name: "softmax_rows_4096x1024",
            work: |small| Work::Bytes((2 * rows(small) * 1024 * 4) as f64),
            setup: |dev, small| {
                let a = Tensor::randn(dev, &[rows(small), 1024], 0.0, 1.0, 15)?;
                Ok(Box::new(move || Ok(vec![ops::softmax(&a, -1)?])))
            },
        },
        Case {
            name: "fused_chain_4096",
            work: |small| Work::Bytes((3 * rows(small) * 4096 * 4 + 4096 * 4) as f64),
            setup: |dev, small| {
                let a = Tensor::randn(dev, &[rows(small), 4096], 0.0, 1.0, 16)?;
                let b = Tensor::randn(dev, &[rows(small), 4096], 0.0, 1.0, 17)?;
                let c = Tensor::randn(dev, &[4096], 0.0, 1.0, 18)?;
                Ok(Box::new(move || {
                    Ok(vec![ops::fused("max(x0 * x1 + x2, 0)", &[&a, &b, &c])?])
                }))
            },
        },
        Case {
            name: "batch_norm_train_nchw",
            work: |small| Work::Bytes((2 * nchw(small).iter().product::<usize>() * 4) as f64),
            setup: |dev, small| {
                let x = Tensor::randn(dev, &nchw(small), 0.0, 1.0, 19)?;
                let g = Tensor::ones(dev, &[64])?;
                let b = Tensor::zeros(dev, &[64])?;
                let (rm, rv) = (Tensor::zeros(dev, &[64])?, Tensor::ones(dev, &[64])?);
                Ok(Box::new(move || {
                    let o = ops::batch_norm2d(&x, Some(&g), Some(&b), &rm, &rv, 0.1, 1e-5, true)?;
                    Ok(vec![o.out.y, o.running_var])
                }))
            },
        },
    ]
}
