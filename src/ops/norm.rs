//! Normalisation layers, forward and backward, entirely on the device: batch_norm2d (training statistics,
//! running statistics, eval mode), layer_norm, group_norm and rms_norm.
//!
//! Training batch_norm2d has its own kernels (per-channel statistics as a grid reduction, then one normalising
//! pass: the input is read twice and the output written once); the others are composed from the reduction
//! passes (autotuned per shape) and fused elementwise kernels. No value goes through the host. ε and momentum
//! travel as kernel arguments, never as source.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use serde::Serialize;

use crate::autotune::{self, Source, bucket, shape_key};
use crate::backend::cpu::CpuDevice;
use crate::backend::opencl::ClDevice;
use crate::backend::opencl::program::Defines;
use crate::backend::opencl::{Arg, events_ms};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

use super::fused::fused;
use super::reduce::{mean, sum};
use super::{UnaryOp, add_scalar, mul_scalar, unary};

/// A normalisation's output with the statistics its backward needs.
#[derive(Debug, Clone)]
pub struct NormOut {
    /// The normalised (and affine-transformed) output.
    pub y: Tensor,
    /// The mean per normalised group, with kept (size-1) reduced axes.
    pub mean: Tensor,
    /// 1/√(var + ε) per group, same shape as `mean`.
    pub rstd: Tensor,
}

/// Gradients of a normalisation.
#[derive(Debug, Clone)]
pub struct NormGrads {
    /// Gradient of the input.
    pub dx: Tensor,
    /// Gradient of the scale γ, if the layer has one.
    pub dgamma: Option<Tensor>,
    /// Gradient of the shift β, if the layer has one.
    pub dbeta: Option<Tensor>,
}

fn check_eps(eps: f32, op: &str) -> Result<()> {
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(Error::Invalid(format!(
            "{op}: eps = {eps} must be finite and ≥ 0"
        )));
    }
    Ok(())
}

fn check_param(p: Option<&Tensor>, want: &[usize], x: &Tensor, what: &str, op: &str) -> Result<()> {
    if let Some(p) = p {
        x.same_device(&[p], op)?;
        p.expect_dtype(DType::F32, op)?;
        if p.numel() != want.iter().product::<usize>() {
            return Err(Error::Shape(format!(
                "{op}: {what} has shape {:?}; expected {want:?} for input {:?}",
                p.shape(),
                x.shape()
            )));
        }
    }
    Ok(())
}

/// Mean and 1/√(biased var + ε) over `axes` (kept as size 1).
fn stats(x: &Tensor, axes: &[isize], eps: f32) -> Result<(Tensor, Tensor)> {
    let m = mean(x, Some(axes), true)?;
    let var = mean(&fused("(x0 - x1) * (x0 - x1)", &[x, &m])?, Some(axes), true)?;
    let rstd = unary(UnaryOp::Rsqrt, &add_scalar(&var, eps)?)?;
    Ok((m, rstd))
}

/// `(x − mean)·rstd·γ + β` with γ, β already shaped to broadcast.
fn affine(
    x: &Tensor,
    m: &Tensor,
    rstd: &Tensor,
    gamma: Option<&Tensor>,
    beta: Option<&Tensor>,
) -> Result<Tensor> {
    // One fused kernel: the normalised value is never stored.
    match (gamma, beta) {
        (Some(g), Some(b)) => fused("(x0 - x1) * x2 * x3 + x4", &[x, m, rstd, g, b]),
        (Some(g), None) => fused("(x0 - x1) * x2 * x3", &[x, m, rstd, g]),
        (None, Some(b)) => fused("(x0 - x1) * x2 + x3", &[x, m, rstd, b]),
        (None, None) => fused("(x0 - x1) * x2", &[x, m, rstd]),
    }
}

/// The shared backward: dx = rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂)) over `axes`, with ĝ = g·γ, and the parameter
/// gradients summed over `param_axes` into `param_shape`.
#[allow(clippy::too_many_arguments)]
fn backward(
    x: &Tensor,
    g: &Tensor,
    m: &Tensor,
    rstd: &Tensor,
    gamma: Option<&Tensor>,
    axes: &[isize],
    param_axes: &[isize],
    param_shape: &[usize],
    has_beta: bool,
    center: bool,
) -> Result<NormGrads> {
    let xhat = if center {
        fused("(x0 - x1) * x2", &[x, m, rstd])?
    } else {
        fused("x0 * x1", &[x, rstd])?
    };
    let gh = match gamma {
        Some(gm) => fused("x0 * x1", &[g, gm])?,
        None => g.clone(),
    };
    let mgx = mean(&fused("x0 * x1", &[&gh, &xhat])?, Some(axes), true)?;
    let dx = if center {
        let mg = mean(&gh, Some(axes), true)?;
        let t = fused("x0 - x1 - x2 * x3", &[&gh, &mg, &xhat, &mgx])?;
        fused("x0 * x1", &[&t, rstd])?
    } else {
        fused("(x0 - x2 * x3) * x1", &[&gh, rstd, &xhat, &mgx])?
    };
    let dgamma = match gamma {
        Some(_) => Some(
            sum(&fused("x0 * x1", &[g, &xhat])?, Some(param_axes), false)?.reshape(param_shape)?,
        ),
        None => None,
    };
    let dbeta = if has_beta {
        Some(sum(g, Some(param_axes), false)?.reshape(param_shape)?)
    } else {
        None
    };
    Ok(NormGrads { dx, dgamma, dbeta })
}

