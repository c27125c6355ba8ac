//! The reference convolution on the built-in device: direct loops with f64 accumulation (every algorithm
//! request computes the same mathematical result, so the reference ignores it).

use crate::Device;
use crate::backend::cpu::CpuDevice;
use crate::backend::cpu::host::{read_f32 as host, store_f64 as store};
use crate::contract::conv::{ConvAlgo, ConvBwd, ConvFwd, ConvGeom, ConvKernels};
use crate::error::Result;

/// Calls `f(n, f, c, oh, ow, y, x, kh, kw)` for every (output, tap) pair that reads an in-bounds input.
fn for_each_tap(
    g: &ConvGeom,
    mut f: impl FnMut(usize, usize, usize, usize, usize, usize, usize, usize, usize),
) {
    let (cg, fg) = (g.c / g.groups, g.f / g.groups);
    for n in 0..g.n {
        for fo in 0..g.f {
            let grp = fo / fg;
            for cl in 0..cg {
                let c = grp * cg + cl;
                for kh in 0..g.kh {
                    for oh in 0..g.oh {
                        let y = (oh * g.sh + kh * g.dh) as isize - g.ph as isize;
                        if y < 0 || y >= g.h as isize {
                            continue;
                        }
                        for kw in 0..g.kw {
                            for ow in 0..g.ow {
                                let x = (ow * g.sw + kw * g.dw) as isize - g.pw as isize;
                                if x < 0 || x >= g.w as isize {
                                    continue;
                                }
                                f(n, fo, c, oh, ow, y as usize, x as usize, kh, kw);
                            }
                        }
                    }
                }
            }
        }
    }
}

impl ConvKernels for CpuDevice {
    fn conv2d_fwd(&self, _: &Device, op: &ConvFwd<'_>, _: Option<ConvAlgo>) -> Result<()> {
        let (x, w, bias, out, g, relu) = op.parts();
        let (xv, wv) = (host(x)?, host(w)?);
        let cg = g.c / g.groups;
        let mut acc = crate::tensor::host_vec(g.n * g.f * g.p(), 0f64)?;
        for_each_tap(g, |n, f, c, oh, ow, y, xx, kh, kw| {
            let cl = c % cg;
            acc[((n * g.f + f) * g.oh + oh) * g.ow + ow] += xv[((n * g.c + c) * g.h + y) * g.w + xx]
                as f64
                * wv[((f * cg + cl) * g.kh + kh) * g.kw + kw] as f64;
        });
        if let Some(b) = bias {
            let bv = host(b)?;
            for (i, a) in acc.iter_mut().enumerate() {
                *a += bv[(i / g.p()) % g.f] as f64;
            }
        }
        if relu {
            acc.iter_mut().for_each(|a| {
                if *a < 0.0 {
                    *a = 0.0
                }
            });
        }
        store(out, &acc)
    }

    fn conv2d_bwd(&self, _: &Device, op: &ConvBwd<'_>, _: Option<ConvAlgo>) -> Result<()> {
        let (x, w, go, grads, g) = op.parts();
        let gov = host(go)?;
        let cg = g.c / g.groups;
        let goi = |n: usize, f: usize, oh: usize, ow: usize| {
            gov[((n * g.f + f) * g.oh + oh) * g.ow + ow] as f64
        };
        if let Some(gx) = grads.gx {
            let wv = host(w)?;
            let mut acc = crate::tensor::host_vec(g.n * g.c * g.h * g.w, 0f64)?;
            for_each_tap(g, |n, f, c, oh, ow, y, xx, kh, kw| {
                acc[((n * g.c + c) * g.h + y) * g.w + xx] +=
                    goi(n, f, oh, ow) * wv[((f * cg + c % cg) * g.kh + kh) * g.kw + kw] as f64;
            });
            store(gx, &acc)?;
        }
        if let Some(gw) = grads.gw {
            let xv = host(x)?;
            let mut acc = vec![0f64; g.f * cg * g.kh * g.kw];
            for_each_tap(g, |n, f, c, oh, ow, y, xx, kh, kw| {
                acc[((f * cg + c % cg) * g.kh + kh) * g.kw + kw] +=
                    goi(n, f, oh, ow) * xv[((n * g.c + c) * g.h + y) * g.w + xx] as f64;
            });
            store(gw, &acc)?;
        }
        if let Some(gb) = grads.gb {
            let mut acc = vec![0f64; g.f];
            for (i, v) in gov.iter().enumerate() {
                acc[(i / g.p()) % g.f] += *v as f64;
            }
            store(gb, &acc)?;
        }
        Ok(())
    }
}
