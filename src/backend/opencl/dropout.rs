//! Dropout on OpenCL: `kernels/dropout.cl`, the counter-based generator of [`crate::rng`] on the device.

use crate::backend::opencl::ClDevice;
use crate::backend::opencl::abi::dropout as abi;
use crate::backend::opencl::shape::io_defines;
use crate::contract::DropoutKernels;
use crate::error::Result;
use crate::tensor::Tensor;

impl DropoutKernels for ClDevice {
    fn dropout_apply(&self, x: &Tensor, p: f32, seed: u64, out: &Tensor) -> Result<()> {
        let n = x.numel();
        let args = abi::DropoutApply {
            n: n as i32,
            seed_lo: seed as u32,
            seed_hi: (seed >> 32) as u32,
            p,
            scale: 1.0 / (1.0 - p),
            x: x.storage(),
            out: out.storage(),
        };
        let d = io_defines(x, out);
        self.run_1d(abi::DROPOUT_APPLY, &d, &args, n, Some(256))?;
        Ok(())
    }
}
