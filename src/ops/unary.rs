//! Unary ops and activations, forward and backward.
//!
//! Each op is an OpenCL C expression pair (forward on the input `v`, backward on `v` and the incoming gradient
//! `g`) built into `kernels/unary.cl`, with its parameters (slopes, bounds) passed as kernel arguments. The
//! built-in device evaluates the same formulas in f64. The backward recomputes from the forward input, so no
//! activation needs to be kept; hard_swish's backward is one fused kernel.

use super::limit;
use super::policy::{OpClass, expect_float, output_dtype};
pub use crate::contract::unary::{UnaryOp, erf};
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

fn check(op: UnaryOp, x: &Tensor) -> Result<()> {
    op.validate()?;
    expect_float(x, op.name())?;
    limit(x, op.name())?;
    Ok(())
}

/// `op(x)` elementwise, on f32 or f16 (the output's dtype: [`crate::ops::policy`]).
pub fn unary(op: UnaryOp, x: &Tensor) -> Result<Tensor> {
    check(op, x)?;
    let dtype = output_dtype(OpClass::Store16, &[x], op.name())?;
    let out = Tensor::empty(x.device(), x.shape(), dtype)?;
    if out.numel() > 0 {
        x.device().backend().unary(op, x, &out)?;
    }
    Ok(out)
}

/// The gradient of `op` at `x` given the output gradient `grad` (same shape as `x`).
pub fn unary_backward(op: UnaryOp, x: &Tensor, grad: &Tensor) -> Result<Tensor> {
    check(op, x)?;
    x.same_device(&[grad], op.name())?;
    expect_float(grad, op.name())?;
    if grad.shape() != x.shape() {
        return Err(Error::shape_mismatch(
            format!("{} backward gradient", op.name()),
            x.shape(),
            grad.shape(),
        ));
    }
    // The gradient of x is stored in x's dtype.
    let out = Tensor::empty(x.device(), x.shape(), x.dtype())?;
    if out.numel() > 0 {
        x.device().backend().unary_backward(op, x, grad, &out)?;
    }
    Ok(out)
}

macro_rules! unary_fns {
    ($($(#[$m:meta])* $f:ident => $op:expr;)*) => {
        $( $(#[$m])* pub fn $f(x: &Tensor) -> Result<Tensor> { unary($op, x) } )*
    };
}
unary_fns! {
    /// `-x`.
    neg => UnaryOp::Neg;
    /// `|x|`.
    abs => UnaryOp::Abs;
    /// `e^x`.
    exp => UnaryOp::Exp;
    /// `ln x`.
    log => UnaryOp::Log;
    /// `√x`.
    sqrt => UnaryOp::Sqrt;
    /// `max(x, 0)`.
    relu => UnaryOp::Relu;
    /// `1/(1+e^−x)`.
    sigmoid => UnaryOp::Sigmoid;
    /// `tanh x`.
    tanh => UnaryOp::Tanh;
    /// `x·sigmoid(x)`.
    silu => UnaryOp::Silu;
    /// `ln(1+e^x)`.
    softplus => UnaryOp::Softplus;
    /// `clip(0.2x + 0.5, 0, 1)`.
    hard_sigmoid => UnaryOp::HardSigmoid;
    /// `x·hard_sigmoid(x)`.
    hard_swish => UnaryOp::HardSwish;
}

/// `x > 0 ? x : slope·x`.
pub fn leaky_relu(x: &Tensor, slope: f32) -> Result<Tensor> {
    unary(UnaryOp::LeakyRelu(slope), x)
}
/// `x > 0 ? x : alpha·(e^x − 1)`.
pub fn elu(x: &Tensor, alpha: f32) -> Result<Tensor> {
    unary(UnaryOp::Elu(alpha), x)
}
/// GELU, in its tanh approximation (`approximate`, netcl's default) or the exact erf form.
pub fn gelu(x: &Tensor, approximate: bool) -> Result<Tensor> {
    unary(
        if approximate {
            UnaryOp::GeluTanh
        } else {
            UnaryOp::GeluErf
        },
        x,
    )
}
/// `min(max(x, lo), hi)`.
pub fn clamp(x: &Tensor, lo: f32, hi: f32) -> Result<Tensor> {
    unary(UnaryOp::Clamp(lo, hi), x)
}
/// `clamp(x, −1, 1)`.
pub fn hard_tanh(x: &Tensor) -> Result<Tensor> {
    unary(UnaryOp::Clamp(-1.0, 1.0), x)
}

/// The per-channel slope `alpha` ([C], or [1] for one shared slope) shaped to broadcast over axis 1 of `x`.
fn prelu_alpha(x: &Tensor, alpha: &Tensor) -> Result<Tensor> {
    x.same_device(&[alpha], "prelu")?;
    x.expect_dtype(DType::F32, "prelu")?;
    alpha.expect_dtype(DType::F32, "prelu")?;
    if x.rank() < 2 {
        return Err(Error::Shape(format!(
            "prelu: the input needs a channel axis 1, got {:?}",
            x.shape()
        )));
    }
    let c = x.shape()[1];
    if alpha.numel() != c && alpha.numel() != 1 {
        return Err(Error::Shape(format!(
            "prelu: alpha {:?} must hold 1 or {c} slopes for input {:?}",
            alpha.shape(),
            x.shape()
        )));
    }
    let mut shape = vec![1usize; x.rank() - 1];
    shape[0] = alpha.numel();
    alpha.reshape(&shape)
}

/// `x > 0 ? x : alpha[c]·x` with one slope per channel (axis 1), as one fused kernel.
pub fn prelu(x: &Tensor, alpha: &Tensor) -> Result<Tensor> {
    let a = prelu_alpha(x, alpha)?;
    super::fused::fused("where(x0 > 0, x0, x1 * x0)", &[x, &a])
}

/// The gradients of [`prelu`]: (input gradient, slope gradient of `alpha`'s shape).
pub fn prelu_backward(x: &Tensor, alpha: &Tensor, grad: &Tensor) -> Result<(Tensor, Tensor)> {
    let a = prelu_alpha(x, alpha)?;
    if grad.shape() != x.shape() {
        return Err(Error::shape_mismatch(
            "prelu_backward gradient",
            x.shape(),
            grad.shape(),
        ));
    }
    let gx = super::fused::fused("where(x0 > 0, x2, x1 * x2)", &[x, &a, grad])?;
    let ga = super::fused::fused("where(x0 > 0, 0, x0 * x1)", &[x, grad])?;
    let ga = super::reduce::reduce_to_shape(&ga, a.shape())?.reshape(alpha.shape())?;
    Ok((gx, ga))
}
