//! softmax and log_softmax over any axis with their backward, and the fused cross-entropy from logits and
//! integer labels.
//!
//! Both run over the view [O, R, I] (R the softmax axis). Rows (I = 1) choose by autotune between one
//! work-group per row holding the row in registers (read once, written once; rows of a multiple of 4), one
//! work-group per row with local-memory trees (GPUs) and one work-item per row without barriers (CPU
//! OpenCL); other axes run one work-item per (o, i), coalesced across i.

use super::limit;
use super::policy::{OpClass, expect_float, output_dtype, store_as, widen};
pub use crate::contract::softmax::SoftmaxAlgo;
use crate::contract::softmax::{CrossEntropy, SoftmaxRows};
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

use super::reduce::{Ori, normalize_axes};

fn view(x: &Tensor, axis: isize, op: &str) -> Result<Ori> {
    expect_float(x, op)?;
    limit(x, op)?;
    let shape = x.shape();
    if shape.is_empty() {
        return Ok(Ori { o: 1, r: 1, i: 1 });
    }
    let a = normalize_axes(Some(&[axis]), shape.len(), op)?[0];
    Ok(Ori {
        o: shape[..a].iter().product(),
        r: shape[a],
        i: shape[a + 1..].iter().product(),
    })
}

fn forward(log: bool, x: &Tensor, axis: isize, algo: Option<SoftmaxAlgo>) -> Result<Tensor> {
    let name = if log { "log_softmax" } else { "softmax" };
    let v = view(x, axis, name)?;
    let dtype = output_dtype(OpClass::Store16, &[x], name)?;
    let y = Tensor::empty(x.device(), x.shape(), dtype)?;
    if y.numel() > 0 {
        let s = SoftmaxRows::new(log, v, x, &y, algo);
        x.device().backend().softmax(x.device(), s)?;
    }
    Ok(y)
}

fn backward(
    log: bool,
    y: &Tensor,
    g: &Tensor,
    axis: isize,
    algo: Option<SoftmaxAlgo>,
) -> Result<Tensor> {
    let name = if log {
        "log_softmax_backward"
    } else {
        "softmax_backward"
    };
    let v = view(y, axis, name)?;
    y.same_device(&[g], name)?;
    expect_float(g, name)?;
    if g.shape() != y.shape() {
        return Err(Error::shape_mismatch(
            format!("{name} gradient"),
            y.shape(),
            g.shape(),
        ));
    }
    // The input's gradient is stored like the output y (the input's dtype, or f16 under the policy).
    let gx = Tensor::empty(y.device(), y.shape(), y.dtype())?;
    if gx.numel() > 0 {
        let s = SoftmaxRows::new(log, v, y, &gx, algo);
        y.device().backend().softmax_backward(y.device(), s, g)?;
    }
    Ok(gx)
}

/// `exp(x − max) / Σ exp(x − max)` along `axis` (negative counts from the end).
pub fn softmax(x: &Tensor, axis: isize) -> Result<Tensor> {
    forward(false, x, axis, None)
}
/// `x − max − log Σ exp(x − max)` along `axis`.
pub fn log_softmax(x: &Tensor, axis: isize) -> Result<Tensor> {
    forward(true, x, axis, None)
}
/// [`softmax`] (or [`log_softmax`] when `log`) with the row algorithm forced when given.
pub fn softmax_with(
    x: &Tensor,
    axis: isize,
    log: bool,
    algo: Option<SoftmaxAlgo>,
) -> Result<Tensor> {
    forward(log, x, axis, algo)
}
/// The softmax input gradient `y·(g − Σ g·y)` from the output `y` and output gradient `grad`.
pub fn softmax_backward(y: &Tensor, grad: &Tensor, axis: isize) -> Result<Tensor> {
    backward(false, y, grad, axis, None)
}
/// The log_softmax input gradient `g − e^y·Σ g` from the output `y` and output gradient `grad`.
pub fn log_softmax_backward(y: &Tensor, grad: &Tensor, axis: isize) -> Result<Tensor> {
    backward(true, y, grad, axis, None)
}
/// Either backward with the row algorithm forced when given.
pub fn softmax_backward_with(
    y: &Tensor,
    grad: &Tensor,
    axis: isize,
    log: bool,
    algo: Option<SoftmaxAlgo>,
) -> Result<Tensor> {
    backward(log, y, grad, axis, algo)
}