/// Layer normalisation over the last `normalized` dimensions, with optional γ and β of those dimensions.
pub fn layer_norm(
    x: &Tensor,
    normalized: usize,
    gamma: Option<&Tensor>,
    beta: Option<&Tensor>,
    eps: f32,
) -> Result<NormOut> {
    x.expect_dtype(DType::F32, "layer_norm")?;
    check_eps(eps, "layer_norm")?;
    let r = x.rank();
    if normalized == 0 || normalized > r {
        return Err(Error::Shape(format!(
            "layer_norm: cannot normalise the last {normalized} dimensions of {:?}",
            x.shape()
        )));
    }
    let inner = &x.shape()[r - normalized..];
    check_param(gamma, inner, x, "gamma", "layer_norm")?;
    check_param(beta, inner, x, "beta", "layer_norm")?;
    let axes: Vec<isize> = (r - normalized..r).map(|a| a as isize).collect();
    let (m, rstd) = stats(x, &axes, eps)?;
    let g = gamma.map(|t| t.reshape(inner)).transpose()?;
    let b = beta.map(|t| t.reshape(inner)).transpose()?;
    let y = affine(x, &m, &rstd, g.as_ref(), b.as_ref())?;
    Ok(NormOut { y, mean: m, rstd })
}

/// The gradients of [`layer_norm`] from its input, output gradient and saved statistics.
pub fn layer_norm_backward(
    x: &Tensor,
    grad: &Tensor,
    out: &NormOut,
    normalized: usize,
    gamma: Option<&Tensor>,
    has_beta: bool,
) -> Result<NormGrads> {
    let r = x.rank();
    if normalized == 0 || normalized > r || grad.shape() != x.shape() {
        return Err(Error::Shape(format!(
            "layer_norm_backward: input {:?}, gradient {:?}, {normalized} normalised dims",
            x.shape(),
            grad.shape()
        )));
    }
    let inner = x.shape()[r - normalized..].to_vec();
    let axes: Vec<isize> = (r - normalized..r).map(|a| a as isize).collect();
    let lead: Vec<isize> = (0..r - normalized).map(|a| a as isize).collect();
    let g = gamma.map(|t| t.reshape(&inner)).transpose()?;
    backward(
        x,
        grad,
        &out.mean,
        &out.rstd,
        g.as_ref(),
        &axes,
        &lead,
        &inner,
        has_beta,
        true,
    )
}

/// RMS normalisation over the last dimension: `x / √(mean(x²) + ε) · γ`.
pub fn rms_norm(x: &Tensor, gamma: Option<&Tensor>, eps: f32) -> Result<NormOut> {
    x.expect_dtype(DType::F32, "rms_norm")?;
    check_eps(eps, "rms_norm")?;
    let Some(&d) = x.shape().last() else {
        return Err(Error::Shape(
            "rms_norm: the input needs at least one dimension".into(),
        ));
    };
    check_param(gamma, &[d], x, "gamma", "rms_norm")?;
    let ms = mean(&fused("x0 * x0", &[x])?, Some(&[-1]), true)?;
    let rstd = unary(UnaryOp::Rsqrt, &add_scalar(&ms, eps)?)?;
    let y = match gamma {
        Some(g) => fused("x0 * x1 * x2", &[x, &rstd, &g.reshape(&[d])?])?,
        None => fused("x0 * x1", &[x, &rstd])?,
    };
    let zero = mul_scalar(&ms, 0.0)?;
    Ok(NormOut {
        y,
        mean: zero,
        rstd,
    })
}

/// The gradients of [`rms_norm`].
pub fn rms_norm_backward(
    x: &Tensor,
    grad: &Tensor,
    out: &NormOut,
    gamma: Option<&Tensor>,
) -> Result<NormGrads> {
    let r = x.rank();
    if r == 0 || grad.shape() != x.shape() {
        return Err(Error::Shape(format!(
            "rms_norm_backward: input {:?}, gradient {:?}",
            x.shape(),
            grad.shape()
        )));
    }
    let d = x.shape()[r - 1];
    let lead: Vec<isize> = (0..r - 1).map(|a| a as isize).collect();
    let g = gamma.map(|t| t.reshape(&[d])).transpose()?;
    backward(
        x,
        grad,
        &out.mean,
        &out.rstd,
        g.as_ref(),
        &[-1],
        &lead,
        &[d],
        false,
        false,
    )
}

fn nchw(x: &Tensor, op: &str) -> Result<[usize; 4]> {
    x.expect_dtype(DType::F32, op)?;
    match *x.shape() {
        [n, c, h, w] => Ok([n, c, h, w]),
        _ => Err(Error::Shape(format!(
            "{op}: expected an N×C×H×W input, got {:?}",
            x.shape()
        ))),
    }
}

