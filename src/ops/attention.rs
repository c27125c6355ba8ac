//! Scaled dot-product attention over [B, H, S, D]: the forward with the row log-sum-exp its backward needs,
//! the backward (dq, dk, dv recomputed from q, k and the log-sum-exp, never from a stored score matrix), and
//! one decode step against a KV cache.
//!
//! The kernels stream over keys with an online softmax (see the attention concept page). Several layouts
//! compute the same thing — local-memory tiles and register blocks for GPUs (and, for the backward, one fused
//! kernel that adds dq atomically), private per-row accumulators and vector lanes for CPU OpenCL — and the
//! tuner picks per device and shape class; `*_with` forces one.

use super::policy::{OpClass, autocast, current, output_dtype, store_as, widen};
pub use crate::contract::attention::{AttnAlgo, DecodeAlgo, MAX_HEAD_DIM};
use crate::contract::attention::{AttnGrads, AttnShape, DecodeShape};
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// The forward's output and the row log-sum-exp the backward recomputes probabilities from.
#[derive(Debug, Clone)]
pub struct AttentionOut {
    /// The attention output, [B, H, S, D].
    pub out: Tensor,
    /// `log Σ_j exp(q_i·k_j·scale)` over the keys row i sees, [B, H, S].
    pub lse: Tensor,
}

/// The input gradients of attention.
#[derive(Debug, Clone)]
pub struct AttentionGrads {
    /// Gradient of q.
    pub dq: Tensor,
    /// Gradient of k.
    pub dk: Tensor,
    /// Gradient of v.
    pub dv: Tensor,
}

fn limit(t: &Tensor, op: &str) -> Result<()> {
    if t.numel() > i32::MAX as usize {
        return Err(Error::Limit(format!(
            "{op}: {} elements exceed the 2^31-1 per-op limit",
            t.numel()
        )));
    }
    Ok(())
}

fn head_dim(d: usize, op: &str, shape: &[usize]) -> Result<()> {
    if d == 0 || d > MAX_HEAD_DIM {
        return Err(Error::Shape(format!(
            "{op}: head dimension {d} of {shape:?} is outside 1..={MAX_HEAD_DIM}"
        )));
    }
    Ok(())
}

fn the_scale(scale: Option<f32>, d: usize, op: &str) -> Result<f32> {
    let s = scale.unwrap_or(1.0 / (d as f32).sqrt());
    if !s.is_finite() {
        return Err(Error::Invalid(format!("{op}: scale {s} must be finite")));
    }
    Ok(s)
}

/// Checks q, k, v: f32, one device, the same [B, H, S, D] with 1 ≤ D ≤ 256.
fn check_qkv(q: &Tensor, k: &Tensor, v: &Tensor, op: &str) -> Result<[usize; 4]> {
    q.same_device(&[k, v], op)?;
    for (t, n) in [(q, "q"), (k, "k"), (v, "v")] {
        t.expect_dtype(DType::F32, &format!("{op} {n}"))?;
    }
    let [b, h, s, d] = *q.shape() else {
        return Err(Error::Shape(format!(
            "{op}: q must be [B, H, S, D], got {:?}",
            q.shape()
        )));
    };
    for (t, n) in [(k, "k"), (v, "v")] {
        if t.shape() != q.shape() {
            return Err(Error::shape_mismatch(
                format!("{op} {n} (the shape of q)"),
                q.shape(),
                t.shape(),
            ));
        }
    }
    head_dim(d, op, q.shape())?;
    limit(q, op)?;
    Ok([b, h, s, d])
}

/// `softmax(q·kᵀ·scale)·v` per (batch, head) over [B, H, S, D], with the causal mask (query i sees keys
/// j ≤ i) when `causal`; `scale` defaults to 1/√D. Returns the output and the row log-sum-exp.
pub fn flash_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    causal: bool,
    scale: Option<f32>,
) -> Result<AttentionOut> {
    flash_attention_with(q, k, v, causal, scale, None)
}

/// [`flash_attention`] with the kernel layout forced when given.
pub fn flash_attention_with(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    causal: bool,
    scale: Option<f32>,
    algo: Option<AttnAlgo>,
) -> Result<AttentionOut> {
    if current().is_some() || [q, k, v].iter().any(|t| t.dtype() == DType::F16) {
        // f16 (or the mixed policy): q, k, v widened on the device, the output stored in the policy's dtype,
        // the log-sum-exp kept f32.
        let dt = output_dtype(OpClass::Store16, &[q, k, v], "flash_attention")?;
        let (qw, kw, vw) = (widen(q)?, widen(k)?, widen(v)?);
        let _f32 = autocast(false);
        let r = flash_attention_with(&qw, &kw, &vw, causal, scale, algo)?;
        return Ok(AttentionOut {
            out: store_as(r.out, dt)?,
            lse: r.lse,
        });
    }
    let op = "flash_attention";
    let [b, h, s, d] = check_qkv(q, k, v, op)?;
    let p = AttnShape {
        bh: b * h,
        s,
        d,
        causal,
        scale: the_scale(scale, d, op)?,
    };
    let dev = q.device();
    let out = Tensor::empty(dev, q.shape(), DType::F32)?;
    let lse = Tensor::empty(dev, &[b, h, s], DType::F32)?;
    if out.numel() > 0 {
        dev.backend()
            .attention_forward(dev, p, q, k, v, &out, &lse, algo)?;
    }
    Ok(AttentionOut { out, lse })
}

