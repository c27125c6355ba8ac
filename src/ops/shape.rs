//! Shape and index ops: permute/transpose, narrow, cat, split, index_select, one_hot, and pad2d (zero or
//! reflect) with its backward. Every op copies into a new contiguous tensor on the device.

use super::limit;
use crate::contract::reduce::Ori;
pub(crate) use crate::contract::shape::Block;
use crate::contract::shape::{Pad, TopK};
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor, strides};

use super::policy::{expect_float, promote};
use super::reduce::normalize_axes;

/// Padding modes of [`pad2d`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PadMode {
    /// Zeros outside the input.
    Zero,
    /// Mirror without repeating the edge (`x[−1] = x[1]`); each pad must be smaller than its dimension.
    Reflect,
}

/// The axes of `x` reordered: output axis `k` is input axis `dims[k]`.
pub fn permute(x: &Tensor, dims: &[usize]) -> Result<Tensor> {
    expect_float(x, "permute")?;
    limit(x, "permute")?;
    let r = x.rank();
    let mut seen = vec![false; r];
    if dims.len() != r
        || dims
            .iter()
            .any(|&d| d >= r || std::mem::replace(&mut seen[d], true))
    {
        return Err(Error::Shape(format!(
            "permute: {dims:?} is not a permutation of the {r} axes of {:?}",
            x.shape()
        )));
    }
    if r > 8 {
        return Err(Error::Shape(format!("permute: at most 8 axes, got {r}")));
    }
    let st = strides(x.shape());
    let oshape: Vec<usize> = dims.iter().map(|&d| x.shape()[d]).collect();
    let y = Tensor::empty(x.device(), &oshape, x.dtype())?;
    if y.numel() > 0 {
        let os: Vec<usize> = oshape.iter().rev().copied().collect();
        let is: Vec<usize> = dims.iter().rev().map(|&d| st[d]).collect();
        x.device().backend().permute(x, &os, &is, &y)?;
    }
    Ok(y)
}

/// `x` with axes `a` and `b` swapped.
pub fn transpose(x: &Tensor, a: isize, b: isize) -> Result<Tensor> {
    let ax = normalize_axes(Some(&[a]), x.rank(), "transpose")?[0];
    let bx = normalize_axes(Some(&[b]), x.rank(), "transpose")?[0];
    let mut dims: Vec<usize> = (0..x.rank()).collect();
    dims.swap(ax, bx);
    permute(x, &dims)
}

fn view3(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (
        shape[..axis].iter().product(),
        shape[axis],
        shape[axis + 1..].iter().product(),
    )
}

/// Elements `start..start + len` of `axis`.
pub fn narrow(x: &Tensor, axis: isize, start: usize, len: usize) -> Result<Tensor> {
    expect_float(x, "narrow")?;
    limit(x, "narrow")?;
    let a = normalize_axes(Some(&[axis]), x.rank(), "narrow")?[0];
    let (o, n, i) = view3(x.shape(), a);
    if start.checked_add(len).is_none_or(|e| e > n) {
        return Err(Error::Shape(format!(
            "narrow: {start}..{} is outside axis {a} of {:?}",
            start.saturating_add(len),
            x.shape()
        )));
    }
    let mut shape = x.shape().to_vec();
    shape[a] = len;
    let y = Tensor::empty(x.device(), &shape, x.dtype())?;
    if y.numel() > 0 {
        x.device().backend().block_copy(
            x,
            &y,
            Block {
                o,
                len,
                i,
                sa: n,
                soff: start,
                da: len,
                doff: 0,
            },
        )?;
    }
    Ok(y)
}

/// Pieces of `sizes` along `axis` (they must add up to its extent).
pub fn split(x: &Tensor, axis: isize, sizes: &[usize]) -> Result<Vec<Tensor>> {
    let a = normalize_axes(Some(&[axis]), x.rank(), "split")?[0];
    if sizes.iter().sum::<usize>() != x.shape()[a] {
        return Err(Error::Shape(format!(
            "split: sizes {sizes:?} do not add up to axis {a} of {:?}",
            x.shape()
        )));
    }
    let mut start = 0;
    sizes
        .iter()
        .map(|&s| {
            let t = narrow(x, a as isize, start, s);
            start += s;
            t
        })
        .collect()
}

