//! Differentiable ops: each computes its value with `crate::ops` and records how to map the output gradient
//! back to its inputs. Gradients of broadcast operands are summed back to their shapes (`reduce_to_shape`).

use super::{Var, record};
use crate::error::{Error, Result};
use crate::ops::{self, Conv2dOptions, Pool2d, UnaryOp};
use crate::tensor::{DType, Tensor};

/// Sums `g` down to `shape` (the inverse of broadcasting) when the shapes differ.
fn unbroadcast(g: &Tensor, shape: &[usize]) -> Result<Tensor> {
    if g.shape() == shape {
        Ok(g.clone())
    } else {
        ops::reduce_to_shape(g, shape)
    }
}

/// `a + b` with broadcasting.
pub fn add(a: &Var, b: &Var) -> Result<Var> {
    let out = ops::add(a.value(), b.value())?;
    let (sa, sb) = (a.shape().to_vec(), b.shape().to_vec());
    record("add", out, &[a, b], move |g| {
        Ok(vec![Some(unbroadcast(g, &sa)?), Some(unbroadcast(g, &sb)?)])
    })
}

/// `a − b` with broadcasting.
pub fn sub(a: &Var, b: &Var) -> Result<Var> {
    let out = ops::sub(a.value(), b.value())?;
    let (sa, sb) = (a.shape().to_vec(), b.shape().to_vec());
    record("sub", out, &[a, b], move |g| {
        Ok(vec![
            Some(unbroadcast(g, &sa)?),
            Some(unbroadcast(&ops::neg(g)?, &sb)?),
        ])
    })
}

/// `a · b` elementwise with broadcasting.
pub fn mul(a: &Var, b: &Var) -> Result<Var> {
    let out = ops::mul(a.value(), b.value())?;
    let (ta, tb) = (a.value().clone(), b.value().clone());
    let (ra, rb) = (a.requires_grad(), b.requires_grad());
    record("mul", out, &[a, b], move |g| {
        let ga = if ra {
            Some(unbroadcast(&ops::mul(g, &tb)?, ta.shape())?)
        } else {
            None
        };
        let gb = if rb {
            Some(unbroadcast(&ops::mul(g, &ta)?, tb.shape())?)
        } else {
            None
        };
        Ok(vec![ga, gb])
    })
}

/// `a / b` elementwise with broadcasting.
pub fn div(a: &Var, b: &Var) -> Result<Var> {
    let out = ops::div(a.value(), b.value())?;
    let (ta, tb, o) = (a.value().clone(), b.value().clone(), out.clone());
    record("div", out, &[a, b], move |g| {
        let ga = ops::div(g, &tb)?;
        // d(a/b)/db = −(a/b)/b
        let gb = ops::fused("-(x0 * x1) / x2", &[g, &o, &tb])?;
        Ok(vec![
            Some(unbroadcast(&ga, ta.shape())?),
            Some(unbroadcast(&gb, tb.shape())?),
        ])
    })
}

/// `x + s`.
pub fn add_scalar(x: &Var, s: f32) -> Result<Var> {
    let out = ops::add_scalar(x.value(), s)?;
    record("add_scalar", out, &[x], |g| Ok(vec![Some(g.clone())]))
}

/// `x · s`.
pub fn mul_scalar(x: &Var, s: f32) -> Result<Var> {
    let out = ops::mul_scalar(x.value(), s)?;
    record("mul_scalar", out, &[x], move |g| {
        Ok(vec![Some(ops::mul_scalar(g, s)?)])
    })
}

/// Any unary op of [`UnaryOp`] (activations, `exp`, `log`, `sqrt`, …).
pub fn unary(op: UnaryOp, x: &Var) -> Result<Var> {
    let out = ops::unary(op, x.value())?;
    let xv = x.value().clone();
    record(op.name(), out, &[x], move |g| {
        Ok(vec![Some(ops::unary_backward(op, &xv, g)?)])
    })
}

/// `max(x, 0)`.
pub fn relu(x: &Var) -> Result<Var> {
    unary(UnaryOp::Relu, x)
}

/// `1 / (1 + e^−x)`.
pub fn sigmoid(x: &Var) -> Result<Var> {
    unary(UnaryOp::Sigmoid, x)
}

