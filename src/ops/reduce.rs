//! Reductions: sum, mean, max, min, prod (and the sum of squares) over any set of axes with keepdims,
//! argmax/argmin along one axis, `reduce_to_shape` for broadcast gradients, the full sum and the global L2
//! norm of many tensors.
//!
//! A reduction over a set of axes runs one pass per contiguous group of reduced axes, each pass over the
//! canonical view [O, R, I] (reduce R). The pass's algorithm is chosen by the autotuner per shape bucket:
//! work-group trees (GPUs), barrier-free float8 chunks per work-item (CPU OpenCL), or column loops coalesced
//! across I; each may split R into G chunks (two stages) when O·I alone gives too little parallelism.

use super::limit;
use super::policy::{OpClass, expect_float, output_dtype, store_as, widen};
pub(crate) use crate::contract::reduce::Ori;
pub use crate::contract::reduce::{ReduceAlgo, ReduceOp, RtsAlgo, RtsPlan};
use crate::contract::reduce::{ReducePass, ToShape};
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// Normalises `axes` (negative counts from the end) against `rank`; `None` means every axis.
pub fn normalize_axes(axes: Option<&[isize]>, rank: usize, op: &str) -> Result<Vec<usize>> {
    let Some(axes) = axes else {
        return Ok((0..rank).collect());
    };
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let r = rank as isize;
        if a < -r || a >= r {
            return Err(Error::Shape(format!(
                "{op}: axis {a} is out of range for a tensor of rank {rank} (valid: {}..={})",
                -r,
                r - 1
            )));
        }
        let a = if a < 0 { (a + r) as usize } else { a as usize };
        if out.contains(&a) {
            return Err(Error::Shape(format!("{op}: axis {a} is given twice")));
        }
        out.push(a);
    }
    out.sort_unstable();
    Ok(out)
}

/// `op` over `axes` (all axes when `None`), keeping reduced axes as size 1 when `keepdims`.
pub fn reduce(op: ReduceOp, x: &Tensor, axes: Option<&[isize]>, keepdims: bool) -> Result<Tensor> {
    reduce_with(op, x, axes, keepdims, None)
}

/// [`reduce`] with every pass forced to `algo` when given (`Wg`/`Chunk` apply to passes with I = 1, `Col` to
/// passes with I > 1; the other kind is autotuned).
pub fn reduce_with(
    op: ReduceOp,
    x: &Tensor,
    axes: Option<&[isize]>,
    keepdims: bool,
    algo: Option<ReduceAlgo>,
) -> Result<Tensor> {
    // f16 inputs are read as halves and accumulated in f32; the result is f32 (OpClass::Keep32: a sum can
    // leave f16's range, and reductions feed losses and statistics).
    let dtype = output_dtype(OpClass::Keep32, &[x], op.name())?;
    limit(x, op.name())?;
    let shape = x.shape().to_vec();
    let axes = normalize_axes(axes, shape.len(), op.name())?;
    let out_shape: Vec<usize> = if keepdims {
        shape
            .iter()
            .enumerate()
            .map(|(d, &s)| if axes.contains(&d) { 1 } else { s })
            .collect()
    } else {
        shape
            .iter()
            .enumerate()
            .filter(|(d, _)| !axes.contains(d))
            .map(|(_, &s)| s)
            .collect()
    };
    let count: usize = axes.iter().map(|&a| shape[a]).product();
    if count == 0
        && matches!(op, ReduceOp::Max | ReduceOp::Min)
        && out_shape.iter().product::<usize>() > 0
    {
        return Err(Error::Shape(format!(
            "{}: reduction over an empty axis of shape {shape:?} has no identity",
            op.name()
        )));
    }
    let out = Tensor::empty(x.device(), &out_shape, dtype)?;
    if out.numel() == 0 {
        return Ok(out);
    }
    // Groups of adjacent reduced axes, innermost first, each one pass.
    let mut groups: Vec<(usize, usize)> = Vec::new();
    for &a in &axes {
        match groups.last_mut() {
            Some((_, end)) if *end == a => *end = a + 1,
            _ => groups.push((a, a + 1)),
        }
    }
    let dev = x.device();
    if groups.is_empty() {
        // Nothing to reduce: the op of one element (the pre-map still applies to a sum of squares).
        let v = Ori {
            o: x.numel(),
            r: 1,
            i: 1,
        };
        let p = ReducePass::new(op, true, v, 1.0, x, &out, 0, algo);
        dev.backend().reduce_pass(dev, p)?;
        return Ok(out);
    }
    let scale = if op == ReduceOp::Mean {
        1.0 / count as f32
    } else {
        1.0
    };
    let mut cur = x.clone();
    let mut cur_shape = shape.clone();
    let n = groups.len();
    for (k, &(s, e)) in groups.iter().rev().enumerate() {
        let o: usize = cur_shape[..s].iter().product();
        let r: usize = cur_shape[s..e].iter().product();
        let i: usize = cur_shape[e..].iter().product();
        let last = k + 1 == n;
        let dst = if last {
            out.clone()
        } else {
            Tensor::empty(dev, &[o * i], DType::F32)?
        };
        let this_op = if k == 0 { op } else { op.rest() };
        let scale = if last { scale } else { 1.0 };
        let p = ReducePass::new(this_op, k == 0, Ori { o, r, i }, scale, &cur, &dst, 0, algo);
        dev.backend().reduce_pass(dev, p)?;
        cur_shape[s..e].fill(1);
        cur = dst;
    }
    Ok(out)
}

