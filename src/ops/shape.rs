//! Shape and index ops: permute/transpose, narrow, cat, split, index_select, one_hot, and pad2d (zero or
//! reflect) with its backward. Every op copies into a new contiguous tensor on the device.

use crate::backend::cpu::CpuDevice;
use crate::backend::opencl::Arg;
use crate::backend::opencl::ClDevice;
use crate::backend::opencl::program::Defines;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor, strides};

use super::reduce::normalize_axes;
use crate::backend::opencl::elementwise::{grid_3d, grid_defines};

/// The copy of one block: `dst[o, doff + a, i] = src[o, soff + a, i]` for `a < len`, with the axis extents
/// `sa` and `da` of the source and destination views `[o, axis, i]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Block {
    o: usize,
    len: usize,
    i: usize,
    sa: usize,
    soff: usize,
    da: usize,
    doff: usize,
}

/// Padding modes of [`pad2d`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PadMode {
    /// Zeros outside the input.
    Zero,
    /// Mirror without repeating the edge (`x[−1] = x[1]`); each pad must be smaller than its dimension.
    Reflect,
}

/// Device primitives for data movement.
pub(crate) trait ShapeKernels {
    /// `y[i] = x[offset of i over oshape with istride]` (both innermost first).
    fn permute(&self, x: &Tensor, oshape: &[usize], istride: &[usize], y: &Tensor) -> Result<()>;
    /// One block copy from `x` into `y`.
    fn block_copy(&self, x: &Tensor, y: &Tensor, b: Block) -> Result<()>;
    /// `y[o, k, i] = x[o, idx[k], i]` over `[o, a, i]`.
    fn index_select(
        &self,
        x: &Tensor,
        idx: &Tensor,
        o: usize,
        a: usize,
        i: usize,
        y: &Tensor,
    ) -> Result<()>;
    /// `y[n, c] = labels[n] == c`.
    fn one_hot(&self, labels: &Tensor, y: &Tensor) -> Result<()>;
    /// pad2d forward (`back` false: x → y) or backward (`back` true: gradient of y → gradient of x).
    fn pad2d(
        &self,
        src: &Tensor,
        dst: &Tensor,
        top: usize,
        left: usize,
        reflect: bool,
        back: bool,
    ) -> Result<()>;
    /// The first `k` of each lane along R of `[o, r, i]` in rank order into `vals` and `idx` (`[o, k, i]`).
    #[allow(clippy::too_many_arguments)]
    fn topk(
        &self,
        x: &Tensor,
        o: usize,
        r: usize,
        i: usize,
        k: usize,
        largest: bool,
        vals: &Tensor,
        idx: &Tensor,
    ) -> Result<()>;
}

fn limit(x: &Tensor, op: &str) -> Result<()> {
    if x.numel() > i32::MAX as usize {
        return Err(Error::Limit(format!(
            "{op}: {} elements exceed the 2^31-1 per-op limit",
            x.numel()
        )));
    }
    Ok(())
}

/// The axes of `x` reordered: output axis `k` is input axis `dims[k]`.
pub fn permute(x: &Tensor, dims: &[usize]) -> Result<Tensor> {
    x.expect_dtype(DType::F32, "permute")?;
    limit(x, "permute")?;
    let r = x.rank();
    let mut seen = vec![false; r];
    if dims.len() != r
        || dims
            .iter()
            .any(|&d| d >= r || std::mem::replace(&mut seen[d], true))
    {
        return Err(Error::Shape(format!(
            "permute: {dims:?} is not a permutation of the {r} axes of {:?}",
            x.shape()
        )));
    }
    if r > 8 {
        return Err(Error::Shape(format!("permute: at most 8 axes, got {r}")));
    }
    let st = strides(x.shape());
    let oshape: Vec<usize> = dims.iter().map(|&d| x.shape()[d]).collect();
    let y = Tensor::empty(x.device(), &oshape, DType::F32)?;
    if y.numel() > 0 {
        let os: Vec<usize> = oshape.iter().rev().copied().collect();
        let is: Vec<usize> = dims.iter().rev().map(|&d| st[d]).collect();
        x.device().backend().permute(x, &os, &is, &y)?;
    }
    Ok(y)
}

