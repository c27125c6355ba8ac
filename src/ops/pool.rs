//! 2-D max, average and global-average pooling of N×C×H×W with any kernel, stride and padding, forward and
//! backward. Max pooling keeps the index of each window's maximum for its backward.

use crate::backend::cpu::CpuDevice;
use crate::backend::opencl::Arg;
use crate::backend::opencl::ClDevice;
use crate::backend::opencl::program::Defines;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

use super::reduce::mean;
use crate::backend::opencl::elementwise::{grid_3d, grid_defines};

/// Window geometry of a 2-D pooling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool2d {
    /// Window height and width.
    pub kernel: (usize, usize),
    /// Vertical and horizontal stride.
    pub stride: (usize, usize),
    /// Zero-area padding on each side (top/bottom, left/right); at most half the window.
    pub padding: (usize, usize),
}

impl Pool2d {
    /// A square window `k` with stride `s` and padding `p`.
    pub fn square(k: usize, s: usize, p: usize) -> Pool2d {
        Pool2d {
            kernel: (k, k),
            stride: (s, s),
            padding: (p, p),
        }
    }

    fn out_hw(&self, h: usize, w: usize, op: &str) -> Result<(usize, usize)> {
        let (kh, kw) = self.kernel;
        let (sh, sw) = self.stride;
        let (ph, pw) = self.padding;
        if kh == 0 || kw == 0 || sh == 0 || sw == 0 {
            return Err(Error::Invalid(format!(
                "{op}: kernel {:?} and stride {:?} must be positive",
                self.kernel, self.stride
            )));
        }
        if 2 * ph > kh || 2 * pw > kw {
            return Err(Error::Invalid(format!(
                "{op}: padding {:?} must be at most half the kernel {:?}",
                self.padding, self.kernel
            )));
        }
        if h + 2 * ph < kh || w + 2 * pw < kw {
            return Err(Error::Shape(format!(
                "{op}: a {kh}×{kw} window does not fit a padded {h}×{w} input (padding {:?})",
                self.padding
            )));
        }
        Ok(((h + 2 * ph - kh) / sh + 1, (w + 2 * pw - kw) / sw + 1))
    }

    fn args(&self) -> [i32; 6] {
        [
            self.kernel.0,
            self.kernel.1,
            self.stride.0,
            self.stride.1,
            self.padding.0,
            self.padding.1,
        ]
        .map(|v| v as i32)
    }
}

/// Max pooling's output with the flat in-plane index (h·W + w, i32) of each maximum.
#[derive(Debug, Clone)]
pub struct MaxPoolOut {
    /// The pooled values.
    pub y: Tensor,
    /// Where each maximum came from, for the backward.
    pub indices: Tensor,
}

/// Device primitives for pooling.
pub(crate) trait PoolKernels {
    /// Max pooling into `y` and `idx`.
    fn maxpool(&self, x: &Tensor, p: &Pool2d, y: &Tensor, idx: &Tensor) -> Result<()>;
    /// Routes `g` to the recorded maxima.
    fn maxpool_backward(&self, g: &Tensor, idx: &Tensor, p: &Pool2d, gx: &Tensor) -> Result<()>;
    /// Average pooling (divisor: the whole window when `incl`, else its in-bounds part).
    fn avgpool(&self, x: &Tensor, p: &Pool2d, incl: bool, y: &Tensor) -> Result<()>;
    /// Average pooling's backward.
    fn avgpool_backward(&self, g: &Tensor, p: &Pool2d, incl: bool, gx: &Tensor) -> Result<()>;
    /// Global average pooling's backward: `gx[p, :] = g[p] / HW`.
    fn gap_backward(&self, g: &Tensor, gx: &Tensor) -> Result<()>;
}

fn nchw(x: &Tensor, op: &str) -> Result<[usize; 4]> {
    x.expect_dtype(DType::F32, op)?;
    if x.numel() > i32::MAX as usize {
        return Err(Error::Limit(format!(
            "{op}: {} elements exceed the 2^31-1 per-op limit",
            x.numel()
        )));
    }
    match *x.shape() {
        [n, c, h, w] => Ok([n, c, h, w]),
        _ => Err(Error::Shape(format!(
            "{op}: expected an N×C×H×W input, got {:?}",
            x.shape()
        ))),
    }
}