/// The gradients of [`flash_attention`] from its inputs, its output, its log-sum-exp and the output gradient
/// `grad`, with the same `causal` and `scale`.
#[allow(clippy::too_many_arguments)]
pub fn flash_attention_backward(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    fwd: &AttentionOut,
    grad: &Tensor,
    causal: bool,
    scale: Option<f32>,
) -> Result<AttentionGrads> {
    flash_attention_backward_with(q, k, v, fwd, grad, causal, scale, None)
}

/// [`flash_attention_backward`] with the kernel layout forced when given.
#[allow(clippy::too_many_arguments)]
pub fn flash_attention_backward_with(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    fwd: &AttentionOut,
    grad: &Tensor,
    causal: bool,
    scale: Option<f32>,
    algo: Option<AttnAlgo>,
) -> Result<AttentionGrads> {
    if [q, k, v, &fwd.out, grad]
        .iter()
        .any(|t| t.dtype() == DType::F16)
    {
        // Widened on the device; each gradient is stored in its tensor's dtype.
        let w = AttentionOut {
            out: widen(&fwd.out)?,
            lse: fwd.lse.clone(),
        };
        let (qw, kw, vw, gw) = (widen(q)?, widen(k)?, widen(v)?, widen(grad)?);
        let _f32 = autocast(false);
        let g = flash_attention_backward_with(&qw, &kw, &vw, &w, &gw, causal, scale, algo)?;
        return Ok(AttentionGrads {
            dq: store_as(g.dq, q.dtype())?,
            dk: store_as(g.dk, k.dtype())?,
            dv: store_as(g.dv, v.dtype())?,
        });
    }
    let op = "flash_attention_backward";
    let [b, h, s, d] = check_qkv(q, k, v, op)?;
    q.same_device(&[&fwd.out, &fwd.lse, grad], op)?;
    for (t, n) in [(&fwd.out, "output"), (grad, "gradient")] {
        t.expect_dtype(DType::F32, &format!("{op} {n}"))?;
        if t.shape() != q.shape() {
            return Err(Error::shape_mismatch(
                format!("{op} {n}"),
                q.shape(),
                t.shape(),
            ));
        }
    }
    fwd.lse.expect_dtype(DType::F32, &format!("{op} lse"))?;
    if fwd.lse.shape() != [b, h, s] {
        return Err(Error::shape_mismatch(
            format!("{op} lse"),
            &[b, h, s],
            fwd.lse.shape(),
        ));
    }
    let p = AttnShape {
        bh: b * h,
        s,
        d,
        causal,
        scale: the_scale(scale, d, op)?,
    };
    let dev = q.device();
    let dq = Tensor::empty(dev, q.shape(), DType::F32)?;
    let dk = Tensor::empty(dev, q.shape(), DType::F32)?;
    let dv = Tensor::empty(dev, q.shape(), DType::F32)?;
    if dq.numel() > 0 {
        let t = AttnGrads {
            q,
            k,
            v,
            o: &fwd.out,
            lse: &fwd.lse,
            g: grad,
            dq: &dq,
            dk: &dk,
            dv: &dv,
        };
        dev.backend().attention_backward(dev, p, &t, algo)?;
    }
    Ok(AttentionGrads { dq, dk, dv })
}

/// One decode step: q [B, H, 1, D] against the first `len` positions of the caches [B, H, C, D]
/// (1 ≤ len ≤ C), without a mask (the cache holds only positions the query may see); `scale` defaults to
/// 1/√D. Returns [B, H, 1, D].
pub fn attention_decode(
    q: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    len: usize,
    scale: Option<f32>,
) -> Result<Tensor> {
    attention_decode_with(q, k_cache, v_cache, len, scale, None)
}

/// [`attention_decode`] with the layout forced when given.
pub fn attention_decode_with(
    q: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    len: usize,
    scale: Option<f32>,
    algo: Option<DecodeAlgo>,
) -> Result<Tensor> {
    let op = "attention_decode";
    q.same_device(&[k_cache, v_cache], op)?;
    for (t, n) in [(q, "q"), (k_cache, "k_cache"), (v_cache, "v_cache")] {
        t.expect_dtype(DType::F32, &format!("{op} {n}"))?;
    }
    let [b, h, 1, d] = *q.shape() else {
        return Err(Error::Shape(format!(
            "{op}: q must be [B, H, 1, D], got {:?}",
            q.shape()
        )));
    };
    head_dim(d, op, q.shape())?;
    let [cb, ch, cap, cd] = *k_cache.shape() else {
        return Err(Error::Shape(format!(
            "{op}: k_cache must be [B, H, C, D], got {:?}",
            k_cache.shape()
        )));
    };
    if (cb, ch, cd) != (b, h, d) {
        return Err(Error::shape_mismatch(
            format!("{op} k_cache for q {:?}", q.shape()),
            &[b, h, cap, d],
            k_cache.shape(),
        ));
    }
    if v_cache.shape() != k_cache.shape() {
        return Err(Error::shape_mismatch(
            format!("{op} v_cache (the shape of k_cache)"),
            k_cache.shape(),
            v_cache.shape(),
        ));
    }
    if len == 0 || len > cap {
        return Err(Error::Invalid(format!(
            "{op}: len {len} must be between 1 and the cache capacity {cap}"
        )));
    }
    limit(k_cache, op)?;
    let p = DecodeShape {
        bh: b * h,
        cap,
        len,
        d,
        scale: the_scale(scale, d, op)?,
    };
    let dev = q.device();
    let out = Tensor::empty(dev, q.shape(), DType::F32)?;
    if out.numel() > 0 {
        dev.backend()
            .attention_decode(dev, p, q, k_cache, v_cache, &out, algo)?;
    }
    Ok(out)
}
