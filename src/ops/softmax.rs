//! softmax and log_softmax over any axis with their backward, and the fused cross-entropy from logits and
//! integer labels.
//!
//! Both run over the view [O, R, I] (R the softmax axis). Rows (I = 1) choose by autotune between one
//! work-group per row holding the row in registers (read once, written once; rows of a multiple of 4), one
//! work-group per row with local-memory trees (GPUs) and one work-item per row without barriers (CPU
//! OpenCL); other axes run one work-item per (o, i), coalesced across i.

use serde::Serialize;

use crate::autotune::{self, bucket, shape_key};
use crate::backend::cpu::CpuDevice;
use crate::backend::opencl::ClDevice;
use crate::backend::opencl::program::Defines;
use crate::backend::opencl::{Arg, events_ms};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

use super::reduce::{Ori, normalize_axes};

/// A softmax row algorithm; its autotune cache form is `["reg", local, k]`, `["wg", local]` or `"serial"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SoftmaxAlgo {
    /// One work-group of `local` items per row, each holding `k` float4 of the row in registers (forward
    /// only; needs R a multiple of 4 and R ≤ 4·k·local; the backward runs it as `Wg(local)`).
    Reg(usize, usize),
    /// One work-group of `local` items per row.
    Wg(usize),
    /// One work-item per row.
    Serial,
}

impl Serialize for SoftmaxAlgo {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match *self {
            SoftmaxAlgo::Reg(l, k) => ("reg", l, k).serialize(s),
            SoftmaxAlgo::Wg(l) => ("wg", l).serialize(s),
            SoftmaxAlgo::Serial => "serial".serialize(s),
        }
    }
}

/// Device primitives for softmax and cross-entropy.
pub(crate) trait SoftmaxKernels {
    /// `y = (log_)softmax(x)` over R of the view.
    fn softmax(
        &self,
        device: &Device,
        log: bool,
        v: Ori,
        x: &Tensor,
        y: &Tensor,
        algo: Option<SoftmaxAlgo>,
    ) -> Result<()>;
    /// The input gradient from the forward output `y` and the output gradient `g`.
    #[allow(clippy::too_many_arguments)]
    fn softmax_backward(
        &self,
        device: &Device,
        log: bool,
        v: Ori,
        y: &Tensor,
        g: &Tensor,
        gx: &Tensor,
        algo: Option<SoftmaxAlgo>,
    ) -> Result<()>;
    /// Writes `stats = [mean loss, count, first bad row or -1]`.
    fn cross_entropy(
        &self,
        logits: &Tensor,
        labels: &Tensor,
        ignore: i32,
        stats: &Tensor,
    ) -> Result<()>;
    /// The logits' gradient given `stats` from the forward and the scalar output gradient `gout`.
    fn cross_entropy_backward(
        &self,
        logits: &Tensor,
        labels: &Tensor,
        ignore: i32,
        stats: &Tensor,
        gout: &Tensor,
        gx: &Tensor,
    ) -> Result<()>;
}

fn view(x: &Tensor, axis: isize, op: &str) -> Result<Ori> {
    x.expect_dtype(DType::F32, op)?;
    if x.numel() > i32::MAX as usize {
        return Err(Error::Limit(format!(
            "{op}: {} elements exceed the 2^31-1 per-op limit",
            x.numel()
        )));
    }
    let shape = x.shape();
    if shape.is_empty() {
        return Ok(Ori { o: 1, r: 1, i: 1 });
    }
    let a = normalize_axes(Some(&[axis]), shape.len(), op)?[0];
    Ok(Ori {
        o: shape[..a].iter().product(),
        r: shape[a],
        i: shape[a + 1..].iter().product(),
    })
}