/// Σx over `axes` (all when `None`).
pub fn sum(x: &Tensor, axes: Option<&[isize]>, keepdims: bool) -> Result<Tensor> {
    reduce(ReduceOp::Sum, x, axes, keepdims)
}
/// The mean over `axes` (all when `None`).
pub fn mean(x: &Tensor, axes: Option<&[isize]>, keepdims: bool) -> Result<Tensor> {
    reduce(ReduceOp::Mean, x, axes, keepdims)
}
/// The maximum over `axes` (all when `None`).
pub fn max(x: &Tensor, axes: Option<&[isize]>, keepdims: bool) -> Result<Tensor> {
    reduce(ReduceOp::Max, x, axes, keepdims)
}
/// The minimum over `axes` (all when `None`).
pub fn min(x: &Tensor, axes: Option<&[isize]>, keepdims: bool) -> Result<Tensor> {
    reduce(ReduceOp::Min, x, axes, keepdims)
}
/// The product over `axes` (all when `None`).
pub fn prod(x: &Tensor, axes: Option<&[isize]>, keepdims: bool) -> Result<Tensor> {
    reduce(ReduceOp::Prod, x, axes, keepdims)
}

/// The sum of every element, as a rank-0 tensor. An empty tensor sums to 0.
pub fn sum_all(x: &Tensor) -> Result<Tensor> {
    reduce(ReduceOp::Sum, x, None, false)
}

fn arg_reduce(max: bool, x: &Tensor, axis: isize, keepdims: bool) -> Result<Tensor> {
    let name = if max { "argmax" } else { "argmin" };
    expect_float(x, name)?;
    limit(x, name)?;
    let shape = x.shape();
    let a = normalize_axes(Some(&[axis]), shape.len(), name)?[0];
    let mut out_shape = shape.to_vec();
    if keepdims {
        out_shape[a] = 1;
    } else {
        out_shape.remove(a);
    }
    let out = Tensor::empty(x.device(), &out_shape, DType::I32)?;
    if out.numel() == 0 {
        return Ok(out);
    }
    if shape[a] == 0 {
        return Err(Error::Shape(format!(
            "{name}: axis {a} of shape {shape:?} is empty"
        )));
    }
    let v = Ori {
        o: shape[..a].iter().product(),
        r: shape[a],
        i: shape[a + 1..].iter().product(),
    };
    x.device().backend().arg_reduce(max, v, x, &out)?;
    Ok(out)
}

/// The index (i32) of the first largest value along `axis`; a NaN counts as largest.
pub fn argmax(x: &Tensor, axis: isize, keepdims: bool) -> Result<Tensor> {
    arg_reduce(true, x, axis, keepdims)
}
/// The index (i32) of the first smallest value along `axis`; a NaN counts as smallest.
pub fn argmin(x: &Tensor, axis: isize, keepdims: bool) -> Result<Tensor> {
    arg_reduce(false, x, axis, keepdims)
}

