//! Dropout on OpenCL: `kernels/dropout.cl`, the counter-based generator of [`crate::rng`] on the device.

use crate::backend::opencl::program::Defines;
use crate::backend::opencl::{Arg, ClDevice};
use crate::contract::DropoutKernels;
use crate::error::Result;
use crate::tensor::Tensor;

impl DropoutKernels for ClDevice {
    fn dropout_apply(&self, x: &Tensor, p: f32, seed: u64, out: &Tensor) -> Result<()> {
        let k = self.kernel("dropout", &Defines::new(), "dropout_apply")?;
        let n = x.numel();
        let args = [
            Arg::I32(n as i32),
            Arg::U32(seed as u32),
            Arg::U32((seed >> 32) as u32),
            Arg::F32(p),
            Arg::F32(1.0 / (1.0 - p)),
            Arg::Mem(x.storage()),
            Arg::Mem(out.storage()),
        ];
        self.launch(
            &k,
            &args,
            &[n],
            Some(&[256.min(self.info.max_work_group_size.max(1))]),
        )?;
        Ok(())
    }
}