/// `x` with axes `a` and `b` swapped.
pub fn transpose(x: &Tensor, a: isize, b: isize) -> Result<Tensor> {
    let ax = normalize_axes(Some(&[a]), x.rank(), "transpose")?[0];
    let bx = normalize_axes(Some(&[b]), x.rank(), "transpose")?[0];
    let mut dims: Vec<usize> = (0..x.rank()).collect();
    dims.swap(ax, bx);
    permute(x, &dims)
}

fn view3(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (
        shape[..axis].iter().product(),
        shape[axis],
        shape[axis + 1..].iter().product(),
    )
}

/// Elements `start..start + len` of `axis`.
pub fn narrow(x: &Tensor, axis: isize, start: usize, len: usize) -> Result<Tensor> {
    x.expect_dtype(DType::F32, "narrow")?;
    limit(x, "narrow")?;
    let a = normalize_axes(Some(&[axis]), x.rank(), "narrow")?[0];
    let (o, n, i) = view3(x.shape(), a);
    if start.checked_add(len).is_none_or(|e| e > n) {
        return Err(Error::Shape(format!(
            "narrow: {start}..{} is outside axis {a} of {:?}",
            start.saturating_add(len),
            x.shape()
        )));
    }
    let mut shape = x.shape().to_vec();
    shape[a] = len;
    let y = Tensor::empty(x.device(), &shape, DType::F32)?;
    if y.numel() > 0 {
        x.device().backend().block_copy(
            x,
            &y,
            Block {
                o,
                len,
                i,
                sa: n,
                soff: start,
                da: len,
                doff: 0,
            },
        )?;
    }
    Ok(y)
}

/// Pieces of `sizes` along `axis` (they must add up to its extent).
pub fn split(x: &Tensor, axis: isize, sizes: &[usize]) -> Result<Vec<Tensor>> {
    let a = normalize_axes(Some(&[axis]), x.rank(), "split")?[0];
    if sizes.iter().sum::<usize>() != x.shape()[a] {
        return Err(Error::Shape(format!(
            "split: sizes {sizes:?} do not add up to axis {a} of {:?}",
            x.shape()
        )));
    }
    let mut start = 0;
    sizes
        .iter()
        .map(|&s| {
            let t = narrow(x, a as isize, start, s);
            start += s;
            t
        })
        .collect()
}

/// The tensors joined along `axis`; every other extent must match.
pub fn cat(xs: &[&Tensor], axis: isize) -> Result<Tensor> {
    let Some(first) = xs.first() else {
        return Err(Error::Invalid("cat: no tensors given".into()));
    };
    first.same_device(&xs[1..], "cat")?;
    let a = normalize_axes(Some(&[axis]), first.rank(), "cat")?[0];
    let mut shape = first.shape().to_vec();
    shape[a] = 0;
    for t in xs {
        t.expect_dtype(DType::F32, "cat")?;
        let ok = t.rank() == first.rank()
            && t.shape()
                .iter()
                .enumerate()
                .all(|(d, &s)| d == a || s == first.shape()[d]);
        if !ok {
            return Err(Error::Shape(format!(
                "cat: shape {:?} does not match {:?} outside axis {a}",
                t.shape(),
                first.shape()
            )));
        }
        shape[a] += t.shape()[a];
    }
    let y = Tensor::empty(first.device(), &shape, DType::F32)?;
    limit(&y, "cat")?;
    let (o, total, i) = view3(&shape, a);
    let mut off = 0;
    for t in xs {
        let len = t.shape()[a];
        if len > 0 && o * i > 0 {
            first.device().backend().block_copy(
                t,
                &y,
                Block {
                    o,
                    len,
                    i,
                    sa: len,
                    soff: 0,
                    da: total,
                    doff: off,
                },
            )?;
        }
        off += len;
    }
    Ok(y)
}