fn forward(log: bool, x: &Tensor, axis: isize, algo: Option<SoftmaxAlgo>) -> Result<Tensor> {
    let name = if log { "log_softmax" } else { "softmax" };
    let v = view(x, axis, name)?;
    let y = Tensor::empty(x.device(), x.shape(), DType::F32)?;
    if y.numel() > 0 {
        x.device()
            .backend()
            .softmax(x.device(), log, v, x, &y, algo)?;
    }
    Ok(y)
}

fn backward(
    log: bool,
    y: &Tensor,
    g: &Tensor,
    axis: isize,
    algo: Option<SoftmaxAlgo>,
) -> Result<Tensor> {
    let name = if log {
        "log_softmax_backward"
    } else {
        "softmax_backward"
    };
    let v = view(y, axis, name)?;
    y.same_device(&[g], name)?;
    g.expect_dtype(DType::F32, name)?;
    if g.shape() != y.shape() {
        return Err(Error::Shape(format!(
            "{name}: gradient shape {:?} differs from output shape {:?}",
            g.shape(),
            y.shape()
        )));
    }
    let gx = Tensor::empty(y.device(), y.shape(), DType::F32)?;
    if gx.numel() > 0 {
        y.device()
            .backend()
            .softmax_backward(y.device(), log, v, y, g, &gx, algo)?;
    }
    Ok(gx)
}

/// `exp(x − max) / Σ exp(x − max)` along `axis` (negative counts from the end).
pub fn softmax(x: &Tensor, axis: isize) -> Result<Tensor> {
    forward(false, x, axis, None)
}
/// `x − max − log Σ exp(x − max)` along `axis`.
pub fn log_softmax(x: &Tensor, axis: isize) -> Result<Tensor> {
    forward(true, x, axis, None)
}
/// [`softmax`] (or [`log_softmax`] when `log`) with the row algorithm forced when given.
pub fn softmax_with(
    x: &Tensor,
    axis: isize,
    log: bool,
    algo: Option<SoftmaxAlgo>,
) -> Result<Tensor> {
    forward(log, x, axis, algo)
}
/// The softmax input gradient `y·(g − Σ g·y)` from the output `y` and output gradient `grad`.
pub fn softmax_backward(y: &Tensor, grad: &Tensor, axis: isize) -> Result<Tensor> {
    backward(false, y, grad, axis, None)
}
/// The log_softmax input gradient `g − e^y·Σ g` from the output `y` and output gradient `grad`.
pub fn log_softmax_backward(y: &Tensor, grad: &Tensor, axis: isize) -> Result<Tensor> {
    backward(true, y, grad, axis, None)
}
/// Either backward with the row algorithm forced when given.
pub fn softmax_backward_with(
    y: &Tensor,
    grad: &Tensor,
    axis: isize,
    log: bool,
    algo: Option<SoftmaxAlgo>,
) -> Result<Tensor> {
    backward(log, y, grad, axis, algo)
}

fn check_ce(logits: &Tensor, labels: &Tensor) -> Result<()> {
    logits.same_device(&[labels], "cross_entropy")?;
    logits.expect_dtype(DType::F32, "cross_entropy")?;
    labels.expect_dtype(DType::I32, "cross_entropy labels")?;
    let s = logits.shape();
    if s.len() != 2 || labels.shape() != [s[0]] {
        return Err(Error::Shape(format!(
            "cross_entropy: logits must be [N, C] and labels [N]; got logits {s:?} and labels {:?}",
            labels.shape()
        )));
    }
    if logits.numel() > i32::MAX as usize {
        return Err(Error::Limit(format!(
            "cross_entropy: {} logits exceed the 2^31-1 per-op limit",
            logits.numel()
        )));
    }
    Ok(())
}

