//! Dropout on the built-in device.

use crate::backend::cpu::CpuDevice;
use crate::contract::DropoutKernels;
use crate::error::Result;
use crate::tensor::Tensor;

impl DropoutKernels for CpuDevice {
    fn dropout_apply(&self, x: &Tensor, p: f32, seed: u64, out: &Tensor) -> Result<()> {
        let scale = 1.0 / (1.0 - p);
        crate::backend::cpu::host::map_f32(&[x], out, |ins, o| {
            for (i, (o, &v)) in o.iter_mut().zip(ins[0]).enumerate() {
                *o = if crate::rng::uniform(seed, i as u64) >= p {
                    v * scale
                } else {
                    0.0
                };
            }
        })
    }
}