/// `tanh x`.
pub fn tanh(x: &Var) -> Result<Var> {
    unary(UnaryOp::Tanh, x)
}

/// The sum of every element (a rank-0 result).
pub fn sum_all(x: &Var) -> Result<Var> {
    let out = ops::sum_all(x.value())?;
    let shape = x.shape().to_vec();
    record("sum_all", out, &[x], move |g| {
        Ok(vec![Some(ops::add(
            &Tensor::zeros(g.device(), &shape)?,
            g,
        )?)])
    })
}

/// The mean of every element (a rank-0 result).
pub fn mean_all(x: &Var) -> Result<Var> {
    let n = x.value().numel().max(1) as f32;
    // A mean is a reduction into a loss: f32 under the mixed-precision policy too.
    let _keep = crate::ops::policy::autocast(false);
    mul_scalar(&sum_all(x)?, 1.0 / n)
}

/// The sum over `axes` (all when `None`), keeping reduced axes as size 1 when `keepdims`.
pub fn sum(x: &Var, axes: Option<&[isize]>, keepdims: bool) -> Result<Var> {
    let out = ops::sum(x.value(), axes, keepdims)?;
    let shape = x.shape().to_vec();
    let kept = ops::sum(x.value(), axes, true).map(|t| t.shape().to_vec())?;
    record("sum", out, &[x], move |g| {
        Ok(vec![Some(ops::add(
            &Tensor::zeros(g.device(), &shape)?,
            &g.reshape(&kept)?,
        )?)])
    })
}

/// A view with another shape; the gradient is reshaped back.
pub fn reshape(x: &Var, shape: &[usize]) -> Result<Var> {
    let out = x.value().reshape(shape)?;
    let orig = x.shape().to_vec();
    record("reshape", out, &[x], move |g| {
        Ok(vec![Some(g.reshape(&orig)?)])
    })
}

/// `(N, …) → (N, rest)`.
pub fn flatten(x: &Var) -> Result<Var> {
    let n = *x
        .shape()
        .first()
        .ok_or_else(|| Error::Shape("flatten needs at least one dimension".into()))?;
    reshape(x, &[n, usize::MAX])
}

/// `a @ b` for 2-D `a` (M, K) and `b` (K, N).
pub fn matmul(a: &Var, b: &Var) -> Result<Var> {
    let out = ops::matmul(a.value(), b.value())?;
    let (ta, tb) = (a.value().clone(), b.value().clone());
    let (ra, rb) = (a.requires_grad(), b.requires_grad());
    record("matmul", out, &[a, b], move |g| {
        let ga = if ra {
            Some(ops::matmul_t(g, &tb, false, true)?)
        } else {
            None
        };
        let gb = if rb {
            Some(ops::matmul_t(&ta, g, true, false)?)
        } else {
            None
        };
        Ok(vec![ga, gb])
    })
}

/// `x @ w + b` with netcl's weight layout `w` (in, out); `x` of more than two dimensions is flattened to (N, in).
pub fn linear(x: &Var, w: &Var, b: Option<&Var>) -> Result<Var> {
    let x2 = if x.shape().len() > 2 {
        flatten(x)?
    } else {
        x.clone()
    };
    let y = matmul(&x2, w)?;
    match b {
        Some(b) => add(&y, b),
        None => Ok(y),
    }
}

/// 2-D convolution (NCHW, weights F×C/g×KH×KW) with an optional bias; `opts.fuse_relu` applies ReLU.
pub fn conv2d(x: &Var, w: &Var, b: Option<&Var>, opts: &Conv2dOptions) -> Result<Var> {
    let out = ops::conv2d(x.value(), w.value(), b.map(Var::value), opts)?;
    let y = out.clone();
    let o = Conv2dOptions {
        fuse_relu: false,
        ..opts.clone()
    };
    let relu = opts.fuse_relu;
    let name = if relu { "conv2d_relu" } else { "conv2d" };
    record_conv(name, out, x, w, b, move |g, tx, tw, has_b, need_x| {
        let g = if relu {
            ops::unary_backward(UnaryOp::Relu, &y, g)?
        } else {
            g.clone()
        };
        ops::conv2d_backward(tx, tw, &g, has_b, need_x, &o)
    })
}

