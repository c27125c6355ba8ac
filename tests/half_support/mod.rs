//! Helpers of the f16 tests: seeded f16 inputs with their widened reference copy, f16 rounding, and the
//! comparisons built on them.
#![allow(dead_code)]

use netcl::half::{f16_to_f32, f32_to_f16};
use netcl::{DType, Device, Tensor};

use crate::common::cpu;

/// Seeded values in about [-3, 3] on `dev`, as f16 (and the same f16 values widened on the built-in device).
pub fn halves(dev: &Device, shape: &[usize], seed: u64) -> (Tensor, Tensor) {
    let c = Tensor::randn(&cpu(), shape, 0.0, 1.5, seed).expect("randn");
    let h = c
        .to_device(dev)
        .and_then(|t| t.cast(DType::F16))
        .expect("to f16");
    let wide = h
        .to_device(&cpu())
        .and_then(|t| t.cast(DType::F32))
        .expect("widen");
    (h, wide)
}

/// The f32 values of a tensor, each rounded to f16 (what an f16 output of the reference holds).
pub fn rounded(t: &Tensor) -> Vec<f32> {
    t.to_f32_vec()
        .expect("read")
        .into_iter()
        .map(|v| f16_to_f32(f32_to_f16(v)))
        .collect()
}

/// Checks `got` (an f16 or f32 tensor, read as f32) against the reference `want` rounded to f16.
pub fn assert_rounded(got: &Tensor, want: &Tensor, atol: f32, rtol: f32, what: &str) {
    let got = got.to_f32_vec().expect("read");
    crate::common::assert_close(&got, &rounded(want), atol, rtol, what);
}

/// [`crate::common::assert_close`] on the values of two tensors of any float dtype, read as f32.
pub fn assert_read_close(got: &Tensor, want: &Tensor, atol: f32, rtol: f32, what: &str) {
    let read = |t: &Tensor| t.to_f32_vec().expect("read");
    crate::common::assert_close(&read(got), &read(want), atol, rtol, what);
}
