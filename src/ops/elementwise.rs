//! Elementwise binary ops with NumPy broadcasting.
//!
//! The broadcast plan (output shape, per-input strides with 0 on repeated dimensions, adjacent dimensions
//! merged where both inputs allow) is computed once per call on the host and passed to the kernel by value.
//! Plans of at most three collapsed dimensions (same shape, row or column broadcast, a per-channel vector over
//! NCHW) run a division-free kernel with float4 loads; deeper plans run the general kernel.

use serde::Serialize;

use crate::backend::cpu::CpuDevice;
use crate::backend::opencl::ClDevice;
use crate::backend::opencl::elementwise::{grid_3d, grid_defines};
use crate::backend::opencl::program::Defines;
use crate::error::{Error, Result};
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
    /// `1` where `a < b`, else `0` (NaN compares false).
    Lt,
    /// `1` where `a <= b`, else `0`.
    Le,
    /// `1` where `a > b`, else `0`.
    Gt,
    /// `1` where `a >= b`, else `0`.
    Ge,
    /// `1` where `a == b`, else `0`.
    Eq,
    /// `1` where `a != b` (also where either is NaN), else `0`.
    Ne,
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
            BinaryOp::Lt => "lt",
            BinaryOp::Le => "le",
            BinaryOp::Gt => "gt",
            BinaryOp::Ge => "ge",
            BinaryOp::Eq => "eq",
            BinaryOp::Ne => "ne",
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
            BinaryOp::Lt => "(((x)<(y))?1.0f:0.0f)",
            BinaryOp::Le => "(((x)<=(y))?1.0f:0.0f)",
            BinaryOp::Gt => "(((x)>(y))?1.0f:0.0f)",
            BinaryOp::Ge => "(((x)>=(y))?1.0f:0.0f)",
            BinaryOp::Eq => "(((x)==(y))?1.0f:0.0f)",
            BinaryOp::Ne => "(((x)!=(y))?1.0f:0.0f)",
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
            BinaryOp::Lt => f32::from(u8::from(x < y)),
            BinaryOp::Le => f32::from(u8::from(x <= y)),
            BinaryOp::Gt => f32::from(u8::from(x > y)),
            BinaryOp::Ge => f32::from(u8::from(x >= y)),
            BinaryOp::Eq => f32::from(u8::from(x == y)),
            BinaryOp::Ne => f32::from(u8::from(x != y)),
        }
    }
}

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
            let full: Vec<usize> = std::iter::repeat_n(1, pad)
                .chain(s.iter().copied())
                .collect();
            let st = strides(&full);
            full.iter()
                .zip(st)
                .zip(out)
                .map(|((&d, s), &o)| if d == 1 && o != 1 { 0 } else { s })
                .collect()
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
        Ok(BroadcastPlan {
            shape,
            sa: ca,
            sb: cb,
            same,
        })
    }
}

/// Device primitives for binary elementwise ops.
pub(crate) trait BinaryKernels {
    /// Writes `op(a, b)` into `out` following `plan`.
    fn binary(
        &self,
        op: BinaryOp,
        a: &Tensor,
        b: &Tensor,
        out: &Tensor,
        plan: &BroadcastPlan,
    ) -> Result<()>;
    /// Writes `op(a, s)` (or `op(s, a)` when `swap`) into `out`.
    fn binary_scalar(
        &self,
        op: BinaryOp,
        a: &Tensor,
        s: f32,
        swap: bool,
        out: &Tensor,
    ) -> Result<()>;
    /// Copies the f32 elements of `x` into `out` (same size) with a kernel, so the copy is timed like an op.
    fn copy_f32(&self, x: &Tensor, out: &Tensor) -> Result<()>;
}

/// A copy of `x` (f32) made by a device kernel: the yardstick of the memory-bound benchmarks.
pub(crate) fn device_copy(x: &Tensor) -> Result<Tensor> {
    x.expect_dtype(DType::F32, "device_copy")?;
    if x.numel() > i32::MAX as usize {
        return Err(Error::Limit(format!(
            "device_copy: {} elements exceed the 2^31-1 per-op limit",
            x.numel()
        )));
    }
    let out = Tensor::empty(x.device(), x.shape(), DType::F32)?;
    if out.numel() > 0 {
        x.device().backend().copy_f32(x, &out)?;
    }
    Ok(out)
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
        return Err(Error::Limit(format!(
            "{}: {} elements exceed the 2^31-1 per-op limit",
            op.name(),
            out.numel()
        )));
    }
    a.device().backend().binary(op, a, b, &out, &plan)?;
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
    a.expect_dtype(DType::F32, op.name())?;
    let out = Tensor::empty(a.device(), a.shape(), DType::F32)?;
    if out.numel() == 0 {
        return Ok(out);
    }
    if out.numel() > i32::MAX as usize {
        return Err(Error::Limit(format!(
            "{}: {} elements exceed the 2^31-1 per-op limit",
            op.name(),
            out.numel()
        )));
    }
    a.device().backend().binary_scalar(op, a, s, swap, &out)?;
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

fn int8(v: &[usize]) -> [i32; 8] {
    // Innermost dimension first, as the kernel walks from .s0 outwards.
    let mut out = [1i32; 8];
    for (i, x) in v.iter().rev().enumerate() {
        out[i] = *x as i32;
    }
    out
}

