//! Dropout with a counter-based device generator: element `i` is kept when `rng::uniform(seed, i) ≥ p`,
//! computed on the device with the same hash as [`crate::rng`], so masks are seeded, reproducible and identical
//! on every device. The backward applies the same mask to the gradient.

use crate::backend::cpu::CpuDevice;
use crate::backend::opencl::Arg;
use crate::backend::opencl::ClDevice;
use crate::backend::opencl::program::Defines;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// Device primitives for dropout.
pub(crate) trait DropoutKernels {
    /// `out = keep(i) ? x·scale : 0`.
    fn dropout_apply(&self, x: &Tensor, p: f32, seed: u64, out: &Tensor) -> Result<()>;
}

fn check(x: &Tensor, p: f32, op: &str) -> Result<f32> {
    x.expect_dtype(DType::F32, op)?;
    if !(0.0..1.0).contains(&p) {
        return Err(Error::Invalid(format!("{op}: p = {p} must be in [0, 1)")));
    }
    if x.numel() > i32::MAX as usize {
        return Err(Error::Limit(format!(
            "{op}: {} elements exceed the 2^31-1 per-op limit",
            x.numel()
        )));
    }
    Ok(1.0 / (1.0 - p))
}

fn apply(x: &Tensor, p: f32, seed: u64, op: &str) -> Result<Tensor> {
    check(x, p, op)?;
    let out = Tensor::empty(x.device(), x.shape(), DType::F32)?;
    if out.numel() > 0 {
        x.device().backend().dropout_apply(x, p, seed, &out)?;
    }
    Ok(out)
}

/// Zeroes each element with probability `p` (from `seed` and its index) and scales the rest by 1/(1−p).
pub fn dropout(x: &Tensor, p: f32, seed: u64) -> Result<Tensor> {
    apply(x, p, seed, "dropout")
}

/// The gradient of [`dropout`] with the same `p` and `seed`: the same mask and scale applied to `grad`.
pub fn dropout_backward(grad: &Tensor, p: f32, seed: u64) -> Result<Tensor> {
    apply(grad, p, seed, "dropout_backward")
}

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