/// Records a convolution of `x` by `w` with the optional bias `b` (its parents in that order), whose value is
/// `out`: `grads(g, x, w, has_b, need_x)` gives the gradients of x (when needed), w and b (with a bias).
fn record_conv(
    name: &'static str,
    out: Tensor,
    x: &Var,
    w: &Var,
    b: Option<&Var>,
    grads: impl Fn(&Tensor, &Tensor, &Tensor, bool, bool) -> Result<ops::Conv2dGrads>
    + Send
    + Sync
    + 'static,
) -> Result<Var> {
    let (tx, tw) = (x.value().clone(), w.value().clone());
    let (need_x, has_b) = (x.requires_grad(), b.is_some());
    let mut parents = vec![x, w];
    parents.extend(b);
    record(name, out, &parents, move |g| {
        let gr = grads(g, &tx, &tw, has_b, need_x)?;
        let mut v = vec![gr.grad_x, Some(gr.grad_w)];
        if has_b {
            v.push(gr.grad_b);
        }
        Ok(v)
    })
}

/// Depthwise convolution (weights C×1×K×K) with an optional bias.
pub fn depthwise_conv2d(
    x: &Var,
    w: &Var,
    b: Option<&Var>,
    stride: usize,
    pad: usize,
) -> Result<Var> {
    let out = ops::depthwise_conv2d(x.value(), w.value(), b.map(Var::value), stride, pad)?;
    record_conv(
        "depthwise_conv2d",
        out,
        x,
        w,
        b,
        move |g, tx, tw, has_b, need_x| {
            ops::depthwise_conv2d_backward(tx, tw, g, has_b, need_x, stride, pad)
        },
    )
}

/// Transposed convolution (weights Cin×Cout/g×KH×KW) with an optional bias.
pub fn conv_transpose2d(
    x: &Var,
    w: &Var,
    b: Option<&Var>,
    opts: &ops::ConvTranspose2dOptions,
) -> Result<Var> {
    let out = ops::conv_transpose2d(x.value(), w.value(), b.map(Var::value), opts)?;
    let o = opts.clone();
    record_conv(
        "conv_transpose2d",
        out,
        x,
        w,
        b,
        move |g, tx, tw, has_b, need_x| {
            ops::conv_transpose2d_backward(tx, tw, g, has_b, need_x, &o)
        },
    )
}

/// Max pooling; the backward routes each gradient to its window's maximum.
pub fn max_pool2d(x: &Var, p: Pool2d) -> Result<Var> {
    let out = ops::max_pool2d(x.value(), p)?;
    let y = out.y.clone();
    let shape = x.shape().to_vec();
    record("max_pool2d", y, &[x], move |g| {
        Ok(vec![Some(ops::max_pool2d_backward(g, &out, &shape, p)?)])
    })
}

/// Average pooling (padding counted in the divisor when `count_include_pad`).
pub fn avg_pool2d(x: &Var, p: Pool2d, count_include_pad: bool) -> Result<Var> {
    let y = ops::avg_pool2d(x.value(), p, count_include_pad)?;
    let shape = x.shape().to_vec();
    record("avg_pool2d", y, &[x], move |g| {
        Ok(vec![Some(ops::avg_pool2d_backward(
            g,
            &shape,
            p,
            count_include_pad,
        )?)])
    })
}

/// The mean over each H×W plane: (N, C, H, W) → (N, C, 1, 1).
pub fn global_avg_pool2d(x: &Var) -> Result<Var> {
    let y = ops::global_avg_pool2d(x.value())?;
    let shape = x.shape().to_vec();
    record("global_avg_pool2d", y, &[x], move |g| {
        Ok(vec![Some(ops::global_avg_pool2d_backward(g, &shape)?)])
    })
}

/// Training-mode batch normalisation: returns the output and the updated running statistics.
pub fn batch_norm2d_train(
    x: &Var,
    gamma: &Var,
    beta: &Var,
    running_mean: &Tensor,
    running_var: &Tensor,
    momentum: f32,
    eps: f32,
) -> Result<(Var, Tensor, Tensor)> {
    bn_train(
        x,
        [gamma, beta],
        [running_mean, running_var],
        momentum,
        eps,
        None,
    )
}

