//! Reductions: sum, mean, max, min, prod (and the sum of squares) over any set of axes with keepdims,
//! argmax/argmin along one axis, `reduce_to_shape` for broadcast gradients, the full sum and the global L2
//! norm of many tensors.
//!
//! A reduction over a set of axes runs one pass per contiguous group of reduced axes, each pass over the
//! canonical view [O, R, I] (reduce R). The pass's algorithm is chosen by the autotuner per shape bucket:
//! work-group trees (GPUs), barrier-free float8 chunks per work-item (CPU OpenCL), or column loops coalesced
//! across I; each may split R into G chunks (two stages) when O·I alone gives too little parallelism.

use std::collections::HashSet;
use std::sync::Mutex;

use serde::Serialize;

use crate::autotune::{self, Source, bucket, shape_key};
use crate::backend::cpu::CpuDevice;
use crate::backend::opencl::ClDevice;
use crate::backend::opencl::program::Defines;
use crate::backend::opencl::{Arg, events_ms};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

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

    /// The build of one pass; `first` applies the op's pre-map (the square of the sum of squares).
    fn defines(self, first: bool) -> Defines {
        let (comb, ident) = match self {
            ReduceOp::Sum | ReduceOp::Mean | ReduceOp::SumSq => ("((a)+(b))", "0.0f"),
            ReduceOp::Prod => ("((a)*(b))", "1.0f"),
            ReduceOp::Max => (
                "select(fmax((a),(b)),(a)+(b),isnan(a)|isnan(b))",
                "(-INFINITY)",
            ),
            ReduceOp::Min => (
                "select(fmin((a),(b)),(a)+(b),isnan(a)|isnan(b))",
                "INFINITY",
            ),
        };
        let pre = if first && self == ReduceOp::SumSq {
            "((v)*(v))"
        } else {
            "(v)"
        };
        // Sums are compensated in the serial column loop, whose length is the whole reduced extent.
        let kahan = matches!(self, ReduceOp::Sum | ReduceOp::Mean | ReduceOp::SumSq);
        Defines::new()
            .set("COMB(a,b)", comb)
            .set("IDENT", ident)
            .set("PRE(v)", pre)
            .set("KAHAN", u8::from(kahan))
    }

    /// The op after the first pass (a sum of squares continues as a sum).
    fn rest(self) -> ReduceOp {
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
    fn groups(self) -> usize {
        match self {
            ReduceAlgo::Wg(_, g)
            | ReduceAlgo::Chunk(g)
            | ReduceAlgo::Col(_, g)
            | ReduceAlgo::ColBlk(_, g)
            | ReduceAlgo::Stream(g) => g.max(1),
        }
    }
}

pub(crate) use crate::contract::reduce::Ori;

/// Device primitives for reductions.
pub(crate) trait ReduceKernels: super::norm::NormKernels {
    /// One reduction pass over [O, R, I] of `x` into `out` ([O, I]) at element offset `out_off`, multiplied by
    /// `scale`. `algo` forces an algorithm (else the autotuner chooses).
    #[allow(clippy::too_many_arguments)]
    fn reduce_pass(
        &self,
        device: &Device,
        op: ReduceOp,
        first: bool,
        v: Ori,
        scale: f32,
        x: &Tensor,
        out: &Tensor,
        out_off: usize,
        algo: Option<ReduceAlgo>,
    ) -> Result<()>;
    /// argmax (`max`) or argmin along R of [O, R, I] into i32 `out` ([O, I]).
    fn arg_reduce(&self, max: bool, v: Ori, x: &Tensor, out: &Tensor) -> Result<()>;
    /// Sums `grad` over the reduced axes of `plan` into `out`.
    fn reduce_to_shape(
        &self,
        device: &Device,
        grad: &Tensor,
        out: &Tensor,
        plan: &RtsPlan,
        algo: Option<RtsAlgo>,
    ) -> Result<()>;
    /// `out[0] = sqrt(Σ parts)`.
    fn sqrt_sum(&self, parts: &Tensor, out: &Tensor) -> Result<()>;
}

/// Normalises `axes` (negative counts from the end) against `rank`; `None` means every axis.
pub fn normalize_axes(axes: Option<&[isize]>, rank: usize, op: &str) -> Result<Vec<usize>> {
    let Some(axes) = axes else {
        return Ok((0..rank).collect());
    };
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let r = rank as isize;
        if a < -r || a >= r {
            return Err(Error::Shape(format!(
                "{op}: axis {a} is out of range for a tensor of rank {rank} (valid: {}..={})",
                -r,
                r - 1
            )));
        }
        let a = if a < 0 { (a + r) as usize } else { a as usize };
        if out.contains(&a) {
            return Err(Error::Shape(format!("{op}: axis {a} is given twice")));
        }
        out.push(a);
    }
    out.sort_unstable();
    Ok(out)
}

