//! In-place updates on the built-in device.

use crate::backend::cpu::{CpuDevice, access as cpu_access, host};
use crate::contract::update::{Step, StepOp, UpdateKernels};
use crate::error::Result;
use crate::tensor::Tensor;

fn f32s(w: &[u32], n: usize) -> &[f32] {
    &bytemuck::cast_slice(w)[..n]
}
fn f32s_mut(w: &mut [u32], n: usize) -> &mut [f32] {
    &mut bytemuck::cast_slice_mut(w)[..n]
}

/// Whether a GradScaler state buffer's found-inf flag is set.
fn flag(state: &Tensor) -> Result<bool> {
    Ok(f32s(&cpu_access::read(state)?, 4)[2] != 0.0)
}

/// Runs `f` on a GradScaler state buffer's four values.
fn with_state(state: &Tensor, f: impl FnOnce(&mut [f32])) -> Result<()> {
    let mut w = cpu_access::write(state)?;
    f(f32s_mut(&mut w, 4));
    Ok(())
}

impl UpdateKernels for CpuDevice {
    fn update(&self, step: &Step, op: StepOp<'_>) -> Result<()> {
        let (p, g, state, skip) = op.parts();
        if let Some(s) = skip
            && flag(s)?
        {
            return Ok(());
        }
        let n = p.numel();
        let mut pw = cpu_access::write(p)?;
        let gw = cpu_access::read(g)?;
        // The step's state buffers `a` and `b`: SGD's velocity in `a` (`b` is empty); Adam's moments m and v;
        // RMSProp's mean square s and momentum buffer b.
        let mut s0 = cpu_access::write(state[0])?;
        let mut s1 = match state.get(1) {
            Some(t) => Some(cpu_access::write(t)?),
            None => None,
        };
        let pv = f32s_mut(&mut pw, n);
        let gv = f32s(&gw, n);
        let a = f32s_mut(&mut s0, n);
        let b = s1
            .as_deref_mut()
            .map(|w| f32s_mut(w, n))
            .unwrap_or_default();
        match *step {
            Step::Sgd {
                lr,
                wd,
                momentum,
                nesterov,
            } => {
                for i in 0..n {
                    let mut gi = gv[i] + wd * pv[i];
                    if momentum != 0.0 {
                        a[i] = momentum * a[i] + gi;
                        gi = if nesterov { gi + momentum * a[i] } else { a[i] };
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
                for i in 0..n {
                    let mut gi = gv[i];
                    if decoupled {
                        pv[i] -= lr * wd * pv[i];
                    } else {
                        gi += wd * pv[i];
                    }
                    a[i] = b1 * a[i] + (1.0 - b1) * gi;
                    b[i] = b2 * b[i] + (1.0 - b2) * gi * gi;
                    pv[i] -= lr * (a[i] / bc1) / ((b[i] / bc2).sqrt() + eps);
                }
            }
            Step::RmsProp {
                lr,
                alpha,
                eps,
                wd,
                momentum,
            } => {
                for i in 0..n {
                    let gi = gv[i] + wd * pv[i];
                    a[i] = alpha * a[i] + (1.0 - alpha) * gi * gi;
                    let st = gi / (a[i].sqrt() + eps);
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

    fn amp_begin(&self, state: &Tensor) -> Result<()> {
        with_state(state, |s| {
            s[2] = 0.0;
            s[3] = 1.0 / s[0];
        })
    }

    fn amp_unscale(&self, g: &Tensor, state: &Tensor) -> Result<()> {
        let inv = f32s(&cpu_access::read(state)?, 4)[3];
        let mut v = host::read_f32(g)?;
        let mut bad = false;
        for x in &mut v {
            *x *= inv;
            bad |= !x.is_finite();
        }
        host::write_f32(g, &v)?;
        if bad {
            with_state(state, |s| s[2] = 1.0)?;
        }
        Ok(())
    }

    fn amp_scale(&self, x: &Tensor, state: &Tensor, out: &Tensor) -> Result<()> {
        let scale = f32s(&cpu_access::read(state)?, 4)[0];
        let v: Vec<f32> = host::read_f32(x)?.into_iter().map(|x| x * scale).collect();
        host::write_f32(out, &v)
    }

    fn amp_update(&self, growth: f32, backoff: f32, interval: i32, state: &Tensor) -> Result<()> {
        with_state(state, |s| {
            if s[2] != 0.0 {
                s[0] *= backoff;
                s[1] = 0.0;
            } else {
                s[1] += 1.0;
                if s[1] >= interval as f32 {
                    s[0] *= growth;
                    s[1] = 0.0;
                }
            }
        })
    }
}
