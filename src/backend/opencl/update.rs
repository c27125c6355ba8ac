//! In-place updates on OpenCL: the kernels of `kernels/update.cl`, every hyper-parameter an argument.

use crate::backend::opencl::ClDevice;
use crate::backend::opencl::abi::update as abi;
use crate::backend::opencl::elementwise::half_defines;
use crate::backend::opencl::program::Defines;
use crate::contract::update::{Step, StepOp, UpdateKernels};
use crate::error::Result;
use crate::tensor::Tensor;

/// The most parameters one multi-tensor launch updates (the kernels' eight pointer slots).
const MULTI: usize = 8;

/// The defines and the `skip` argument of an update kernel: FLAGGED with a GradScaler state; without one the
/// kernel never reads `skip` and the parameter's buffer fills the slot.
fn flagged<'a>(skip: Option<&'a Tensor>, p: &'a Tensor) -> (Defines, &'a crate::memory::Storage) {
    match skip {
        Some(s) => (Defines::new().set("FLAGGED", 1), s.storage()),
        None => (Defines::new(), p.storage()),
    }
}

impl ClDevice {
    /// One launch of `sgd_multi` or `adam_multi` over `ops` (2 to [`MULTI`] operand sets of `total` < 2^31
    /// elements together); unused slots repeat the last set and the total, so no item selects them. RMSProp has
    /// no multi-tensor kernel: its sets are updated one launch each.
    fn update_multi(&self, step: &Step, ops: &[StepOp<'_>], total: usize) -> Result<()> {
        let mut ends = [total as i32; MULTI];
        let mut at = 0;
        for (e, op) in ends.iter_mut().zip(ops) {
            at += op.p.numel();
            *e = at as i32;
        }
        let slot = |k: usize| ops[k.min(ops.len() - 1)];
        let p = |k: usize| slot(k).p.storage();
        let g = |k: usize| slot(k).g.storage();
        let s = |k: usize, b: usize| slot(k).state[b].storage();
        let (d, skip) = flagged(ops[0].skip, ops[0].p);
        match *step {
            Step::Sgd {
                lr,
                wd,
                momentum: mu,
                nesterov,
            } => {
                let args = abi::SgdMulti {
                    ends,
                    lr,
                    wd,
                    mu,
                    nesterov: i32::from(nesterov),
                    p0: p(0),
                    g0: g(0),
                    v0: s(0, 0),
                    p1: p(1),
                    g1: g(1),
                    v1: s(1, 0),
                    p2: p(2),
                    g2: g(2),
                    v2: s(2, 0),
                    p3: p(3),
                    g3: g(3),
                    v3: s(3, 0),
                    p4: p(4),
                    g4: g(4),
                    v4: s(4, 0),
                    p5: p(5),
                    g5: g(5),
                    v5: s(5, 0),
                    p6: p(6),
                    g6: g(6),
                    v6: s(6, 0),
                    p7: p(7),
                    g7: g(7),
                    v7: s(7, 0),
                    skip,
                };
                self.run_1d(abi::SGD_MULTI, &d, &args, total, None)?;
            }
            Step::Adam {
                lr,
                b1,
                b2,
                decoupled,
                eps,
                wd,
                bc1,
                bc2,
            } => {
                let args = abi::AdamMulti {
                    ends,
                    lr,
                    b1,
                    b2,
                    eps,
                    wd,
                    decoupled: i32::from(decoupled),
                    bc1,
                    bc2,
                    p0: p(0),
                    g0: g(0),
                    m0: s(0, 0),
                    v0: s(0, 1),
                    p1: p(1),
                    g1: g(1),
                    m1: s(1, 0),
                    v1: s(1, 1),
                    p2: p(2),
                    g2: g(2),
                    m2: s(2, 0),
                    v2: s(2, 1),
                    p3: p(3),
                    g3: g(3),
                    m3: s(3, 0),
                    v3: s(3, 1),
                    p4: p(4),
                    g4: g(4),
                    m4: s(4, 0),
                    v4: s(4, 1),
                    p5: p(5),
                    g5: g(5),
                    m5: s(5, 0),
                    v5: s(5, 1),
                    p6: p(6),
                    g6: g(6),
                    m6: s(6, 0),
                    v6: s(6, 1),
                    p7: p(7),
                    g7: g(7),
                    m7: s(7, 0),
                    v7: s(7, 1),
                    skip,
                };
                self.run_1d(abi::ADAM_MULTI, &d, &args, total, None)?;
            }
            Step::RmsProp { .. } => {
                return ops.iter().try_for_each(|op| self.update(step, *op));
            }
        }
        Ok(())
    }
}

impl UpdateKernels for ClDevice {
    fn update_many(&self, step: &Step, ops: &[StepOp<'_>]) -> Result<()> {
        // Runs of up to eight operand sets whose sizes add up to less than 2^31.
        let mut i = 0;
        while i < ops.len() {
            let (mut j, mut total) = (i, 0usize);
            while j < ops.len() && j - i < MULTI && total + ops[j].p.numel() <= i32::MAX as usize {
                total += ops[j].p.numel();
                j += 1;
            }
            match j - i {
                0 | 1 => {
                    self.update(step, ops[i])?;
                    j = i + 1;
                }
                _ => self.update_multi(step, &ops[i..j], total)?,
            }
            i = j;
        }
        Ok(())
    }

    fn update(&self, step: &Step, op: StepOp<'_>) -> Result<()> {
        let (p, g, state, skip) = op.parts();
        let n = p.numel();
        let (d, skip) = flagged(skip, p);
        let (p, g, s0) = (p.storage(), g.storage(), state[0].storage());
        let s1 = || state[1].storage();
        match *step {
            Step::Sgd {
                lr,
                wd,
                momentum: mu,
                nesterov,
            } => {
                let nesterov = i32::from(nesterov);
                let args = abi::SgdStep {
                    n: n as i32,
                    lr,
                    wd,
                    mu,
                    nesterov,
                    p,
                    g,
                    v: s0,
                    skip,
                };
                self.run_1d(abi::SGD_STEP, &d, &args, n, None)?;
            }
            Step::Adam {
                lr,
                b1,
                b2,
                decoupled: dec,
                eps,
                wd,
                bc1,
                bc2,
            } => {
                let decoupled = i32::from(dec);
                let (m, v) = (s0, s1());
                let args = abi::AdamStep {
                    n: n as i32,
                    lr,
                    b1,
                    b2,
                    eps,
                    wd,
                    decoupled,
                    bc1,
                    bc2,
                    p,
                    g,
                    m,
                    v,
                    skip,
                };
                self.run_1d(abi::ADAM_STEP, &d, &args, n, None)?;
            }
            Step::RmsProp {
                lr,
                alpha,
                eps,
                wd,
                momentum: mu,
            } => {
                let (s, b) = (s0, s1());
                let args = abi::RmspropStep {
                    n: n as i32,
                    lr,
                    alpha,
                    eps,
                    wd,
                    mu,
                    p,
                    g,
                    s,
                    b,
                    skip,
                };
                self.run_1d(abi::RMSPROP_STEP, &d, &args, n, None)?;
            }
        }
        Ok(())
    }

    fn ema(&self, d: f32, shadow: &Tensor, p: &Tensor) -> Result<()> {
        let n = p.numel();
        let (shadow, p) = (shadow.storage(), p.storage());
        let args = abi::EmaStep {
            n: n as i32,
            d,
            shadow,
            p,
        };
        self.run_1d(abi::EMA_STEP, &Defines::new(), &args, n, None)?;
        Ok(())
    }

    fn scale_inplace(&self, s: f32, x: &Tensor) -> Result<()> {
        let n = x.numel();
        let args = abi::ScaleInplace {
            n: n as i32,
            s,
            x: x.storage(),
        };
        self.run_1d(abi::SCALE_INPLACE, &Defines::new(), &args, n, None)?;
        Ok(())
    }

    fn amp_begin(&self, state: &Tensor) -> Result<()> {
        let args = abi::AmpBegin {
            state: state.storage(),
        };
        self.run_1d(abi::AMP_BEGIN, &Defines::new(), &args, 1, Some(1))?;
        Ok(())
    }

    fn amp_unscale(&self, g: &Tensor, state: &Tensor) -> Result<()> {
        let n = g.numel();
        let args = abi::AmpUnscale {
            n: n as i32,
            g: g.storage(),
            state: state.storage(),
        };
        let d = half_defines(Defines::new(), &[("G_HALF", g)]);
        self.run_1d(abi::AMP_UNSCALE, &d, &args, n, Some(256))?;
        Ok(())
    }

    fn amp_scale(&self, x: &Tensor, state: &Tensor, out: &Tensor) -> Result<()> {
        let n = x.numel();
        let args = abi::AmpScale {
            n: n as i32,
            x: x.storage(),
            state: state.storage(),
            out: out.storage(),
        };
        let d = half_defines(Defines::new(), &[("IN_HALF", x), ("OUT_HALF", out)]);
        self.run_1d(abi::AMP_SCALE, &d, &args, n, Some(256))?;
        Ok(())
    }

    fn amp_update(&self, growth: f32, backoff: f32, interval: i32, state: &Tensor) -> Result<()> {
        let args = abi::AmpUpdate {
            growth,
            backoff,
            interval,
            state: state.storage(),
        };
        self.run_1d(abi::AMP_UPDATE, &Defines::new(), &args, 1, Some(1))?;
        Ok(())
    }
}
