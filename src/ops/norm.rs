//! Normalisation layers, forward and backward, entirely on the device: batch_norm2d (training statistics,
//! running statistics, eval mode), layer_norm, group_norm and rms_norm.
//!
//! Training batch_norm2d has its own kernels (per-channel statistics as a grid reduction, then one normalising
//! pass: the input is read twice and the output written once); the others are composed from the reduction
//! passes (autotuned per shape) and fused elementwise kernels. layer_norm and rms_norm also have one-launch row
//! kernels (statistics and output per row, x read once or twice), and one-launch input gradients for their
//! backward (x and g read twice); the tuner measures them beside the composed path per shape class. No value
//! goes through the host. ε and momentum travel as kernel arguments, never as source.

use super::limit;
pub use crate::contract::norm::{
    ActGrad, BatchNormAlgo, BnApply, BnBackAlgo, BnStats, MAX_HELD, MAX_ROW_HELD, RowNormAlgo,
};
use crate::contract::norm::{BnBack, BnTrain, RowNorm, RowNormBack};
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

use super::fused::fused_as;
use super::policy::{OpClass, autocast, expect_float, output_dtype, store_as, widen};

/// A fused expression whose result is kept in f32: statistics and intermediates (OpClass::Keep32), whatever the
/// inputs' storage (f16 inputs are read as halves).
fn fz(e: &str, inputs: &[&Tensor]) -> Result<Tensor> {
    fused_as(e, inputs, DType::F32)
}
use super::reduce::{mean, sum};
use super::{UnaryOp, add_scalar, mul_scalar, unary, unary_backward};

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
        expect_float(p, op)?;
        if p.numel() != want.iter().product::<usize>() {
            return Err(Error::shape_mismatch(
                format!("{op} {what} for input {:?}", x.shape()),
                want,
                p.shape(),
            ));
        }
    }
    Ok(())
}

/// Mean and 1/√(biased var + ε) over `axes` (kept as size 1).
fn stats(x: &Tensor, axes: &[isize], eps: f32) -> Result<(Tensor, Tensor)> {
    // Statistics are f32 whatever the policy (OpClass::Keep32).
    let _keep = autocast(false);
    let m = mean(x, Some(axes), true)?;
    let var = mean(&fz("(x0 - x1) * (x0 - x1)", &[x, &m])?, Some(axes), true)?;
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
    // One fused kernel: the normalised value is never stored. The output is stored like x (or f16 under the
    // mixed policy: OpClass::Store16), the statistics are f32.
    let dt = output_dtype(OpClass::Store16, &[x], "normalisation")?;
    match (gamma, beta) {
        (Some(g), Some(b)) => fused_as("(x0 - x1) * x2 * x3 + x4", &[x, m, rstd, g, b], dt),
        (Some(g), None) => fused_as("(x0 - x1) * x2 * x3", &[x, m, rstd, g], dt),
        (None, Some(b)) => fused_as("(x0 - x1) * x2 + x3", &[x, m, rstd, b], dt),
        (None, None) => fused_as("(x0 - x1) * x2", &[x, m, rstd], dt),
    }
}

/// The composed input gradient over `axes`: dx = rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂)) with ĝ = g·γ (rms_norm,
/// `center` false: dx = (ĝ − x̂·mean(ĝ·x̂))·rstd with x̂ = x·rstd), stored like x, and x̂ (f32).
fn input_grad(
    x: &Tensor,
    g: &Tensor,
    m: &Tensor,
    rstd: &Tensor,
    gamma: Option<&Tensor>,
    axes: &[isize],
    center: bool,
) -> Result<(Tensor, Tensor)> {
    let xhat = if center {
        fz("(x0 - x1) * x2", &[x, m, rstd])?
    } else {
        fz("x0 * x1", &[x, rstd])?
    };
    let gh = match gamma {
        Some(gm) => fz("x0 * x1", &[g, gm])?,
        None => g.clone(),
    };
    let mgx = mean(&fz("x0 * x1", &[&gh, &xhat])?, Some(axes), true)?;
    let dx = if center {
        let mg = mean(&gh, Some(axes), true)?;
        let t = fz("x0 - x1 - x2 * x3", &[&gh, &mg, &xhat, &mgx])?;
        // The input's gradient is stored in the input's dtype.
        fused_as("x0 * x1", &[&t, rstd], x.dtype())?
    } else {
        fused_as("(x0 - x2 * x3) * x1", &[&gh, rstd, &xhat, &mgx], x.dtype())?
    };
    Ok((dx, xhat))
}

