//! In-place updates on OpenCL: the kernels of `kernels/update.cl`, every hyper-parameter an argument.

use crate::backend::opencl::program::Defines;
use crate::backend::opencl::{Arg, ClDevice};
use crate::contract::update::{Step, UpdateKernels};
use crate::error::Result;
use crate::tensor::Tensor;

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
