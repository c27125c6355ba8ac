//! In-place updates on OpenCL: the kernels of `kernels/update.cl`, every hyper-parameter an argument.

use crate::backend::opencl::ClDevice;
use crate::backend::opencl::abi::update as abi;
use crate::backend::opencl::program::Defines;
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
                let k = self.kernel(abi::FAMILY, &d, abi::SGD_STEP)?;
                let args = abi::SgdStep {
                    n: n as i32,
                    lr,
                    wd,
                    mu: momentum,
                    nesterov: nesterov as i32,
                    p: p.storage(),
                    g: g.storage(),
                    v: state[0].storage(),
                };
                self.run(&k, &args, &[n], None)?;
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
                let k = self.kernel(abi::FAMILY, &d, abi::ADAM_STEP)?;
                let args = abi::AdamStep {
                    n: n as i32,
                    lr,
                    b1,
                    b2,
                    eps,
                    wd,
                    decoupled: decoupled as i32,
                    bc1,
                    bc2,
                    p: p.storage(),
                    g: g.storage(),
                    m: state[0].storage(),
                    v: state[1].storage(),
                };
                self.run(&k, &args, &[n], None)?;
            }
            Step::RmsProp {
                lr,
                alpha,
                eps,
                wd,
                momentum,
            } => {
                let k = self.kernel(abi::FAMILY, &d, abi::RMSPROP_STEP)?;
                let args = abi::RmspropStep {
                    n: n as i32,
                    lr,
                    alpha,
                    eps,
                    wd,
                    mu: momentum,
                    p: p.storage(),
                    g: g.storage(),
                    s: state[0].storage(),
                    b: state[1].storage(),
                };
                self.run(&k, &args, &[n], None)?;
            }
        }
        Ok(())
    }

    fn ema(&self, d: f32, shadow: &Tensor, p: &Tensor) -> Result<()> {
        let n = p.numel();
        let k = self.kernel(abi::FAMILY, &Defines::new(), abi::EMA_STEP)?;
        let args = abi::EmaStep {
            n: n as i32,
            d,
            shadow: shadow.storage(),
            p: p.storage(),
        };
        self.run(&k, &args, &[n], None)?;
        Ok(())
    }

    fn scale_inplace(&self, s: f32, x: &Tensor) -> Result<()> {
        let n = x.numel();
        let k = self.kernel(abi::FAMILY, &Defines::new(), abi::SCALE_INPLACE)?;
        self.run(
            &k,
            &abi::ScaleInplace {
                n: n as i32,
                s,
                x: x.storage(),
            },
            &[n],
            None,
        )?;
        Ok(())
    }
}
