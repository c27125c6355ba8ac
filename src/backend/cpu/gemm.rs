//! The reference product on the built-in device: f64 accumulation, row by row.

use crate::Device;
use crate::backend::cpu::{CpuDevice, access as cpu_access};
use crate::contract::gemm::{BiasMode, Gemm, GemmKernels, GemmOp};
use crate::error::Result;

/// `C[b] = op(A[b]) · op(B[b])` (+ bias, ReLU) on host slices, accumulating in f64.
pub(crate) fn gemm_host(a: &[f32], b: &[f32], c: &mut [f32], bias: Option<&[f32]>, g: &Gemm) {
    let mut row = vec![0f64; g.n];
    for z in 0..g.batch {
        let (ab, bb, cb) = (
            g.off_a + z * g.s_a,
            g.off_b + z * g.s_b,
            g.off_c + z * g.s_c,
        );
        for i in 0..g.m {
            row.iter_mut().for_each(|v| *v = 0.0);
            for p in 0..g.k {
                let av = if g.trans_a {
                    a[ab + p * g.lda + i]
                } else {
                    a[ab + i * g.lda + p]
                } as f64;
                if g.trans_b {
                    for (j, r) in row.iter_mut().enumerate() {
                        *r += av * b[bb + j * g.ldb + p] as f64;
                    }
                } else {
                    let br = &b[bb + p * g.ldb..bb + p * g.ldb + g.n];
                    for (r, &bv) in row.iter_mut().zip(br) {
                        *r += av * bv as f64;
                    }
                }
            }
            for (j, &r) in row.iter().enumerate() {
                let mut v = r as f32;
                if let (BiasMode::Row, Some(bs)) = (g.bias, bias) {
                    v += bs[i];
                }
                if g.relu && v < 0.0 {
                    v = 0.0;
                }
                c[cb + i * g.ldc + j] = v;
            }
        }
    }
}

impl GemmKernels for CpuDevice {
    fn gemm(&self, _device: &Device, op: &GemmOp<'_>) -> Result<()> {
        let (a, b, c, bias, g) = op.parts();
        // Read the inputs into owned vectors first: `c` may share storage with nothing here, but a and b may
        // be the same tensor.
        let av: Vec<f32> =
            bytemuck::cast_slice::<u32, f32>(&cpu_access::read(a)?[..])[..a.numel()].to_vec();
        let bv: Vec<f32> =
            bytemuck::cast_slice::<u32, f32>(&cpu_access::read(b)?[..])[..b.numel()].to_vec();
        let biasv: Option<Vec<f32>> = match bias {
            Some(t) => Some(
                bytemuck::cast_slice::<u32, f32>(&cpu_access::read(t)?[..])[..t.numel()].to_vec(),
            ),
            None => None,
        };
        let mut w = cpu_access::write(c)?;
        let n = c.numel();
        let out = &mut bytemuck::cast_slice_mut::<u32, f32>(&mut w[..])[..n];
        gemm_host(&av, &bv, out, biasv.as_deref(), g);
        Ok(())
    }

    fn gemm_labels(&self, _g: &Gemm) -> Vec<String> {
        vec!["reference".into()]
    }

    fn gemm_forced(&self, device: &Device, op: &GemmOp<'_>, label: &str) -> Result<()> {
        if label != "reference" {
            return Err(crate::Error::Invalid(format!(
                "gemm candidate `{label}` does not exist on the built-in device (it has `reference`)"
            )));
        }
        self.gemm(device, op)
    }
}