/// The tensors joined along `axis`; every other extent must match.
pub fn cat(xs: &[&Tensor], axis: isize) -> Result<Tensor> {
    let Some(first) = xs.first() else {
        return Err(Error::Invalid("cat: no tensors given".into()));
    };
    first.same_device(&xs[1..], "cat")?;
    let a = normalize_axes(Some(&[axis]), first.rank(), "cat")?[0];
    let mut shape = first.shape().to_vec();
    shape[a] = 0;
    for t in xs {
        expect_float(t, "cat")?;
        let ok = t.rank() == first.rank()
            && t.shape()
                .iter()
                .enumerate()
                .all(|(d, &s)| d == a || s == first.shape()[d]);
        if !ok {
            return Err(Error::Shape(format!(
                "cat: shape {:?} does not match {:?} outside axis {a}",
                t.shape(),
                first.shape()
            )));
        }
        shape[a] += t.shape()[a];
    }
    // Mixed f16 and f32 pieces join as f32 (the wider type), as elementwise ops promote.
    let y = Tensor::empty(first.device(), &shape, promote(xs))?;
    limit(&y, "cat")?;
    let (o, total, i) = view3(&shape, a);
    let mut off = 0;
    for t in xs {
        let len = t.shape()[a];
        if len > 0 && o * i > 0 {
            first.device().backend().block_copy(
                t,
                &y,
                Block {
                    o,
                    len,
                    i,
                    sa: len,
                    soff: 0,
                    da: total,
                    doff: off,
                },
            )?;
        }
        off += len;
    }
    Ok(y)
}

/// Slices of `axis` at `indices` (i32, each in range), in that order.
pub fn index_select(x: &Tensor, axis: isize, indices: &Tensor) -> Result<Tensor> {
    x.same_device(&[indices], "index_select")?;
    expect_float(x, "index_select")?;
    indices.expect_dtype(DType::I32, "index_select indices")?;
    limit(x, "index_select")?;
    if indices.rank() != 1 {
        return Err(Error::Shape(format!(
            "index_select: indices must be 1-D, got {:?}",
            indices.shape()
        )));
    }
    let a = normalize_axes(Some(&[axis]), x.rank(), "index_select")?[0];
    let (o, n, i) = view3(x.shape(), a);
    if let Some(bad) = indices
        .to_vec::<i32>()?
        .into_iter()
        .find(|&k| k < 0 || k as usize >= n)
    {
        return Err(Error::Invalid(format!(
            "index_select: index {bad} is outside 0..{n} (axis {a} of {:?})",
            x.shape()
        )));
    }
    let mut shape = x.shape().to_vec();
    shape[a] = indices.numel();
    let y = Tensor::empty(x.device(), &shape, x.dtype())?;
    limit(&y, "index_select")?;
    if y.numel() > 0 {
        let v = Ori { o, r: n, i };
        x.device().backend().index_select(x, indices, v, &y)?;
    }
    Ok(y)
}

/// The first of the i32 values of `t` outside 0..n, if any.
pub(crate) fn first_outside(t: &Tensor, n: usize) -> Result<Option<i32>> {
    Ok(t.to_vec::<i32>()?
        .into_iter()
        .find(|&k| k < 0 || k as usize >= n))
}

/// `[N, classes]` f32 with a 1 at each label; a label outside `0..classes` is an error.
pub fn one_hot(labels: &Tensor, classes: usize) -> Result<Tensor> {
    one_hot_as(labels, classes, DType::F32)
}

/// [`one_hot`] stored as `dtype` (f32 or f16; 0 and 1 are exact in both).
pub fn one_hot_as(labels: &Tensor, classes: usize, dtype: DType) -> Result<Tensor> {
    if !matches!(dtype, DType::F32 | DType::F16) {
        return Err(Error::Invalid(format!(
            "one_hot: the output dtype must be f32 or f16, got {}",
            dtype.name()
        )));
    }
    labels.expect_dtype(DType::I32, "one_hot")?;
    if labels.rank() != 1 {
        return Err(Error::Shape(format!(
            "one_hot: labels must be 1-D, got {:?}",
            labels.shape()
        )));
    }
    if let Some(bad) = first_outside(labels, classes)? {
        return Err(Error::Invalid(format!(
            "one_hot: label {bad} is outside 0..{classes}"
        )));
    }
    let y = Tensor::empty(labels.device(), &[labels.numel(), classes], dtype)?;
    limit(&y, "one_hot")?;
    if y.numel() > 0 {
        labels.device().backend().one_hot(labels, &y)?;
    }
    Ok(y)
}

