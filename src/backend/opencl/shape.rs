//! OpenCL data movement: the `shape` kernels (permute, block copies, gathers, one-hot, padding, top-k).

use super::elementwise::{grid_3d, grid_defines};
use crate::backend::opencl::ClDevice;
use crate::backend::opencl::abi::shape as abi;
use crate::backend::opencl::program::Defines;
use crate::contract::ShapeKernels;
use crate::contract::shape::Block;
use crate::error::Result;
use crate::tensor::Tensor;

fn int8(v: &[usize]) -> [i32; 8] {
    let mut out = [1i32; 8];
    for (k, x) in v.iter().enumerate() {
        out[k] = *x as i32;
    }
    out
}

impl ShapeKernels for ClDevice {
    fn topk(
        &self,
        x: &Tensor,
        o: usize,
        r: usize,
        i: usize,
        k: usize,
        largest: bool,
        vals: &Tensor,
        idx: &Tensor,
    ) -> Result<()> {
        let kern = self.kernel(abi::FAMILY, &Defines::new(), abi::TOPK)?;
        let args = abi::Topk {
            O: o as i32,
            R: r as i32,
            I: i as i32,
            k: k as i32,
            largest: i32::from(largest),
            x: x.storage(),
            vals: vals.storage(),
            idx: idx.storage(),
        };
        self.run(
            &kern,
            &args,
            &[o * i],
            Some(&[64.min(self.info.max_work_group_size.max(1))]),
        )?;
        Ok(())
    }

    fn permute(&self, x: &Tensor, oshape: &[usize], istride: &[usize], y: &Tensor) -> Result<()> {
        let k = self.kernel(abi::FAMILY, &Defines::new(), abi::PERMUTE)?;
        let n = y.numel();
        let args = abi::Permute {
            n: n as i32,
            rank: oshape.len() as i32,
            oshape: int8(oshape),
            istride: int8(istride),
            x: x.storage(),
            y: y.storage(),
        };
        self.run(
            &k,
            &args,
            &[n],
            Some(&[256.min(self.info.max_work_group_size.max(1))]),
        )?;
        Ok(())
    }

    fn block_copy(&self, x: &Tensor, y: &Tensor, b: Block) -> Result<()> {
        let args = abi::BlockCopy {
            O: b.o as i32,
            len: b.len as i32,
            I: b.i as i32,
            sA: b.sa as i32,
            soff: b.soff as i32,
            dA: b.da as i32,
            doff: b.doff as i32,
            x: x.storage(),
            y: y.storage(),
        };
        let range = [b.i, b.len, b.o];
        let (range, local, capped) = grid_3d(self, range);
        let k = self.kernel(
            abi::FAMILY,
            &grid_defines(&Defines::new(), capped),
            abi::BLOCK_COPY,
        )?;
        self.run(&k, &args, &range, Some(&local))?;
        Ok(())
    }

    fn index_select(
        &self,
        x: &Tensor,
        idx: &Tensor,
        o: usize,
        a: usize,
        i: usize,
        y: &Tensor,
    ) -> Result<()> {
        let kk = idx.numel();
        let args = abi::IndexSelect {
            O: o as i32,
            K: kk as i32,
            A: a as i32,
            I: i as i32,
            x: x.storage(),
            idx: idx.storage(),
            y: y.storage(),
        };
        let range = [i, kk, o];
        let (range, local, capped) = grid_3d(self, range);
        let k = self.kernel(
            abi::FAMILY,
            &grid_defines(&Defines::new(), capped),
            abi::INDEX_SELECT,
        )?;
        self.run(&k, &args, &range, Some(&local))?;
        Ok(())
    }

    fn one_hot(&self, labels: &Tensor, y: &Tensor) -> Result<()> {
        let k = self.kernel(abi::FAMILY, &Defines::new(), abi::ONE_HOT)?;
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

    fn pad2d(
        &self,
        src: &Tensor,
        dst: &Tensor,
        top: usize,
        left: usize,
        reflect: bool,
        back: bool,
    ) -> Result<()> {
        let (x, y) = if back { (dst, src) } else { (src, dst) };
        let (xs, ys) = (x.shape(), y.shape());
        let [p, h, w, oh, ow, pt, pl] =
            [xs[0] * xs[1], xs[2], xs[3], ys[2], ys[3], top, left].map(|v| v as i32);
        let reflect = i32::from(reflect);
        let range = if back {
            [xs[3], xs[2], xs[0] * xs[1]]
        } else {
            [ys[3], ys[2], ys[0] * ys[1]]
        };
        let (range, local, capped) = grid_3d(self, range);
        let d = grid_defines(&Defines::new(), capped);
        if back {
            let k = self.kernel(abi::FAMILY, &d, abi::PAD2D_BWD)?;
            let args = abi::Pad2dBwd {
                P: p,
                H: h,
                W: w,
                OH: oh,
                OW: ow,
                pt,
                pl,
                reflect,
                g: src.storage(),
                gx: dst.storage(),
            };
            self.run(&k, &args, &range, Some(&local))?;
        } else {
            let k = self.kernel(abi::FAMILY, &d, abi::PAD2D)?;
            let args = abi::Pad2d {
                P: p,
                H: h,
                W: w,
                OH: oh,
                OW: ow,
                pt,
                pl,
                reflect,
                x: src.storage(),
                y: dst.storage(),
            };
            self.run(&k, &args, &range, Some(&local))?;
        }
        Ok(())
    }
}