/// Sums `grad` over the axes along which `target_shape` was broadcast, giving a tensor of exactly
/// `target_shape` (the gradient of a broadcast operand).
///
/// On OpenCL: one work-group of 256 per output element with a tree reduction once 256 or more elements fold
/// into each output, one work-item per output element otherwise.
pub fn reduce_to_shape(grad: &Tensor, target_shape: &[usize]) -> Result<Tensor> {
    reduce_to_shape_with(grad, target_shape, None)
}

/// [`reduce_to_shape`] with the algorithm forced when given: `RtsAlgo::Wg(g)` and `RtsAlgo::Flat(g)` apply
/// where 256 or more elements fold into each output (elsewhere the one-work-item rule runs), `RtsAlgo::Item`
/// everywhere.
pub fn reduce_to_shape_with(
    grad: &Tensor,
    target_shape: &[usize],
    algo: Option<RtsAlgo>,
) -> Result<Tensor> {
    if matches!(algo, Some(RtsAlgo::Wg(0) | RtsAlgo::Flat(0))) {
        return Err(Error::Invalid(
            "reduce_to_shape: a work-group algorithm needs at least one group per output".into(),
        ));
    }
    expect_float(grad, "reduce_to_shape")?;
    limit(grad, "reduce_to_shape")?;
    let plan = RtsPlan::new(grad.shape(), target_shape)?;
    if grad.shape() == target_shape {
        return grad.deep_clone();
    }
    // An f16 gradient is widened on the device, summed in f32 and stored back as f16 (the gradient keeps its
    // tensor's dtype).
    let wide = widen(grad)?;
    let out = Tensor::empty(grad.device(), target_shape, DType::F32)?;
    if out.numel() == 0 {
        return store_as(out, grad.dtype());
    }
    let r = ToShape::new(&wide, &out, &plan, algo);
    grad.device().backend().reduce_to_shape(grad.device(), r)?;
    store_as(out, grad.dtype())
}

/// √(Σ over every tensor of Σx²): the global L2 norm used for gradient clipping, as a rank-0 tensor.
pub fn global_l2_norm(tensors: &[&Tensor]) -> Result<Tensor> {
    let Some(first) = tensors.first() else {
        return Err(Error::Invalid("global_l2_norm: no tensors given".into()));
    };
    first.same_device(&tensors[1..], "global_l2_norm")?;
    let dev = first.device();
    let parts = Tensor::zeros(dev, &[tensors.len()])?;
    for (k, t) in tensors.iter().enumerate() {
        expect_float(t, "global_l2_norm")?;
        limit(t, "global_l2_norm")?;
        if t.numel() == 0 {
            continue;
        }
        let v = Ori {
            o: 1,
            r: t.numel(),
            i: 1,
        };
        let p = ReducePass::new(ReduceOp::SumSq, true, v, 1.0, t, &parts, k, None);
        dev.backend().reduce_pass(dev, p)?;
    }
    let out = Tensor::empty(dev, &[], DType::F32)?;
    dev.backend().sqrt_sum(&parts, &out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rts_plan_merges_axes() {
        let p = RtsPlan::new(&[8, 3, 5, 5], &[3, 1, 1]).ok();
        assert_eq!(
            p.as_ref()
                .map(|p| (p.kshape.clone(), p.rshape.clone(), p.r)),
            Some((vec![3], vec![25, 8], 200))
        );
        assert!(RtsPlan::new(&[4, 3], &[2, 3]).is_err());
        assert!(RtsPlan::new(&[4, 3], &[1, 1, 3]).is_ok());
        assert!(RtsPlan::new(&[4, 3], &[2, 4, 3]).is_err());
    }

    #[test]
    fn axes_are_validated() {
        assert_eq!(
            normalize_axes(Some(&[-1, 0]), 3, "sum").ok(),
            Some(vec![0, 2])
        );
        assert!(
            normalize_axes(Some(&[3]), 3, "sum")
                .is_err_and(|e| e.to_string().contains("out of range"))
        );
        assert!(normalize_axes(Some(&[1, -2]), 3, "sum").is_err());
    }
}
