//! In-place parameter updates on the device: the steps of SGD, Adam/AdamW and RMSProp, the weight EMA, and
//! in-place scaling (gradient clipping). Every hyper-parameter is a kernel argument.

use crate::backend::cpu::{CpuDevice, access as cpu_access};
use crate::backend::opencl::Arg;
use crate::backend::opencl::ClDevice;
use crate::backend::opencl::program::Defines;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// One optimiser step's hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Step {
    /// SGD: g ← g + wd·p; with μ ≠ 0, v ← μv + g and g ← v (Nesterov: g + μv); p ← p − lr·g.
    Sgd {
        /// Learning rate.
        lr: f32,
        /// L2 weight decay.
        wd: f32,
        /// Momentum μ (0 for none).
        momentum: f32,
        /// Nesterov momentum.
        nesterov: bool,
    },
    /// Adam (L2 decay) or AdamW (decoupled decay p ← p − lr·wd·p); `bc1`/`bc2` are 1 − β^t.
    Adam {
        /// Learning rate.
        lr: f32,
        /// β1.
        b1: f32,
        /// β2.
        b2: f32,
        /// ε.
        eps: f32,
        /// Weight decay.
        wd: f32,
        /// Decoupled (AdamW) rather than L2 decay.
        decoupled: bool,
        /// 1 − β1^t.
        bc1: f32,
        /// 1 − β2^t.
        bc2: f32,
    },
    /// RMSProp: s ← αs + (1−α)g²; step = g/(√s + ε); with μ ≠ 0, b ← μb + lr·step and p ← p − b.
    RmsProp {
        /// Learning rate.
        lr: f32,
        /// α (smoothing).
        alpha: f32,
        /// ε.
        eps: f32,
        /// L2 weight decay.
        wd: f32,
        /// Momentum μ (0 for none).
        momentum: f32,
    },
}

/// Device primitives for in-place updates.
pub(crate) trait UpdateKernels {
    /// Applies `step` to `p` with gradient `g` and state buffers `state` (SGD: [v]; Adam: [m, v]; RMSProp: [s, b]).
    fn update(&self, step: &Step, p: &Tensor, g: &Tensor, state: &[&Tensor]) -> Result<()>;
    /// shadow ← d·shadow + (1 − d)·p.
    fn ema(&self, d: f32, shadow: &Tensor, p: &Tensor) -> Result<()>;
    /// x ← s·x.
    fn scale_inplace(&self, s: f32, x: &Tensor) -> Result<()>;
}

fn check(p: &Tensor, others: &[&Tensor], what: &str) -> Result<()> {
    p.expect_dtype(DType::F32, what)?;
    p.same_device(others, what)?;
    for o in others {
        o.expect_dtype(DType::F32, what)?;
        if o.shape() != p.shape() {
            return Err(Error::Shape(format!(
                "{what}: {:?} does not match the parameter's {:?}",
                o.shape(),
                p.shape()
            )));
        }
        if o.shares_storage(p) {
            return Err(Error::Invalid(format!(
                "{what}: a state or gradient tensor shares storage with the parameter"
            )));
        }
    }
    if p.numel() > i32::MAX as usize {
        return Err(Error::Limit(format!(
            "{what}: {} elements exceed the 2^31-1 per-op limit",
            p.numel()
        )));
    }
    Ok(())
}

/// Applies one optimiser step to `p` in place. `state` holds the step's buffers, zero-initialised by the caller.
pub fn apply_step(step: &Step, p: &Tensor, g: &Tensor, state: &[&Tensor]) -> Result<()> {
    let want = match step {
        Step::Sgd { .. } => 1,
        Step::Adam { .. } | Step::RmsProp { .. } => 2,
    };
    if state.len() != want {
        return Err(Error::Invalid(format!(
            "{step:?} needs {want} state tensors, got {}",
            state.len()
        )));
    }
    let mut all = vec![g];
    all.extend_from_slice(state);
    check(p, &all, "optimizer step")?;
    if p.numel() == 0 {
        return Ok(());
    }
    p.device().backend().update(step, p, g, state)
}

