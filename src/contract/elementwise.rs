//! The elementwise family's contract: the binary op enum with its host semantics, the broadcast plan, and the
//! primitives a backend provides.

use serde::Serialize;

use crate::contract::vocab::{self, OpDef};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

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
        self.def().name
    }

    /// Every binary op (for tests and listings).
    pub fn all() -> [BinaryOp; 13] {
        use BinaryOp::*;
        [Add, Sub, Mul, Div, Max, Min, Pow, Lt, Le, Gt, Ge, Eq, Ne]
    }

    /// The op's entry in the vocabulary: its OpenCL template and reference maths.
    pub fn def(self) -> &'static OpDef {
        match self {
            BinaryOp::Add => &vocab::ADD,
            BinaryOp::Sub => &vocab::SUB,
            BinaryOp::Mul => &vocab::MUL,
            BinaryOp::Div => &vocab::DIV,
            BinaryOp::Max => &vocab::MAXIMUM,
            BinaryOp::Min => &vocab::MINIMUM,
            BinaryOp::Pow => &vocab::POW,
            BinaryOp::Lt => &vocab::LT,
            BinaryOp::Le => &vocab::LE,
            BinaryOp::Gt => &vocab::GT,
            BinaryOp::Ge => &vocab::GE,
            BinaryOp::Eq => &vocab::EQ,
            BinaryOp::Ne => &vocab::NE,
        }
    }

    /// The op on host scalars, with the same IEEE semantics as the kernel.
    pub fn apply(self, x: f32, y: f32) -> f32 {
        self.def().apply(&[x, y])
    }
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

/// The element strides of an input of shape `s` read as the (broadcast) shape `out`: its shape aligned on the
/// right, with stride 0 along every dimension it repeats.
pub(crate) fn broadcast_strides(s: &[usize], out: &[usize]) -> Vec<usize> {
    let pad = out.len() - s.len();
    let mut st = vec![0; out.len()];
    let mut step = 1;
    for i in (0..out.len()).rev() {
        let d = if i < pad { 1 } else { s[i - pad] };
        st[i] = if d == 1 && out[i] != 1 { 0 } else { step };
        step *= d;
    }
    st
}

/// The most dimensions a collapsed broadcast may have.
pub const MAX_BROADCAST_RANK: usize = 8;

/// Refuses a collapsed broadcast of more than [`MAX_BROADCAST_RANK`] dimensions; `what` names the shapes.
pub(crate) fn broadcast_rank(rank: usize, what: impl FnOnce() -> String) -> Result<()> {
    if rank > MAX_BROADCAST_RANK {
        return Err(Error::Shape(format!(
            "broadcasting {} needs {rank} independent dimensions; at most {MAX_BROADCAST_RANK} are supported",
            what()
        )));
    }
    Ok(())
}

impl BroadcastPlan {
    pub(crate) fn new(a: &[usize], b: &[usize], out: &[usize]) -> Result<Self> {
        let same = a == out && b == out;
        if same {
            // One contiguous run: the common case of a hot loop, planned without the general merge below.
            let n: usize = out.iter().product();
            let shape = if n == 1 { Vec::new() } else { vec![n] };
            let unit = if n == 1 { Vec::new() } else { vec![1] };
            return Ok(BroadcastPlan {
                shape,
                sa: unit.clone(),
                sb: unit,
                same,
            });
        }
        let (sa, sb) = (broadcast_strides(a, out), broadcast_strides(b, out));
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
        broadcast_rank(shape.len(), || format!("{a:?} with {b:?}"))?;
        Ok(BroadcastPlan {
            shape,
            sa: ca,
            sb: cb,
            same,
        })
    }
}

operands! {
    /// One broadcast binary op: `out = op(a, b)` following `plan`.
    BinaryOperands {
        op: BinaryOp,
        a: &'a Tensor,
        b: &'a Tensor,
        out: &'a Tensor,
        plan: &'a BroadcastPlan,
    }
}

operands! {
    /// One binary op with a scalar: `out = op(a, s)`, or `op(s, a)` when `swap`.
    ScalarOperands {
        op: BinaryOp,
        a: &'a Tensor,
        s: f32,
        swap: bool,
        out: &'a Tensor,
    }
}

/// Device primitives for binary elementwise ops.
pub(crate) trait BinaryKernels {
    /// Writes `op(a, b)` into `out` following `plan`.
    fn binary(&self, o: BinaryOperands<'_>) -> Result<()>;
    /// Writes `op(a, s)` (or `op(s, a)` when `swap`) into `out`.
    fn binary_scalar(&self, o: ScalarOperands<'_>) -> Result<()>;
    /// Copies the elements of `x` into `out` (same size and dtype, f32 or f16) with a kernel, so the copy is
    /// timed like an op.
    fn copy_dense(&self, x: &Tensor, out: &Tensor) -> Result<()>;
    /// Converts the elements of `x` into `out`'s dtype (same size; f16 rounded to nearest even).
    fn cast(&self, x: &Tensor, out: &Tensor) -> Result<()>;
}

#[cfg(test)]
mod tests {
    use super::*;

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