fn ce_stats(logits: &Tensor, labels: &Tensor, ignore_index: i32) -> Result<Tensor> {
    check_ce(logits, labels)?;
    let dev = logits.device();
    let stats = Tensor::empty(dev, &[3], DType::F32)?;
    dev.backend()
        .cross_entropy(logits, labels, ignore_index, &stats)?;
    let s = stats.to_vec::<f32>()?;
    if s[2] >= 0.0 {
        let row = s[2] as usize;
        let lab = labels.to_vec::<i32>()?.get(row).copied().unwrap_or(0);
        return Err(Error::Invalid(format!(
            "cross_entropy: label {lab} of row {row} is outside [0, {}) and is not ignore_index {ignore_index}",
            logits.shape()[1]
        )));
    }
    Ok(stats)
}

/// The mean over non-ignored rows of `log Σ e^x − x[label]`, from logits [N, C] and i32 labels [N]; rows whose
/// label is `ignore_index` are skipped (all ignored gives NaN). A label outside [0, C) is an error.
pub fn cross_entropy(logits: &Tensor, labels: &Tensor, ignore_index: i32) -> Result<Tensor> {
    let stats = ce_stats(logits, labels, ignore_index)?;
    first_element(&stats)
}

fn first_element(s: &Tensor) -> Result<Tensor> {
    let out = Tensor::empty(s.device(), &[], DType::F32)?;
    s.device().backend().copy(s.storage(), out.storage(), 4)?;
    Ok(out)
}

/// The logits' gradient of [`cross_entropy`] times the scalar output gradient `grad`:
/// `(softmax(x) − onehot(label))·grad / count` on counted rows, 0 on ignored rows.
pub fn cross_entropy_backward(
    logits: &Tensor,
    labels: &Tensor,
    grad: &Tensor,
    ignore_index: i32,
) -> Result<Tensor> {
    let stats = ce_stats(logits, labels, ignore_index)?;
    logits.same_device(&[grad], "cross_entropy_backward")?;
    grad.expect_dtype(DType::F32, "cross_entropy_backward")?;
    if grad.numel() != 1 {
        return Err(Error::Shape(format!(
            "cross_entropy_backward: the output gradient must be a scalar, got {:?}",
            grad.shape()
        )));
    }
    let gx = Tensor::empty(logits.device(), logits.shape(), DType::F32)?;
    if gx.numel() > 0 {
        logits.device().backend().cross_entropy_backward(
            logits,
            labels,
            ignore_index,
            &stats,
            grad,
            &gx,
        )?;
    }
    Ok(gx)
}

impl ClDevice {
    fn softmax_algo(
        &self,
        device: &Device,
        v: Ori,
        forced: Option<SoftmaxAlgo>,
        bwd: bool,
        mut bench: impl FnMut(SoftmaxAlgo) -> Result<f64>,
    ) -> Result<SoftmaxAlgo> {
        if v.i > 1 {
            return Ok(SoftmaxAlgo::Serial);
        }
        let max_wg = self.info.max_work_group_size.max(1);
        if let Some(a) = forced {
            let ok = match a {
                SoftmaxAlgo::Reg(l, k) => {
                    bwd || (l.is_power_of_two()
                        && l <= max_wg
                        && (1..=16).contains(&k)
                        && v.r.is_multiple_of(4)
                        && v.r <= 4 * k * l)
                }
                SoftmaxAlgo::Wg(l) => l.is_power_of_two() && l <= max_wg,
                SoftmaxAlgo::Serial => true,
            };
            if !ok {
                return Err(Error::Invalid(format!(
                    "softmax: algorithm {a:?} does not fit rows of {} on this device (reg needs a power-of-two local size up to {max_wg}, 1 ≤ k ≤ 16, rows a multiple of 4 and at most 4·k·local)",
                    v.r
                )));
            }
            return Ok(a);
        }
        let mut cands: Vec<SoftmaxAlgo> = Vec::new();
        if !bwd && v.r.is_multiple_of(4) {
            // Rows in registers: at most 16 float4 per work-item, and no more work-items than float4 columns.
            let r4 = v.r / 4;
            for l in [128usize, 256, 512, 1024] {
                let k = r4.div_ceil(l);
                if l <= max_wg && k <= 16 && (l == 128 || l <= r4) {
                    cands.push(SoftmaxAlgo::Reg(l, k));
                }
            }
        }
        cands.extend(
            [64usize, 128, 256]
                .into_iter()
                .filter(|&l| l <= max_wg)
                .map(SoftmaxAlgo::Wg),
        );
        cands.push(SoftmaxAlgo::Serial);
        let default = if self.info.kind == "cpu" {
            cands.len() - 1
        } else if let Some(i) = cands
            .iter()
            .position(|a| matches!(a, SoftmaxAlgo::Reg(256, _)))
        {
            i
        } else {
            cands.len().saturating_sub(2)
        };
        // The key keeps R's multiple-of-4 bit: rows in registers are a candidate only then.
        let key = shape_key(&[bucket(v.o), bucket(v.r), i64::from(v.r.is_multiple_of(4))]);
        let kernel = if bwd { "softmax_backward" } else { "softmax" };
        autotune::tune(device, kernel, &key, &cands, default, |c| bench(*c))
    }