/// Group normalisation of N×C×H×W over (C/groups, H, W) per (n, group), then per-channel γ and β.
pub fn group_norm(
    x: &Tensor,
    groups: usize,
    gamma: Option<&Tensor>,
    beta: Option<&Tensor>,
    eps: f32,
) -> Result<NormOut> {
    let [n, c, h, w] = nchw(x, "group_norm")?;
    check_eps(eps, "group_norm")?;
    if groups == 0 || c % groups != 0 {
        return Err(Error::Shape(format!(
            "group_norm: {c} channels do not split into {groups} groups"
        )));
    }
    check_param(gamma, &[c], x, "gamma", "group_norm")?;
    check_param(beta, &[c], x, "beta", "group_norm")?;
    let xg = x.reshape(&[n, groups, c / groups * h * w])?;
    let (m, rstd) = stats(&xg, &[2], eps)?;
    let xhat = fused("(x0 - x1) * x2", &[&xg, &m, &rstd])?.reshape(&[n, c, h * w])?;
    let g = gamma.map(|t| t.reshape(&[c, 1])).transpose()?;
    let b = beta.map(|t| t.reshape(&[c, 1])).transpose()?;
    let y = match (&g, &b) {
        (Some(g), Some(b)) => fused("x0 * x1 + x2", &[&xhat, g, b])?,
        (Some(g), None) => fused("x0 * x1", &[&xhat, g])?,
        (None, Some(b)) => fused("x0 + x1", &[&xhat, b])?,
        (None, None) => xhat,
    };
    Ok(NormOut {
        y: y.reshape(&[n, c, h, w])?,
        mean: m,
        rstd,
    })
}

/// The gradients of [`group_norm`].
pub fn group_norm_backward(
    x: &Tensor,
    grad: &Tensor,
    out: &NormOut,
    groups: usize,
    gamma: Option<&Tensor>,
    has_beta: bool,
) -> Result<NormGrads> {
    let [n, c, h, w] = nchw(x, "group_norm_backward")?;
    if groups == 0 || c % groups != 0 || grad.shape() != x.shape() {
        return Err(Error::Shape(format!(
            "group_norm_backward: input {:?}, gradient {:?}, {groups} groups",
            x.shape(),
            grad.shape()
        )));
    }
    let xg = x.reshape(&[n, groups, c / groups * h * w])?;
    let xhat = fused("(x0 - x1) * x2", &[&xg, &out.mean, &out.rstd])?.reshape(&[n, c, h * w])?;
    let g3 = grad.reshape(&[n, c, h * w])?;
    let gh = match gamma {
        Some(gm) => fused("x0 * x1", &[&g3, &gm.reshape(&[c, 1])?])?,
        None => g3.clone(),
    };
    let ghg = gh.reshape(&[n, groups, c / groups * h * w])?;
    let xhg = xhat.reshape(&[n, groups, c / groups * h * w])?;
    let mg = mean(&ghg, Some(&[2]), true)?;
    let mgx = mean(&fused("x0 * x1", &[&ghg, &xhg])?, Some(&[2]), true)?;
    let dx = fused("x0 - x1 - x2 * x3", &[&ghg, &mg, &xhg, &mgx])?;
    let dx = fused("x0 * x1", &[&dx, &out.rstd])?.reshape(&[n, c, h, w])?;
    let dgamma = match gamma {
        Some(_) => Some(sum(
            &fused("x0 * x1", &[&g3, &xhat])?,
            Some(&[0, 2]),
            false,
        )?),
        None => None,
    };
    let dbeta = if has_beta {
        Some(sum(&g3, Some(&[0, 2]), false)?)
    } else {
        None
    };
    Ok(NormGrads { dx, dgamma, dbeta })
}

/// batch_norm2d's output: the normalised tensor, the batch statistics used, and the updated running statistics.
#[derive(Debug, Clone)]
pub struct BatchNormOut {
    /// Output and the statistics used (mean and rstd shaped [1, C, 1, 1]).
    pub out: NormOut,
    /// `(1 − momentum)·running_mean + momentum·batch mean` in training; the input running mean in eval.
    pub running_mean: Tensor,
    /// `(1 − momentum)·running_var + momentum·batch variance` (biased, as netcl) in training; unchanged in eval.
    pub running_var: Tensor,
}

/// Batch normalisation of N×C×H×W per channel. In training the batch mean and biased variance over
/// (N, H, W) normalise the input and update the running statistics; in eval the running statistics are used.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm2d(
    x: &Tensor,
    gamma: Option<&Tensor>,
    beta: Option<&Tensor>,
    running_mean: &Tensor,
    running_var: &Tensor,
    momentum: f32,
    eps: f32,
    training: bool,
) -> Result<BatchNormOut> {
    batch_norm2d_with(
        x,
        gamma,
        beta,
        running_mean,
        running_var,
        momentum,
        eps,
        training,
        None,
    )
}

