//! Reference pooling in plain Rust (f64 accumulation).

use crate::backend::cpu::CpuDevice;
use crate::backend::cpu::host::{read_f32, write_f32, write_pod};
use crate::contract::PoolKernels;
use crate::contract::pool::Pool2d;
use crate::error::Result;
use crate::tensor::Tensor;

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
        let xs = read_f32(x)?;
        let mut best = crate::tensor::host_vec(y.numel(), f32::NEG_INFINITY)?;
        let mut bi = crate::tensor::host_vec(y.numel(), -1i32)?;
        windows(x.shape(), y.shape(), p, |o, base, k| {
            let v = xs[base + k];
            if bi[o] < 0 || v > best[o] || (v.is_nan() && !best[o].is_nan()) {
                best[o] = v;
                bi[o] = k as i32;
            }
        });
        write_f32(y, &best)?;
        write_pod(idx, &bi)
    }
    fn maxpool_backward(&self, g: &Tensor, idx: &Tensor, _p: &Pool2d, gx: &Tensor) -> Result<()> {
        let (gs, is) = (read_f32(g)?, idx.to_vec::<i32>()?);
        let s = gx.shape();
        let (hw, ohw) = (s[2] * s[3], g.shape()[2] * g.shape()[3]);
        let mut out = crate::tensor::host_vec(gx.numel(), 0f32)?;
        for (o, (&gv, &i)) in gs.iter().zip(&is).enumerate() {
            if i >= 0 {
                out[(o / ohw) * hw + i as usize] += gv;
            }
        }
        write_f32(gx, &out)
    }
    fn avgpool(&self, x: &Tensor, p: &Pool2d, incl: bool, y: &Tensor) -> Result<()> {
        let xs = read_f32(x)?;
        let mut acc = crate::tensor::host_vec(y.numel(), 0f64)?;
        windows(x.shape(), y.shape(), p, |o, base, k| {
            acc[o] += xs[base + k] as f64
        });
        let cnt = window_counts(x.shape(), y.shape(), p, incl);
        let out: Vec<f32> = acc
            .iter()
            .zip(&cnt)
            .map(|(a, c)| (*a / *c as f64) as f32)
            .collect();
        write_f32(y, &out)
    }
    fn avgpool_backward(&self, g: &Tensor, p: &Pool2d, incl: bool, gx: &Tensor) -> Result<()> {
        let gs = read_f32(g)?;
        let cnt = window_counts(gx.shape(), g.shape(), p, incl);
        let mut out = crate::tensor::host_vec(gx.numel(), 0f64)?;
        windows(gx.shape(), g.shape(), p, |o, base, k| {
            out[base + k] += gs[o] as f64 / cnt[o] as f64
        });
        let out: Vec<f32> = out.into_iter().map(|v| v as f32).collect();
        write_f32(gx, &out)
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
