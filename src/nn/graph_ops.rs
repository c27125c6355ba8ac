//! The differentiable shape and product steps that the attention layers and the extra losses are built from:
//! axis permutation, a slice along one axis, batched products with either side transposed, and a `Linear`
//! applied over the last dimension of an input of any rank.

use crate::autograd::record;
use crate::autograd::{Var, ops as ag};
use crate::error::{Error, Result};
use crate::ops;
use crate::tensor::Tensor;

/// The axes reordered (output axis `k` is input axis `dims[k]`); the gradient is permuted back.
pub(crate) fn permute(x: &Var, dims: &[usize]) -> Result<Var> {
    let y = ops::permute(x.value(), dims)?;
    let mut inv = vec![0usize; dims.len()];
    for (k, &d) in dims.iter().enumerate() {
        inv[d] = k;
    }
    record("permute", y, &[x], move |g| {
        Ok(vec![Some(ops::permute(g, &inv)?)])
    })
}

/// Elements `start..start + len` of `axis`; the gradient is placed back between zeros.
pub(crate) fn narrow(x: &Var, axis: usize, start: usize, len: usize) -> Result<Var> {
    let y = ops::narrow(x.value(), axis as isize, start, len)?;
    let shape = x.shape().to_vec();
    record("narrow", y, &[x], move |g| {
        let dev = g.device();
        let mut before = shape.clone();
        before[axis] = start;
        let mut after = shape.clone();
        after[axis] = shape[axis] - start - len;
        let zb = Tensor::zeros(dev, &before)?;
        let za = Tensor::zeros(dev, &after)?;
        let parts: Vec<&Tensor> = [&zb, g, &za]
            .into_iter()
            .filter(|t| t.shape()[axis] > 0)
            .collect();
        Ok(vec![Some(ops::cat(&parts, axis as isize)?)])
    })
}

/// `n` equal pieces of the last axis (netcl's `chunk(x, n, axis=-1)`).
pub(crate) fn chunk_last(x: &Var, n: usize) -> Result<Vec<Var>> {
    let r = x.shape().len();
    let last = *x
        .shape()
        .last()
        .ok_or_else(|| Error::Shape("chunk: a scalar has no last axis".into()))?;
    if n == 0 || !last.is_multiple_of(n) {
        return Err(Error::Shape(format!(
            "chunk: the last axis of {:?} does not split into {n} equal pieces",
            x.shape()
        )));
    }
    let w = last / n;
    (0..n).map(|i| narrow(x, r - 1, i * w, w)).collect()
}

/// Batched `op(a) · op(b)` over 3-D tensors with equal batches, with both gradients.
pub(crate) fn bmm(a: &Var, b: &Var, trans_a: bool, trans_b: bool) -> Result<Var> {
    let y = ops::bmm(a.value(), b.value(), trans_a, trans_b)?;
    let (ta, tb) = (a.value().clone(), b.value().clone());
    let (ra, rb) = (a.requires_grad(), b.requires_grad());
    record("bmm", y, &[a, b], move |g| {
        // C = op(A)·op(B): dop(A) = G·op(B)ᵀ, dop(B) = op(A)ᵀ·G, then undo each op.
        let ga = if !ra {
            None
        } else if trans_a {
            Some(ops::bmm(&tb, g, trans_b, true)?)
        } else {
            Some(ops::bmm(g, &tb, false, !trans_b)?)
        };
        let gb = if !rb {
            None
        } else if trans_b {
            Some(ops::bmm(g, &ta, true, trans_a)?)
        } else {
            Some(ops::bmm(&ta, g, !trans_a, false)?)
        };
        Ok(vec![ga, gb])
    })
}

/// `x @ wᵀ` for 2-D `x` (M, K) and `w` (N, K).
pub(crate) fn matmul_nt(x: &Var, w: &Var) -> Result<Var> {
    let y = ops::matmul_t(x.value(), w.value(), false, true)?;
    let (tx, tw) = (x.value().clone(), w.value().clone());
    let (rx, rw) = (x.requires_grad(), w.requires_grad());
    record("matmul_nt", y, &[x, w], move |g| {
        let gx = if rx { Some(ops::matmul(g, &tw)?) } else { None };
        let gw = if rw {
            Some(ops::matmul_t(g, &tx, true, false)?)
        } else {
            None
        };
        Ok(vec![gx, gw])
    })
}

/// `x @ w + b` over the last dimension of `x` (any rank ≥ 1): the leading dimensions are kept, as netcl's
/// `Linear` does.
pub(crate) fn linear_last(x: &Var, w: &Var, b: Option<&Var>) -> Result<Var> {
    let s = x.shape().to_vec();
    let out = w.shape()[1];
    if s.len() == 2 {
        return ag::linear(x, w, b);
    }
    let rows: usize = s[..s.len().saturating_sub(1)].iter().product();
    let flat = ag::reshape(x, &[rows, *s.last().unwrap_or(&0)])?;
    let y = ag::linear(&flat, w, b)?;
    let mut shape = s[..s.len().saturating_sub(1)].to_vec();
    shape.push(out);
    ag::reshape(&y, &shape)
}