    fn run_softmax(
        &self,
        log: bool,
        v: Ori,
        x: &Tensor,
        y: &Tensor,
        algo: SoftmaxAlgo,
    ) -> Result<crate::backend::opencl::Event> {
        let d = Defines::new().set("LOG", u8::from(log));
        if v.i > 1 {
            let k = self.kernel("softmax", &d, "sm_col")?;
            let args = [
                Arg::I32(v.o as i32),
                Arg::I32(v.r as i32),
                Arg::I32(v.i as i32),
                Arg::Mem(x.storage()),
                Arg::Mem(y.storage()),
            ];
            return self.launch(
                &k,
                &args,
                &[v.o * v.i],
                Some(&[64.min(self.info.max_work_group_size.max(1))]),
            );
        }
        match algo {
            SoftmaxAlgo::Reg(l, _) | SoftmaxAlgo::Wg(l) => {
                let k = match algo {
                    SoftmaxAlgo::Reg(_, kk) => {
                        self.kernel("softmax", &d.set("SM_K", kk), "sm_row_reg")?
                    }
                    _ => self.kernel("softmax", &d, "sm_row_wg")?,
                };
                let args = [
                    Arg::I32(v.r as i32),
                    Arg::Mem(x.storage()),
                    Arg::Mem(y.storage()),
                    Arg::Local(l * 4),
                ];
                self.launch(&k, &args, &[l * v.o], Some(&[l]))
            }
            SoftmaxAlgo::Serial => {
                let k = self.kernel("softmax", &d, "sm_row_serial")?;
                let args = [
                    Arg::I32(v.o as i32),
                    Arg::I32(v.r as i32),
                    Arg::Mem(x.storage()),
                    Arg::Mem(y.storage()),
                ];
                self.launch(&k, &args, &[v.o], None)
            }
        }
    }

    fn run_softmax_bwd(
        &self,
        log: bool,
        v: Ori,
        y: &Tensor,
        g: &Tensor,
        gx: &Tensor,
        algo: SoftmaxAlgo,
    ) -> Result<crate::backend::opencl::Event> {
        let d = Defines::new().set("LOG", u8::from(log));
        if v.i > 1 {
            let k = self.kernel("softmax", &d, "smb_col")?;
            let args = [
                Arg::I32(v.o as i32),
                Arg::I32(v.r as i32),
                Arg::I32(v.i as i32),
                Arg::Mem(y.storage()),
                Arg::Mem(g.storage()),
                Arg::Mem(gx.storage()),
            ];
            return self.launch(
                &k,
                &args,
                &[v.o * v.i],
                Some(&[64.min(self.info.max_work_group_size.max(1))]),
            );
        }
        match algo {
            SoftmaxAlgo::Reg(l, _) | SoftmaxAlgo::Wg(l) => {
                let k = self.kernel("softmax", &d, "smb_row_wg")?;
                let args = [
                    Arg::I32(v.r as i32),
                    Arg::Mem(y.storage()),
                    Arg::Mem(g.storage()),
                    Arg::Mem(gx.storage()),
                    Arg::Local(l * 4),
                ];
                self.launch(&k, &args, &[l * v.o], Some(&[l]))
            }
            SoftmaxAlgo::Serial => {
                let k = self.kernel("softmax", &d, "smb_row_serial")?;
                let args = [
                    Arg::I32(v.o as i32),
                    Arg::I32(v.r as i32),
                    Arg::Mem(y.storage()),
                    Arg::Mem(g.storage()),
                    Arg::Mem(gx.storage()),
                ];
                self.launch(&k, &args, &[v.o], None)
            }
        }
    }
}