/// Training-mode batch normalisation followed by the activation `act` (ReLU or a clamp): the output is the
/// activation's, and the backward applies the activation's gradient inside the normalisation's backward
/// kernels (one graph node, no separate pass). Returns the output and the updated running statistics.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm2d_train_act(
    x: &Var,
    gamma: &Var,
    beta: &Var,
    running_mean: &Tensor,
    running_var: &Tensor,
    momentum: f32,
    eps: f32,
    act: ops::norm::ActGrad,
) -> Result<(Var, Tensor, Tensor)> {
    bn_train(
        x,
        [gamma, beta],
        [running_mean, running_var],
        momentum,
        eps,
        Some(act),
    )
}

/// Training batch_norm2d with γ and β, then `act` when given, as one graph node.
fn bn_train(
    x: &Var,
    [gamma, beta]: [&Var; 2],
    [running_mean, running_var]: [&Tensor; 2],
    momentum: f32,
    eps: f32,
    act: Option<ops::norm::ActGrad>,
) -> Result<(Var, Tensor, Tensor)> {
    let r = ops::batch_norm2d(
        x.value(),
        Some(gamma.value()),
        Some(beta.value()),
        running_mean,
        running_var,
        momentum,
        eps,
        true,
    )?;
    let y = match act {
        None => r.out.y.clone(),
        Some(a) => ops::unary(a.op(), &r.out.y)?,
    };
    let (tx, tg, stats) = (x.value().clone(), gamma.value().clone(), r.out.clone());
    let name = if act.is_some() {
        "batch_norm2d_act"
    } else {
        "batch_norm2d"
    };
    let y = Var::from_op(
        name,
        y,
        &[x, gamma, beta],
        Box::new(move |g| {
            let gr = match act {
                None => ops::batch_norm2d_backward(&tx, g, &stats, Some(&tg), true)?,
                Some(a) => {
                    ops::norm::batch_norm2d_backward_act(&tx, g, &stats, Some(&tg), true, a, None)?
                }
            };
            Ok(vec![Some(gr.dx), gr.dgamma, gr.dbeta])
        }),
    );
    Ok((y, r.running_mean, r.running_var))
}

/// Eval-mode batch normalisation with the running statistics (an affine map per channel).
pub fn batch_norm2d_eval(
    x: &Var,
    gamma: &Var,
    beta: &Var,
    running_mean: &Tensor,
    running_var: &Tensor,
    eps: f32,
) -> Result<Var> {
    let c = running_var.numel();
    // y = x·s + t with s = γ/√(var+ε), t = β − mean·s, all differentiable in x, γ and β.
    let rstd = ops::unary(UnaryOp::Rsqrt, &ops::add_scalar(running_var, eps)?)?;
    let s = mul(gamma, &Var::constant(rstd))?;
    let t = sub(beta, &mul(&Var::constant(running_mean.clone()), &s)?)?;
    add(
        &mul(x, &reshape(&s, &[1, c, 1, 1])?)?,
        &reshape(&t, &[1, c, 1, 1])?,
    )
}

/// Layer normalisation over the last `normalized` dimensions with scale and shift.
pub fn layer_norm(x: &Var, normalized: usize, gamma: &Var, beta: &Var, eps: f32) -> Result<Var> {
    let (g, b) = (Some(gamma.value()), Some(beta.value()));
    let out = ops::layer_norm(x.value(), normalized, g, b, eps)?;
    record_norm(
        "layer_norm",
        out,
        x,
        gamma,
        beta,
        move |x, g, stats, gamma| {
            ops::layer_norm_backward(x, g, stats, normalized, Some(gamma), true)
        },
    )
}

/// Group normalisation of N×C×H×W with per-channel scale and shift.
pub fn group_norm(x: &Var, groups: usize, gamma: &Var, beta: &Var, eps: f32) -> Result<Var> {
    let (g, b) = (Some(gamma.value()), Some(beta.value()));
    let out = ops::group_norm(x.value(), groups, g, b, eps)?;
    record_norm(
        "group_norm",
        out,
        x,
        gamma,
        beta,
        move |x, g, stats, gamma| ops::group_norm_backward(x, g, stats, groups, Some(gamma), true),
    )
}

