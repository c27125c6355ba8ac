//! The reduction family's contract: the reduction ops, the canonical [O, R, I] view of one pass, the pass and
//! `reduce_to_shape` algorithms and plans, and the device primitives for reductions.

use serde::Serialize;

use crate::contract::norm::NormKernels;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// A reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReduceOp {
    /// Σx (0 over an empty axis).
    Sum,
    /// Σx / count (NaN over an empty axis).
    Mean,
    /// The largest value; NaN if any is NaN. An empty axis is an error.
    Max,
    /// The smallest value; NaN if any is NaN. An empty axis is an error.
    Min,
    /// Πx (1 over an empty axis).
    Prod,
    /// Σx² (0 over an empty axis).
    SumSq,
}

impl ReduceOp {
    /// The op's name.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Prod => "prod",
            ReduceOp::SumSq => "sumsq",
        }
    }

    /// The op after the first pass (a sum of squares continues as a sum).
    pub(crate) fn rest(self) -> ReduceOp {
        if self == ReduceOp::SumSq {
            ReduceOp::Sum
        } else {
            self
        }
    }
}

/// One pass's algorithm; its autotune cache form is an array: `["wg", local, groups]`, `["chunk", groups]`
/// or `["col", vec, groups]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceAlgo {
    /// `["wg", local, groups]`: work-groups of `local` items with a local tree per (row, chunk); rows only.
    Wg(usize, usize),
    /// `["chunk", groups]`: one work-item per (row, chunk) with float8 loads and no barriers; rows only.
    Chunk(usize),
    /// `["col", vec, groups]`: one work-item per (outer, chunk, `vec` inner elements); needs I > 1.
    Col(usize, usize),
    /// `["colblk", cols, groups]`: one work-item per (outer, chunk, `cols` = 8·NB inner elements) with float8
    /// accumulators and no barriers (CPU OpenCL); needs I a multiple of `cols`.
    ColBlk(usize, usize),
    /// `["stream", groups]`: one work-item per (outer, chunk of rows) streaming its rows into a partial row of
    /// I in cache, then a second pass over the partials (CPU OpenCL); needs I a multiple of 8.
    Stream(usize),
}

impl Serialize for ReduceAlgo {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match *self {
            ReduceAlgo::Wg(l, g) => ("wg", l, g).serialize(s),
            ReduceAlgo::Chunk(g) => ("chunk", g).serialize(s),
            ReduceAlgo::Col(v, g) => ("col", v, g).serialize(s),
            ReduceAlgo::ColBlk(c, g) => ("colblk", c, g).serialize(s),
            ReduceAlgo::Stream(g) => ("stream", g).serialize(s),
        }
    }
}

impl ReduceAlgo {
    pub(crate) fn groups(self) -> usize {
        match self {
            ReduceAlgo::Wg(_, g)
            | ReduceAlgo::Chunk(g)
            | ReduceAlgo::Col(_, g)
            | ReduceAlgo::ColBlk(_, g)
            | ReduceAlgo::Stream(g) => g.max(1),
        }
    }
}

/// The canonical view of one pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ori {
    pub o: usize,
    pub r: usize,
    pub i: usize,
}

operands! {
    /// One reduction pass of `op` over [O, R, I] of `x` into `out` ([O, I]) at element offset `out_off`,
    /// multiplied by `scale`; `first` when `x` is the op's input (not partial results). `algo` forces an
    /// algorithm (else the autotuner chooses).
    ReducePass {
        op: ReduceOp,
        first: bool,
        v: Ori,
        scale: f32,
        x: &'a Tensor,
        out: &'a Tensor,
        out_off: usize,
        algo: Option<ReduceAlgo>,
    }
}

operands! {
    /// One `reduce_to_shape`: `grad` summed over the reduced axes of `plan` into `out`, with `algo` a forced
    /// algorithm.
    ToShape {
        grad: &'a Tensor,
        out: &'a Tensor,
        plan: &'a RtsPlan,
        algo: Option<RtsAlgo>,
    }
}

