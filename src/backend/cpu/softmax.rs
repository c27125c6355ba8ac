//! Reference softmax and cross-entropy in plain Rust (f64 accumulation).

use crate::backend::cpu::CpuDevice;
use crate::contract::SoftmaxKernels;
use crate::contract::softmax::{CrossEntropy, SoftmaxRows};
use crate::device::Device;
use crate::error::Result;
use crate::tensor::Tensor;

/// The largest of `xs` in f64, NaN if any is NaN.
fn max_f64(xs: impl Iterator<Item = f64>) -> f64 {
    xs.fold(f64::NEG_INFINITY, |a, b| {
        if a.is_nan() || b.is_nan() {
            f64::NAN
        } else {
            a.max(b)
        }
    })
}

/// `(max, Σ e^(x − max))` of a row in f64.
fn row_max_sum(p: &[f32]) -> (f64, f64) {
    let m = max_f64(p.iter().map(|&v| v as f64));
    (m, p.iter().map(|&v| (v as f64 - m).exp()).sum())
}

/// Reference softmax of one strided lane in f64.
fn lane_softmax(
    x: &[f32],
    log: bool,
    idx: impl Fn(usize) -> usize + Copy,
    r: usize,
    out: &mut [f32],
) {
    let m = max_f64((0..r).map(|k| x[idx(k)] as f64));
    let z: f64 = (0..r).map(|k| (x[idx(k)] as f64 - m).exp()).sum();
    for k in 0..r {
        let v = x[idx(k)] as f64 - m;
        out[idx(k)] = if log { v - z.ln() } else { v.exp() / z } as f32;
    }
}

impl SoftmaxKernels for CpuDevice {
    fn softmax(&self, _device: &Device, s: SoftmaxRows<'_>) -> Result<()> {
        let (log, v, x, y, _) = s.parts();
        crate::backend::cpu::host::map_f32(&[x], y, |ins, out| {
            for o in 0..v.o {
                for i in 0..v.i {
                    lane_softmax(ins[0], log, |k| (o * v.r + k) * v.i + i, v.r, out);
                }
            }
        })
    }

    fn softmax_backward(&self, _device: &Device, s: SoftmaxRows<'_>, g: &Tensor) -> Result<()> {
        let (log, v, y, gx, _) = s.parts();
        crate::backend::cpu::host::map_f32(&[y, g], gx, |ins, out| {
            let (ys, gs) = (ins[0], ins[1]);
            for o in 0..v.o {
                for i in 0..v.i {
                    let idx = |k: usize| (o * v.r + k) * v.i + i;
                    let d: f64 = (0..v.r)
                        .map(|k| {
                            if log {
                                gs[idx(k)] as f64
                            } else {
                                gs[idx(k)] as f64 * ys[idx(k)] as f64
                            }
                        })
                        .sum();
                    for k in 0..v.r {
                        let (yv, gv) = (ys[idx(k)] as f64, gs[idx(k)] as f64);
                        out[idx(k)] = if log {
                            gv - yv.exp() * d
                        } else {
                            yv * (gv - d)
                        } as f32;
                    }
                }
            }
        })
    }

    fn cross_entropy(&self, ce: CrossEntropy<'_>) -> Result<()> {
        let (logits, labels, ignore, stats) = ce.parts();
        let (n, c) = (logits.shape()[0], logits.shape()[1]);
        let x = logits.to_vec::<f32>()?;
        let labs = labels.to_vec::<i32>()?;
        let (mut sum, mut count, mut bad) = (0f64, 0usize, -1f32);
        for (row, &lab) in labs.iter().enumerate().take(n) {
            if lab == ignore {
                continue;
            }
            if lab < 0 || lab as usize >= c {
                if bad < 0.0 {
                    bad = row as f32;
                }
                continue;
            }
            let p = &x[row * c..(row + 1) * c];
            let (m, z) = row_max_sum(p);
            sum += z.ln() + m - p[lab as usize] as f64;
            count += 1;
        }
        let s = [(sum / count as f64) as f32, count as f32, bad];
        stats
            .device()
            .backend()
            .write(stats.storage(), 0, bytemuck::cast_slice(&s))
    }

    fn cross_entropy_backward(&self, ce: CrossEntropy<'_>, g: &Tensor, gx: &Tensor) -> Result<()> {
        let (logits, labels, ignore, stats) = ce.parts();
        let (n, c) = (logits.shape()[0], logits.shape()[1]);
        let labs = labels.to_vec::<i32>()?;
        let count = stats.to_vec::<f32>()?[1] as f64;
        let g = g.to_vec::<f32>()?[0] as f64;
        crate::backend::cpu::host::map_f32(&[logits], gx, |ins, out| {
            let x = ins[0];
            for row in 0..n {
                let lab = labs[row];
                let q = &mut out[row * c..(row + 1) * c];
                if lab == ignore || lab < 0 || lab as usize >= c {
                    q.fill(0.0);
                    continue;
                }
                let p = &x[row * c..(row + 1) * c];
                let (m, z) = row_max_sum(p);
                for k in 0..c {
                    let s = (p[k] as f64 - m).exp() / z - if k == lab as usize { 1.0 } else { 0.0 };
                    q[k] = (s * g / count) as f32;
                }
            }
        })
    }
}
