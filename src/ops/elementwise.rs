//! Elementwise binary ops with NumPy broadcasting.
//!
//! The broadcast plan (output shape, per-input strides with 0 on repeated dimensions, adjacent dimensions
//! merged where both inputs allow) is computed once per call on the host and passed to the kernel by value.

use serde::Serialize;

use crate::device::{ClDevice, CpuDevice};
use crate::error::{Error, Result};
use crate::program::Defines;
use crate::tensor::{DType, Tensor, strides};

/// A binary elementwise operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BinaryOp {
    /// `a + b`
    Add,
    /// `a - b`
    Sub,
    /// `a * b`
    Mul,
    /// `a / b` (IEEE: division by zero gives ±inf or NaN)
    Div,
    /// The larger of `a` and `b`; NaN if either is NaN.
    Max,
    /// The smaller of `a` and `b`; NaN if either is NaN.
    Min,
    /// `a` raised to `b`.
    Pow,
}

impl BinaryOp {
    /// The op's name.
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Max => "maximum",
            BinaryOp::Min => "minimum",
            BinaryOp::Pow => "pow",
        }
    }

    /// The OpenCL C expression of the op on scalars `x` and `y`.
    fn cl_expr(self) -> &'static str {
        match self {
            BinaryOp::Add => "((x)+(y))",
            BinaryOp::Sub => "((x)-(y))",
            BinaryOp::Mul => "((x)*(y))",
            BinaryOp::Div => "((x)/(y))",
            BinaryOp::Max => "((isnan(x)||isnan(y))?((x)+(y)):fmax((x),(y)))",
            BinaryOp::Min => "((isnan(x)||isnan(y))?((x)+(y)):fmin((x),(y)))",
            BinaryOp::Pow => "pow((x),(y))",
        }
    }

    /// The op on host scalars, with the same IEEE semantics as the kernel.
    pub fn apply(self, x: f32, y: f32) -> f32 {
        match self {
            BinaryOp::Add => x + y,
            BinaryOp::Sub => x - y,
            BinaryOp::Mul => x * y,
            BinaryOp::Div => x / y,
            BinaryOp::Max => {
                if x.is_nan() || y.is_nan() {
                    f32::NAN
                } else {
                    x.max(y)
                }
            }
            BinaryOp::Min => {
                if x.is_nan() || y.is_nan() {
                    f32::NAN
                } else {
                    x.min(y)
                }
            }
            BinaryOp::Pow => x.powf(y),
        }
    }
}

/// The broadcast shape of `a` and `b` (NumPy rules: align right; sizes must match or be 1).
pub fn broadcast_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        let da = if i < rank - a.len() { 1 } else { a[i - (rank - a.len())] };
        let db = if i < rank - b.len() { 1 } else { b[i - (rank - b.len())] };
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

/// How the two inputs map onto the output.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BroadcastPlan {
    /// Collapsed output shape.
    pub shape: Vec<usize>,
    /// Element strides of `a` per collapsed dimension (0 = repeated).
    pub sa: Vec<usize>,
    /// Element strides of `b` per collapsed dimension (0 = repeated).
    pub sb: Vec<usize>,
    /// Both inputs have the output's shape.
    pub same: bool,
}

/// The most dimensions a collapsed broadcast may have.
pub const MAX_BROADCAST_RANK: usize = 8;

impl BroadcastPlan {
    pub(crate) fn new(a: &[usize], b: &[usize], out: &[usize]) -> Result<Self> {
        let same = a == out && b == out;
        let aligned = |s: &[usize]| -> Vec<usize> {
            let pad = out.len() - s.len();
            let full: Vec<usize> = std::iter::repeat_n(1, pad).chain(s.iter().copied()).collect();
            let st = strides(&full);
            full.iter().zip(st).zip(out).map(|((&d, s), &o)| if d == 1 && o != 1 { 0 } else { s }).collect()
        };
        let (sa, sb) = (aligned(a), aligned(b));
        // Merge dimension i into i+1 (the inner one) when both inputs are contiguous across the pair.
        let mut shape: Vec<usize> = Vec::new();
        let mut ca: Vec<usize> = Vec::new();
        let mut cb: Vec<usize> = Vec::new();
        for i in 0..out.len() {
            if out[i] == 1 {
                continue;
            }
            if let (Some(&ls), Some(&la), Some(&lb)) = (shape.last(), ca.last(), cb.last())
                && la == sa[i] * out[i]
                && lb == sb[i] * out[i]
            {
                let k = shape.len() - 1;
                shape[k] = ls * out[i];
                ca[k] = sa[i];
                cb[k] = sb[i];
                continue;
            }
            shape.push(out[i]);
            ca.push(sa[i]);
            cb.push(sb[i]);
        }
        if shape.len() > MAX_BROADCAST_RANK {
            return Err(Error::Shape(format!(
                "broadcasting {a:?} with {b:?} needs {} independent dimensions; at most {MAX_BROADCAST_RANK} are supported",
                shape.len()
            )));
        }
        Ok(BroadcastPlan { shape, sa: ca, sb: cb, same })
    }
}