/// `op` over `axes` (all axes when `None`), keeping reduced axes as size 1 when `keepdims`.
pub fn reduce(op: ReduceOp, x: &Tensor, axes: Option<&[isize]>, keepdims: bool) -> Result<Tensor> {
    reduce_with(op, x, axes, keepdims, None)
}

/// [`reduce`] with every pass forced to `algo` when given (`Wg`/`Chunk` apply to passes with I = 1, `Col` to
/// passes with I > 1; the other kind is autotuned).
pub fn reduce_with(
    op: ReduceOp,
    x: &Tensor,
    axes: Option<&[isize]>,
    keepdims: bool,
    algo: Option<ReduceAlgo>,
) -> Result<Tensor> {
    x.expect_dtype(DType::F32, op.name())?;
    if x.numel() > i32::MAX as usize {
        return Err(Error::Limit(format!(
            "{}: {} elements exceed the 2^31-1 per-op limit",
            op.name(),
            x.numel()
        )));
    }
    let shape = x.shape().to_vec();
    let axes = normalize_axes(axes, shape.len(), op.name())?;
    let out_shape: Vec<usize> = if keepdims {
        shape
            .iter()
            .enumerate()
            .map(|(d, &s)| if axes.contains(&d) { 1 } else { s })
            .collect()
    } else {
        shape
            .iter()
            .enumerate()
            .filter(|(d, _)| !axes.contains(d))
            .map(|(_, &s)| s)
            .collect()
    };
    let count: usize = axes.iter().map(|&a| shape[a]).product();
    if count == 0
        && matches!(op, ReduceOp::Max | ReduceOp::Min)
        && out_shape.iter().product::<usize>() > 0
    {
        return Err(Error::Shape(format!(
            "{}: reduction over an empty axis of shape {shape:?} has no identity",
            op.name()
        )));
    }
    let out = Tensor::empty(x.device(), &out_shape, DType::F32)?;
    if out.numel() == 0 {
        return Ok(out);
    }
    // Groups of adjacent reduced axes, innermost first, each one pass.
    let mut groups: Vec<(usize, usize)> = Vec::new();
    for &a in &axes {
        match groups.last_mut() {
            Some((_, end)) if *end == a => *end = a + 1,
            _ => groups.push((a, a + 1)),
        }
    }
    let dev = x.device();
    if groups.is_empty() {
        // Nothing to reduce: the op of one element (the pre-map still applies to a sum of squares).
        let v = Ori {
            o: x.numel(),
            r: 1,
            i: 1,
        };
        dev.backend()
            .reduce_pass(dev, op, true, v, 1.0, x, &out, 0, algo)?;
        return Ok(out);
    }
    let scale = if op == ReduceOp::Mean {
        1.0 / count as f32
    } else {
        1.0
    };
    let mut cur = x.clone();
    let mut cur_shape = shape.clone();
    let n = groups.len();
    for (k, &(s, e)) in groups.iter().rev().enumerate() {
        let o: usize = cur_shape[..s].iter().product();
        let r: usize = cur_shape[s..e].iter().product();
        let i: usize = cur_shape[e..].iter().product();
        let last = k + 1 == n;
        let dst = if last {
            out.clone()
        } else {
            Tensor::empty(dev, &[o * i], DType::F32)?
        };
        let this_op = if k == 0 { op } else { op.rest() };
        dev.backend().reduce_pass(
            dev,
            this_op,
            k == 0,
            Ori { o, r, i },
            if last { scale } else { 1.0 },
            &cur,
            &dst,
            0,
            algo,
        )?;
        cur_shape[s..e].fill(1);
        cur = dst;
    }
    Ok(out)
}

/// Σx over `axes` (all when `None`).
pub fn sum(x: &Tensor, axes: Option<&[isize]>, keepdims: bool) -> Result<Tensor> {
    reduce(ReduceOp::Sum, x, axes, keepdims)
}
/// The mean over `axes` (all when `None`).
pub fn mean(x: &Tensor, axes: Option<&[isize]>, keepdims: bool) -> Result<Tensor> {
    reduce(ReduceOp::Mean, x, axes, keepdims)
}
/// The maximum over `axes` (all when `None`).
pub fn max(x: &Tensor, axes: Option<&[isize]>, keepdims: bool) -> Result<Tensor> {
    reduce(ReduceOp::Max, x, axes, keepdims)
}
/// The minimum over `axes` (all when `None`).
pub fn min(x: &Tensor, axes: Option<&[isize]>, keepdims: bool) -> Result<Tensor> {
    reduce(ReduceOp::Min, x, axes, keepdims)
}
/// The product over `axes` (all when `None`).
pub fn prod(x: &Tensor, axes: Option<&[isize]>, keepdims: bool) -> Result<Tensor> {
    reduce(ReduceOp::Prod, x, axes, keepdims)
}

/// The sum of every element, as a rank-0 tensor. An empty tensor sums to 0.
pub fn sum_all(x: &Tensor) -> Result<Tensor> {
    reduce(ReduceOp::Sum, x, None, false)
}

