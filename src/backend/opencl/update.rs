//! In-place updates on OpenCL: the kernels of `kernels/update.cl`, every hyper-parameter an argument.

use crate::backend::opencl::ClDevice;
use crate::backend::opencl::abi::update as abi;
use crate::backend::opencl::elementwise::half_defines;
use crate::backend::opencl::program::Defines;
use crate::contract::update::{Step, StepOp, UpdateKernels};
use crate::error::Result;
use crate::tensor::Tensor;

impl UpdateKernels for ClDevice {
    fn update(&self, step: &Step, op: StepOp<'_>) -> Result<()> {
        let (p, g, state, skip) = op.parts();
        let n = p.numel();
        let d = match skip {
            Some(_) => Defines::new().set("FLAGGED", 1),
            None => Defines::new(),
        };
        // Without a scaler the kernel never reads `skip`; the parameter's buffer fills the slot.
        let skip = skip.unwrap_or(p).storage();
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