/// [`batch_norm2d`] with the training kernels forced to `algo` when given (eval mode ignores it).
#[allow(clippy::too_many_arguments)]
pub fn batch_norm2d_with(
    x: &Tensor,
    gamma: Option<&Tensor>,
    beta: Option<&Tensor>,
    running_mean: &Tensor,
    running_var: &Tensor,
    momentum: f32,
    eps: f32,
    training: bool,
    algo: Option<BatchNormAlgo>,
) -> Result<BatchNormOut> {
    let [_, c, _, _] = nchw(x, "batch_norm2d")?;
    check_eps(eps, "batch_norm2d")?;
    if !(0.0..=1.0).contains(&momentum) {
        return Err(Error::Invalid(format!(
            "batch_norm2d: momentum {momentum} must be in [0, 1]"
        )));
    }
    check_param(gamma, &[c], x, "gamma", "batch_norm2d")?;
    check_param(beta, &[c], x, "beta", "batch_norm2d")?;
    check_param(Some(running_mean), &[c], x, "running_mean", "batch_norm2d")?;
    check_param(Some(running_var), &[c], x, "running_var", "batch_norm2d")?;
    if training {
        batch_norm_train(
            x,
            gamma,
            beta,
            running_mean,
            running_var,
            momentum,
            eps,
            algo,
        )
    } else {
        let g = gamma.map(|t| t.reshape(&[1, c, 1, 1])).transpose()?;
        let b = beta.map(|t| t.reshape(&[1, c, 1, 1])).transpose()?;
        let m = running_mean.reshape(&[1, c, 1, 1])?;
        let rstd = unary(
            UnaryOp::Rsqrt,
            &add_scalar(&running_var.reshape(&[1, c, 1, 1])?, eps)?,
        )?;
        let y = affine(x, &m, &rstd, g.as_ref(), b.as_ref())?;
        Ok(BatchNormOut {
            out: NormOut { y, mean: m, rstd },
            running_mean: running_mean.clone(),
            running_var: running_var.clone(),
        })
    }
}

/// The gradients of training-mode [`batch_norm2d`] from its input, output gradient and batch statistics.
pub fn batch_norm2d_backward(
    x: &Tensor,
    grad: &Tensor,
    out: &NormOut,
    gamma: Option<&Tensor>,
    has_beta: bool,
) -> Result<NormGrads> {
    let [_, c, _, _] = nchw(x, "batch_norm2d_backward")?;
    if grad.shape() != x.shape() {
        return Err(Error::Shape(format!(
            "batch_norm2d_backward: gradient {:?} differs from input {:?}",
            grad.shape(),
            x.shape()
        )));
    }
    let g = gamma.map(|t| t.reshape(&[1, c, 1, 1])).transpose()?;
    backward(
        x,
        grad,
        &out.mean,
        &out.rstd,
        g.as_ref(),
        &[0, 2, 3],
        &[0, 2, 3],
        &[c],
        has_beta,
        true,
    )
}

/// The most units one item of [`BnStats::Held`] may hold in registers.
pub const MAX_HELD: usize = 32;

/// How training batch_norm2d computes its per-channel statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BnStats {
    /// `["wg", local, groups]`: work-groups of `local` items with a local-memory tree, `groups` chunks per
    /// channel, then a fold of the chunks (GPUs).
    Wg(usize, usize),
    /// `["wide", local, groups]`: as `Wg`, with four independent loads in flight per work-item and iteration.
    Wide(usize, usize),
    /// `["item", groups]`: one work-item per (channel, chunk) with float8 loads and no barriers (CPU OpenCL).
    Item(usize),
    /// `["held", local, units]`: work-groups of `local` items, each item holding `units` float4s (floats when
    /// H·W is not a multiple of 4) of its channel in registers until the channel's statistics are complete;
    /// goes with [`BnApply::Hold`].
    Held(usize, usize),
}

/// How training batch_norm2d writes its output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BnApply {
    /// One float4 (when H·W is a multiple of 4, else one float) per work-item over every element (GPUs).
    Flat,
    /// One work-item per (n, c) plane with float8 loads (CPU OpenCL).
    Plane,
    /// On the statistics pass's own (chunk, channel) work-groups, each walking its chunk from the end (what
    /// that pass read last is still cached) with four loads in flight per item, and folding the channel's
    /// partials itself: no separate finishing launch (GPUs).
    Back,
    /// One launch for everything (`bn_pipe`): work-groups take tickets in the order they start, sum their
    /// chunk, and then normalise the same chunk of the previous channel once all its chunks are summed, while
    /// that channel is still cached. Uses the statistics' `wide` chunking. Offered on GPUs: the work-groups
    /// wait for each other, which is fast only where groups that started keep running side by side; the wait
    /// is bounded, so it ends on any device.
    Pipe,
    /// One launch that reads x once (`bn_hold`, with [`BnStats::Held`]): each work-group sums a chunk it keeps
    /// in registers, waits until every chunk of its channel is summed, and normalises the chunk it holds. The
    /// wait is bounded: a group that waits too long sums the channel itself, so the kernel ends on any device,
    /// fast where a channel's groups all fit on the device at once (GPUs).
    Hold,
}

/// The training batch_norm2d kernels; autotuned per shape bucket, cached as `{"stats": [...], "apply": ...}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BatchNormAlgo {
    /// The statistics pass.
    pub stats: BnStats,
    /// The normalising pass.
    pub apply: BnApply,
}