/// The shared backward: the input gradient of [`input_grad`] and the parameter gradients summed over
/// `param_axes` into `param_shape`.
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
    let (dx, xhat) = input_grad(x, g, m, rstd, gamma, axes, center)?;
    let dgamma = match gamma {
        Some(_) => {
            Some(sum(&fz("x0 * x1", &[g, &xhat])?, Some(param_axes), false)?.reshape(param_shape)?)
        }
        None => None,
    };
    let dbeta = if has_beta {
        Some(sum(g, Some(param_axes), false)?.reshape(param_shape)?)
    } else {
        None
    };
    Ok(NormGrads { dx, dgamma, dbeta })
}

/// Runs the one-launch row kernel the device chooses (or `algo`), else `composed`: rows of the last `d`
/// elements of x, statistics shaped `stat_shape`.
#[allow(clippy::too_many_arguments)]
fn rows_or_composed(
    x: &Tensor,
    d: usize,
    stat_shape: &[usize],
    gamma: Option<&Tensor>,
    beta: Option<&Tensor>,
    eps: f32,
    center: bool,
    algo: Option<RowNormAlgo>,
    mut composed: impl FnMut() -> Result<NormOut>,
) -> Result<NormOut> {
    let op = if center { "layer_norm" } else { "rms_norm" };
    limit(x, op)?;
    let dev = x.device();
    let dt = output_dtype(OpClass::Store16, &[x], op)?;
    let rows = x.numel().checked_div(d).unwrap_or(0);
    let y = Tensor::empty(dev, x.shape(), dt)?;
    let mean = Tensor::empty(dev, stat_shape, DType::F32)?;
    let rstd = Tensor::empty(dev, stat_shape, DType::F32)?;
    let rn = RowNorm {
        x,
        gamma,
        beta,
        eps,
        center,
        rows,
        d,
        y: &y,
        mean: &mean,
        rstd: &rstd,
        algo,
    };
    let fused = {
        let mut run = || composed().map(drop);
        dev.backend().row_norm(dev, &rn, &mut run)?
    };
    if fused {
        Ok(NormOut { y, mean, rstd })
    } else {
        composed()
    }
}

/// Layer normalisation over the last `normalized` dimensions, with optional γ and β of those dimensions.
pub fn layer_norm(
    x: &Tensor,
    normalized: usize,
    gamma: Option<&Tensor>,
    beta: Option<&Tensor>,
    eps: f32,
) -> Result<NormOut> {
    layer_norm_with(x, normalized, gamma, beta, eps, None)
}

/// [`layer_norm`] with the row algorithm forced to `algo` when given (the built-in device has one path and
/// ignores it).
pub fn layer_norm_with(
    x: &Tensor,
    normalized: usize,
    gamma: Option<&Tensor>,
    beta: Option<&Tensor>,
    eps: f32,
    algo: Option<RowNormAlgo>,
) -> Result<NormOut> {
    expect_float(x, "layer_norm")?;
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
    let g = gamma.map(|t| t.reshape(inner)).transpose()?;
    let b = beta.map(|t| t.reshape(inner)).transpose()?;
    let composed = || {
        let (m, rstd) = stats(x, &axes, eps)?;
        let y = affine(x, &m, &rstd, g.as_ref(), b.as_ref())?;
        Ok(NormOut { y, mean: m, rstd })
    };
    let mut stat_shape = x.shape()[..r - normalized].to_vec();
    stat_shape.resize(r, 1);
    let d = inner.iter().product();
    rows_or_composed(x, d, &stat_shape, gamma, beta, eps, true, algo, composed)
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
    layer_norm_backward_with(x, grad, out, normalized, gamma, has_beta, None)
}