/// Records a normalisation of `x` with scale `gamma` and shift `beta` (its parents in that order) whose
/// forward gave `out`: `grads(x, g, out, gamma)` gives the gradients of all three.
fn record_norm(
    name: &'static str,
    out: ops::NormOut,
    x: &Var,
    gamma: &Var,
    beta: &Var,
    grads: impl Fn(&Tensor, &Tensor, &ops::NormOut, &Tensor) -> Result<ops::NormGrads>
    + Send
    + Sync
    + 'static,
) -> Result<Var> {
    let (tx, tg, stats) = (x.value().clone(), gamma.value().clone(), out.clone());
    record(name, out.y, &[x, gamma, beta], move |g| {
        let gr = grads(&tx, g, &stats, &tg)?;
        Ok(vec![Some(gr.dx), gr.dgamma, gr.dbeta])
    })
}

/// Inverted dropout with the counter-based generator: zeroes with probability `p`, scales the rest by 1/(1−p).
pub fn dropout(x: &Var, p: f32, seed: u64) -> Result<Var> {
    let y = ops::dropout(x.value(), p, seed)?;
    record("dropout", y, &[x], move |g| {
        Ok(vec![Some(ops::dropout_backward(g, p, seed)?)])
    })
}

/// Softmax along `axis`.
pub fn softmax(x: &Var, axis: isize) -> Result<Var> {
    let y = ops::softmax(x.value(), axis)?;
    let yc = y.clone();
    record("softmax", y, &[x], move |g| {
        Ok(vec![Some(ops::softmax_backward(&yc, g, axis)?)])
    })
}

/// Log-softmax along `axis`.
pub fn log_softmax(x: &Var, axis: isize) -> Result<Var> {
    let y = ops::log_softmax(x.value(), axis)?;
    let yc = y.clone();
    record("log_softmax", y, &[x], move |g| {
        Ok(vec![Some(ops::log_softmax_backward(&yc, g, axis)?)])
    })
}

/// Mean cross-entropy of logits (N, C) against i32 labels (N); rows labelled `ignore_index` are skipped. The
/// labels are checked once, in the forward (one read from the device); the backward reads nothing back.
pub fn cross_entropy(logits: &Var, labels: &Tensor, ignore_index: i32) -> Result<Var> {
    // The forward checks the labels (one read of its statistics); the backward reuses those statistics, so a
    // training step reads nothing more back for its loss.
    let (y, stats) =
        ops::softmax::cross_entropy_keeping_stats(logits.value(), labels, ignore_index)?;
    let (tl, lab) = (logits.value().clone(), labels.clone());
    record("cross_entropy", y, &[logits], move |g| {
        Ok(vec![Some(ops::softmax::cross_entropy_backward_from(
            &tl,
            &lab,
            g,
            ignore_index,
            &stats,
        )?)])
    })
}

/// Negative log-likelihood of log-probabilities (N, C) against i32 labels: the mean of −logp[label].
pub fn nll_loss(logp: &Var, labels: &Tensor) -> Result<Var> {
    let c = *logp.shape().get(1).ok_or_else(|| {
        Error::Shape(format!(
            "nll_loss needs (N, C) inputs, got {:?}",
            logp.shape()
        ))
    })?;
    let onehot = Var::constant(ops::one_hot(labels, c)?);
    let picked = sum(&mul(logp, &onehot)?, None, false)?;
    mul_scalar(&picked, -1.0 / logp.shape()[0].max(1) as f32)
}

/// Fails unless `b` (called `what` in op `op`'s message) has the shape of `a`.
pub(crate) fn same_shape(a: &Var, b: &Var, op: &str, what: &str) -> Result<()> {
    if a.shape() != b.shape() {
        return Err(Error::shape_mismatch(
            format!("{op} {what}"),
            a.shape(),
            b.shape(),
        ));
    }
    Ok(())
}

/// Mean squared error (a mean, not netcl's sum).
pub fn mse_loss(pred: &Var, target: &Var) -> Result<Var> {
    same_shape(pred, target, "mse_loss", "target")?;
    let d = sub(pred, target)?;
    mean_all(&mul(&d, &d)?)
}

/// Mean absolute error.
pub fn l1_loss(pred: &Var, target: &Var) -> Result<Var> {
    same_shape(pred, target, "l1_loss", "target")?;
    mean_all(&unary(UnaryOp::Abs, &sub(pred, target)?)?)
}