fn arg_reduce(max: bool, x: &Tensor, axis: isize, keepdims: bool) -> Result<Tensor> {
    let name = if max { "argmax" } else { "argmin" };
    x.expect_dtype(DType::F32, name)?;
    if x.numel() > i32::MAX as usize {
        return Err(Error::Limit(format!(
            "{name}: {} elements exceed the 2^31-1 per-op limit",
            x.numel()
        )));
    }
    let shape = x.shape();
    let a = normalize_axes(Some(&[axis]), shape.len(), name)?[0];
    let mut out_shape = shape.to_vec();
    if keepdims {
        out_shape[a] = 1;
    } else {
        out_shape.remove(a);
    }
    let out = Tensor::empty(x.device(), &out_shape, DType::I32)?;
    if out.numel() == 0 {
        return Ok(out);
    }
    if shape[a] == 0 {
        return Err(Error::Shape(format!(
            "{name}: axis {a} of shape {shape:?} is empty"
        )));
    }
    let v = Ori {
        o: shape[..a].iter().product(),
        r: shape[a],
        i: shape[a + 1..].iter().product(),
    };
    x.device().backend().arg_reduce(max, v, x, &out)?;
    Ok(out)
}

/// The index (i32) of the first largest value along `axis`; a NaN counts as largest.
pub fn argmax(x: &Tensor, axis: isize, keepdims: bool) -> Result<Tensor> {
    arg_reduce(true, x, axis, keepdims)
}
/// The index (i32) of the first smallest value along `axis`; a NaN counts as smallest.
pub fn argmin(x: &Tensor, axis: isize, keepdims: bool) -> Result<Tensor> {
    arg_reduce(false, x, axis, keepdims)
}

/// How a gradient folds onto a broadcast operand: kept and reduced axes (merged where adjacent), innermost
/// first, with the gradient's element strides.
#[derive(Debug, Clone, PartialEq)]
pub struct RtsPlan {
    kshape: Vec<usize>,
    kstride: Vec<usize>,
    rshape: Vec<usize>,
    rstride: Vec<usize>,
    /// Elements folded into each output.
    pub r: usize,
}