/// Device primitives for reductions.
pub(crate) trait ReduceKernels: NormKernels {
    /// One reduction pass (see [`ReducePass`]).
    fn reduce_pass(&self, device: &Device, p: ReducePass<'_>) -> Result<()>;
    /// argmax (`max`) or argmin along R of [O, R, I] into i32 `out` ([O, I]).
    fn arg_reduce(&self, max: bool, v: Ori, x: &Tensor, out: &Tensor) -> Result<()>;
    /// Sums `grad` over the reduced axes of `plan` into `out`.
    fn reduce_to_shape(&self, device: &Device, r: ToShape<'_>) -> Result<()>;
    /// `out[0] = sqrt(Σ parts)`.
    fn sqrt_sum(&self, parts: &Tensor, out: &Tensor) -> Result<()>;
}

/// How a gradient folds onto a broadcast operand: kept and reduced axes (merged where adjacent), innermost
/// first, with the gradient's element strides.
#[derive(Debug, Clone, PartialEq)]
pub struct RtsPlan {
    pub(crate) kshape: Vec<usize>,
    pub(crate) kstride: Vec<usize>,
    pub(crate) rshape: Vec<usize>,
    pub(crate) rstride: Vec<usize>,
    /// Elements folded into each output.
    pub r: usize,
}

impl RtsPlan {
    pub(crate) fn new(grad: &[usize], target: &[usize]) -> Result<RtsPlan> {
        let err = || {
            Error::Shape(format!(
                "reduce_to_shape: target {target:?} is not a broadcast source of gradient {grad:?} (each target axis, aligned right, must equal the gradient's or be 1)"
            ))
        };
        if target.len() > grad.len() {
            let extra = target.len() - grad.len();
            if target[..extra].iter().any(|&d| d != 1) {
                return Err(err());
            }
        }
        let t: Vec<usize> = if target.len() >= grad.len() {
            target[target.len() - grad.len()..].to_vec()
        } else {
            std::iter::repeat_n(1, grad.len() - target.len())
                .chain(target.iter().copied())
                .collect()
        };
        let st = crate::tensor::strides(grad);
        // (extent, stride, reduced), merged with the next-inner dimension when of the same kind.
        let mut dims: Vec<(usize, usize, bool)> = Vec::new();
        for d in (0..grad.len()).rev() {
            let (g, tt) = (grad[d], t[d]);
            let reduced = if tt == g && g != 1 {
                false
            } else if tt == 1 {
                true
            } else if g == 1 {
                false
            } else {
                return Err(err());
            };
            if g == 1 {
                continue;
            }
            match dims.last_mut() {
                Some((e, s, red)) if *red == reduced && *s * *e == st[d] => *e *= g,
                _ => dims.push((g, st[d], reduced)),
            }
        }
        let (mut kshape, mut kstride, mut rshape, mut rstride) = (vec![], vec![], vec![], vec![]);
        for (e, s, red) in dims {
            if red {
                rshape.push(e);
                rstride.push(s);
            } else {
                kshape.push(e);
                kstride.push(s);
            }
        }
        if kshape.len() > 8 || rshape.len() > 8 {
            return Err(Error::Shape(format!(
                "reduce_to_shape: {grad:?} → {target:?} alternates kept and summed axes more than 8 times"
            )));
        }
        let r = rshape.iter().product();
        Ok(RtsPlan {
            kshape,
            kstride,
            rshape,
            rstride,
            r,
        })
    }
}

/// A `reduce_to_shape` algorithm; cache form `"item"`, `["wg", groups]` or `["flat", groups]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtsAlgo {
    /// One work-item per output element (fewer than 256 elements fold into each).
    Item,
    /// `groups` work-groups of 256 per output element, then a fold of the partials when `groups` > 1.
    Wg(usize),
    /// `["flat", groups]`: as `Wg`, each group taking a slice of the reduced positions laid end to end, with
    /// four independent loads in flight per work-item.
    Flat(usize),
}

impl Serialize for RtsAlgo {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match *self {
            RtsAlgo::Item => "item".serialize(s),
            RtsAlgo::Wg(g) => ("wg", g).serialize(s),
            RtsAlgo::Flat(g) => ("flat", g).serialize(s),
        }
    }
}