impl SoftmaxKernels for ClDevice {
    fn softmax(
        &self,
        device: &Device,
        log: bool,
        v: Ori,
        x: &Tensor,
        y: &Tensor,
        algo: Option<SoftmaxAlgo>,
    ) -> Result<()> {
        let a = self.softmax_algo(device, v, algo, false, |c| {
            events_ms(&[self.run_softmax(log, v, x, y, c)?])
        })?;
        self.run_softmax(log, v, x, y, a)?;
        Ok(())
    }

    fn softmax_backward(
        &self,
        device: &Device,
        log: bool,
        v: Ori,
        y: &Tensor,
        g: &Tensor,
        gx: &Tensor,
        algo: Option<SoftmaxAlgo>,
    ) -> Result<()> {
        let a = self.softmax_algo(device, v, algo, true, |c| {
            events_ms(&[self.run_softmax_bwd(log, v, y, g, gx, c)?])
        })?;
        self.run_softmax_bwd(log, v, y, g, gx, a)?;
        Ok(())
    }

    fn cross_entropy(
        &self,
        logits: &Tensor,
        labels: &Tensor,
        ignore: i32,
        stats: &Tensor,
    ) -> Result<()> {
        let (n, c) = (logits.shape()[0], logits.shape()[1]);
        let dev = logits.device();
        let loss = Tensor::empty(dev, &[n.max(1)], DType::F32)?;
        let valid = Tensor::empty(dev, &[n.max(1)], DType::I32)?;
        let d = Defines::new();
        if n > 0 {
            let k = self.kernel("softmax", &d, "ce_rows")?;
            let args = [
                Arg::I32(n as i32),
                Arg::I32(c as i32),
                Arg::I32(ignore),
                Arg::Mem(logits.storage()),
                Arg::Mem(labels.storage()),
                Arg::Mem(loss.storage()),
                Arg::Mem(valid.storage()),
            ];
            self.launch(
                &k,
                &args,
                &[n],
                Some(&[64.min(self.info.max_work_group_size.max(1))]),
            )?;
        }
        // The largest power of two up to 256 that the device allows in a group.
        let max = self.info.max_work_group_size.clamp(1, 256);
        let l = 1usize << (usize::BITS - 1 - max.leading_zeros());
        let k = self.kernel("softmax", &d, "ce_finish")?;
        let args = [
            Arg::I32(n as i32),
            Arg::Mem(loss.storage()),
            Arg::Mem(valid.storage()),
            Arg::Mem(stats.storage()),
            Arg::Local(l * 4),
            Arg::Local(l * 4),
            Arg::Local(l * 4),
        ];
        self.launch(&k, &args, &[l], Some(&[l]))?;
        Ok(())
    }

