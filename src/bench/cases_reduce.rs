//! Benchmark cases of reductions, softmax, elementwise chains and batch normalisation (GB/s of compulsory
//! traffic: every input read once, every output written once), at the peer script's sizes and as `_large`
//! variants (8192×16384 f32 = 512 MB, N = 128 for the N×C×H×W cases).

use super::cases_core::large;
use super::{Case, Work};
use crate::ops;
use crate::tensor::Tensor;

fn rows(small: bool) -> usize {
    if small { 1024 } else { 4096 }
}

fn nchw(small: bool) -> [usize; 4] {
    [if small { 8 } else { 32 }, 64, 56, 56]
}

fn nchw_large(small: bool) -> [usize; 4] {
    [if small { 8 } else { 128 }, 64, 56, 56]
}

fn big(small: bool) -> usize {
    numel(large(small))
}

fn numel<const N: usize>(s: [usize; N]) -> usize {
    s.iter().product()
}

type Runner = super::Runner;
type Dev = crate::Device;
type R<T> = crate::Result<T>;

fn sum_axis(dev: &Dev, shape: [usize; 2], axis: isize, seed: u64) -> R<Runner> {
    let a = Tensor::randn(dev, &shape, 0.0, 1.0, seed)?;
    Ok(Box::new(move || {
        Ok(vec![ops::sum(&a, Some(&[axis]), false)?])
    }))
}

fn sum_full(dev: &Dev, shape: [usize; 2], seed: u64) -> R<Runner> {
    let a = Tensor::randn(dev, &shape, 0.0, 1.0, seed)?;
    Ok(Box::new(move || Ok(vec![ops::sum(&a, None, false)?])))
}

fn rts(dev: &Dev, shape: [usize; 4]) -> R<Runner> {
    let g = Tensor::randn(dev, &shape, 0.0, 1.0, 14)?;
    Ok(Box::new(move || {
        Ok(vec![ops::reduce_to_shape(&g, &[1, 64, 1, 1])?])
    }))
}

fn softmax_rows(dev: &Dev, shape: [usize; 2]) -> R<Runner> {
    let a = Tensor::randn(dev, &shape, 0.0, 1.0, 15)?;
    Ok(Box::new(move || Ok(vec![ops::softmax(&a, -1)?])))
}

fn chain(dev: &Dev, shape: [usize; 2]) -> R<Runner> {
    let a = Tensor::randn(dev, &shape, 0.0, 1.0, 16)?;
    let b = Tensor::randn(dev, &shape, 0.0, 1.0, 17)?;
    let c = Tensor::randn(dev, &[shape[1]], 0.0, 1.0, 18)?;
    Ok(Box::new(move || {
        Ok(vec![ops::fused("max(x0 * x1 + x2, 0)", &[&a, &b, &c])?])
    }))
}

fn batch_norm(dev: &Dev, shape: [usize; 4]) -> R<Runner> {
    let x = Tensor::randn(dev, &shape, 0.0, 1.0, 19)?;
    let g = Tensor::ones(dev, &[64])?;
    let b = Tensor::zeros(dev, &[64])?;
    let (rm, rv) = (Tensor::zeros(dev, &[64])?, Tensor::ones(dev, &[64])?);
    Ok(Box::new(move || {
        let o = ops::batch_norm2d(&x, Some(&g), Some(&b), &rm, &rv, 0.1, 1e-5, true)?;
        Ok(vec![o.out.y, o.running_var])
    }))
}

/// Training batch_norm2d's backward (read x and the output gradient, write dx) after one forward at set-up.
fn batch_norm_bwd(dev: &Dev, shape: [usize; 4]) -> R<Runner> {
    let x = Tensor::randn(dev, &shape, 0.0, 1.0, 19)?;
    let gy = Tensor::randn(dev, &shape, 0.0, 1.0, 20)?;
    let g = Tensor::ones(dev, &[64])?;
    let b = Tensor::zeros(dev, &[64])?;
    let (rm, rv) = (Tensor::zeros(dev, &[64])?, Tensor::ones(dev, &[64])?);
    let o = ops::batch_norm2d(&x, Some(&g), Some(&b), &rm, &rv, 0.1, 1e-5, true)?;
    Ok(Box::new(move || {
        let r = ops::batch_norm2d_backward(&x, &gy, &o.out, Some(&g), true)?;
        Ok([Some(r.dx), r.dgamma, r.dbeta]
            .into_iter()
            .flatten()
            .collect())
    }))
}

