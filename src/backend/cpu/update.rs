//! In-place updates on the built-in device.

use crate::backend::cpu::{CpuDevice, access as cpu_access};
use crate::contract::update::{Step, UpdateKernels};
use crate::error::Result;
use crate::tensor::Tensor;

fn f32s(w: &[u32], n: usize) -> &[f32] {
    &bytemuck::cast_slice(w)[..n]
}
fn f32s_mut(w: &mut [u32], n: usize) -> &mut [f32] {
    &mut bytemuck::cast_slice_mut(w)[..n]
}

impl UpdateKernels for CpuDevice {
    fn update(&self, step: &Step, p: &Tensor, g: &Tensor, state: &[&Tensor]) -> Result<()> {
        let n = p.numel();
        let mut pw = cpu_access::write(p)?;
        let gw = cpu_access::read(g)?;
        let mut s0 = cpu_access::write(state[0])?;
        let pv = f32s_mut(&mut pw, n);
        let gv = f32s(&gw, n);
        match *step {
            Step::Sgd {
                lr,
                wd,
                momentum,
                nesterov,
            } => {
                let v = f32s_mut(&mut s0, n);
                for i in 0..n {
                    let mut gi = gv[i] + wd * pv[i];
                    if momentum != 0.0 {
                        v[i] = momentum * v[i] + gi;
                        gi = if nesterov { gi + momentum * v[i] } else { v[i] };
                    }
                    pv[i] -= lr * gi;
                }
            }
            Step::Adam {
                lr,
                b1,
                b2,
                eps,
                wd,
                decoupled,
                bc1,
                bc2,
            } => {
                let mut s1 = cpu_access::write(state[1])?;
                let m = f32s_mut(&mut s0, n);
                let v = f32s_mut(&mut s1, n);
                for i in 0..n {
                    let mut gi = gv[i];
                    if decoupled {
                        pv[i] -= lr * wd * pv[i];
                    } else {
                        gi += wd * pv[i];
                    }
                    m[i] = b1 * m[i] + (1.0 - b1) * gi;
                    v[i] = b2 * v[i] + (1.0 - b2) * gi * gi;
                    pv[i] -= lr * (m[i] / bc1) / ((v[i] / bc2).sqrt() + eps);
                }
            }
            Step::RmsProp {
                lr,
                alpha,
                eps,
                wd,
                momentum,
            } => {
                let mut s1 = cpu_access::write(state[1])?;
                let s = f32s_mut(&mut s0, n);
                let b = f32s_mut(&mut s1, n);
                for i in 0..n {
                    let gi = gv[i] + wd * pv[i];
                    s[i] = alpha * s[i] + (1.0 - alpha) * gi * gi;
                    let st = gi / (s[i].sqrt() + eps);
                    if momentum != 0.0 {
                        b[i] = momentum * b[i] + lr * st;
                        pv[i] -= b[i];
                    } else {
                        pv[i] -= lr * st;
                    }
                }
            }
        }
        Ok(())
    }

    fn ema(&self, d: f32, shadow: &Tensor, p: &Tensor) -> Result<()> {
        let n = p.numel();
        let mut sw = cpu_access::write(shadow)?;
        let pw = cpu_access::read(p)?;
        for (s, &x) in f32s_mut(&mut sw, n).iter_mut().zip(f32s(&pw, n)) {
            *s = d * *s + (1.0 - d) * x;
        }
        Ok(())
    }

    fn scale_inplace(&self, s: f32, x: &Tensor) -> Result<()> {
        let n = x.numel();
        let mut w = cpu_access::write(x)?;
        f32s_mut(&mut w, n).iter_mut().for_each(|v| *v *= s);
        Ok(())
    }
}
