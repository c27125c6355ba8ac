//! Reference training batch_norm2d in plain Rust.

use crate::backend::cpu::CpuDevice;
use crate::contract::NormKernels;
use crate::contract::norm::BnTrain;
use crate::device::Device;
use crate::error::Result;
use crate::tensor::Tensor;

impl NormKernels for CpuDevice {
    fn batch_norm_train(&self, _device: &Device, bn: &BnTrain<'_>) -> Result<()> {
        let s = bn.x.shape();
        let (n, c, p) = (s[0], s[1], s[2] * s[3]);
        let read = |t: Option<&Tensor>| t.map(|t| t.to_vec::<f32>()).transpose();
        let (gamma, beta) = (read(bn.gamma)?, read(bn.beta)?);
        let (rm, rv) = (bn.rm.to_vec::<f32>()?, bn.rv.to_vec::<f32>()?);
        let (mut means, mut rstds, mut stat) = (vec![0f32; c], vec![0f32; c], vec![0f32; 2 * c]);
        let (mut rm_out, mut rv_out) = (vec![0f32; c], vec![0f32; c]);
        crate::backend::cpu::host::map_f32(&[bn.x], bn.y, |ins, y| {
            let x = ins[0];
            let cnt = (n * p) as f64;
            for ch in 0..c {
                let planes =
                    || (0..n).flat_map(move |b| x[(b * c + ch) * p..(b * c + ch + 1) * p].iter());
                // The reference accumulates in f64, in two passes.
                let mean = planes().map(|&v| v as f64).sum::<f64>() / cnt;
                let var = planes().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / cnt;
                let rstd = 1.0 / (var + bn.eps as f64).sqrt();
                let scale = rstd * gamma.as_ref().map_or(1.0, |g| g[ch] as f64);
                let shift = beta.as_ref().map_or(0.0, |b| b[ch] as f64);
                for b in 0..n {
                    let r = (b * c + ch) * p..(b * c + ch + 1) * p;
                    for (o, &v) in y[r.clone()].iter_mut().zip(&x[r]) {
                        *o = ((v as f64 - mean) * scale + shift) as f32;
                    }
                }
                means[ch] = mean as f32;
                rstds[ch] = rstd as f32;
                stat[ch] = scale as f32;
                stat[c + ch] = shift as f32;
                let m = bn.momentum as f64;
                rm_out[ch] = ((1.0 - m) * rm[ch] as f64 + m * mean) as f32;
                rv_out[ch] = ((1.0 - m) * rv[ch] as f64 + m * var) as f32;
            }
        })?;
        for (t, v) in [
            (bn.mean, &means),
            (bn.rstd, &rstds),
            (bn.stat, &stat),
            (bn.rm_out, &rm_out),
            (bn.rv_out, &rv_out),
        ] {
            t.device()
                .backend()
                .write(t.storage(), 0, bytemuck::cast_slice(v))?;
        }
        Ok(())
    }
}
