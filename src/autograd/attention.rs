//! Differentiable attention and transformer ops: scaled dot-product attention (its backward recomputes the
//! probabilities from the saved log-sum-exp), rotary embedding, masked fill, embedding lookup and RMS norm.

use super::Var;
use crate::error::Result;
use crate::ops::{self, AttentionOut};
use crate::tensor::Tensor;

/// `softmax(q·kᵀ·scale [+ causal mask])·v` over [B, H, S, D] with gradients for q, k and v.
pub fn flash_attention(q: &Var, k: &Var, v: &Var, causal: bool, scale: Option<f32>) -> Result<Var> {
    let fwd = ops::flash_attention(q.value(), k.value(), v.value(), causal, scale)?;
    let (tq, tk, tv) = (q.value().clone(), k.value().clone(), v.value().clone());
    let saved = AttentionOut {
        out: fwd.out.clone(),
        lse: fwd.lse,
    };
    Ok(Var::from_op(
        "flash_attention",
        fwd.out,
        &[q, k, v],
        Box::new(move |g| {
            let gr = ops::flash_attention_backward(&tq, &tk, &tv, &saved, g, causal, scale)?;
            Ok(vec![Some(gr.dq), Some(gr.dk), Some(gr.dv)])
        }),
    ))
}

/// Rotary position embedding of x [..., S, D]; the gradient is the inverse rotation.
pub fn rope(x: &Var, positions: Option<&Tensor>, base: f32) -> Result<Var> {
    let y = ops::rope(x.value(), positions, base, false)?;
    let pos = positions.cloned();
    Ok(Var::from_op(
        "rope",
        y,
        &[x],
        Box::new(move |g| Ok(vec![Some(ops::rope(g, pos.as_ref(), base, true)?)])),
    ))
}

/// `x` with `value` where `mask ≠ 0`; no gradient flows to the filled positions.
pub fn masked_fill(x: &Var, mask: &Tensor, value: f32) -> Result<Var> {
    let y = ops::masked_fill(x.value(), mask, value)?;
    let m = mask.clone();
    Ok(Var::from_op(
        "masked_fill",
        y,
        &[x],
        Box::new(move |g| Ok(vec![Some(ops::masked_fill_backward(g, &m)?)])),
    ))
}

/// Rows of `weight` [V, E] at i32 `indices`; the weight's gradient is an index-add on the device.
pub fn embedding(weight: &Var, indices: &Tensor) -> Result<Var> {
    let y = ops::embedding(weight.value(), indices)?;
    let (idx, v) = (indices.clone(), weight.value().shape()[0]);
    Ok(Var::from_op(
        "embedding",
        y,
        &[weight],
        Box::new(move |g| Ok(vec![Some(ops::embedding_backward(&idx, g, v)?)])),
    ))
}

/// RMS normalisation over the last dimension, `x / √(mean(x²) + ε) · γ`, with gradients for x and γ.
pub fn rms_norm(x: &Var, gamma: &Var, eps: f32) -> Result<Var> {
    let out = ops::rms_norm(x.value(), Some(gamma.value()), eps)?;
    let (tx, tg, stats) = (x.value().clone(), gamma.value().clone(), out.clone());
    Ok(Var::from_op(
        "rms_norm",
        out.y,
        &[x, gamma],
        Box::new(move |g| {
            let gr = ops::rms_norm_backward(&tx, g, &stats, Some(&tg))?;
            Ok(vec![Some(gr.dx), gr.dgamma])
        }),
    ))
}