/// Max pooling; the indices feed [`max_pool2d_backward`].
pub fn max_pool2d(x: &Tensor, p: Pool2d) -> Result<MaxPoolOut> {
    let [n, c, h, w] = nchw(x, "max_pool2d")?;
    let (oh, ow) = p.out_hw(h, w, "max_pool2d")?;
    let y = Tensor::empty(x.device(), &[n, c, oh, ow], DType::F32)?;
    let indices = Tensor::empty(x.device(), &[n, c, oh, ow], DType::I32)?;
    if y.numel() > 0 {
        x.device().backend().maxpool(x, &p, &y, &indices)?;
    }
    Ok(MaxPoolOut { y, indices })
}

/// The input gradient of max pooling: each output gradient goes to its window's (first) maximum.
pub fn max_pool2d_backward(
    grad: &Tensor,
    out: &MaxPoolOut,
    input_shape: &[usize],
    p: Pool2d,
) -> Result<Tensor> {
    let [n, c, h, w] = match *input_shape {
        [n, c, h, w] => [n, c, h, w],
        _ => {
            return Err(Error::Shape(format!(
                "max_pool2d_backward: input shape {input_shape:?} is not N×C×H×W"
            )));
        }
    };
    let (oh, ow) = p.out_hw(h, w, "max_pool2d_backward")?;
    if grad.shape() != [n, c, oh, ow] || out.indices.shape() != grad.shape() {
        return Err(Error::Shape(format!(
            "max_pool2d_backward: gradient {:?} does not match output [{n}, {c}, {oh}, {ow}]",
            grad.shape()
        )));
    }
    grad.expect_dtype(DType::F32, "max_pool2d_backward")?;
    let gx = Tensor::empty(grad.device(), input_shape, DType::F32)?;
    if gx.numel() > 0 {
        grad.device()
            .backend()
            .maxpool_backward(grad, &out.indices, &p, &gx)?;
    }
    Ok(gx)
}

/// Average pooling; `count_include_pad` divides by the whole window, else by its in-bounds part.
pub fn avg_pool2d(x: &Tensor, p: Pool2d, count_include_pad: bool) -> Result<Tensor> {
    let [n, c, h, w] = nchw(x, "avg_pool2d")?;
    let (oh, ow) = p.out_hw(h, w, "avg_pool2d")?;
    let y = Tensor::empty(x.device(), &[n, c, oh, ow], DType::F32)?;
    if y.numel() > 0 {
        x.device().backend().avgpool(x, &p, count_include_pad, &y)?;
    }
    Ok(y)
}

/// The input gradient of [`avg_pool2d`].
pub fn avg_pool2d_backward(
    grad: &Tensor,
    input_shape: &[usize],
    p: Pool2d,
    count_include_pad: bool,
) -> Result<Tensor> {
    let [n, c, h, w] = match *input_shape {
        [n, c, h, w] => [n, c, h, w],
        _ => {
            return Err(Error::Shape(format!(
                "avg_pool2d_backward: input shape {input_shape:?} is not N×C×H×W"
            )));
        }
    };
    let (oh, ow) = p.out_hw(h, w, "avg_pool2d_backward")?;
    if grad.shape() != [n, c, oh, ow] {
        return Err(Error::Shape(format!(
            "avg_pool2d_backward: gradient {:?} does not match output [{n}, {c}, {oh}, {ow}]",
            grad.shape()
        )));
    }
    grad.expect_dtype(DType::F32, "avg_pool2d_backward")?;
    let gx = Tensor::empty(grad.device(), input_shape, DType::F32)?;
    if gx.numel() > 0 {
        grad.device()
            .backend()
            .avgpool_backward(grad, &p, count_include_pad, &gx)?;
    }
    Ok(gx)
}

/// The mean of each plane: N×C×H×W → N×C×1×1.
pub fn global_avg_pool2d(x: &Tensor) -> Result<Tensor> {
    nchw(x, "global_avg_pool2d")?;
    mean(x, Some(&[2, 3]), true)
}

/// The input gradient of [`global_avg_pool2d`].
pub fn global_avg_pool2d_backward(grad: &Tensor, input_shape: &[usize]) -> Result<Tensor> {
    let [n, c, _, _] = match *input_shape {
        [n, c, h, w] => [n, c, h, w],
        _ => {
            return Err(Error::Shape(format!(
                "global_avg_pool2d_backward: input shape {input_shape:?} is not N×C×H×W"
            )));
        }
    };
    if grad.numel() != n * c {
        return Err(Error::Shape(format!(
            "global_avg_pool2d_backward: gradient {:?} does not match [{n}, {c}, 1, 1]",
            grad.shape()
        )));
    }
    grad.expect_dtype(DType::F32, "global_avg_pool2d_backward")?;
    let gx = Tensor::empty(grad.device(), input_shape, DType::F32)?;
    if gx.numel() > 0 {
        grad.device().backend().gap_backward(grad, &gx)?;
    }
    Ok(gx)
}