impl RtsPlan {
    fn new(grad: &[usize], target: &[usize]) -> Result<RtsPlan> {
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

/// Sums `grad` over the axes along which `target_shape` was broadcast, giving a tensor of exactly
/// `target_shape` (the gradient of a broadcast operand).
///
/// On OpenCL: one work-group of 256 per output element with a tree reduction once 256 or more elements fold
/// into each output, one work-item per output element otherwise.
pub fn reduce_to_shape(grad: &Tensor, target_shape: &[usize]) -> Result<Tensor> {
    reduce_to_shape_with(grad, target_shape, None)
}

/// [`reduce_to_shape`] with the algorithm forced when given: `RtsAlgo::Wg(g)` and `RtsAlgo::Flat(g)` apply
/// where 256 or more elements fold into each output (elsewhere the one-work-item rule runs), `RtsAlgo::Item`
/// everywhere.
pub fn reduce_to_shape_with(
    grad: &Tensor,
    target_shape: &[usize],
    algo: Option<RtsAlgo>,
) -> Result<Tensor> {
    if matches!(algo, Some(RtsAlgo::Wg(0) | RtsAlgo::Flat(0))) {
        return Err(Error::Invalid(
            "reduce_to_shape: a work-group algorithm needs at least one group per output".into(),
        ));
    }
    grad.expect_dtype(DType::F32, "reduce_to_shape")?;
    if grad.numel() > i32::MAX as usize {
        return Err(Error::Limit(format!(
            "reduce_to_shape: {} elements exceed the 2^31-1 per-op limit",
            grad.numel()
        )));
    }
    let plan = RtsPlan::new(grad.shape(), target_shape)?;
    if grad.shape() == target_shape {
        return grad.deep_clone();
    }
    let out = Tensor::empty(grad.device(), target_shape, DType::F32)?;
    if out.numel() == 0 {
        return Ok(out);
    }
    grad.device()
        .backend()
        .reduce_to_shape(grad.device(), grad, &out, &plan, algo)?;
    Ok(out)
}

/// √(Σ over every tensor of Σx²): the global L2 norm used for gradient clipping, as a rank-0 tensor.
pub fn global_l2_norm(tensors: &[&Tensor]) -> Result<Tensor> {
    let Some(first) = tensors.first() else {
        return Err(Error::Invalid("global_l2_norm: no tensors given".into()));
    };
    first.same_device(&tensors[1..], "global_l2_norm")?;
    let dev = first.device();
    let parts = Tensor::zeros(dev, &[tensors.len()])?;
    for (k, t) in tensors.iter().enumerate() {
        t.expect_dtype(DType::F32, "global_l2_norm")?;
        if t.numel() > i32::MAX as usize {
            return Err(Error::Limit(format!(
                "global_l2_norm: {} elements exceed the 2^31-1 per-op limit",
                t.numel()
            )));
        }
        if t.numel() == 0 {
            continue;
        }
        let v = Ori {
            o: 1,
            r: t.numel(),
            i: 1,
        };
        dev.backend()
            .reduce_pass(dev, ReduceOp::SumSq, true, v, 1.0, t, &parts, k, None)?;
    }
    let out = Tensor::empty(dev, &[], DType::F32)?;
    dev.backend().sqrt_sum(&parts, &out)?;
    Ok(out)
}

fn once_per_key(key: &str) -> bool {
    static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    match SEEN.lock() {
        Ok(mut g) => g.get_or_insert_with(HashSet::new).insert(key.to_owned()),
        Err(_) => false,
    }
}

fn int8(v: &[usize]) -> [i32; 8] {
    let mut out = [1i32; 8];
    for (i, x) in v.iter().enumerate() {
        out[i] = *x as i32;
    }
    out
}

impl ClDevice {
    /// Candidates for one pass; they depend only on the bucketed key (O, R, I, largest of 32/8/4 dividing I).
    fn reduce_candidates(&self, v: Ori) -> (Vec<ReduceAlgo>, usize) {
        let (o, r, i) = (
            bucket(v.o) as usize,
            bucket(v.r) as usize,
            bucket(v.i) as usize,
        );
        let cu = self.info.compute_units.max(1) as usize;
        let max_wg = self.info.max_work_group_size.max(1);
        let cpu = self.info.kind == "cpu";
        let mut c = Vec::new();
        if v.i == 1 {
            for local in [64usize, 128, 256] {
                if local <= max_wg {
                    // Enough groups to fill the device, each reading at least 4 float4 per item.
                    let g = (cu * 16).div_ceil(o).clamp(1, (r / (local * 16)).max(1));
                    c.push(ReduceAlgo::Wg(local, g));
                }
            }
            if 256 <= max_wg {
                // Few work-groups per compute unit, each streaming a long chunk (large rows on GPUs).
                let g = (cu * 4).div_ceil(o).clamp(1, (r / (256 * 16)).max(1));
                if !c.contains(&ReduceAlgo::Wg(256, g)) {
                    c.push(ReduceAlgo::Wg(256, g));
                }
            }
            let g = (cu * 4).div_ceil(o).clamp(1, (r / 256).max(1));
            c.push(ReduceAlgo::Chunk(g));
            if g > 1 {
                c.push(ReduceAlgo::Chunk(
                    ((cu * 16).div_ceil(o)).clamp(1, (r / 256).max(1)),
                ));
            }
            let default = if cpu {
                c.iter().position(|a| matches!(a, ReduceAlgo::Chunk(_)))
            } else {
                c.iter().rposition(|a| matches!(a, ReduceAlgo::Wg(..)))
            };
            let default = default.unwrap_or(0);
            (c, default)
        } else {
            let vecs: &[usize] = if v.i.is_multiple_of(4) { &[1, 4] } else { &[1] };
            for &vec in vecs {
                let items = (o * i / vec).max(1);
                // About 1024 work-items per compute unit keep a GPU's memory system busy.
                let g = (cu * 1024).div_ceil(items).clamp(1, (r / 16).max(1));
                c.push(ReduceAlgo::Col(vec, 1));
                if g > 1 {
                    c.push(ReduceAlgo::Col(vec, g));
                }
            }
            // Column blocks of 32 or 8 for CPU OpenCL, whole rows split into chunks for parallelism.
            for cols in [32usize, 8] {
                if v.i.is_multiple_of(cols) {
                    let items = (o * i / cols).max(1);
                    c.push(ReduceAlgo::ColBlk(cols, 1));
                    let g = (cu * 8).div_ceil(items).clamp(1, (r / 16).max(1));
                    if g > 1 {
                        c.push(ReduceAlgo::ColBlk(cols, g));
                    }
                    break;
                }
            }
            if v.i.is_multiple_of(8) {
                // At least two chunks and at most 1024 rows each, so no partial sums more than 1024 rows.
                let g = (cu * 4).max(r.div_ceil(1024)).clamp(2, r.max(2));
                c.push(ReduceAlgo::Stream(g));
            }
            let default = if cpu {
                c.iter()
                    .position(|a| matches!(a, ReduceAlgo::Stream(..) | ReduceAlgo::ColBlk(..)))
                    .unwrap_or(0)
            } else {
                c.iter()
                    .rposition(|a| matches!(a, ReduceAlgo::Col(..)))
                    .unwrap_or(0)
            };
            (c, default)
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn run_pass(
        &self,
        device: &Device,
        op: ReduceOp,
        first: bool,
        v: Ori,
        scale: f32,
        x: &Tensor,
        out: &Tensor,
        out_off: usize,
        algo: ReduceAlgo,
    ) -> Result<Vec<crate::backend::opencl::Event>> {
        let g = algo.groups().min(v.r.max(1));
        if g == 1 {
            return Ok(vec![
                self.launch_pass(op, first, v, 1, scale, x, out, out_off, algo)?,
            ]);
        }
        // Two stages: partials [O, G, I], then fold G with the same kind of kernel.
        let partial = Tensor::empty(device, &[v.o * g * v.i], DType::F32)?;
        let e1 = self.launch_pass(op, first, v, g, 1.0, x, &partial, 0, algo)?;
        let second = match algo {
            ReduceAlgo::Wg(l, _) => ReduceAlgo::Wg(l.min(g.next_power_of_two()).max(1), 1),
            ReduceAlgo::Chunk(_) => ReduceAlgo::Chunk(1),
            ReduceAlgo::Col(vec, _) => ReduceAlgo::Col(vec, 1),
            ReduceAlgo::ColBlk(cols, _) => ReduceAlgo::ColBlk(cols, 1),
            ReduceAlgo::Stream(_) => ReduceAlgo::ColBlk(8, 1),
        };
        let e2 = self.launch_pass(
            op.rest(),
            false,
            Ori {
                o: v.o,
                r: g,
                i: v.i,
            },
            1,
            scale,
            &partial,
            out,
            out_off,
            second,
        )?;
        Ok(vec![e1, e2])
    }

    #[allow(clippy::too_many_arguments)]
    fn launch_pass(
        &self,
        op: ReduceOp,
        first: bool,
        v: Ori,
        g: usize,
        scale: f32,
        x: &Tensor,
        out: &Tensor,
        out_off: usize,
        algo: ReduceAlgo,
    ) -> Result<crate::backend::opencl::Event> {
        let rc = v.r.div_ceil(g).max(1);
        let defines = op.defines(first);
        match algo {
            ReduceAlgo::Wg(local, _) if v.i == 1 => {
                let local = local.min(self.info.max_work_group_size.max(1));
                // Rows of a multiple of 4 with chunks rounded up to a multiple of 4 load aligned float4.
                let align = v.r.is_multiple_of(4);
                let rc = if align { rc.next_multiple_of(4) } else { rc };
                let defines = defines.set("ALIGN4", u8::from(align));
                let k = self.kernel("reduce", &defines, "red_row_wg")?;
                let args = [
                    Arg::I32(v.o as i32),
                    Arg::I32(v.r as i32),
                    Arg::I32(rc as i32),
                    Arg::I32(g as i32),
                    Arg::F32(scale),
                    Arg::Mem(x.storage()),
                    Arg::Mem(out.storage()),
                    Arg::I32(out_off as i32),
                    Arg::Local(local * 4),
                ];
                self.launch(&k, &args, &[local * g, v.o.min(65535)], Some(&[local, 1]))
            }
            ReduceAlgo::Chunk(_) if v.i == 1 => {
                let k = self.kernel("reduce", &defines, "red_row_chunk")?;
                let total = v.o * g;
                let args = [
                    Arg::I32(v.r as i32),
                    Arg::I32(rc as i32),
                    Arg::I32(g as i32),
                    Arg::I32(total as i32),
                    Arg::F32(scale),
                    Arg::Mem(x.storage()),
                    Arg::Mem(out.storage()),
                    Arg::I32(out_off as i32),
                ];
                self.launch(&k, &args, &[total], None)
            }
            ReduceAlgo::Stream(_) if v.i > 1 && v.i.is_multiple_of(8) => {
                let k = self.kernel("reduce", &defines, "red_col_stream")?;
                let total = v.o * g;
                let args = [
                    Arg::I32(v.o as i32),
                    Arg::I32(v.r as i32),
                    Arg::I32(v.i as i32),
                    Arg::I32(rc as i32),
                    Arg::I32(g as i32),
                    Arg::F32(scale),
                    Arg::Mem(x.storage()),
                    Arg::Mem(out.storage()),
                    Arg::I32(out_off as i32),
                ];
                self.launch(&k, &args, &[total], None)
            }
            ReduceAlgo::ColBlk(cols, _)
                if v.i > 1 && (cols == 8 || cols == 32) && v.i.is_multiple_of(cols) =>
            {
                let gr = [v.i / cols, g, v.o];
                let (gr, local, capped) = super::elementwise::grid_3d(self, gr);
                let d = super::elementwise::grid_defines(&defines.set("NB", cols / 8), capped);
                let k = self.kernel("reduce", &d, "red_col_blk")?;
                let args = [
                    Arg::I32(v.o as i32),
                    Arg::I32(v.r as i32),
                    Arg::I32(v.i as i32),
                    Arg::I32(rc as i32),
                    Arg::I32(g as i32),
                    Arg::F32(scale),
                    Arg::Mem(x.storage()),
                    Arg::Mem(out.storage()),
                    Arg::I32(out_off as i32),
                ];
                self.launch(&k, &args, &gr, Some(&local))
            }
            _ => {
                let vec = match algo {
                    ReduceAlgo::Col(4, _) if v.i.is_multiple_of(4) => 4,
                    _ => 1,
                };
                let gr = [v.i / vec, g, v.o];
                let (gr, local, capped) = super::elementwise::grid_3d(self, gr);
                let d = super::elementwise::grid_defines(&defines.set("V", vec), capped);
                let k = self.kernel("reduce", &d, "red_col")?;
                let args = [
                    Arg::I32(v.o as i32),
                    Arg::I32(v.r as i32),
                    Arg::I32(v.i as i32),
                    Arg::I32(rc as i32),
                    Arg::I32(g as i32),
                    Arg::F32(scale),
                    Arg::Mem(x.storage()),
                    Arg::Mem(out.storage()),
                    Arg::I32(out_off as i32),
                ];
                self.launch(&k, &args, &gr, Some(&local))
            }
        }
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

fn rts_args<'a>(plan: &RtsPlan, grad: &'a Tensor, out: &'a Tensor) -> [Arg<'a>; 9] {
    [
        Arg::I32(plan.kshape.len() as i32),
        Arg::I32x8(int8(&plan.kshape)),
        Arg::I32x8(int8(&plan.kstride)),
        Arg::I32(plan.rshape.len() as i32),
        Arg::I32x8(int8(&plan.rshape)),
        Arg::I32x8(int8(&plan.rstride)),
        Arg::I32(plan.r as i32),
        Arg::Mem(grad.storage()),
        Arg::Mem(out.storage()),
    ]
}

impl ClDevice {
    fn rts_candidates(&self, total: usize, plan: &RtsPlan) -> Vec<RtsAlgo> {
        let cu = self.info.compute_units.max(1) as usize;
        // Chunks are whole runs of the innermost reduced axis when it is long, else 256-element stretches.
        let chunks = match plan.rshape.first() {
            Some(&inner) if inner >= 256 => plan.r / inner,
            _ => plan.r / 256,
        }
        .max(1);
        let mut c = vec![RtsAlgo::Wg(1)];
        for per_cu in [4usize, 16] {
            let g = (cu * per_cu).div_ceil(total).clamp(1, chunks);
            if !c.contains(&RtsAlgo::Wg(g)) {
                c.push(RtsAlgo::Wg(g));
            }
        }
        // Flattened slices of at least 4·256 elements each: two, four or eight groups per compute unit.
        let slices = (plan.r / 1024).max(1);
        for per_cu in [2usize, 4, 8] {
            let g = (cu * per_cu).div_ceil(total).clamp(1, slices);
            if !c.contains(&RtsAlgo::Flat(g)) {
                c.push(RtsAlgo::Flat(g));
            }
        }
        c
    }

    fn run_rts(
        &self,
        device: &Device,
        grad: &Tensor,
        out: &Tensor,
        plan: &RtsPlan,
        algo: RtsAlgo,
    ) -> Result<Vec<crate::backend::opencl::Event>> {
        let total = out.numel();
        let g = match algo {
            RtsAlgo::Wg(g) | RtsAlgo::Flat(g) => g.max(1),
            RtsAlgo::Item => 1,
        };
        let flat = matches!(algo, RtsAlgo::Flat(_));
        // float4 loads: the innermost reduced axis is contiguous and every offset a multiple of 4; rts_wg also
        // needs that axis to be at least 256 long, the flat kernel takes short rows too.
        let inner = plan.rshape.first().copied().unwrap_or(1);
        let v4 = inner.is_multiple_of(4)
            && (flat || inner >= 256)
            && plan.rstride.first() == Some(&1)
            && plan.rstride.iter().skip(1).all(|s| s.is_multiple_of(4))
            && plan.kstride.iter().all(|s| s.is_multiple_of(4));
        let d = Defines::new().set("RTS_V4", u8::from(v4));
        let k = self.kernel("reduce", &d, if flat { "rts_flat" } else { "rts_wg" })?;
        let partial = if g > 1 {
            Some(Tensor::empty(device, &[total * g], DType::F32)?)
        } else {
            None
        };
        let dst = partial.as_ref().unwrap_or(out);
        let mut args: Vec<Arg<'_>> = rts_args(plan, grad, dst).into();
        args.insert(7, Arg::I32(g as i32));
        if flat {
            let units = if v4 { plan.r / 4 } else { plan.r };
            args.insert(8, Arg::I32(units.div_ceil(g) as i32));
        }
        let mut evs = vec![self.launch(&k, &args, &[total * g * 256], Some(&[256]))?];
        if let Some(p) = &partial {
            let k = self.kernel("reduce", &Defines::new(), "rts_fold")?;
            let args = [
                Arg::I32(total as i32),
                Arg::I32(g as i32),
                Arg::Mem(p.storage()),
                Arg::Mem(out.storage()),
            ];
            evs.push(self.launch(
                &k,
                &args,
                &[total],
                Some(&[64.min(self.info.max_work_group_size.max(1))]),
            )?);
        }
        Ok(evs)
    }
}

impl ReduceKernels for ClDevice {
    fn reduce_pass(
        &self,
        device: &Device,
        op: ReduceOp,
        first: bool,
        v: Ori,
        scale: f32,
        x: &Tensor,
        out: &Tensor,
        out_off: usize,
        algo: Option<ReduceAlgo>,
    ) -> Result<()> {
        let key = shape_key(&[
            bucket(v.o),
            bucket(v.r),
            bucket(v.i),
            // The largest of 32, 8, 4 dividing I: column candidates depend on it.
            [32i64, 8, 4]
                .into_iter()
                .find(|&m| v.i.is_multiple_of(m as usize))
                .unwrap_or(1),
        ]);
        let (cands, default) = self.reduce_candidates(v);
        let eligible = |a: &ReduceAlgo| match a {
            ReduceAlgo::Col(..) => v.i > 1,
            ReduceAlgo::ColBlk(cols, _) => {
                v.i > 1 && (*cols == 8 || *cols == 32) && v.i.is_multiple_of(*cols)
            }
            ReduceAlgo::Stream(_) => v.i > 1 && v.i.is_multiple_of(8),
            _ => v.i == 1,
        };
        let chosen = match algo.filter(eligible) {
            Some(a) => {
                if once_per_key(&format!("reduce|{key}|{a:?}")) {
                    autotune::record_choice(
                        device,
                        "reduce",
                        &key,
                        &a,
                        Source::Forced,
                        "algorithm given by the caller",
                    );
                }
                a
            }
            None if v.r <= 1 => cands[default],
            None => autotune::tune(device, "reduce", &key, &cands, default, |c| {
                events_ms(&self.run_pass(device, op, first, v, scale, x, out, out_off, *c)?)
            })?,
        };
        self.run_pass(device, op, first, v, scale, x, out, out_off, chosen)?;
        Ok(())
    }

    fn arg_reduce(&self, max: bool, v: Ori, x: &Tensor, out: &Tensor) -> Result<()> {
        let k = self.kernel(
            "reduce",
            &Defines::new(),
            if max { "argmax_col" } else { "argmin_col" },
        )?;
        let total = v.o * v.i;
        let args = [
            Arg::I32(v.o as i32),
            Arg::I32(v.r as i32),
            Arg::I32(v.i as i32),
            Arg::Mem(x.storage()),
            Arg::Mem(out.storage()),
        ];
        self.launch(
            &k,
            &args,
            &[total],
            Some(&[64.min(self.info.max_work_group_size.max(1))]),
        )?;
        Ok(())
    }

    fn reduce_to_shape(
        &self,
        device: &Device,
        grad: &Tensor,
        out: &Tensor,
        plan: &RtsPlan,
        algo: Option<RtsAlgo>,
    ) -> Result<()> {
        let total = out.numel();
        let wg =
            plan.r >= 256 && self.info.max_work_group_size >= 256 && algo != Some(RtsAlgo::Item);
        let key = shape_key(&[bucket(total), bucket(plan.r)]);
        if !wg {
            if once_per_key(&format!("rts|{}|{key}|item", device.info().index)) {
                let why = "rule: one work-item per output when fewer than 256 elements fold into each (or the device's work-groups are smaller than 256)";
                autotune::record_choice(
                    device,
                    "reduce_to_shape",
                    &key,
                    &RtsAlgo::Item,
                    Source::Only,
                    why,
                );
            }
            let k = self.kernel("reduce", &Defines::new(), "rts_item")?;
            let mut args = vec![Arg::I32(total as i32)];
            args.extend(rts_args(plan, grad, out));
            self.launch(
                &k,
                &args,
                &[total],
                Some(&[64.min(self.info.max_work_group_size.max(1))]),
            )?;
            return Ok(());
        }
        let chosen = match algo {
            Some(a) => {
                if once_per_key(&format!("rts|{}|{key}|{a:?}", device.info().index)) {
                    let why = "algorithm given by the caller";
                    autotune::record_choice(
                        device,
                        "reduce_to_shape",
                        &key,
                        &a,
                        Source::Forced,
                        why,
                    );
                }
                a
            }
            None => {
                let cands = self.rts_candidates(total, plan);
                autotune::tune(device, "reduce_to_shape", &key, &cands, 0, |a| {
                    events_ms(&self.run_rts(device, grad, out, plan, *a)?)
                })?
            }
        };
        self.run_rts(device, grad, out, plan, chosen)?;
        Ok(())
    }

    fn sqrt_sum(&self, parts: &Tensor, out: &Tensor) -> Result<()> {
        let k = self.kernel("reduce", &Defines::new(), "sqrt_sum")?;
        let args = [
            Arg::I32(parts.numel() as i32),
            Arg::Mem(parts.storage()),
            Arg::Mem(out.storage()),
        ];
        self.launch(&k, &args, &[1], Some(&[1]))?;
        Ok(())
    }
}

/// The reference fold of one op over f64 values.
fn fold_ref(op: ReduceOp, vals: impl Iterator<Item = f32>, first: bool) -> f64 {
    let mut acc: f64 = match op {
        ReduceOp::Prod => 1.0,
        ReduceOp::Max => f64::NEG_INFINITY,
        ReduceOp::Min => f64::INFINITY,
        _ => 0.0,
    };
    for v in vals {
        let v = v as f64;
        acc = match op {
            ReduceOp::Sum | ReduceOp::Mean => acc + v,
            ReduceOp::SumSq => acc + if first { v * v } else { v },
            ReduceOp::Prod => acc * v,
            ReduceOp::Max => {
                if acc.is_nan() || v.is_nan() {
                    f64::NAN
                } else {
                    acc.max(v)
                }
            }
            ReduceOp::Min => {
                if acc.is_nan() || v.is_nan() {
                    f64::NAN
                } else {
                    acc.min(v)
                }
            }
        };
    }
    acc
}

impl ReduceKernels for CpuDevice {
    fn reduce_pass(
        &self,
        _device: &Device,
        op: ReduceOp,
        first: bool,
        v: Ori,
        scale: f32,
        x: &Tensor,
        out: &Tensor,
        out_off: usize,
        _algo: Option<ReduceAlgo>,
    ) -> Result<()> {
        // `out` may be a slot buffer written in several calls: read it first, then write it back whole.
        let mut cur = out.to_vec::<f32>()?;
        let xs = x.to_vec::<f32>()?;
        for o in 0..v.o {
            for i in 0..v.i {
                let vals = (0..v.r).map(|r| xs[(o * v.r + r) * v.i + i]);
                // The reference accumulates in f64 and scales in f64.
                cur[out_off + o * v.i + i] = (fold_ref(op, vals, first) * scale as f64) as f32;
            }
        }
        out.device()
            .backend()
            .write(out.storage(), 0, bytemuck::cast_slice(&cur))
    }

    fn arg_reduce(&self, max: bool, v: Ori, x: &Tensor, out: &Tensor) -> Result<()> {
        let xs = x.to_vec::<f32>()?;
        let mut res = vec![0i32; v.o * v.i];
        for o in 0..v.o {
            for i in 0..v.i {
                let mut best = xs[o * v.r * v.i + i];
                let mut bi = 0;
                if !best.is_nan() {
                    for r in 1..v.r {
                        let val = xs[(o * v.r + r) * v.i + i];
                        if val.is_nan() {
                            bi = r;
                            break;
                        }
                        if (max && val > best) || (!max && val < best) {
                            best = val;
                            bi = r;
                        }
                    }
                }
                res[o * v.i + i] = bi as i32;
            }
        }
        out.device()
            .backend()
            .write(out.storage(), 0, bytemuck::cast_slice(&res))
    }

    fn reduce_to_shape(
        &self,
        _device: &Device,
        grad: &Tensor,
        out: &Tensor,
        plan: &RtsPlan,
        _algo: Option<RtsAlgo>,
    ) -> Result<()> {
        crate::backend::cpu::host::map_f32(&[grad], out, |ins, o| {
            let g = ins[0];
            let decomp = |mut rem: usize, shape: &[usize], stride: &[usize]| -> usize {
                let mut off = 0;
                for (s, st) in shape.iter().zip(stride) {
                    off += (rem % s) * st;
                    rem /= s;
                }
                off
            };
            for (k, v) in o.iter_mut().enumerate() {
                let base = decomp(k, &plan.kshape, &plan.kstride);
                let acc: f64 = (0..plan.r)
                    .map(|r| g[base + decomp(r, &plan.rshape, &plan.rstride)] as f64)
                    .sum();
                *v = acc as f32;
            }
        })
    }

    fn sqrt_sum(&self, parts: &Tensor, out: &Tensor) -> Result<()> {
        crate::backend::cpu::host::map_f32(&[parts], out, |ins, o| {
            o[0] = ins[0].iter().map(|&v| v as f64).sum::<f64>().sqrt() as f32;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rts_plan_merges_axes() {
        let p = RtsPlan::new(&[8, 3, 5, 5], &[3, 1, 1]).ok();
        assert_eq!(
            p.as_ref()
                .map(|p| (p.kshape.clone(), p.rshape.clone(), p.r)),
            Some((vec![3], vec![25, 8], 200))
        );
        assert!(RtsPlan::new(&[4, 3], &[2, 3]).is_err());
        assert!(RtsPlan::new(&[4, 3], &[1, 1, 3]).is_ok());
        assert!(RtsPlan::new(&[4, 3], &[2, 4, 3]).is_err());
    }

    #[test]
    fn axes_are_validated() {
        assert_eq!(
            normalize_axes(Some(&[-1, 0]), 3, "sum").ok(),
            Some(vec![0, 2])
        );
        assert!(
            normalize_axes(Some(&[3]), 3, "sum")
                .is_err_and(|e| e.to_string().contains("out of range"))
        );
        assert!(normalize_axes(Some(&[1, -2]), 3, "sum").is_err());
    }
}
