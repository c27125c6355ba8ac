//! Elementwise binary ops with NumPy broadcasting.
//!
//! The broadcast plan (output shape, per-input strides with 0 on repeated dimensions, adjacent dimensions
//! merged where both inputs allow) is computed once per call on the host and passed to the kernel by value.
//! Plans of at most three collapsed dimensions (same shape, row or column broadcast, a per-channel vector over
//! NCHW) run a division-free kernel with float4 loads; deeper plans run the general kernel.

use super::limit;
use super::policy::{OpClass, expect_float, output_dtype};
pub use crate::contract::elementwise::{BinaryOp, MAX_BROADCAST_RANK};
use crate::contract::elementwise::{BinaryOperands, BroadcastPlan, ScalarOperands};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// The broadcast shape of `a` and `b` (NumPy rules: align right; sizes must match or be 1).
pub fn broadcast_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        let da = if i < rank - a.len() {
            1
        } else {
            a[i - (rank - a.len())]
        };
        let db = if i < rank - b.len() {
            1
        } else {
            b[i - (rank - b.len())]
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            (x, y) => {
                return Err(Error::Shape(format!(
                    "shapes {a:?} and {b:?} do not broadcast: dimension {i} of the result would need {x} and {y} to match or one of them to be 1"
                )));
            }
        };
    }
    Ok(out)
}

/// A copy of `x` (f32 or f16, same dtype) made by a device kernel, with its own storage: the yardstick of the
/// memory-bound benchmarks.
pub fn copy(x: &Tensor) -> Result<Tensor> {
    expect_float(x, "copy")?;
    limit(x, "copy")?;
    let out = Tensor::empty(x.device(), x.shape(), x.dtype())?;
    if out.numel() > 0 {
        x.device().backend().copy_dense(x, &out)?;
    }
    Ok(out)
}

/// `op(a, b)` with broadcasting; both inputs f32 or f16 on one device. The output is f16 when both are f16
/// (or under [`crate::ops::policy::autocast`]), else f32 (see [`crate::ops::policy`]); the maths is f32.
pub fn binary(op: BinaryOp, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    a.same_device(&[b], op.name())?;
    let dtype = output_dtype(OpClass::Store16, &[a, b], op.name())?;
    let shape = broadcast_shape(a.shape(), b.shape())?;
    let plan = BroadcastPlan::new(a.shape(), b.shape(), &shape)?;
    let out = Tensor::empty(a.device(), &shape, dtype)?;
    if out.numel() == 0 {
        return Ok(out);
    }
    limit(&out, op.name())?;
    let operands = BinaryOperands::new(op, a, b, &out, &plan);
    a.device().backend().binary(operands)?;
    Ok(out)
}

/// `a + b` with broadcasting.
pub fn add(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(BinaryOp::Add, a, b)
}
/// `a - b` with broadcasting.
pub fn sub(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(BinaryOp::Sub, a, b)
}
/// `a * b` with broadcasting.
pub fn mul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(BinaryOp::Mul, a, b)
}
/// `a / b` with broadcasting.
pub fn div(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(BinaryOp::Div, a, b)
}
/// The elementwise maximum with broadcasting (NaN propagates).
pub fn maximum(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(BinaryOp::Max, a, b)
}
/// The elementwise minimum with broadcasting (NaN propagates).
pub fn minimum(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(BinaryOp::Min, a, b)
}

/// `op(a, s)`, or `op(s, a)` when `swap`, for a tensor `a` and a scalar `s` (passed as a kernel argument).
pub fn binary_scalar(op: BinaryOp, a: &Tensor, s: f32, swap: bool) -> Result<Tensor> {
    let dtype = output_dtype(OpClass::Store16, &[a], op.name())?;
    let out = Tensor::empty(a.device(), a.shape(), dtype)?;
    if out.numel() == 0 {
        return Ok(out);
    }
    limit(&out, op.name())?;
    let operands = ScalarOperands::new(op, a, s, swap, &out);
    a.device().backend().binary_scalar(operands)?;
    Ok(out)
}

/// `a + s`.
pub fn add_scalar(a: &Tensor, s: f32) -> Result<Tensor> {
    binary_scalar(BinaryOp::Add, a, s, false)
}
/// `a - s`.
pub fn sub_scalar(a: &Tensor, s: f32) -> Result<Tensor> {
    binary_scalar(BinaryOp::Sub, a, s, false)
}
/// `s - a`.
pub fn rsub_scalar(a: &Tensor, s: f32) -> Result<Tensor> {
    binary_scalar(BinaryOp::Sub, a, s, true)
}
/// `a * s`.
pub fn mul_scalar(a: &Tensor, s: f32) -> Result<Tensor> {
    binary_scalar(BinaryOp::Mul, a, s, false)
}
/// `a / s`.
pub fn div_scalar(a: &Tensor, s: f32) -> Result<Tensor> {
    binary_scalar(BinaryOp::Div, a, s, false)
}
/// `s / a`.
pub fn rdiv_scalar(a: &Tensor, s: f32) -> Result<Tensor> {
    binary_scalar(BinaryOp::Div, a, s, true)
}
/// `a` raised to the power `s`.
pub fn pow_scalar(a: &Tensor, s: f32) -> Result<Tensor> {
    binary_scalar(BinaryOp::Pow, a, s, false)
}
/// `a` raised to `b` with broadcasting.
pub fn pow(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(BinaryOp::Pow, a, b)
}
/// `a < b` as 0/1 f32 with broadcasting.
pub fn lt(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(BinaryOp::Lt, a, b)
}
/// `a <= b` as 0/1 f32 with broadcasting.
pub fn le(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(BinaryOp::Le, a, b)
}
/// `a > b` as 0/1 f32 with broadcasting.
pub fn gt(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(BinaryOp::Gt, a, b)
}
/// `a >= b` as 0/1 f32 with broadcasting.
pub fn ge(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(BinaryOp::Ge, a, b)
}
/// `a == b` as 0/1 f32 with broadcasting.
pub fn eq(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(BinaryOp::Eq, a, b)
}
/// `a != b` as 0/1 f32 with broadcasting.
pub fn ne(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(BinaryOp::Ne, a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_rules() {
        assert_eq!(
            broadcast_shape(&[2, 1, 3], &[4, 1]).ok(),
            Some(vec![2, 4, 3])
        );
        assert_eq!(broadcast_shape(&[], &[5]).ok(), Some(vec![5]));
        assert_eq!(broadcast_shape(&[0, 3], &[1, 3]).ok(), Some(vec![0, 3]));
        let e = broadcast_shape(&[2, 3], &[4, 3]).map_err(|e| e.to_string());
        assert!(e.is_err_and(|m| m.contains("[2, 3]") && m.contains("[4, 3]")));
    }
}
