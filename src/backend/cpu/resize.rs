//! Upsampling on the built-in device: the separable taps in f64.

use crate::backend::cpu::CpuDevice;
use crate::backend::cpu::host::{each_pixel, read_f32, write_f32};
use crate::contract::resize::{ResizeKernels, Upsample, Upsampling};
use crate::error::Result;

/// Reference taps of output `o` along one axis: (input index, weight) pairs.
fn taps(mode: Upsample, o: usize, inp: usize, out: usize) -> [(usize, f64); 2] {
    match mode {
        Upsample::Nearest => [((o * inp) / out, 1.0), (0, 0.0)],
        Upsample::Bilinear { align_corners } => {
            let s = if align_corners {
                if out > 1 {
                    o as f64 * (inp - 1) as f64 / (out - 1) as f64
                } else {
                    0.0
                }
            } else {
                ((o as f64 + 0.5) * inp as f64 / out as f64 - 0.5).max(0.0)
            };
            let i0 = (s.floor() as usize).min(inp - 1);
            let i1 = (i0 + 1).min(inp - 1);
            let f = s - i0 as f64;
            [(i0, 1.0 - f), (i1, f)]
        }
    }
}

impl ResizeKernels for CpuDevice {
    fn upsample(&self, op: &Upsampling<'_>) -> Result<()> {
        let (mode, xs, ys, src, dst, back) = op.parts();
        let (planes, h, w, oh, ow) = (xs[0] * xs[1], xs[2], xs[3], ys[2], ys[3]);
        let s = read_f32(src)?;
        let mut d = crate::tensor::host_vec(dst.numel(), 0f64)?;
        each_pixel(planes, oh, ow, |p, a, b| {
            let yi = (p * oh + a) * ow + b;
            for (hh, wa) in taps(mode, a, h, oh) {
                for (ww, wb) in taps(mode, b, w, ow) {
                    let xi = (p * h + hh) * w + ww;
                    if back {
                        d[xi] += wa * wb * s[yi] as f64;
                    } else {
                        d[yi] += wa * wb * s[xi] as f64;
                    }
                }
            }
        });
        let d: Vec<f32> = d.into_iter().map(|v| v as f32).collect();
        write_f32(dst, &d)
    }
}