/// [`layer_norm_backward`] with the input gradient's row algorithm forced to `algo` when given
/// (`Reg(local, _)` runs as `Wg(local)`; the built-in device has one path and ignores it). The saved mean and
/// rstd must have the forward's shape: x's leading dimensions, then `normalized` ones.
pub fn layer_norm_backward_with(
    x: &Tensor,
    grad: &Tensor,
    out: &NormOut,
    normalized: usize,
    gamma: Option<&Tensor>,
    has_beta: bool,
    algo: Option<RowNormAlgo>,
) -> Result<NormGrads> {
    let op = "layer_norm_backward";
    let r = x.rank();
    if grad.shape() != x.shape() {
        return Err(Error::shape_mismatch(
            "layer_norm_backward gradient",
            x.shape(),
            grad.shape(),
        ));
    }
    if normalized == 0 || normalized > r {
        return Err(Error::Shape(format!(
            "layer_norm_backward: cannot normalise the last {normalized} dimensions of {:?}",
            x.shape()
        )));
    }
    x.same_device(&[grad, &out.mean, &out.rstd], op)?;
    for t in [x, grad, &out.mean, &out.rstd] {
        expect_float(t, op)?;
    }
    let inner = x.shape()[r - normalized..].to_vec();
    let mut stat_shape = x.shape()[..r - normalized].to_vec();
    stat_shape.resize(r, 1);
    for (t, what) in [(&out.mean, "mean"), (&out.rstd, "rstd")] {
        if t.shape() != stat_shape.as_slice() {
            return Err(Error::shape_mismatch(
                format!("layer_norm_backward saved {what}"),
                &stat_shape,
                t.shape(),
            ));
        }
    }
    check_param(gamma, &inner, x, "gamma", op)?;
    limit(x, op)?;
    let axes: Vec<isize> = (r - normalized..r).map(|a| a as isize).collect();
    let lead: Vec<isize> = (0..r - normalized).map(|a| a as isize).collect();
    let g = gamma.map(|t| t.reshape(&inner)).transpose()?;
    let full = || {
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
    };
    // What the row kernel replaces, for the tuner to time against it: the input gradient alone.
    let dx_only = || -> Result<()> {
        input_grad(x, grad, &out.mean, &out.rstd, g.as_ref(), &axes, true).map(drop)
    };
    let dev = x.device();
    let (m, rstd) = (widen(&out.mean)?, widen(&out.rstd)?);
    let dx = Tensor::empty(dev, x.shape(), x.dtype())?;
    let d: usize = inner.iter().product();
    let rb = RowNormBack {
        x,
        g: grad,
        gamma: g.as_ref(),
        mean: Some(&m),
        rstd: &rstd,
        rows: x.numel().checked_div(d).unwrap_or(0),
        d,
        dx: &dx,
        algo,
    };
    let fused = {
        let mut run = dx_only;
        dev.backend().layer_norm_backward_rows(dev, &rb, &mut run)?
    };
    if !fused {
        return full();
    }
    // γ's and β's gradients are column sums over the rows: one fused product and one reduction for dγ, one
    // reduction for dβ.
    let dgamma = match &g {
        Some(_) => Some(
            sum(
                &fz("x0 * (x1 - x2) * x3", &[grad, x, &m, &rstd])?,
                Some(&lead),
                false,
            )?
            .reshape(&inner)?,
        ),
        None => None,
    };
    let dbeta = if has_beta {
        Some(sum(grad, Some(&lead), false)?.reshape(&inner)?)
    } else {
        None
    };
    Ok(NormGrads { dx, dgamma, dbeta })
}

/// RMS normalisation over the last dimension: `x / √(mean(x²) + ε) · γ`.
pub fn rms_norm(x: &Tensor, gamma: Option<&Tensor>, eps: f32) -> Result<NormOut> {
    rms_norm_with(x, gamma, eps, None)
}