/// Device primitives for binary elementwise ops.
pub(crate) trait BinaryKernels {
    /// Writes `op(a, b)` into `out` following `plan`.
    fn binary(&self, op: BinaryOp, a: &Tensor, b: &Tensor, out: &Tensor, plan: &BroadcastPlan) -> Result<()>;
}

/// `op(a, b)` with broadcasting; both inputs f32 on one device.
pub fn binary(op: BinaryOp, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    a.same_device(&[b], op.name())?;
    a.expect_dtype(DType::F32, op.name())?;
    b.expect_dtype(DType::F32, op.name())?;
    let shape = broadcast_shape(a.shape(), b.shape())?;
    let plan = BroadcastPlan::new(a.shape(), b.shape(), &shape)?;
    let out = Tensor::empty(a.device(), &shape, DType::F32)?;
    if out.numel() == 0 {
        return Ok(out);
    }
    if out.numel() > i32::MAX as usize {
        return Err(Error::Limit(format!("{}: {} elements exceed the 2^31-1 per-op limit", op.name(), out.numel())));
    }
    a.device().kind().binary(op, a, b, &out, &plan)?;
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

fn int8(v: &[usize]) -> [i32; 8] {
    // Innermost dimension first, as the kernel walks from .s0 outwards.
    let mut out = [1i32; 8];
    for (i, x) in v.iter().rev().enumerate() {
        out[i] = *x as i32;
    }
    out
}

impl BinaryKernels for ClDevice {
    fn binary(&self, op: BinaryOp, a: &Tensor, b: &Tensor, out: &Tensor, plan: &BroadcastPlan) -> Result<()> {
        use crate::device::opencl::Arg;
        let defines = Defines::new().set("OP(x,y)", op.cl_expr());
        let n = out.numel();
        if plan.same {
            let k = self.kernel("elementwise", &defines, "binary_same")?;
            let args = [Arg::I32(n as i32), Arg::Mem(a.storage()), Arg::Mem(b.storage()), Arg::Mem(out.storage())];
            self.launch(&k, &args, &[n.div_ceil(4)], None)?;
        } else {
            let k = self.kernel("elementwise", &defines, "binary_bcast")?;
            let args = [
                Arg::I32(n as i32),
                Arg::I32(plan.shape.len() as i32),
                Arg::I32x8(int8(&plan.shape)),
                Arg::I32x8(int8(&plan.sa)),
                Arg::I32x8(int8(&plan.sb)),
                Arg::Mem(a.storage()),
                Arg::Mem(b.storage()),
                Arg::Mem(out.storage()),
            ];
            self.launch(&k, &args, &[n], None)?;
        }
        Ok(())
    }
}

impl BinaryKernels for CpuDevice {
    fn binary(&self, op: BinaryOp, a: &Tensor, b: &Tensor, out: &Tensor, plan: &BroadcastPlan) -> Result<()> {
        super::host::map_f32(&[a, b], out, |ins, o| {
            let (x, y) = (ins[0], ins[1]);
            if plan.same {
                for ((o, &x), &y) in o.iter_mut().zip(x).zip(y) {
                    *o = op.apply(x, y);
                }
                return;
            }
            let rank = plan.shape.len();
            let mut idx = vec![0usize; rank];
            let (mut ia, mut ib) = (0usize, 0usize);
            for v in o.iter_mut() {
                *v = op.apply(x[ia], y[ib]);
                for d in (0..rank).rev() {
                    idx[d] += 1;
                    ia += plan.sa[d];
                    ib += plan.sb[d];
                    if idx[d] < plan.shape[d] {
                        break;
                    }
                    ia -= plan.sa[d] * plan.shape[d];
                    ib -= plan.sb[d] * plan.shape[d];
                    idx[d] = 0;
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_rules() {
        assert_eq!(broadcast_shape(&[2, 1, 3], &[4, 1]).ok(), Some(vec![2, 4, 3]));
        assert_eq!(broadcast_shape(&[], &[5]).ok(), Some(vec![5]));
        assert_eq!(broadcast_shape(&[0, 3], &[1, 3]).ok(), Some(vec![0, 3]));
        let e = broadcast_shape(&[2, 3], &[4, 3]).map_err(|e| e.to_string());
        assert!(e.is_err_and(|m| m.contains("[2, 3]") && m.contains("[4, 3]")));
    }

    #[test]
    fn plan_collapses_contiguous_dims() {
        let p = BroadcastPlan::new(&[2, 3, 4], &[2, 3, 4], &[2, 3, 4]).ok();
        assert_eq!(p.map(|p| (p.shape, p.same)), Some((vec![24], true)));
        let p = BroadcastPlan::new(&[2, 3, 4], &[4], &[2, 3, 4]).ok();
        assert_eq!(p.map(|p| (p.shape, p.sa, p.sb)), Some((vec![6, 4], vec![4, 1], vec![0, 1])));
        let p = BroadcastPlan::new(&[5, 1], &[1, 7], &[5, 7]).ok();
        assert_eq!(p.map(|p| (p.shape, p.sa, p.sb)), Some((vec![5, 7], vec![1, 0], vec![0, 1])));
    }
}
