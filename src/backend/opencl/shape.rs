//! OpenCL data movement: the `shape` kernels (permute, block copies, gathers, one-hot, padding, top-k).

// The kernels' parameter names (`O`, `H`, `sA`, …) name the local values built for them.
#![allow(non_snake_case)]

use super::elementwise::{grid_3d, half_defines};
use crate::backend::opencl::ClDevice;
use crate::backend::opencl::abi::shape as abi;
use crate::backend::opencl::program::Defines;
use crate::contract::ShapeKernels;
use crate::contract::reduce::Ori;
use crate::contract::shape::{Block, Pad, TopK};
use crate::error::Result;
use crate::tensor::Tensor;

/// The f16 switches of a one-input, one-output kernel (kernels/prelude.cl): `IN_HALF` for `x`, `OUT_HALF` for
/// `y`; an all-f32 call keeps the empty defines, and so its program.
pub(crate) fn io_defines(x: &Tensor, y: &Tensor) -> Defines {
    half_defines(Defines::new(), &[("IN_HALF", x), ("OUT_HALF", y)])
}

fn int8(v: &[usize]) -> [i32; 8] {
    let mut out = [1i32; 8];
    for (k, x) in v.iter().enumerate() {
        out[k] = *x as i32;
    }
    out
}

impl ShapeKernels for ClDevice {
    fn topk(&self, x: &Tensor, t: TopK, vals: &Tensor, idx: &Tensor) -> Result<()> {
        let (Ori { o, r, i }, k, largest) = (t.v, t.k, t.largest);
        let [O, R, I, k, largest] = [o, r, i, k, usize::from(largest)].map(|v| v as i32);
        let d = io_defines(x, vals);
        let (x, vals, idx) = (x.storage(), vals.storage(), idx.storage());
        let args = abi::Topk {
            O,
            R,
            I,
            k,
            largest,
            x,
            vals,
            idx,
        };
        self.run_1d(abi::TOPK, &d, &args, o * i, Some(64))?;
        Ok(())
    }

    fn permute(&self, x: &Tensor, oshape: &[usize], istride: &[usize], y: &Tensor) -> Result<()> {
        let n = y.numel();
        let args = abi::Permute {
            n: n as i32,
            rank: oshape.len() as i32,
            oshape: int8(oshape),
            istride: int8(istride),
            x: x.storage(),
            y: y.storage(),
        };
        let d = io_defines(x, y);
        self.run_1d(abi::PERMUTE, &d, &args, n, Some(256))?;
        Ok(())
    }

    fn block_copy(&self, x: &Tensor, y: &Tensor, b: Block) -> Result<()> {
        let [O, len, I, sA, soff, dA, doff] =
            [b.o, b.len, b.i, b.sa, b.soff, b.da, b.doff].map(|v| v as i32);
        let d = io_defines(x, y);
        let (x, y) = (x.storage(), y.storage());
        let args = abi::BlockCopy {
            O,
            len,
            I,
            sA,
            soff,
            dA,
            doff,
            x,
            y,
        };
        self.run_grid(abi::BLOCK_COPY, &d, &args, [b.i, b.len, b.o])?;
        Ok(())
    }

    fn index_select(&self, x: &Tensor, idx: &Tensor, v: Ori, y: &Tensor) -> Result<()> {
        let Ori { o, r: a, i } = v;
        let kk = idx.numel();
        let [O, K, A, I] = [o, kk, a, i].map(|v| v as i32);
        let d = io_defines(x, y);
        let (x, idx, y) = (x.storage(), idx.storage(), y.storage());
        let args = abi::IndexSelect {
            O,
            K,
            A,
            I,
            x,
            idx,
            y,
        };
        self.run_grid(abi::INDEX_SELECT, &d, &args, [i, kk, o])?;
        Ok(())
    }

    fn one_hot(&self, labels: &Tensor, y: &Tensor) -> Result<()> {
        let d = half_defines(Defines::new(), &[("OUT_HALF", y)]);
        let k = self.kernel(abi::FAMILY, &d, abi::ONE_HOT)?;
        let (n, c) = (y.shape()[0], y.shape()[1]);
        let args = abi::OneHot {
            N: n as i32,
            C: c as i32,
            labels: labels.storage(),
            y: y.storage(),
        };
        let range = [c, n, 1];
        // one_hot strides over rows itself, so it needs no GRID_LOOP build.
        let (range, l, _) = grid_3d(self, range);
        self.run(&k, &args, &range[..2], Some(&l[..2]))?;
        Ok(())
    }

    fn pad2d(&self, src: &Tensor, dst: &Tensor, pad: Pad) -> Result<()> {
        let (top, left, back) = (pad.top, pad.left, pad.back);
        let (x, y) = if back { (dst, src) } else { (src, dst) };
        let (xs, ys) = (x.shape(), y.shape());
        let [P, H, W, OH, OW, pt, pl] =
            [xs[0] * xs[1], xs[2], xs[3], ys[2], ys[3], top, left].map(|v| v as i32);
        let reflect = i32::from(pad.reflect);
        let d = io_defines(src, dst);
        let (src, dst) = (src.storage(), dst.storage());
        if back {
            let args = abi::Pad2dBwd {
                P,
                H,
                W,
                OH,
                OW,
                pt,
                pl,
                reflect,
                g: src,
                gx: dst,
            };
            self.run_grid(abi::PAD2D_BWD, &d, &args, [xs[3], xs[2], xs[0] * xs[1]])?;
        } else {
            let args = abi::Pad2d {
                P,
                H,
                W,
                OH,
                OW,
                pt,
                pl,
                reflect,
                x: src,
                y: dst,
            };
            self.run_grid(abi::PAD2D, &d, &args, [ys[3], ys[2], ys[0] * ys[1]])?;
        }
        Ok(())
    }
}