impl Serialize for BnStats {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match *self {
            BnStats::Wg(l, g) => ("wg", l, g).serialize(s),
            BnStats::Wide(l, g) => ("wide", l, g).serialize(s),
            BnStats::Item(g) => ("item", g).serialize(s),
            BnStats::Held(l, u) => ("held", l, u).serialize(s),
        }
    }
}

/// The tensors of one training batch_norm2d call.
pub(crate) struct BnTrain<'a> {
    pub x: &'a Tensor,
    pub gamma: Option<&'a Tensor>,
    pub beta: Option<&'a Tensor>,
    pub rm: &'a Tensor,
    pub rv: &'a Tensor,
    pub momentum: f32,
    pub eps: f32,
    /// The output, shaped like `x`.
    pub y: &'a Tensor,
    /// [1, C, 1, 1] each: the batch mean and 1/√(var + ε).
    pub mean: &'a Tensor,
    pub rstd: &'a Tensor,
    /// [2, C]: γ·rstd and β per channel (the normalising pass's scale and shift).
    pub stat: &'a Tensor,
    pub rm_out: &'a Tensor,
    pub rv_out: &'a Tensor,
}

/// Device primitives of the normalisation layers.
pub(crate) trait NormKernels {
    /// Training batch_norm2d: statistics over (N, H, W) per channel, the output, the running statistics.
    fn batch_norm_train(
        &self,
        device: &Device,
        bn: &BnTrain<'_>,
        algo: Option<BatchNormAlgo>,
    ) -> Result<()>;
}

#[allow(clippy::too_many_arguments)]
fn batch_norm_train(
    x: &Tensor,
    gamma: Option<&Tensor>,
    beta: Option<&Tensor>,
    running_mean: &Tensor,
    running_var: &Tensor,
    momentum: f32,
    eps: f32,
    algo: Option<BatchNormAlgo>,
) -> Result<BatchNormOut> {
    let [n, c, h, w] = nchw(x, "batch_norm2d")?;
    if n * h * w == 0 {
        return Err(Error::Shape(format!(
            "batch_norm2d: training needs at least one element per channel; the input is {:?}",
            x.shape()
        )));
    }
    if x.numel() > i32::MAX as usize {
        return Err(Error::Limit(format!(
            "batch_norm2d: {} elements exceed the 2^31-1 per-op limit",
            x.numel()
        )));
    }
    let dev = x.device();
    let y = Tensor::empty(dev, x.shape(), DType::F32)?;
    let mean = Tensor::empty(dev, &[1, c, 1, 1], DType::F32)?;
    let rstd = Tensor::empty(dev, &[1, c, 1, 1], DType::F32)?;
    let stat = Tensor::empty(dev, &[2, c], DType::F32)?;
    let rm_out = Tensor::empty(dev, &[c], DType::F32)?;
    let rv_out = Tensor::empty(dev, &[c], DType::F32)?;
    let bn = BnTrain {
        x,
        gamma,
        beta,
        rm: running_mean,
        rv: running_var,
        momentum,
        eps,
        y: &y,
        mean: &mean,
        rstd: &rstd,
        stat: &stat,
        rm_out: &rm_out,
        rv_out: &rv_out,
    };
    dev.backend().batch_norm_train(dev, &bn, algo)?;
    Ok(BatchNormOut {
        out: NormOut { y, mean, rstd },
        running_mean: rm_out,
        running_var: rv_out,
    })
}

/// The units of a channel's N·P elements that the batch_norm2d kernels walk: float4s when H·W is a multiple
/// of 4 (the kernels' `VEC4`), floats otherwise.
fn bn_units(n: usize, p: usize) -> usize {
    if p.is_multiple_of(4) {
        n * p / 4
    } else {
        n * p
    }
}

/// A tag no earlier one-launch batch_norm2d launch used (never 0, the value of zeroed memory): its partials
/// carry it, so a waiting work-group tells this launch's partials from what a reused buffer still holds.
fn launch_tag() -> i32 {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    loop {
        let t = NEXT.fetch_add(1, Ordering::Relaxed);
        if t != 0 {
            return t as i32;
        }
    }
}

/// How often a waiting group of the one-launch kernels reads a partial before it sums its channel itself:
/// `NETCL_BN_POLLS` (0 to 2^24; 0 makes every group that would wait do so), read once, by default 2^15.
fn bn_polls() -> u32 {
    static POLLS: OnceLock<u32> = OnceLock::new();
    *POLLS.get_or_init(|| {
        std::env::var("NETCL_BN_POLLS")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .filter(|&n| n <= 1 << 24)
            .unwrap_or(1 << 15)
    })
}