    fn cross_entropy_backward(
        &self,
        logits: &Tensor,
        labels: &Tensor,
        ignore: i32,
        stats: &Tensor,
        gout: &Tensor,
        gx: &Tensor,
    ) -> Result<()> {
        let (n, c) = (logits.shape()[0], logits.shape()[1]);
        let k = self.kernel("softmax", &Defines::new(), "ce_bwd")?;
        let args = [
            Arg::I32(n as i32),
            Arg::I32(c as i32),
            Arg::I32(ignore),
            Arg::Mem(logits.storage()),
            Arg::Mem(labels.storage()),
            Arg::Mem(stats.storage()),
            Arg::Mem(gout.storage()),
            Arg::Mem(gx.storage()),
        ];
        self.launch(
            &k,
            &args,
            &[n],
            Some(&[64.min(self.info.max_work_group_size.max(1))]),
        )?;
        Ok(())
    }
}

/// Reference softmax of one strided lane in f64.
fn lane_softmax(
    x: &[f32],
    log: bool,
    idx: impl Fn(usize) -> usize + Copy,
    r: usize,
    out: &mut [f32],
) {
    let m = (0..r)
        .map(|k| x[idx(k)] as f64)
        .fold(f64::NEG_INFINITY, |a, b| {
            if a.is_nan() || b.is_nan() {
                f64::NAN
            } else {
                a.max(b)
            }
        });
    let z: f64 = (0..r).map(|k| (x[idx(k)] as f64 - m).exp()).sum();
    for k in 0..r {
        let v = x[idx(k)] as f64 - m;
        out[idx(k)] = if log { v - z.ln() } else { v.exp() / z } as f32;
    }
}

impl SoftmaxKernels for CpuDevice {
    fn softmax(
        &self,
        _device: &Device,
        log: bool,
        v: Ori,
        x: &Tensor,
        y: &Tensor,
        _algo: Option<SoftmaxAlgo>,
    ) -> Result<()> {
        crate::backend::cpu::host::map_f32(&[x], y, |ins, out| {
            for o in 0..v.o {
                for i in 0..v.i {
                    lane_softmax(ins[0], log, |k| (o * v.r + k) * v.i + i, v.r, out);
                }
            }
        })
    }

    fn softmax_backward(
        &self,
        _device: &Device,
        log: bool,
        v: Ori,
        y: &Tensor,
        g: &Tensor,
        gx: &Tensor,
        _algo: Option<SoftmaxAlgo>,
    ) -> Result<()> {
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

    fn cross_entropy(
        &self,
        logits: &Tensor,
        labels: &Tensor,
        ignore: i32,
        stats: &Tensor,
    ) -> Result<()> {
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
            let m = p.iter().map(|&v| v as f64).fold(f64::NEG_INFINITY, |a, b| {
                if a.is_nan() || b.is_nan() {
                    f64::NAN
                } else {
                    a.max(b)
                }
            });
            let z: f64 = p.iter().map(|&v| (v as f64 - m).exp()).sum();
            sum += z.ln() + m - p[lab as usize] as f64;
            count += 1;
        }
        let s = [(sum / count as f64) as f32, count as f32, bad];
        stats
            .device()
            .backend()
            .write(stats.storage(), 0, bytemuck::cast_slice(&s))
    }

    fn cross_entropy_backward(
        &self,
        logits: &Tensor,
        labels: &Tensor,
        ignore: i32,
        stats: &Tensor,
        gout: &Tensor,
        gx: &Tensor,
    ) -> Result<()> {
        let (n, c) = (logits.shape()[0], logits.shape()[1]);
        let labs = labels.to_vec::<i32>()?;
        let count = stats.to_vec::<f32>()?[1] as f64;
        let g = gout.to_vec::<f32>()?[0] as f64;
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
                let m = p.iter().map(|&v| v as f64).fold(f64::NEG_INFINITY, |a, b| {
                    if a.is_nan() || b.is_nan() {
                        f64::NAN
                    } else {
                        a.max(b)
                    }
                });
                let z: f64 = p.iter().map(|&v| (v as f64 - m).exp()).sum();
                for k in 0..c {
                    let s = (p[k] as f64 - m).exp() / z - if k == lab as usize { 1.0 } else { 0.0 };
                    q[k] = (s * g / count) as f32;
                }
            }
        })
    }
}