/// [`rms_norm`] with the row algorithm forced to `algo` when given (the built-in device has one path and
/// ignores it).
pub fn rms_norm_with(
    x: &Tensor,
    gamma: Option<&Tensor>,
    eps: f32,
    algo: Option<RowNormAlgo>,
) -> Result<NormOut> {
    expect_float(x, "rms_norm")?;
    check_eps(eps, "rms_norm")?;
    let Some(&d) = x.shape().last() else {
        return Err(Error::Shape(
            "rms_norm: the input needs at least one dimension".into(),
        ));
    };
    check_param(gamma, &[d], x, "gamma", "rms_norm")?;
    let g = gamma.map(|t| t.reshape(&[d])).transpose()?;
    let composed = || {
        let (zero, rstd) = {
            let _keep = autocast(false);
            let ms = mean(&fz("x0 * x0", &[x])?, Some(&[-1]), true)?;
            let rstd = unary(UnaryOp::Rsqrt, &add_scalar(&ms, eps)?)?;
            (mul_scalar(&ms, 0.0)?, rstd)
        };
        let dt = output_dtype(OpClass::Store16, &[x], "rms_norm")?;
        let y = match &g {
            Some(g) => fused_as("x0 * x1 * x2", &[x, &rstd, g], dt)?,
            None => fused_as("x0 * x1", &[x, &rstd], dt)?,
        };
        Ok(NormOut {
            y,
            mean: zero,
            rstd,
        })
    };
    let mut stat_shape = x.shape().to_vec();
    if let Some(last) = stat_shape.last_mut() {
        *last = 1;
    }
    rows_or_composed(x, d, &stat_shape, gamma, None, eps, false, algo, composed)
}

/// The gradients of [`rms_norm`].
pub fn rms_norm_backward(
    x: &Tensor,
    grad: &Tensor,
    out: &NormOut,
    gamma: Option<&Tensor>,
) -> Result<NormGrads> {
    rms_norm_backward_with(x, grad, out, gamma, None)
}

/// [`rms_norm_backward`] with the input gradient's row algorithm forced to `algo` when given (`Reg(local, _)`
/// runs as `Wg(local)`; the built-in device has one path and ignores it).
pub fn rms_norm_backward_with(
    x: &Tensor,
    grad: &Tensor,
    out: &NormOut,
    gamma: Option<&Tensor>,
    algo: Option<RowNormAlgo>,
) -> Result<NormGrads> {
    let r = x.rank();
    if grad.shape() != x.shape() {
        return Err(Error::shape_mismatch(
            "rms_norm_backward gradient",
            x.shape(),
            grad.shape(),
        ));
    }
    if r == 0 {
        return Err(Error::Shape(
            "rms_norm_backward: the input needs at least one dimension".into(),
        ));
    }
    let d = x.shape()[r - 1];
    let mut stat_shape = x.shape().to_vec();
    stat_shape[r - 1] = 1;
    if out.rstd.shape() != stat_shape.as_slice() {
        return Err(Error::shape_mismatch(
            "rms_norm_backward saved rstd",
            &stat_shape,
            out.rstd.shape(),
        ));
    }
    x.same_device(&[grad, &out.rstd], "rms_norm_backward")?;
    for t in [x, grad, &out.rstd] {
        // The row kernels read these as f32 or f16.
        expect_float(t, "rms_norm_backward")?;
    }
    check_param(gamma, &[d], x, "gamma", "rms_norm_backward")?;
    limit(x, "rms_norm_backward")?;
    let lead: Vec<isize> = (0..r - 1).map(|a| a as isize).collect();
    let g = gamma.map(|t| t.reshape(&[d])).transpose()?;
    let full = || {
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
    };
    // What the row kernel replaces, for the tuner to time against it: the input gradient alone.
    let dx_only = || -> Result<()> {
        input_grad(x, grad, &out.mean, &out.rstd, g.as_ref(), &[-1], false).map(drop)
    };
    let dev = x.device();
    let rstd = widen(&out.rstd)?;
    let dx = Tensor::empty(dev, x.shape(), x.dtype())?;
    let rb = RowNormBack {
        x,
        g: grad,
        gamma: g.as_ref(),
        mean: None,
        rstd: &rstd,
        rows: x.numel().checked_div(d).unwrap_or(0),
        d,
        dx: &dx,
        algo,
    };
    let fused = {
        let mut run = dx_only;
        dev.backend().rms_norm_backward_rows(dev, &rb, &mut run)?
    };
    if !fused {
        return full();
    }
    let dgamma = match &g {
        Some(_) => {
            Some(sum(&fz("x0 * x1 * x2", &[grad, x, &rstd])?, Some(&lead), false)?.reshape(&[d])?)
        }
        None => None,
    };
    Ok(NormGrads {
        dx,
        dgamma,
        dbeta: None,
    })
}