/// Slices of `axis` at `indices` (i32, each in range), in that order.
pub fn index_select(x: &Tensor, axis: isize, indices: &Tensor) -> Result<Tensor> {
    x.same_device(&[indices], "index_select")?;
    x.expect_dtype(DType::F32, "index_select")?;
    indices.expect_dtype(DType::I32, "index_select indices")?;
    limit(x, "index_select")?;
    if indices.rank() != 1 {
        return Err(Error::Shape(format!(
            "index_select: indices must be 1-D, got {:?}",
            indices.shape()
        )));
    }
    let a = normalize_axes(Some(&[axis]), x.rank(), "index_select")?[0];
    let (o, n, i) = view3(x.shape(), a);
    if let Some(bad) = indices
        .to_vec::<i32>()?
        .into_iter()
        .find(|&k| k < 0 || k as usize >= n)
    {
        return Err(Error::Invalid(format!(
            "index_select: index {bad} is outside 0..{n} (axis {a} of {:?})",
            x.shape()
        )));
    }
    let mut shape = x.shape().to_vec();
    shape[a] = indices.numel();
    let y = Tensor::empty(x.device(), &shape, DType::F32)?;
    limit(&y, "index_select")?;
    if y.numel() > 0 {
        x.device().backend().index_select(x, indices, o, n, i, &y)?;
    }
    Ok(y)
}

/// `[N, classes]` f32 with a 1 at each label; a label outside `0..classes` is an error.
pub fn one_hot(labels: &Tensor, classes: usize) -> Result<Tensor> {
    labels.expect_dtype(DType::I32, "one_hot")?;
    if labels.rank() != 1 {
        return Err(Error::Shape(format!(
            "one_hot: labels must be 1-D, got {:?}",
            labels.shape()
        )));
    }
    if let Some(bad) = labels
        .to_vec::<i32>()?
        .into_iter()
        .find(|&k| k < 0 || k as usize >= classes)
    {
        return Err(Error::Invalid(format!(
            "one_hot: label {bad} is outside 0..{classes}"
        )));
    }
    let y = Tensor::empty(labels.device(), &[labels.numel(), classes], DType::F32)?;
    limit(&y, "one_hot")?;
    if y.numel() > 0 {
        labels.device().backend().one_hot(labels, &y)?;
    }
    Ok(y)
}

fn pad_shape(shape: &[usize], pads: [usize; 4], mode: PadMode, op: &str) -> Result<Vec<usize>> {
    let [n, c, h, w] = match *shape {
        [n, c, h, w] => [n, c, h, w],
        _ => {
            return Err(Error::Shape(format!(
                "{op}: expected an N×C×H×W input, got {shape:?}"
            )));
        }
    };
    let [t, b, l, r] = pads;
    if mode == PadMode::Reflect && (t >= h || b >= h || l >= w || r >= w) {
        return Err(Error::Invalid(format!(
            "{op}: reflect padding {pads:?} must be smaller than the {h}×{w} input"
        )));
    }
    Ok(vec![n, c, h + t + b, w + l + r])
}

/// Pads the last two dimensions of N×C×H×W by `[top, bottom, left, right]`.
pub fn pad2d(x: &Tensor, pads: [usize; 4], mode: PadMode) -> Result<Tensor> {
    x.expect_dtype(DType::F32, "pad2d")?;
    let shape = pad_shape(x.shape(), pads, mode, "pad2d")?;
    let y = Tensor::empty(x.device(), &shape, DType::F32)?;
    limit(&y, "pad2d")?;
    if y.numel() > 0 {
        x.device()
            .backend()
            .pad2d(x, &y, pads[0], pads[2], mode == PadMode::Reflect, false)?;
    }
    Ok(y)
}

/// The input gradient of [`pad2d`] from the padded output's gradient.
pub fn pad2d_backward(
    grad: &Tensor,
    input_shape: &[usize],
    pads: [usize; 4],
    mode: PadMode,
) -> Result<Tensor> {
    grad.expect_dtype(DType::F32, "pad2d_backward")?;
    let shape = pad_shape(input_shape, pads, mode, "pad2d_backward")?;
    if grad.shape() != shape.as_slice() {
        return Err(Error::Shape(format!(
            "pad2d_backward: gradient {:?} does not match the padded shape {shape:?}",
            grad.shape()
        )));
    }
    limit(grad, "pad2d_backward")?;
    let gx = Tensor::empty(grad.device(), input_shape, DType::F32)?;
    if gx.numel() > 0 {
        grad.device().backend().pad2d(
            grad,
            &gx,
            pads[0],
            pads[2],
            mode == PadMode::Reflect,
            true,
        )?;
    }
    Ok(gx)
}

