//! Reference data movement in plain Rust.

use crate::backend::cpu::CpuDevice;
use crate::backend::cpu::host::{each_pixel, read_f32, write_f32, write_pod};
use crate::contract::ShapeKernels;
use crate::contract::reduce::Ori;
use crate::contract::shape::{Block, Pad, TopK};
use crate::error::Result;
use crate::tensor::Tensor;

fn ranks_before(a: f32, ia: usize, b: f32, ib: usize, largest: bool) -> bool {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => ia < ib,
        (na, nb) if na || nb => {
            if largest {
                na
            } else {
                nb
            }
        }
        _ if a == b => ia < ib,
        _ => {
            if largest {
                a > b
            } else {
                a < b
            }
        }
    }
}

fn pad_src(u: isize, h: usize, reflect: bool) -> Option<usize> {
    let h = h as isize;
    if (0..h).contains(&u) {
        Some(u as usize)
    } else if reflect {
        Some(if u < 0 { -u } else { 2 * (h - 1) - u } as usize)
    } else {
        None
    }
}

impl ShapeKernels for CpuDevice {
    fn topk(&self, x: &Tensor, t: TopK, vals: &Tensor, idx: &Tensor) -> Result<()> {
        let (Ori { o, r, i }, k, largest) = (t.v, t.k, t.largest);
        let xs = read_f32(x)?;
        let (mut vs, mut is) = (
            crate::tensor::host_vec(vals.numel(), 0f32)?,
            crate::tensor::host_vec(vals.numel(), 0i32)?,
        );
        for oo in 0..o {
            for ii in 0..i {
                // The reference sorts the lane.
                let mut lane: Vec<(f32, usize)> =
                    (0..r).map(|rr| (xs[(oo * r + rr) * i + ii], rr)).collect();
                lane.sort_by(|a, b| {
                    if ranks_before(a.0, a.1, b.0, b.1, largest) {
                        std::cmp::Ordering::Less
                    } else {
                        std::cmp::Ordering::Greater
                    }
                });
                for (j, (v, rr)) in lane.into_iter().take(k).enumerate() {
                    vs[(oo * k + j) * i + ii] = v;
                    is[(oo * k + j) * i + ii] = rr as i32;
                }
            }
        }
        write_f32(vals, &vs)?;
        write_pod(idx, &is)
    }

    fn permute(&self, x: &Tensor, oshape: &[usize], istride: &[usize], y: &Tensor) -> Result<()> {
        crate::backend::cpu::host::map_f32(&[x], y, |ins, o| {
            for (k, v) in o.iter_mut().enumerate() {
                let (mut rem, mut off) = (k, 0);
                for (s, st) in oshape.iter().zip(istride) {
                    off += (rem % s) * st;
                    rem /= s;
                }
                *v = ins[0][off];
            }
        })
    }

    fn block_copy(&self, x: &Tensor, y: &Tensor, b: Block) -> Result<()> {
        let xs = read_f32(x)?;
        let mut ys = read_f32(y)?;
        for o in 0..b.o {
            for a in 0..b.len {
                for i in 0..b.i {
                    ys[(o * b.da + b.doff + a) * b.i + i] = xs[(o * b.sa + b.soff + a) * b.i + i];
                }
            }
        }
        write_f32(y, &ys)
    }

    fn index_select(&self, x: &Tensor, idx: &Tensor, v: Ori, y: &Tensor) -> Result<()> {
        let Ori { o, r: a, i } = v;
        let (xs, ks) = (read_f32(x)?, idx.to_vec::<i32>()?);
        let mut ys = Vec::with_capacity(y.numel());
        for oo in 0..o {
            for &k in &ks {
                ys.extend_from_slice(&xs[(oo * a + k as usize) * i..(oo * a + k as usize + 1) * i]);
            }
        }
        write_f32(y, &ys)
    }

    fn one_hot(&self, labels: &Tensor, y: &Tensor) -> Result<()> {
        let c = y.shape()[1];
        let mut ys = crate::tensor::host_vec(y.numel(), 0f32)?;
        for (n, &l) in labels.to_vec::<i32>()?.iter().enumerate() {
            ys[n * c + l as usize] = 1.0;
        }
        write_f32(y, &ys)
    }

    fn pad2d(&self, src: &Tensor, dst: &Tensor, pad: Pad) -> Result<()> {
        let (top, left, reflect, back) = (pad.top, pad.left, pad.reflect, pad.back);
        let (x, y) = if back { (dst, src) } else { (src, dst) };
        let (xs, ys) = (x.shape().to_vec(), y.shape().to_vec());
        let (planes, h, w, oh, ow) = (xs[0] * xs[1], xs[2], xs[3], ys[2], ys[3]);
        let s = read_f32(src)?;
        let mut d = crate::tensor::host_vec(dst.numel(), 0f32)?;
        each_pixel(planes, oh, ow, |p, a, b| {
            let (hs, ws) = (
                pad_src(a as isize - top as isize, h, reflect),
                pad_src(b as isize - left as isize, w, reflect),
            );
            let (Some(hh), Some(ww)) = (hs, ws) else {
                return;
            };
            let (xi, yi) = ((p * h + hh) * w + ww, (p * oh + a) * ow + b);
            if back {
                // The reference scatters (the kernel gathers), so the two are checked against each other.
                d[xi] += s[yi];
            } else {
                d[yi] = s[xi];
            }
        });
        write_f32(dst, &d)
    }
}