impl ClDevice {
    fn bn_candidates(&self, v: [usize; 3]) -> (Vec<BatchNormAlgo>, usize) {
        let [n, c, p] = [v[0], v[1], v[2]];
        let cu = self.info.compute_units.max(1) as usize;
        let max_wg = self.info.max_work_group_size.max(1);
        let per_channel = n * p;
        let mut out = Vec::new();
        for local in [256usize, 512] {
            if local > max_wg {
                continue;
            }
            // About four work-groups per compute unit, each reading at least 8 elements per item.
            let g = (cu * 4)
                .div_ceil(c)
                .clamp(1, (per_channel / (local * 8)).max(1));
            for g in [g, (g * 4).min((per_channel / (local * 8)).max(1))] {
                let a = BatchNormAlgo {
                    stats: BnStats::Wg(local, g),
                    apply: BnApply::Flat,
                };
                if !out.contains(&a) {
                    out.push(a);
                }
            }
        }
        // Four loads in flight per item, at most four work-groups of 256 per compute unit so that they all run
        // at once, each item reading at least 16 elements; then the apply that walks the same chunks backwards.
        if max_wg >= 256 {
            let g = (cu * 4 / c).clamp(1, (per_channel / (256 * 16)).max(1));
            out.push(BatchNormAlgo {
                stats: BnStats::Wide(256, g),
                apply: BnApply::Back,
            });
            // One launch, offered on GPUs: its work-groups wait for work-groups that started before them, and
            // OpenCL promises no progress between work-groups; GPUs run resident groups side by side, CPU
            // runtimes need not (there every wait runs to its bound). Chunks of 16K to 64K elements: smaller keeps the
            // channels in flight cached between their statistics and their normalisation, larger has fewer
            // groups waiting (8K chunks lost on the H200 at both bench shapes).
            let pipe = if self.info.kind == "gpu" {
                &[256 * 64, 256 * 128, 256 * 256][..]
            } else {
                &[]
            };
            // Chunks held in registers (GPUs), offered while a channel's groups fit on the device at once
            // with two groups of 256 per compute unit; otherwise every group would wait its full bound.
            let units = bn_units(n, p);
            let hold = if self.info.kind == "gpu" {
                &[(256usize, 4usize), (256, 8), (256, 16), (512, 8)][..]
            } else {
                &[]
            };
            for &(l, u) in hold {
                if l <= max_wg && units.div_ceil(l * u) <= 2 * cu * 256 / l {
                    out.push(BatchNormAlgo {
                        stats: BnStats::Held(l, u),
                        apply: BnApply::Hold,
                    });
                }
            }
            for &per in pipe {
                let a = BatchNormAlgo {
                    stats: BnStats::Wide(256, (per_channel / per).max(1)),
                    apply: BnApply::Pipe,
                };
                if !out.contains(&a) {
                    out.push(a);
                }
            }
        }
        let g = (cu * 2).div_ceil(c).clamp(1, n.max(1));
        for apply in [BnApply::Plane, BnApply::Flat] {
            out.push(BatchNormAlgo {
                stats: BnStats::Item(g),
                apply,
            });
        }
        let default = if self.info.kind == "cpu" {
            out.iter()
                .position(|a| matches!(a.stats, BnStats::Item(_)))
                .unwrap_or(0)
        } else {
            0
        };
        (out, default)
    }