fn nchw(x: &Tensor, op: &str) -> Result<[usize; 4]> {
    expect_float(x, op)?;
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
    let xhat = fz("(x0 - x1) * x2", &[&xg, &m, &rstd])?.reshape(&[n, c, h * w])?;
    let g = gamma.map(|t| t.reshape(&[c, 1])).transpose()?;
    let b = beta.map(|t| t.reshape(&[c, 1])).transpose()?;
    let dt = output_dtype(OpClass::Store16, &[x], "group_norm")?;
    let y = match (&g, &b) {
        (Some(g), Some(b)) => fused_as("x0 * x1 + x2", &[&xhat, g, b], dt)?,
        (Some(g), None) => fused_as("x0 * x1", &[&xhat, g], dt)?,
        (None, Some(b)) => fused_as("x0 + x1", &[&xhat, b], dt)?,
        (None, None) => store_as(xhat, dt)?,
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
    if grad.shape() != x.shape() {
        return Err(Error::shape_mismatch(
            "group_norm_backward gradient",
            x.shape(),
            grad.shape(),
        ));
    }
    if groups == 0 || c % groups != 0 {
        return Err(Error::Shape(format!(
            "group_norm_backward: {c} channels do not split into {groups} groups"
        )));
    }
    let xg = x.reshape(&[n, groups, c / groups * h * w])?;
    let xhat = fz("(x0 - x1) * x2", &[&xg, &out.mean, &out.rstd])?.reshape(&[n, c, h * w])?;
    let g3 = grad.reshape(&[n, c, h * w])?;
    let gh = match gamma {
        Some(gm) => fz("x0 * x1", &[&g3, &gm.reshape(&[c, 1])?])?,
        None => g3.clone(),
    };
    let ghg = gh.reshape(&[n, groups, c / groups * h * w])?;
    let xhg = xhat.reshape(&[n, groups, c / groups * h * w])?;
    let mg = mean(&ghg, Some(&[2]), true)?;
    let mgx = mean(&fz("x0 * x1", &[&ghg, &xhg])?, Some(&[2]), true)?;
    let dx = fz("x0 - x1 - x2 * x3", &[&ghg, &mg, &xhg, &mgx])?;
    let dx = fused_as("x0 * x1", &[&dx, &out.rstd], x.dtype())?.reshape(&[n, c, h, w])?;
    let dgamma = match gamma {
        Some(_) => Some(sum(&fz("x0 * x1", &[&g3, &xhat])?, Some(&[0, 2]), false)?),
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
        // The training kernels read f32: an f16 input is widened on the device and the output stored back in
        // the policy's dtype (the statistics stay f32).
        let dt = output_dtype(OpClass::Store16, &[x], "batch_norm2d")?;
        let x = &widen(x)?;
        let [n, _, h, w] = nchw(x, "batch_norm2d")?;
        if n * h * w == 0 {
            return Err(Error::Shape(format!(
                "batch_norm2d: training needs at least one element per channel; the input is {:?}",
                x.shape()
            )));
        }
        limit(x, "batch_norm2d")?;
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
            algo,
        };
        dev.backend().batch_norm_train(dev, &bn)?;
        Ok(BatchNormOut {
            out: NormOut {
                y: store_as(y, dt)?,
                mean,
                rstd,
            },
            running_mean: rm_out,
            running_var: rv_out,
        })
    } else {
        let g = gamma.map(|t| t.reshape(&[1, c, 1, 1])).transpose()?;
        let b = beta.map(|t| t.reshape(&[1, c, 1, 1])).transpose()?;
        let m = running_mean.reshape(&[1, c, 1, 1])?;
        let keep = autocast(false);
        let rstd = unary(
            UnaryOp::Rsqrt,
            &add_scalar(&running_var.reshape(&[1, c, 1, 1])?, eps)?,
        )?;
        drop(keep);
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
    batch_norm2d_backward_with(x, grad, out, gamma, has_beta, None)
}

/// [`batch_norm2d_backward`] with the algorithm forced to `algo` when given (`Composed` runs the generic ops
/// on any device; the built-in device has only that path and ignores the others).
pub fn batch_norm2d_backward_with(
    x: &Tensor,
    grad: &Tensor,
    out: &NormOut,
    gamma: Option<&Tensor>,
    has_beta: bool,
    algo: Option<BnBackAlgo>,
) -> Result<NormGrads> {
    bn_backward(x, grad, out, gamma, has_beta, None, algo)
}

/// The gradients of training-mode [`batch_norm2d`] followed by the activation `act`, from the gradient of the
/// activation's output: `act`'s gradient at the normalised output `h` (`out.y`) is applied to `grad` inside the
/// backward's kernels, with no pass of its own (the composed path applies it first). `algo` as in
/// [`batch_norm2d_backward_with`].
#[allow(clippy::too_many_arguments)]
pub fn batch_norm2d_backward_act(
    x: &Tensor,
    grad: &Tensor,
    out: &NormOut,
    gamma: Option<&Tensor>,
    has_beta: bool,
    act: ActGrad,
    algo: Option<BnBackAlgo>,
) -> Result<NormGrads> {
    if let ActGrad::Clamp(lo, hi) = act
        && (lo.is_nan() || hi.is_nan() || lo > hi)
    {
        return Err(Error::Invalid(format!(
            "batch_norm2d_backward_act: clamp bounds [{lo}, {hi}] are not ordered"
        )));
    }
    bn_backward(x, grad, out, gamma, has_beta, Some(act), algo)
}

impl ActGrad {
    /// The activation as its elementwise op.
    pub(crate) fn op(self) -> UnaryOp {
        match self {
            ActGrad::Relu => UnaryOp::Relu,
            ActGrad::Clamp(lo, hi) => UnaryOp::Clamp(lo, hi),
        }
    }
}

fn bn_backward(
    x: &Tensor,
    grad: &Tensor,
    out: &NormOut,
    gamma: Option<&Tensor>,
    has_beta: bool,
    act: Option<ActGrad>,
    algo: Option<BnBackAlgo>,
) -> Result<NormGrads> {
    let [_, c, _, _] = nchw(x, "batch_norm2d_backward")?;
    if grad.shape() != x.shape() {
        return Err(Error::shape_mismatch(
            "batch_norm2d_backward gradient",
            x.shape(),
            grad.shape(),
        ));
    }
    expect_float(grad, "batch_norm2d_backward")?;
    check_param(gamma, &[c], x, "gamma", "batch_norm2d_backward")?;
    for (t, what) in [(&out.mean, "mean"), (&out.rstd, "rstd")] {
        x.same_device(&[t], "batch_norm2d_backward")?;
        t.expect_dtype(DType::F32, "batch_norm2d_backward statistics")?;
        if t.shape() != [1, c, 1, 1] {
            return Err(Error::shape_mismatch(
                format!("batch_norm2d_backward {what} for input {:?}", x.shape()),
                &[1, c, 1, 1],
                t.shape(),
            ));
        }
    }
    x.same_device(&[grad], "batch_norm2d_backward")?;
    if act.is_some() {
        x.same_device(&[&out.y], "batch_norm2d_backward")?;
        if out.y.shape() != x.shape() {
            return Err(Error::shape_mismatch(
                "batch_norm2d_backward_act output",
                x.shape(),
                out.y.shape(),
            ));
        }
    }
    limit(x, "batch_norm2d_backward")?;
    if algo != Some(BnBackAlgo::Composed) && x.numel() > 0 {
        // The kernels read f32: f16 tensors are widened on the device, dx is stored back in x's dtype.
        let dev = x.device();
        let (xw, gw) = (widen(x)?, widen(grad)?);
        let gm = gamma.map(widen).transpose()?;
        let hw = act.map(|_| widen(&out.y)).transpose()?;
        let dx = Tensor::empty(dev, x.shape(), DType::F32)?;
        let dgamma = Tensor::empty(dev, &[c], DType::F32)?;
        let dbeta = Tensor::empty(dev, &[c], DType::F32)?;
        let bb = BnBack {
            x: &xw,
            g: &gw,
            mean: &out.mean,
            rstd: &out.rstd,
            gamma: gm.as_ref(),
            dx: &dx,
            dgamma: &dgamma,
            dbeta: &dbeta,
            act: act.zip(hw.as_ref()),
            algo,
        };
        if dev.backend().batch_norm_backward(dev, &bb)? {
            return Ok(NormGrads {
                dx: store_as(dx, x.dtype())?,
                dgamma: gamma.map(|_| dgamma),
                dbeta: has_beta.then_some(dbeta),
            });
        }
    }
    // The composed path: the activation's own backward first.
    let masked = act
        .map(|a| unary_backward(a.op(), &out.y, grad))
        .transpose()?;
    let grad = masked.as_ref().unwrap_or(grad);
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