impl BinaryKernels for ClDevice {
    fn copy_f32(&self, x: &Tensor, out: &Tensor) -> Result<()> {
        use crate::backend::opencl::Arg;
        let n = x.numel();
        let k = self.kernel("elementwise", &Defines::new(), "copy_f32")?;
        let args = [
            Arg::I32(n as i32),
            Arg::Mem(x.storage()),
            Arg::Mem(out.storage()),
        ];
        let local = 256.min(self.info.max_work_group_size.max(1));
        self.launch(&k, &args, &[(n / 4).max(n % 4).max(1)], Some(&[local]))?;
        Ok(())
    }

    fn binary(
        &self,
        op: BinaryOp,
        a: &Tensor,
        b: &Tensor,
        out: &Tensor,
        plan: &BroadcastPlan,
    ) -> Result<()> {
        use crate::backend::opencl::Arg;
        let defines = Defines::new().set("OP(x,y)", op.cl_expr());
        let n = out.numel();
        if plan.same {
            let k = self.kernel("elementwise", &defines, "binary_same")?;
            let args = [
                Arg::I32(n as i32),
                Arg::Mem(a.storage()),
                Arg::Mem(b.storage()),
                Arg::Mem(out.storage()),
            ];
            self.launch(
                &k,
                &args,
                &[n.div_ceil(4)],
                Some(&[256.min(self.info.max_work_group_size.max(1))]),
            )?;
        } else if plan.shape.len() <= 3 {
            // Pad to three dimensions on the outside; the innermost stride of each input is 0 or 1.
            let r = plan.shape.len();
            let pad = |v: &[usize], fill: usize| -> [usize; 3] {
                let mut o = [fill; 3];
                o[3 - r..].copy_from_slice(v);
                o
            };
            let (d, sa, sb) = (pad(&plan.shape, 1), pad(&plan.sa, 0), pad(&plan.sb, 0));
            let vec = if d[2] % 4 == 0 { 4 } else { 1 };
            let align = vec == 4 && [sa[0], sa[1], sb[0], sb[1]].iter().all(|s| s % 4 == 0);
            let defines = defines
                .set("VEC", vec)
                .set("A_INNER", sa[2].min(1))
                .set("B_INNER", sb[2].min(1))
                .set("ALIGN4", u8::from(align));
            let g = [d[2] / vec, d[1], d[0]];
            let (g, local, capped) = grid_3d(self, g);
            let k = self.kernel("elementwise", &grid_defines(&defines, capped), "binary_3d")?;
            let args = [
                Arg::I32(d[0] as i32),
                Arg::I32(d[1] as i32),
                Arg::I32(d[2] as i32),
                Arg::I32(sa[0] as i32),
                Arg::I32(sa[1] as i32),
                Arg::I32(sb[0] as i32),
                Arg::I32(sb[1] as i32),
                Arg::Mem(a.storage()),
                Arg::Mem(b.storage()),
                Arg::Mem(out.storage()),
            ];
            self.launch(&k, &args, &g, Some(&local))?;
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
            self.launch(
                &k,
                &args,
                &[n],
                Some(&[256.min(self.info.max_work_group_size.max(1))]),
            )?;
        }
        Ok(())
    }

    fn binary_scalar(
        &self,
        op: BinaryOp,
        a: &Tensor,
        s: f32,
        swap: bool,
        out: &Tensor,
    ) -> Result<()> {
        use crate::backend::opencl::Arg;
        let defines = Defines::new()
            .set("OP(x,y)", op.cl_expr())
            .set("SWAP", u8::from(swap));
        let k = self.kernel("elementwise", &defines, "binary_scalar")?;
        let n = out.numel();
        let args = [
            Arg::I32(n as i32),
            Arg::F32(s),
            Arg::Mem(a.storage()),
            Arg::Mem(out.storage()),
        ];
        self.launch(
            &k,
            &args,
            &[n.div_ceil(4)],
            Some(&[256.min(self.info.max_work_group_size.max(1))]),
        )?;
        Ok(())
    }
}

impl BinaryKernels for CpuDevice {
    fn copy_f32(&self, x: &Tensor, out: &Tensor) -> Result<()> {
        crate::backend::cpu::host::map_f32(&[x], out, |ins, o| o.copy_from_slice(ins[0]))
    }

    fn binary(
        &self,
        op: BinaryOp,
        a: &Tensor,
        b: &Tensor,
        out: &Tensor,
        plan: &BroadcastPlan,
    ) -> Result<()> {
        crate::backend::cpu::host::map_f32(&[a, b], out, |ins, o| {
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

    fn binary_scalar(
        &self,
        op: BinaryOp,
        a: &Tensor,
        s: f32,
        swap: bool,
        out: &Tensor,
    ) -> Result<()> {
        crate::backend::cpu::host::map_f32(&[a], out, |ins, o| {
            for (o, &x) in o.iter_mut().zip(ins[0]) {
                *o = if swap { op.apply(s, x) } else { op.apply(x, s) };
            }
        })
    }
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

    #[test]
    fn plan_collapses_contiguous_dims() {
        let p = BroadcastPlan::new(&[2, 3, 4], &[2, 3, 4], &[2, 3, 4]).ok();
        assert_eq!(p.map(|p| (p.shape, p.same)), Some((vec![24], true)));
        let p = BroadcastPlan::new(&[2, 3, 4], &[4], &[2, 3, 4]).ok();
        assert_eq!(
            p.map(|p| (p.shape, p.sa, p.sb)),
            Some((vec![6, 4], vec![4, 1], vec![0, 1]))
        );
        let p = BroadcastPlan::new(&[5, 1], &[1, 7], &[5, 7]).ok();
        assert_eq!(
            p.map(|p| (p.shape, p.sa, p.sb)),
            Some((vec![5, 7], vec![1, 0], vec![0, 1]))
        );
    }
}