/// The `k` largest (or smallest) values along `axis` in order, with their i32 indices. Ties keep the lower
/// index first; NaN ranks as the largest value.
pub fn topk(x: &Tensor, k: usize, axis: isize, largest: bool) -> Result<(Tensor, Tensor)> {
    x.expect_dtype(DType::F32, "topk")?;
    limit(x, "topk")?;
    let a = normalize_axes(Some(&[axis]), x.rank(), "topk")?[0];
    let (o, r, i) = view3(x.shape(), a);
    if k > r {
        return Err(Error::Shape(format!(
            "topk: k = {k} exceeds the {r} elements of axis {a} of {:?}",
            x.shape()
        )));
    }
    let mut shape = x.shape().to_vec();
    shape[a] = k;
    let vals = Tensor::empty(x.device(), &shape, DType::F32)?;
    let idx = Tensor::empty(x.device(), &shape, DType::I32)?;
    if vals.numel() > 0 {
        x.device()
            .backend()
            .topk(x, o, r, i, k, largest, &vals, &idx)?;
    }
    Ok((vals, idx))
}

fn ranks_before(a: f32, ia: usize, b: f32, ib: usize, largest: bool) -> bool {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => ia < ib,
        (na, nb) if na || nb => {
            if largest {
                na
            } else {
                nb
            }
        }
        _ if a == b => ia < ib,
        _ => {
            if largest {
                a > b
            } else {
                a < b
            }
        }
    }
}

fn int8(v: &[usize]) -> [i32; 8] {
    let mut out = [1i32; 8];
    for (k, x) in v.iter().enumerate() {
        out[k] = *x as i32;
    }
    out
}

impl ShapeKernels for ClDevice {
    fn topk(
        &self,
        x: &Tensor,
        o: usize,
        r: usize,
        i: usize,
        k: usize,
        largest: bool,
        vals: &Tensor,
        idx: &Tensor,
    ) -> Result<()> {
        let kern = self.kernel("shape", &Defines::new(), "topk")?;
        let mut args: Vec<Arg> = [o, r, i, k].iter().map(|&v| Arg::I32(v as i32)).collect();
        args.push(Arg::I32(i32::from(largest)));
        args.extend([
            Arg::Mem(x.storage()),
            Arg::Mem(vals.storage()),
            Arg::Mem(idx.storage()),
        ]);
        self.launch(
            &kern,
            &args,
            &[o * i],
            Some(&[64.min(self.info.max_work_group_size.max(1))]),
        )?;
        Ok(())
    }

    fn permute(&self, x: &Tensor, oshape: &[usize], istride: &[usize], y: &Tensor) -> Result<()> {
        let k = self.kernel("shape", &Defines::new(), "permute")?;
        let n = y.numel();
        let args = [
            Arg::I32(n as i32),
            Arg::I32(oshape.len() as i32),
            Arg::I32x8(int8(oshape)),
            Arg::I32x8(int8(istride)),
            Arg::Mem(x.storage()),
            Arg::Mem(y.storage()),
        ];
        self.launch(
            &k,
            &args,
            &[n],
            Some(&[256.min(self.info.max_work_group_size.max(1))]),
        )?;
        Ok(())
    }

    fn block_copy(&self, x: &Tensor, y: &Tensor, b: Block) -> Result<()> {
        let k = self.kernel("shape", &Defines::new(), "block_copy")?;
        let args = [b.o, b.len, b.i, b.sa, b.soff, b.da, b.doff].map(|v| Arg::I32(v as i32));
        let mut args: Vec<Arg> = args.into_iter().collect();
        args.push(Arg::Mem(x.storage()));
        args.push(Arg::Mem(y.storage()));
        let range = [b.i, b.len, b.o];
        let (range, local, capped) = grid_3d(self, range);
        let k = if capped {
            self.kernel("shape", &grid_defines(&Defines::new(), true), &k.name)?
        } else {
            k
        };
        self.launch(&k, &args, &range, Some(&local))?;
        Ok(())
    }