/// Exponential moving average of weights: shadow ← d·shadow + (1 − d)·p, in place.
pub fn ema_update(d: f32, shadow: &Tensor, p: &Tensor) -> Result<()> {
    if !(0.0..=1.0).contains(&d) {
        return Err(Error::Invalid(format!("EMA decay {d} must lie in [0, 1]")));
    }
    check(shadow, &[p], "ema")?;
    if p.numel() == 0 {
        return Ok(());
    }
    p.device().backend().ema(d, shadow, p)
}

/// Multiplies `x` by `s` in place.
pub fn scale_inplace(s: f32, x: &Tensor) -> Result<()> {
    check(x, &[], "scale_inplace")?;
    if x.numel() == 0 {
        return Ok(());
    }
    x.device().backend().scale_inplace(s, x)
}

impl UpdateKernels for ClDevice {
    fn update(&self, step: &Step, p: &Tensor, g: &Tensor, state: &[&Tensor]) -> Result<()> {
        let n = p.numel();
        let d = Defines::new();
        match *step {
            Step::Sgd {
                lr,
                wd,
                momentum,
                nesterov,
            } => {
                let k = self.kernel("update", &d, "sgd_step")?;
                let args = [
                    Arg::I32(n as i32),
                    Arg::F32(lr),
                    Arg::F32(wd),
                    Arg::F32(momentum),
                    Arg::I32(nesterov as i32),
                    Arg::Mem(p.storage()),
                    Arg::Mem(g.storage()),
                    Arg::Mem(state[0].storage()),
                ];
                self.launch(&k, &args, &[n], None)?;
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
                let k = self.kernel("update", &d, "adam_step")?;
                let args = [
                    Arg::I32(n as i32),
                    Arg::F32(lr),
                    Arg::F32(b1),
                    Arg::F32(b2),
                    Arg::F32(eps),
                    Arg::F32(wd),
                    Arg::I32(decoupled as i32),
                    Arg::F32(bc1),
                    Arg::F32(bc2),
                    Arg::Mem(p.storage()),
                    Arg::Mem(g.storage()),
                    Arg::Mem(state[0].storage()),
                    Arg::Mem(state[1].storage()),
                ];
                self.launch(&k, &args, &[n], None)?;
            }
            Step::RmsProp {
                lr,
                alpha,
                eps,
                wd,
                momentum,
            } => {
                let k = self.kernel("update", &d, "rmsprop_step")?;
                let args = [
                    Arg::I32(n as i32),
                    Arg::F32(lr),
                    Arg::F32(alpha),
                    Arg::F32(eps),
                    Arg::F32(wd),
                    Arg::F32(momentum),
                    Arg::Mem(p.storage()),
                    Arg::Mem(g.storage()),
                    Arg::Mem(state[0].storage()),
                    Arg::Mem(state[1].storage()),
                ];
                self.launch(&k, &args, &[n], None)?;
            }
        }
        Ok(())
    }

    fn ema(&self, d: f32, shadow: &Tensor, p: &Tensor) -> Result<()> {
        let n = p.numel();
        let k = self.kernel("update", &Defines::new(), "ema_step")?;
        let args = [
            Arg::I32(n as i32),
            Arg::F32(d),
            Arg::Mem(shadow.storage()),
            Arg::Mem(p.storage()),
        ];
        self.launch(&k, &args, &[n], None)?;
        Ok(())
    }

    fn scale_inplace(&self, s: f32, x: &Tensor) -> Result<()> {
        let n = x.numel();
        let k = self.kernel("update", &Defines::new(), "scale_inplace")?;
        self.launch(
            &k,
            &[Arg::I32(n as i32), Arg::F32(s), Arg::Mem(x.storage())],
            &[n],
            None,
        )?;
        Ok(())
    }
}

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
