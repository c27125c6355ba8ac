//! The small ops of a transformer layer: rotary position embedding (netcl's layout: pairs (2t, 2t+1), angle
//! pos·base^(−2t/D)), `masked_fill` and `causal_mask`, and the embedding lookup with its gradient, an index-add
//! on the device.

use crate::contract::transformer::RopePlan;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

use super::limit;
use super::policy::{OpClass, expect_float, output_dtype};
use super::shape::{first_outside, index_select};

/// Rotary position embedding of x [..., S, D] (D even): each pair (x[2t], x[2t+1]) of the row at sequence
/// position s is rotated by `positions[s]·base^(−2t/D)`; `positions` (i32 [S]) defaults to 0..S. With
/// `inverse` the rotation is undone, which is also the gradient.
pub fn rope(x: &Tensor, positions: Option<&Tensor>, base: f32, inverse: bool) -> Result<Tensor> {
    let op = "rope";
    let dt = output_dtype(OpClass::Store16, &[x], op)?;
    let r = x.rank();
    if r < 2 {
        return Err(Error::Shape(format!(
            "{op}: x must be [..., S, D], got {:?}",
            x.shape()
        )));
    }
    let (s, d) = (x.shape()[r - 2], x.shape()[r - 1]);
    if d % 2 != 0 {
        return Err(Error::Shape(format!(
            "{op}: the last dimension {d} of {:?} must be even (rotated in pairs)",
            x.shape()
        )));
    }
    if !(base.is_finite() && base > 0.0) {
        return Err(Error::Invalid(format!(
            "{op}: base {base} must be finite and positive"
        )));
    }
    limit(x, op)?;
    let dev = x.device();
    let made;
    let pos = match positions {
        Some(p) => {
            x.same_device(&[p], op)?;
            p.expect_dtype(DType::I32, "rope positions")?;
            if p.shape() != [s] {
                return Err(Error::shape_mismatch(
                    format!("{op} positions for x {:?}", x.shape()),
                    &[s],
                    p.shape(),
                ));
            }
            p
        }
        None => {
            let v: Vec<i32> = (0..s as i32).collect();
            made = Tensor::from_slice(dev, &v, &[s])?;
            &made
        }
    };
    let y = Tensor::empty(dev, x.shape(), dt)?;
    if y.numel() > 0 {
        let plan = RopePlan {
            rows: x.numel() / d,
            s,
            d,
            base,
            inverse,
        };
        dev.backend().rope(plan, x, pos, &y)?;
    }
    Ok(y)
}

/// `x` with `value` wherever `mask ≠ 0`. The mask (f32 or f16) is x's trailing dimensions, leading 1s allowed, and
/// repeats over x's leading dimensions: an [S, S] or [1, 1, S, S] mask over [B, H, S, S] scores.
pub fn masked_fill(x: &Tensor, mask: &Tensor, value: f32) -> Result<Tensor> {
    let op = "masked_fill";
    x.same_device(&[mask], op)?;
    let dt = output_dtype(OpClass::Store16, &[x], op)?;
    expect_float(mask, "masked_fill mask")?;
    let ms: Vec<usize> = mask
        .shape()
        .iter()
        .copied()
        .skip_while(|&n| n == 1)
        .collect();
    if ms.len() > x.rank() || x.shape()[x.rank() - ms.len()..] != ms[..] {
        return Err(Error::Shape(format!(
            "{op}: mask {:?} is not the trailing dimensions of x {:?}",
            mask.shape(),
            x.shape()
        )));
    }
    limit(x, op)?;
    let y = Tensor::empty(x.device(), x.shape(), dt)?;
    if y.numel() > 0 {
        x.device().backend().masked_fill(x, mask, value, &y)?;
    }
    Ok(y)
}

/// The gradient of [`masked_fill`]: `grad` with zeros where the mask is set.
pub fn masked_fill_backward(grad: &Tensor, mask: &Tensor) -> Result<Tensor> {
    masked_fill(grad, mask, 0.0)
}

/// The [S, S] f32 mask of positions a decoder must not attend to: 1 above the diagonal (key j > query i),
/// 0 elsewhere.
pub fn causal_mask(device: &Device, s: usize) -> Result<Tensor> {
    let n = s
        .checked_mul(s)
        .filter(|&n| n <= i32::MAX as usize)
        .ok_or_else(|| {
            Error::Limit(format!(
                "causal_mask: {s}×{s} elements exceed the 2^31-1 per-op limit"
            ))
        })?;
    let mut v = crate::tensor::host_vec(n, 0.0f32)?;
    for i in 0..s {
        for x in &mut v[i * s + i + 1..(i + 1) * s] {
            *x = 1.0;
        }
    }
    Tensor::from_slice(device, &v, &[s, s])
}

fn check_indices(idx: &Tensor, n: usize, op: &str) -> Result<()> {
    idx.expect_dtype(DType::I32, &format!("{op} indices"))?;
    if let Some(bad) = first_outside(idx, n)? {
        return Err(Error::Invalid(format!(
            "{op}: index {bad} is outside 0..{n} (the table's rows)"
        )));
    }
    Ok(())
}

/// Rows of `weight` [V, E] at the i32 `indices` (any shape, each in 0..V): [..indices.shape, E], in the
/// weight's dtype (an f16 table is gathered as f16).
pub fn embedding(weight: &Tensor, indices: &Tensor) -> Result<Tensor> {
    let op = "embedding";
    weight.same_device(&[indices], op)?;
    expect_float(weight, op)?;
    let [v, e] = *weight.shape() else {
        return Err(Error::Shape(format!(
            "{op}: the weight must be [V, E], got {:?}",
            weight.shape()
        )));
    };
    check_indices(indices, v, op)?;
    let flat = indices.reshape(&[indices.numel()])?;
    let rows = index_select(weight, 0, &flat)?;
    let mut shape = indices.shape().to_vec();
    shape.push(e);
    rows.reshape(&shape)
}

/// The weight gradient of [`embedding`]: [V, E] zeros with each row `grad[n]` added at `indices[n]`
/// (repeated indices add up), computed on the device. An f16 gradient is read as f16; the table accumulates in
/// f32.
pub fn embedding_backward(
    indices: &Tensor,
    grad: &Tensor,
    num_embeddings: usize,
) -> Result<Tensor> {
    let op = "embedding_backward";
    indices.same_device(&[grad], op)?;
    expect_float(grad, &format!("{op} gradient"))?;
    let n = indices.numel();
    let want: Vec<usize> = indices.shape().iter().copied().chain([0]).collect();
    let gs = grad.shape();
    if gs.len() != want.len() || gs[..gs.len() - 1] != want[..want.len() - 1] {
        return Err(Error::Shape(format!(
            "{op}: the gradient {gs:?} must be the indices' shape {:?} plus the embedding dimension",
            indices.shape()
        )));
    }
    let e = gs[gs.len() - 1];
    check_indices(indices, num_embeddings, op)?;
    let dw = Tensor::zeros(grad.device(), &[num_embeddings, e])?;
    limit(&dw, op)?;
    limit(grad, op)?;
    if n > 0 && e > 0 {
        grad.device()
            .backend()
            .embedding_grad(indices, grad, e, &dw)?;
    }
    Ok(dw)
}