    fn index_select(
        &self,
        x: &Tensor,
        idx: &Tensor,
        o: usize,
        a: usize,
        i: usize,
        y: &Tensor,
    ) -> Result<()> {
        let k = self.kernel("shape", &Defines::new(), "index_select")?;
        let kk = idx.numel();
        let args = [
            Arg::I32(o as i32),
            Arg::I32(kk as i32),
            Arg::I32(a as i32),
            Arg::I32(i as i32),
            Arg::Mem(x.storage()),
            Arg::Mem(idx.storage()),
            Arg::Mem(y.storage()),
        ];
        let range = [i, kk, o];
        let (range, local, capped) = grid_3d(self, range);
        let k = if capped {
            self.kernel("shape", &grid_defines(&Defines::new(), true), &k.name)?
        } else {
            k
        };
        self.launch(&k, &args, &range, Some(&local))?;
        Ok(())
    }

    fn one_hot(&self, labels: &Tensor, y: &Tensor) -> Result<()> {
        let k = self.kernel("shape", &Defines::new(), "one_hot")?;
        let (n, c) = (y.shape()[0], y.shape()[1]);
        let args = [
            Arg::I32(n as i32),
            Arg::I32(c as i32),
            Arg::Mem(labels.storage()),
            Arg::Mem(y.storage()),
        ];
        let range = [c, n, 1];
        // one_hot strides over rows itself, so it needs no GRID_LOOP build.
        let (range, l, _) = grid_3d(self, range);
        self.launch(&k, &args, &range[..2], Some(&l[..2]))?;
        Ok(())
    }

    fn pad2d(
        &self,
        src: &Tensor,
        dst: &Tensor,
        top: usize,
        left: usize,
        reflect: bool,
        back: bool,
    ) -> Result<()> {
        let (x, y) = if back { (dst, src) } else { (src, dst) };
        let (xs, ys) = (x.shape(), y.shape());
        let k = self.kernel(
            "shape",
            &Defines::new(),
            if back { "pad2d_bwd" } else { "pad2d" },
        )?;
        let mut args: Vec<Arg> = [xs[0] * xs[1], xs[2], xs[3], ys[2], ys[3], top, left]
            .iter()
            .map(|&v| Arg::I32(v as i32))
            .collect();
        args.push(Arg::I32(i32::from(reflect)));
        args.push(Arg::Mem(src.storage()));
        args.push(Arg::Mem(dst.storage()));
        let range = if back {
            [xs[3], xs[2], xs[0] * xs[1]]
        } else {
            [ys[3], ys[2], ys[0] * ys[1]]
        };
        let (range, local, capped) = grid_3d(self, range);
        let k = if capped {
            self.kernel("shape", &grid_defines(&Defines::new(), true), &k.name)?
        } else {
            k
        };
        self.launch(&k, &args, &range, Some(&local))?;
        Ok(())
    }
}

fn pad_src(u: isize, h: usize, reflect: bool) -> Option<usize> {
    let h = h as isize;
    if (0..h).contains(&u) {
        Some(u as usize)
    } else if reflect {
        Some(if u < 0 { -u } else { 2 * (h - 1) - u } as usize)
    } else {
        None
    }
}

impl ShapeKernels for CpuDevice {
    fn topk(
        &self,
        x: &Tensor,
        o: usize,
        r: usize,
        i: usize,
        k: usize,
        largest: bool,
        vals: &Tensor,
        idx: &Tensor,
    ) -> Result<()> {
        let xs = x.to_vec::<f32>()?;
        let (mut vs, mut is) = (vec![0f32; vals.numel()], vec![0i32; vals.numel()]);
        for oo in 0..o {
            for ii in 0..i {
                // The reference sorts the lane.
                let mut lane: Vec<(f32, usize)> =
                    (0..r).map(|rr| (xs[(oo * r + rr) * i + ii], rr)).collect();
                lane.sort_by(|a, b| {
                    if ranks_before(a.0, a.1, b.0, b.1, largest) {
                        std::cmp::Ordering::Less
                    } else {
                        std::cmp::Ordering::Greater
                    }
                });
                for (j, (v, rr)) in lane.into_iter().take(k).enumerate() {
                    vs[(oo * k + j) * i + ii] = v;
                    is[(oo * k + j) * i + ii] = rr as i32;
                }
            }
        }
        vals.device()
            .backend()
            .write(vals.storage(), 0, bytemuck::cast_slice(&vs))?;
        idx.device()
            .backend()
            .write(idx.storage(), 0, bytemuck::cast_slice(&is))
    }