fn pad_shape(shape: &[usize], pads: [usize; 4], mode: PadMode, op: &str) -> Result<Vec<usize>> {
    let [n, c, h, w] = match *shape {
        [n, c, h, w] => [n, c, h, w],
        _ => {
            return Err(Error::Shape(format!(
                "{op}: expected an N×C×H×W input, got {shape:?}"
            )));
        }
    };
    let [t, b, l, r] = pads;
    if mode == PadMode::Reflect && (t >= h || b >= h || l >= w || r >= w) {
        return Err(Error::Invalid(format!(
            "{op}: reflect padding {pads:?} must be smaller than the {h}×{w} input"
        )));
    }
    Ok(vec![n, c, h + t + b, w + l + r])
}

/// The device's pad2d launch for `pads` (`[top, bottom, left, right]`) and `mode`, forward or `back`.
fn pad_plan(pads: [usize; 4], mode: PadMode, back: bool) -> Pad {
    Pad {
        top: pads[0],
        left: pads[2],
        reflect: mode == PadMode::Reflect,
        back,
    }
}

/// Pads the last two dimensions of N×C×H×W by `[top, bottom, left, right]`.
pub fn pad2d(x: &Tensor, pads: [usize; 4], mode: PadMode) -> Result<Tensor> {
    expect_float(x, "pad2d")?;
    let shape = pad_shape(x.shape(), pads, mode, "pad2d")?;
    let y = Tensor::empty(x.device(), &shape, x.dtype())?;
    limit(&y, "pad2d")?;
    if y.numel() > 0 {
        x.device()
            .backend()
            .pad2d(x, &y, pad_plan(pads, mode, false))?;
    }
    Ok(y)
}

/// The input gradient of [`pad2d`] from the padded output's gradient.
pub fn pad2d_backward(
    grad: &Tensor,
    input_shape: &[usize],
    pads: [usize; 4],
    mode: PadMode,
) -> Result<Tensor> {
    expect_float(grad, "pad2d_backward")?;
    let shape = pad_shape(input_shape, pads, mode, "pad2d_backward")?;
    if grad.shape() != shape.as_slice() {
        return Err(Error::shape_mismatch(
            "pad2d_backward gradient",
            &shape,
            grad.shape(),
        ));
    }
    limit(grad, "pad2d_backward")?;
    let gx = Tensor::empty(grad.device(), input_shape, grad.dtype())?;
    if gx.numel() > 0 {
        let pad = pad_plan(pads, mode, true);
        grad.device().backend().pad2d(grad, &gx, pad)?;
    }
    Ok(gx)
}

/// The `k` largest (or smallest) values along `axis` in order, with their i32 indices. Ties keep the lower
/// index first; NaN ranks as the largest value. The values keep `x`'s dtype (f32 or f16).
pub fn topk(x: &Tensor, k: usize, axis: isize, largest: bool) -> Result<(Tensor, Tensor)> {
    expect_float(x, "topk")?;
    limit(x, "topk")?;
    let a = normalize_axes(Some(&[axis]), x.rank(), "topk")?[0];
    let (o, r, i) = view3(x.shape(), a);
    if k > r {
        return Err(Error::Shape(format!(
            "topk: k = {k} exceeds the {r} elements of axis {a} of {:?}",
            x.shape()
        )));
    }
    let mut shape = x.shape().to_vec();
    shape[a] = k;
    let vals = Tensor::empty(x.device(), &shape, x.dtype())?;
    let idx = Tensor::empty(x.device(), &shape, DType::I32)?;
    if vals.numel() > 0 {
        x.device().backend().topk(
            x,
            TopK {
                v: Ori { o, r, i },
                k,
                largest,
            },
            &vals,
            &idx,
        )?;
    }
    Ok((vals, idx))
}