/// `sum_axis1_4096` (the peer script's case: reduce_sum over axis 1 of 4096×4096 in every size), the sum
/// of every element of 4096×4096, a bias gradient N×C×H×W → C through `reduce_to_shape`, a row softmax, a
/// fused multiply-add-ReLU chain over three inputs and a training batch_norm2d (read x, write y), each also
/// as `_large`, and the batch_norm2d backward (read x and the gradient, write dx).
pub(super) fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "sum_axis1_4096",
            work: |_| Work::Bytes((4096 * 4096 * 4 + 4096 * 4) as f64),
            setup: |dev, _| sum_axis(dev, [4096, 4096], 1, 11),
        },
        Case {
            name: "sum_axis0_4096",
            work: |_| Work::Bytes((4096 * 4096 * 4 + 4096 * 4) as f64),
            setup: |dev, _| sum_axis(dev, [4096, 4096], 0, 12),
        },
        Case {
            name: "sum_full_4096",
            work: |_| Work::Bytes((4096 * 4096 * 4) as f64),
            setup: |dev, _| sum_full(dev, [4096, 4096], 13),
        },
        Case {
            name: "reduce_to_shape_bias_nchw",
            work: |small| Work::Bytes((numel(nchw(small)) * 4 + 64 * 4) as f64),
            setup: |dev, small| rts(dev, nchw(small)),
        },
        Case {
            name: "softmax_rows_4096x1024",
            work: |small| Work::Bytes((2 * rows(small) * 1024 * 4) as f64),
            setup: |dev, small| softmax_rows(dev, [rows(small), 1024]),
        },
        Case {
            name: "fused_chain_4096",
            work: |small| Work::Bytes((3 * rows(small) * 4096 * 4 + 4096 * 4) as f64),
            setup: |dev, small| chain(dev, [rows(small), 4096]),
        },
        Case {
            name: "batch_norm_train_nchw",
            work: |small| Work::Bytes((2 * numel(nchw(small)) * 4) as f64),
            setup: |dev, small| batch_norm(dev, nchw(small)),
        },
        Case {
            name: "batch_norm_train_nchw_bwd",
            work: |small| Work::Bytes((3 * numel(nchw(small)) * 4) as f64),
            setup: |dev, small| batch_norm_bwd(dev, nchw(small)),
        },
        Case {
            name: "sum_axis1_large",
            work: |s| Work::Bytes(((big(s) + large(s)[0]) * 4) as f64),
            setup: |dev, small| sum_axis(dev, large(small), 1, 31),
        },
        Case {
            name: "sum_axis0_large",
            work: |s| Work::Bytes(((big(s) + large(s)[1]) * 4) as f64),
            setup: |dev, small| sum_axis(dev, large(small), 0, 32),
        },
        Case {
            name: "sum_full_large",
            work: |s| Work::Bytes((big(s) * 4) as f64),
            setup: |dev, small| sum_full(dev, large(small), 33),
        },
        Case {
            name: "reduce_to_shape_bias_nchw_large",
            work: |small| Work::Bytes((numel(nchw_large(small)) * 4 + 64 * 4) as f64),
            setup: |dev, small| rts(dev, nchw_large(small)),
        },
        Case {
            name: "softmax_rows_large",
            work: |s| Work::Bytes((2 * big(s) * 4) as f64),
            setup: |dev, small| softmax_rows(dev, large(small)),
        },
        Case {
            name: "fused_chain_large",
            work: |s| Work::Bytes(((3 * big(s) + large(s)[1]) * 4) as f64),
            setup: |dev, small| chain(dev, large(small)),
        },
        Case {
            name: "batch_norm_train_nchw_large",
            work: |small| Work::Bytes((2 * numel(nchw_large(small)) * 4) as f64),
            setup: |dev, small| batch_norm(dev, nchw_large(small)),
        },
    ]
}