fn geometry(x_shape: &[usize], y_shape: &[usize]) -> [i32; 5] {
    [
        x_shape[0] * x_shape[1],
        x_shape[2],
        x_shape[3],
        y_shape[2],
        y_shape[3],
    ]
    .map(|v| v as i32)
}

impl ClDevice {
    #[allow(clippy::too_many_arguments)]
    fn pool_launch(
        &self,
        name: &str,
        geo: [i32; 5],
        p: &Pool2d,
        incl: Option<bool>,
        bufs: &[&Tensor],
        range: [usize; 3],
    ) -> Result<()> {
        let (range, local, capped) = grid_3d(self, range);
        let k = self.kernel("pool", &grid_defines(&Defines::new(), capped), name)?;
        let mut args: Vec<Arg> = geo
            .iter()
            .chain(p.args().iter())
            .map(|&v| Arg::I32(v))
            .collect();
        if let Some(i) = incl {
            args.push(Arg::I32(i32::from(i)));
        }
        args.extend(bufs.iter().map(|t| Arg::Mem(t.storage())));
        self.launch(&k, &args, &range, Some(&local))?;
        Ok(())
    }
}

impl PoolKernels for ClDevice {
    fn maxpool(&self, x: &Tensor, p: &Pool2d, y: &Tensor, idx: &Tensor) -> Result<()> {
        let g = geometry(x.shape(), y.shape());
        self.pool_launch(
            "maxpool_fwd",
            g,
            p,
            None,
            &[x, y, idx],
            [g[4] as usize, g[3] as usize, g[0] as usize],
        )
    }
    fn maxpool_backward(&self, g: &Tensor, idx: &Tensor, p: &Pool2d, gx: &Tensor) -> Result<()> {
        let geo = geometry(gx.shape(), g.shape());
        self.pool_launch(
            "maxpool_bwd",
            geo,
            p,
            None,
            &[g, idx, gx],
            [geo[2] as usize, geo[1] as usize, geo[0] as usize],
        )
    }
    fn avgpool(&self, x: &Tensor, p: &Pool2d, incl: bool, y: &Tensor) -> Result<()> {
        let g = geometry(x.shape(), y.shape());
        self.pool_launch(
            "avgpool_fwd",
            g,
            p,
            Some(incl),
            &[x, y],
            [g[4] as usize, g[3] as usize, g[0] as usize],
        )
    }
    fn avgpool_backward(&self, g: &Tensor, p: &Pool2d, incl: bool, gx: &Tensor) -> Result<()> {
        let geo = geometry(gx.shape(), g.shape());
        self.pool_launch(
            "avgpool_bwd",
            geo,
            p,
            Some(incl),
            &[g, gx],
            [geo[2] as usize, geo[1] as usize, geo[0] as usize],
        )
    }
    fn gap_backward(&self, g: &Tensor, gx: &Tensor) -> Result<()> {
        let k = self.kernel("pool", &Defines::new(), "gap_bwd")?;
        let n = gx.numel();
        let hw = gx.shape()[2] * gx.shape()[3];
        let args = [
            Arg::I32(n as i32),
            Arg::I32(hw as i32),
            Arg::F32(1.0 / hw as f32),
            Arg::Mem(g.storage()),
            Arg::Mem(gx.storage()),
        ];
        self.launch(
            &k,
            &args,
            &[n],
            Some(&[256.min(self.info.max_work_group_size.max(1))]),
        )?;
        Ok(())
    }
}