    fn permute(&self, x: &Tensor, oshape: &[usize], istride: &[usize], y: &Tensor) -> Result<()> {
        crate::backend::cpu::host::map_f32(&[x], y, |ins, o| {
            for (k, v) in o.iter_mut().enumerate() {
                let (mut rem, mut off) = (k, 0);
                for (s, st) in oshape.iter().zip(istride) {
                    off += (rem % s) * st;
                    rem /= s;
                }
                *v = ins[0][off];
            }
        })
    }

    fn block_copy(&self, x: &Tensor, y: &Tensor, b: Block) -> Result<()> {
        let xs = x.to_vec::<f32>()?;
        let mut ys = y.to_vec::<f32>()?;
        for o in 0..b.o {
            for a in 0..b.len {
                for i in 0..b.i {
                    ys[(o * b.da + b.doff + a) * b.i + i] = xs[(o * b.sa + b.soff + a) * b.i + i];
                }
            }
        }
        y.device()
            .backend()
            .write(y.storage(), 0, bytemuck::cast_slice(&ys))
    }

    fn index_select(
        &self,
        x: &Tensor,
        idx: &Tensor,
        o: usize,
        a: usize,
        i: usize,
        y: &Tensor,
    ) -> Result<()> {
        let (xs, ks) = (x.to_vec::<f32>()?, idx.to_vec::<i32>()?);
        let mut ys = Vec::with_capacity(y.numel());
        for oo in 0..o {
            for &k in &ks {
                ys.extend_from_slice(&xs[(oo * a + k as usize) * i..(oo * a + k as usize + 1) * i]);
            }
        }
        y.device()
            .backend()
            .write(y.storage(), 0, bytemuck::cast_slice(&ys))
    }

    fn one_hot(&self, labels: &Tensor, y: &Tensor) -> Result<()> {
        let c = y.shape()[1];
        let mut ys = vec![0f32; y.numel()];
        for (n, &l) in labels.to_vec::<i32>()?.iter().enumerate() {
            ys[n * c + l as usize] = 1.0;
        }
        y.device()
            .backend()
            .write(y.storage(), 0, bytemuck::cast_slice(&ys))
    }

    fn pad2d(
        &self,
        src: &Tensor,
        dst: &Tensor,
        top: usize,
        left: usize,
        reflect: bool,
        back: bool,
    ) -> Result<()> {
        let (x, y) = if back { (dst, src) } else { (src, dst) };
        let (xs, ys) = (x.shape().to_vec(), y.shape().to_vec());
        let (planes, h, w, oh, ow) = (xs[0] * xs[1], xs[2], xs[3], ys[2], ys[3]);
        let s = src.to_vec::<f32>()?;
        let mut d = vec![0f32; dst.numel()];
        for p in 0..planes {
            for a in 0..oh {
                for b in 0..ow {
                    let (hs, ws) = (
                        pad_src(a as isize - top as isize, h, reflect),
                        pad_src(b as isize - left as isize, w, reflect),
                    );
                    let (Some(hh), Some(ww)) = (hs, ws) else {
                        continue;
                    };
                    let (xi, yi) = ((p * h + hh) * w + ww, (p * oh + a) * ow + b);
                    if back {
                        // The reference scatters (the kernel gathers), so the two are checked against each other.
                        d[xi] += s[yi];
                    } else {
                        d[yi] = s[xi];
                    }
                }
            }
        }
        dst.device()
            .backend()
            .write(dst.storage(), 0, bytemuck::cast_slice(&d))
    }
}
