//! The reference depthwise convolution on the built-in device: direct loops with f64 accumulation.

use crate::Device;
use crate::backend::cpu::CpuDevice;
use crate::backend::cpu::host::{read_f32 as host, store_f64 as store};
use crate::contract::depthwise::{DepthwiseKernels, DwAlgo, DwBwd, DwFwd, DwGeom};
use crate::error::Result;

/// Calls `f(nc, c, oh, ow, y, x, tap)` for every in-bounds (output, tap) pair.
fn taps(g: &DwGeom, mut f: impl FnMut(usize, usize, usize, usize, usize, usize, usize)) {
    for nc in 0..g.n * g.c {
        for oh in 0..g.oh {
            for kh in 0..g.k {
                let y = (oh * g.s + kh) as isize - g.p as isize;
                if y < 0 || y >= g.h as isize {
                    continue;
                }
                for ow in 0..g.ow {
                    for kw in 0..g.k {
                        let x = (ow * g.s + kw) as isize - g.p as isize;
                        if x >= 0 && x < g.w as isize {
                            f(nc, nc % g.c, oh, ow, y as usize, x as usize, kh * g.k + kw);
                        }
                    }
                }
            }
        }
    }
}

impl DepthwiseKernels for CpuDevice {
    fn dw_fwd(&self, _device: &Device, op: &DwFwd<'_>, _algo: Option<DwAlgo>) -> Result<()> {
        let (x, w, bias, out, g) = op.parts();
        let (xv, wv) = (host(x)?, host(w)?);
        let mut acc = crate::tensor::host_vec(g.n * g.c * g.oh * g.ow, 0f64)?;
        if let Some(b) = bias {
            let bv = host(b)?;
            for (i, a) in acc.iter_mut().enumerate() {
                *a = bv[(i / (g.oh * g.ow)) % g.c] as f64;
            }
        }
        taps(g, |nc, c, oh, ow, y, xx, t| {
            acc[(nc * g.oh + oh) * g.ow + ow] +=
                xv[(nc * g.h + y) * g.w + xx] as f64 * wv[c * g.k * g.k + t] as f64;
        });
        store(out, &acc)
    }

    fn dw_bwd(&self, _device: &Device, op: &DwBwd<'_>, _algo: Option<DwAlgo>) -> Result<()> {
        let (x, w, go, gx, gw, g) = op.parts();
        let (xv, wv, gov) = (host(x)?, host(w)?, host(go)?);
        if let Some(gx) = gx {
            let mut acc = crate::tensor::host_vec(g.n * g.c * g.h * g.w, 0f64)?;
            taps(g, |nc, c, oh, ow, y, xx, t| {
                acc[(nc * g.h + y) * g.w + xx] +=
                    gov[(nc * g.oh + oh) * g.ow + ow] as f64 * wv[c * g.k * g.k + t] as f64;
            });
            store(gx, &acc)?;
        }
        let mut acc = vec![0f64; g.c * g.k * g.k];
        taps(g, |nc, c, oh, ow, y, xx, t| {
            acc[c * g.k * g.k + t] +=
                gov[(nc * g.oh + oh) * g.ow + ow] as f64 * xv[(nc * g.h + y) * g.w + xx] as f64;
        });
        store(gw, &acc)
    }
}
