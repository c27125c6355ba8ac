//! Matrix products at the tensor-core precisions: `matmul_2048_tf32` and `matmul_4096_tf32` (f32 tensors,
//! operands rounded to TF32) and `matmul_4096_fp16` (f16 tensors multiplied as stored, f16 product), each
//! through `ops::matmul_prec`, and `matmul_4096` at FP32, the large partner of the GEMM family's `matmul_2048`
//! that the tensor-core cases are compared with. Work is 2·n³ FLOPs. On a
//! device without usable tensor cores they run the FP32 kernels (their decisions say so).
//!
//! `rel_err` is measured against the built-in device, which multiplies in FP32 (and, for the f16 case, stores
//! the product in f16): it is the precision's own error, about 2^-11 of the operands' size per product for
//! TF32 and FP16 operand rounding, not a defect. `--small` runs the 4096 cases at 1024 so that they are checked;
//! at full size the check is skipped (minutes on the single-threaded built-in device).

use super::{Case, Runner, Work};
use crate::Result;
use crate::device::Device;
use crate::ops;
use crate::precision::Precision;
use crate::tensor::{DType, Tensor};

/// The side of a case of nominal side `n` (4096 becomes 1024 under `--small`).
fn side(n: usize, small: bool) -> usize {
    if small && n > 2048 { 1024 } else { n }
}

fn work(n: usize, small: bool) -> Work {
    Work::Flops(2.0 * (side(n, small) as f64).powi(3))
}

fn product(dev: &Device, n: usize, p: Precision, dtype: DType) -> Result<Runner> {
    let a = Tensor::randn(dev, &[n, n], 0.0, 1.0, 11)?.cast(dtype)?;
    let b = Tensor::randn(dev, &[n, n], 0.0, 1.0, 12)?.cast(dtype)?;
    Ok(Box::new(move || {
        Ok(vec![ops::matmul_prec(&a, &b, false, false, p)?])
    }))
}

/// The tensor-core cases.
pub(super) fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "matmul_4096",
            work: |small| work(4096, small),
            setup: |dev, small| product(dev, side(4096, small), Precision::Fp32, DType::F32),
        },
        Case {
            name: "matmul_2048_tf32",
            work: |small| work(2048, small),
            setup: |dev, small| product(dev, side(2048, small), Precision::Tf32, DType::F32),
        },
        Case {
            name: "matmul_4096_tf32",
            work: |small| work(4096, small),
            setup: |dev, small| product(dev, side(4096, small), Precision::Tf32, DType::F32),
        },
        Case {
            name: "matmul_4096_fp16",
            work: |small| work(4096, small),
            setup: |dev, small| product(dev, side(4096, small), Precision::Fp16, DType::F16),
        },
    ]
}