/// Mean smooth-L1 (Huber with threshold `beta`): 0.5d²/β where |d| < β, else |d| − 0.5β.
pub fn smooth_l1_loss(pred: &Var, target: &Var, beta: f32) -> Result<Var> {
    same_shape(pred, target, "smooth_l1_loss", "target")?;
    if !(beta.is_finite() && beta > 0.0) {
        return Err(Error::Invalid(format!(
            "smooth_l1_loss: beta {beta} must be finite and > 0"
        )));
    }
    let b = Tensor::full(pred.value().device(), &[], beta)?;
    let (tp, tt) = (pred.value().clone(), target.value().clone());
    let e = ops::fused(
        "where(abs(x0 - x1) < x2, 0.5 * (x0 - x1) * (x0 - x1) / x2, abs(x0 - x1) - 0.5 * x2)",
        &[&tp, &tt, &b],
    )?;
    let bb = b.clone();
    let elem = Var::from_op(
        "smooth_l1",
        e,
        &[pred, target],
        Box::new(move |g| {
            let d = ops::fused(
                "where(abs(x0 - x1) < x2, (x0 - x1) / x2, where(x0 > x1, 1, -1))",
                &[&tp, &tt, &bb],
            )?;
            let gp = ops::mul(g, &d)?;
            Ok(vec![Some(gp.clone()), Some(ops::neg(&gp)?)])
        }),
    );
    mean_all(&elem)
}

/// Mean binary cross-entropy of probabilities `p` (clamped to [1e-7, 1 − 1e-7]) against targets in [0, 1].
pub fn bce_loss(p: &Var, target: &Var) -> Result<Var> {
    same_shape(p, target, "bce_loss", "target")?;
    let (tp, tt) = (p.value().clone(), target.value().clone());
    let e = ops::fused(
        "-(x1 * log(clamp(x0, 1e-7, 1 - 1e-7)) + (1 - x1) * log(1 - clamp(x0, 1e-7, 1 - 1e-7)))",
        &[&tp, &tt],
    )?;
    let elem = Var::from_op(
        "bce",
        e,
        &[p, target],
        Box::new(move |g| {
            let dp = ops::fused(
                "(clamp(x0, 1e-7, 1 - 1e-7) - x1) / (clamp(x0, 1e-7, 1 - 1e-7) * (1 - clamp(x0, 1e-7, 1 - 1e-7)))",
                &[&tp, &tt],
            )?;
            let dt = ops::fused(
                "log(1 - clamp(x0, 1e-7, 1 - 1e-7)) - log(clamp(x0, 1e-7, 1 - 1e-7))",
                &[&tp, &tt],
            )?;
            Ok(vec![Some(ops::mul(g, &dp)?), Some(ops::mul(g, &dt)?)])
        }),
    );
    mean_all(&elem)
}

/// Mean binary cross-entropy from logits, computed stably: max(x, 0) − x·t + log(1 + e^−|x|).
pub fn bce_with_logits_loss(x: &Var, target: &Var) -> Result<Var> {
    same_shape(x, target, "bce_with_logits_loss", "target")?;
    let (tx, tt) = (x.value().clone(), target.value().clone());
    let e = ops::fused("max(x0, 0) - x0 * x1 + log1p(exp(-abs(x0)))", &[&tx, &tt])?;
    let elem = Var::from_op(
        "bce_with_logits",
        e,
        &[x, target],
        Box::new(move |g| {
            let dx = ops::fused("sigmoid(x0) - x1", &[&tx, &tt])?;
            Ok(vec![
                Some(ops::mul(g, &dx)?),
                Some(ops::mul(g, &ops::neg(&tx)?)?),
            ])
        }),
    );
    mean_all(&elem)
}

/// Checks that labels are i32 class indices in `[0, classes)`.
pub fn check_labels(labels: &Tensor, classes: usize) -> Result<()> {
    labels.expect_dtype(DType::I32, "labels")?;
    let v = labels.to_vec::<i32>()?;
    if let Some(bad) = v.iter().find(|&&l| l < 0 || l as usize >= classes) {
        return Err(Error::Invalid(format!(
            "label {bad} is outside [0, {classes})"
        )));
    }
    Ok(())
}
