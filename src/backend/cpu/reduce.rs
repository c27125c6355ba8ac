//! Reference reductions in plain Rust (f64 accumulation).

use crate::backend::cpu::CpuDevice;
use crate::contract::ReduceKernels;
use crate::contract::reduce::{Ori, ReduceOp, ReducePass, ToShape};
use crate::device::Device;
use crate::error::Result;
use crate::tensor::Tensor;

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
    fn reduce_pass(&self, _device: &Device, p: ReducePass<'_>) -> Result<()> {
        let (op, first, v, scale, x, out, out_off, _) = p.parts();
        // `out` may be a slot buffer written in several calls: read it first, then write it back whole.
        let mut cur = out.to_vec::<f32>()?;
        let xs = x.to_f32_vec()?;
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
        let xs = x.to_f32_vec()?;
        let mut res = crate::tensor::host_vec(v.o * v.i, 0i32)?;
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

    fn reduce_to_shape(&self, _device: &Device, r: ToShape<'_>) -> Result<()> {
        let (grad, out, plan, _) = r.parts();
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