    fn run_bn(
        &self,
        device: &Device,
        bn: &BnTrain<'_>,
        algo: BatchNormAlgo,
    ) -> Result<Vec<crate::backend::opencl::Event>> {
        let s = bn.x.shape();
        let (n, c, p) = (s[0], s[1], s[2] * s[3]);
        let vec4 = p.is_multiple_of(4);
        let d = Defines::new().set("VEC4", u8::from(vec4));
        let mut evs = Vec::with_capacity(3);
        let units = bn_units(n, p);
        let g = match algo.stats {
            BnStats::Wg(_, g) | BnStats::Wide(_, g) | BnStats::Item(g) => g.max(1),
            BnStats::Held(l, u) => units.div_ceil(l * u).max(1),
        };
        // The one-launch kernels publish each partial as two 64-bit words (value and launch tag).
        let one_launch = matches!(algo.apply, BnApply::Pipe | BnApply::Hold);
        let part = Tensor::empty(
            device,
            &[c * g * if one_launch { 4 } else { 2 }],
            DType::F32,
        )?;
        // An absent γ or β is never read; any buffer stands in for the argument.
        let stat_args = [
            Arg::F32(bn.eps),
            Arg::F32(bn.momentum),
            Arg::I32(i32::from(bn.gamma.is_some())),
            Arg::I32(i32::from(bn.beta.is_some())),
            Arg::Mem(bn.x.storage()),
            Arg::Mem(part.storage()),
            Arg::Mem(bn.gamma.unwrap_or(bn.rm).storage()),
            Arg::Mem(bn.beta.unwrap_or(bn.rm).storage()),
            Arg::Mem(bn.rm.storage()),
            Arg::Mem(bn.rv.storage()),
            Arg::Mem(bn.mean.storage()),
            Arg::Mem(bn.rstd.storage()),
            Arg::Mem(bn.stat.storage()),
            Arg::Mem(bn.rm_out.storage()),
            Arg::Mem(bn.rv_out.storage()),
        ];
        let chunked = |local: usize| {
            let local = local.min(self.info.max_work_group_size.max(1));
            let mut args = vec![
                Arg::I32(n as i32),
                Arg::I32(c as i32),
                Arg::I32(p as i32),
                Arg::I32(units.div_ceil(g).max(1) as i32),
                Arg::I32(g as i32),
            ];
            args.extend(stat_args.iter().cloned());
            args.push(Arg::Mem(bn.y.storage()));
            (local, args)
        };
        // The one-launch kernels: `hold` on C·g groups of chunks held in registers (at most local·u units each),
        // `pipe` on (C + 1)·g groups; both take the counters, local room for g partials and a new launch tag.
        let one = match (algo.apply, algo.stats) {
            (BnApply::Hold, BnStats::Held(local, u)) => {
                Some((local, d.clone().set("HOLD", u), "bn_hold", c))
            }
            (BnApply::Pipe, BnStats::Wide(local, _)) => {
                Some((local, d.clone().set("UNR", 4), "bn_pipe", c + 1))
            }
            (BnApply::Pipe, _) => {
                return Err(Error::Invalid(
                    "batch_norm2d: the one-launch apply needs the wide statistics".into(),
                ));
            }
            _ => None,
        };
        if let Some((local, defines, name, groups)) = one {
            let (local, mut args) = chunked(local);
            let counters = self.counters(c + 2)?;
            let Some((sync, _)) = counters.as_ref() else {
                return Err(Error::Invalid("batch_norm2d: no counter buffer".into()));
            };
            let lds = local.max(g) * 4;
            args.extend([
                Arg::Mem(sync),
                Arg::Local(lds),
                Arg::Local(lds),
                Arg::I32(launch_tag()),
            ]);
            let k = self.kernel("norm", &defines.set("POLLS", bn_polls()), name)?;
            evs.push(self.launch(&k, &args, &[local * g * groups], Some(&[local]))?);
            return Ok(evs);
        }
        match algo.stats {
            BnStats::Wg(local, _) | BnStats::Wide(local, _) => {
                let local = local.min(self.info.max_work_group_size.max(1));
                let rc = units.div_ceil(g).max(1);
                let unr = if matches!(algo.stats, BnStats::Wide(..)) {
                    4
                } else {
                    1
                };
                let k = self.kernel("norm", &d.clone().set("UNR", unr), "bn_partial_wg")?;
                let args = [
                    Arg::I32(n as i32),
                    Arg::I32(c as i32),
                    Arg::I32(p as i32),
                    Arg::I32(rc as i32),
                    Arg::I32(g as i32),
                    Arg::Mem(bn.x.storage()),
                    Arg::Mem(part.storage()),
                    Arg::Local(local * 4),
                    Arg::Local(local * 4),
                ];
                evs.push(self.launch(&k, &args, &[local * g, c], Some(&[local, 1]))?);
            }
            BnStats::Item(_) => {
                let rc = (n * p).div_ceil(g).max(1);
                let k = self.kernel("norm", &Defines::new(), "bn_partial_item")?;
                let args = [
                    Arg::I32(n as i32),
                    Arg::I32(c as i32),
                    Arg::I32(p as i32),
                    Arg::I32(rc as i32),
                    Arg::I32(g as i32),
                    Arg::Mem(bn.x.storage()),
                    Arg::Mem(part.storage()),
                ];
                evs.push(self.launch(&k, &args, &[g, c], None)?);
            }
            BnStats::Held(..) => {
                return Err(Error::Invalid(
                    "batch_norm2d: the held statistics go with the hold apply only".into(),
                ));
            }
        }
        if algo.apply == BnApply::Back {
            // The statistics pass's grid and chunks, the partials folded in: no finishing launch.
            let local = match algo.stats {
                BnStats::Wg(l, _) | BnStats::Wide(l, _) | BnStats::Held(l, _) => l,
                BnStats::Item(_) => 256,
            };
            let (local, args) = chunked(local);
            let k = self.kernel("norm", &d.clone().set("UNR", 4), "bn_apply_back")?;
            evs.push(self.launch(&k, &args, &[local * g, c], Some(&[local, 1]))?);
            return Ok(evs);
        }
        let k = self.kernel("norm", &Defines::new(), "bn_finish")?;
        let mut args = vec![
            Arg::I32(n as i32),
            Arg::I32(c as i32),
            Arg::I32(p as i32),
            Arg::I32(g as i32),
        ];
        args.extend(stat_args);
        evs.push(self.launch(
            &k,
            &args,
            &[c],
            Some(&[64.min(self.info.max_work_group_size.max(1))]),
        )?);
        let common = |total: usize| {
            [
                Arg::I32(total as i32),
                Arg::I32(c as i32),
                Arg::I32(p as i32),
                Arg::Mem(bn.x.storage()),
                Arg::Mem(bn.mean.storage()),
                Arg::Mem(bn.stat.storage()),
                Arg::Mem(bn.y.storage()),
            ]
        };
        match algo.apply {
            BnApply::Flat => {
                let total = if vec4 { n * c * p / 4 } else { n * c * p };
                let k = self.kernel("norm", &d, "bn_apply_flat")?;
                let local = 256.min(self.info.max_work_group_size.max(1));
                evs.push(self.launch(&k, &common(total), &[total], Some(&[local]))?);
            }
            BnApply::Plane => {
                let k = self.kernel("norm", &Defines::new(), "bn_apply_plane")?;
                evs.push(self.launch(&k, &common(n * c), &[n * c], None)?);
            }
            // Launched above, with the finish folded in.
            BnApply::Back | BnApply::Pipe | BnApply::Hold => {}
        }
        Ok(evs)
    }
}