/// Reference window walk: calls `f(o, in_index)` for every in-bounds element of every output window.
fn windows(
    x_shape: &[usize],
    y_shape: &[usize],
    p: &Pool2d,
    mut f: impl FnMut(usize, usize, usize),
) {
    let (planes, h, w, oh, ow) = (
        x_shape[0] * x_shape[1],
        x_shape[2],
        x_shape[3],
        y_shape[2],
        y_shape[3],
    );
    for pl in 0..planes {
        for a in 0..oh {
            for b in 0..ow {
                let o = (pl * oh + a) * ow + b;
                for i in 0..p.kernel.0 {
                    let hh = (a * p.stride.0 + i) as isize - p.padding.0 as isize;
                    if hh < 0 || hh >= h as isize {
                        continue;
                    }
                    for j in 0..p.kernel.1 {
                        let ww = (b * p.stride.1 + j) as isize - p.padding.1 as isize;
                        if ww < 0 || ww >= w as isize {
                            continue;
                        }
                        f(o, pl * h * w, hh as usize * w + ww as usize);
                    }
                }
            }
        }
    }
}

fn window_counts(x_shape: &[usize], y_shape: &[usize], p: &Pool2d, incl: bool) -> Vec<f32> {
    let mut cnt = vec![0f32; y_shape.iter().product()];
    windows(x_shape, y_shape, p, |o, _, _| cnt[o] += 1.0);
    if incl {
        cnt.fill((p.kernel.0 * p.kernel.1) as f32);
    }
    cnt
}

impl PoolKernels for CpuDevice {
    fn maxpool(&self, x: &Tensor, p: &Pool2d, y: &Tensor, idx: &Tensor) -> Result<()> {
        let xs = x.to_vec::<f32>()?;
        let mut best = vec![f32::NEG_INFINITY; y.numel()];
        let mut bi = vec![-1i32; y.numel()];
        windows(x.shape(), y.shape(), p, |o, base, k| {
            let v = xs[base + k];
            if bi[o] < 0 || v > best[o] || (v.is_nan() && !best[o].is_nan()) {
                best[o] = v;
                bi[o] = k as i32;
            }
        });
        y.device()
            .backend()
            .write(y.storage(), 0, bytemuck::cast_slice(&best))?;
        idx.device()
            .backend()
            .write(idx.storage(), 0, bytemuck::cast_slice(&bi))
    }
    fn maxpool_backward(&self, g: &Tensor, idx: &Tensor, _p: &Pool2d, gx: &Tensor) -> Result<()> {
        let (gs, is) = (g.to_vec::<f32>()?, idx.to_vec::<i32>()?);
        let s = gx.shape();
        let (hw, ohw) = (s[2] * s[3], g.shape()[2] * g.shape()[3]);
        let mut out = vec![0f32; gx.numel()];
        for (o, (&gv, &i)) in gs.iter().zip(&is).enumerate() {
            if i >= 0 {
                out[(o / ohw) * hw + i as usize] += gv;
            }
        }
        gx.device()
            .backend()
            .write(gx.storage(), 0, bytemuck::cast_slice(&out))
    }
    fn avgpool(&self, x: &Tensor, p: &Pool2d, incl: bool, y: &Tensor) -> Result<()> {
        let xs = x.to_vec::<f32>()?;
        let mut acc = vec![0f64; y.numel()];
        windows(x.shape(), y.shape(), p, |o, base, k| {
            acc[o] += xs[base + k] as f64
        });
        let cnt = window_counts(x.shape(), y.shape(), p, incl);
        let out: Vec<f32> = acc
            .iter()
            .zip(&cnt)
            .map(|(a, c)| (*a / *c as f64) as f32)
            .collect();
        y.device()
            .backend()
            .write(y.storage(), 0, bytemuck::cast_slice(&out))
    }
    fn avgpool_backward(&self, g: &Tensor, p: &Pool2d, incl: bool, gx: &Tensor) -> Result<()> {
        let gs = g.to_vec::<f32>()?;
        let cnt = window_counts(gx.shape(), g.shape(), p, incl);
        let mut out = vec![0f64; gx.numel()];
        windows(gx.shape(), g.shape(), p, |o, base, k| {
            out[base + k] += gs[o] as f64 / cnt[o] as f64
        });
        let out: Vec<f32> = out.into_iter().map(|v| v as f32).collect();
        gx.device()
            .backend()
            .write(gx.storage(), 0, bytemuck::cast_slice(&out))
    }
    fn gap_backward(&self, g: &Tensor, gx: &Tensor) -> Result<()> {
        let hw = gx.shape()[2] * gx.shape()[3];
        crate::backend::cpu::host::map_f32(&[g], gx, |ins, o| {
            for (i, v) in o.iter_mut().enumerate() {
                *v = ins[0][i / hw] / hw as f32;
            }
        })
    }
}