fn check_ce(logits: &Tensor, labels: &Tensor) -> Result<()> {
    logits.same_device(&[labels], "cross_entropy")?;
    expect_float(logits, "cross_entropy")?;
    labels.expect_dtype(DType::I32, "cross_entropy labels")?;
    let s = logits.shape();
    if s.len() != 2 || labels.shape() != [s[0]] {
        return Err(Error::Shape(format!(
            "cross_entropy: logits must be [N, C] and labels [N]; got logits {s:?} and labels {:?}",
            labels.shape()
        )));
    }
    if logits.numel() > i32::MAX as usize {
        return Err(Error::Limit(format!(
            "cross_entropy: {} logits exceed the 2^31-1 per-op limit",
            logits.numel()
        )));
    }
    Ok(())
}

fn ce_stats(logits: &Tensor, labels: &Tensor, ignore_index: i32) -> Result<Tensor> {
    check_ce(logits, labels)?;
    // The loss is f32 (OpClass::Keep32); f16 logits are widened on the device first.
    let logits = &widen(logits)?;
    let dev = logits.device();
    let stats = Tensor::empty(dev, &[3], DType::F32)?;
    dev.backend()
        .cross_entropy(CrossEntropy::new(logits, labels, ignore_index, &stats))?;
    let s = stats.to_vec::<f32>()?;
    if s[2] >= 0.0 {
        let row = s[2] as usize;
        let lab = labels.to_vec::<i32>()?.get(row).copied().unwrap_or(0);
        return Err(Error::Invalid(format!(
            "cross_entropy: label {lab} of row {row} is outside [0, {}) and is not ignore_index {ignore_index}",
            logits.shape()[1]
        )));
    }
    Ok(stats)
}

/// The mean over non-ignored rows of `log Σ e^x − x[label]`, from logits [N, C] and i32 labels [N]; rows whose
/// label is `ignore_index` are skipped (all ignored gives NaN). A label outside [0, C) is an error.
pub fn cross_entropy(logits: &Tensor, labels: &Tensor, ignore_index: i32) -> Result<Tensor> {
    cross_entropy_keeping_stats(logits, labels, ignore_index).map(|(loss, _)| loss)
}

/// [`cross_entropy`] and its per-call statistics (the loss sum, the counted rows, the first bad row), which
/// [`cross_entropy_backward_from`] takes instead of computing and checking them again: a recorded loss's
/// backward then reads nothing back from the device.
pub(crate) fn cross_entropy_keeping_stats(
    logits: &Tensor,
    labels: &Tensor,
    ignore_index: i32,
) -> Result<(Tensor, Tensor)> {
    let stats = ce_stats(logits, labels, ignore_index)?;
    Ok((first_element(&stats)?, stats))
}

fn first_element(s: &Tensor) -> Result<Tensor> {
    let out = Tensor::empty(s.device(), &[], DType::F32)?;
    s.device().backend().copy(s.storage(), out.storage(), 4)?;
    Ok(out)
}

/// The logits' gradient of [`cross_entropy`] times the scalar output gradient `grad`:
/// `(softmax(x) − onehot(label))·grad / count` on counted rows, 0 on ignored rows.
pub fn cross_entropy_backward(
    logits: &Tensor,
    labels: &Tensor,
    grad: &Tensor,
    ignore_index: i32,
) -> Result<Tensor> {
    let stats = ce_stats(logits, labels, ignore_index)?;
    cross_entropy_backward_from(logits, labels, grad, ignore_index, &stats)
}

/// [`cross_entropy_backward`] with the statistics of the forward call that checked these logits and labels
/// ([`cross_entropy_keeping_stats`]).
pub(crate) fn cross_entropy_backward_from(
    logits: &Tensor,
    labels: &Tensor,
    grad: &Tensor,
    ignore_index: i32,
    stats: &Tensor,
) -> Result<Tensor> {
    logits.same_device(&[grad], "cross_entropy_backward")?;
    expect_float(grad, "cross_entropy_backward")?;
    if grad.numel() != 1 {
        return Err(Error::Shape(format!(
            "cross_entropy_backward: the output gradient must be a scalar, got {:?}",
            grad.shape()
        )));
    }
    // The logits' gradient keeps their dtype: computed from the widened logits, then stored back.
    let wide = widen(logits)?;
    let grad = widen(grad)?;
    let gx = Tensor::empty(logits.device(), logits.shape(), DType::F32)?;
    if gx.numel() > 0 {
        let ce = CrossEntropy::new(&wide, labels, ignore_index, stats);
        logits
            .device()
            .backend()
            .cross_entropy_backward(ce, &grad, &gx)?;
    }
    store_as(gx, logits.dtype())
}