impl NormKernels for ClDevice {
    fn batch_norm_train(
        &self,
        device: &Device,
        bn: &BnTrain<'_>,
        algo: Option<BatchNormAlgo>,
    ) -> Result<()> {
        let s = bn.x.shape();
        let v = [s[0], s[1], s[2] * s[3]];
        let key = shape_key(&[
            bucket(v[0]),
            bucket(v[1]),
            bucket(v[2]),
            i64::from(v[2].is_multiple_of(4)),
        ]);
        let chosen = match algo {
            Some(a) => {
                let max_wg = self.info.max_work_group_size.max(1);
                let ok = match a.stats {
                    BnStats::Wg(l, g) | BnStats::Wide(l, g) => {
                        l.is_power_of_two() && l <= max_wg && g >= 1
                    }
                    BnStats::Item(g) => g >= 1,
                    BnStats::Held(l, u) => {
                        l.is_power_of_two() && l <= max_wg && (1..=MAX_HELD).contains(&u)
                    }
                } && (a.apply != BnApply::Pipe || matches!(a.stats, BnStats::Wide(..)))
                    && (a.apply == BnApply::Hold) == matches!(a.stats, BnStats::Held(..));
                if !ok {
                    return Err(Error::Invalid(format!(
                        "batch_norm2d: algorithm {a:?} is not valid here (work-groups need a power-of-two size up to {max_wg}, at least one chunk per channel; the one-launch pipe apply needs the wide statistics; the hold apply and the held statistics, 1 to {MAX_HELD} units per item, go together)"
                    )));
                }
                autotune::record_choice(
                    device,
                    "batch_norm2d",
                    &key,
                    &a,
                    Source::Forced,
                    "algorithm given by the caller",
                );
                a
            }
            None => match autotune::answered(device, "batch_norm2d", &key) {
                Some(a) => a,
                None => {
                    let (cands, default) = self.bn_candidates(v);
                    autotune::tune(device, "batch_norm2d", &key, &cands, default, |a| {
                        events_ms(&self.run_bn(device, bn, *a)?)
                    })?
                }
            },
        };
        self.run_bn(device, bn, chosen)?;
        Ok(())
    }
}

impl NormKernels for CpuDevice {
    fn batch_norm_train(
        &self,
        _device: &Device,
        bn: &BnTrain<'_>,
        _algo: Option<BatchNormAlgo>,
    ) -> Result<()> {
        let s = bn.x.shape();
        let (n, c, p) = (s[0], s[1], s[2] * s[3]);
        let read = |t: Option<&Tensor>| t.map(|t| t.to_vec::<f32>()).transpose();
        let (gamma, beta) = (read(bn.gamma)?, read(bn.beta)?);
        let (rm, rv) = (bn.rm.to_vec::<f32>()?, bn.rv.to_vec::<f32>()?);
        let (mut means, mut rstds, mut stat) = (vec![0f32; c], vec![0f32; c], vec![0f32; 2 * c]);
        let (mut rm_out, mut rv_out) = (vec![0f32; c], vec![0f32; c]);
        crate::backend::cpu::host::map_f32(&[bn.x], bn.y, |ins, y| {
            let x = ins[0];
            let cnt = (n * p) as f64;
            for ch in 0..c {
                let planes =
                    || (0..n).flat_map(move |b| x[(b * c + ch) * p..(b * c + ch + 1) * p].iter());
                // The reference accumulates in f64, in two passes.
                let mean = planes().map(|&v| v as f64).sum::<f64>() / cnt;
                let var = planes().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / cnt;
                let rstd = 1.0 / (var + bn.eps as f64).sqrt();
                let scale = rstd * gamma.as_ref().map_or(1.0, |g| g[ch] as f64);
                let shift = beta.as_ref().map_or(0.0, |b| b[ch] as f64);
                for b in 0..n {
                    let r = (b * c + ch) * p..(b * c + ch + 1) * p;
                    for (o, &v) in y[r.clone()].iter_mut().zip(&x[r]) {
                        *o = ((v as f64 - mean) * scale + shift) as f32;
                    }
                }
                means[ch] = mean as f32;
                rstds[ch] = rstd as f32;
                stat[ch] = scale as f32;
                stat[c + ch] = shift as f32;
                let m = bn.momentum as f64;
                rm_out[ch] = ((1.0 - m) * rm[ch] as f64 + m * mean) as f32;
                rv_out[ch] = ((1.0 - m) * rv[ch] as f64 + m * var) as f32;
            }
        })?;
        for (t, v) in [
            (bn.mean, &means),
            (bn.rstd, &rstds),
            (bn.stat, &stat),
            (bn.rm_out, &rm_out),
            (bn.rv_out, &rv_out),
        ] {
            t.device()
                .backend()
                .write(t.storage(), 0, bytemuck::cast_slice(v))?;
        }
        Ok(())
    }
}
