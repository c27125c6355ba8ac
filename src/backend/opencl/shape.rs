//! OpenCL data movement: the `shape` kernels (permute, block copies, gathers, one-hot, padding, top-k).

use super::elementwise::{grid_3d, grid_defines};
use crate::backend::opencl::program::Defines;
use crate::backend::opencl::{Arg, ClDevice};
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
        let kern = self.kernel("shape", &Defines::new(), "topk")?;
        let mut args: Vec<Arg> = [o, r, i, k].iter().map(|&v| Arg::I32(v as i32)).collect();
        args.push(Arg::I32(i32::from(largest)));
        args.extend([
            Arg::Mem(x.storage()),
            Arg::Mem(vals.storage()),
            Arg::Mem(idx.storage()),
        ]);
        self.launch(
            &kern,
            &args,
            &[o * i],
            Some(&[64.min(self.info.max_work_group_size.max(1))]),
        )?;
        Ok(())
    }

    fn permute(&self, x: &Tensor, oshape: &[usize], istride: &[usize], y: &Tensor) -> Result<()> {
        let k = self.kernel("shape", &Defines::new(), "permute")?;
        let n = y.numel();
        let args = [
            Arg::I32(n as i32),
            Arg::I32(oshape.len() as i32),
            Arg::I32x8(int8(oshape)),
            Arg::I32x8(int8(istride)),
            Arg::Mem(x.storage()),
            Arg::Mem(y.storage()),
        ];
        self.launch(
            &k,
            &args,
            &[n],
            Some(&[256.min(self.info.max_work_group_size.max(1))]),
        )?;
        Ok(())
    }

    fn block_copy(&self, x: &Tensor, y: &Tensor, b: Block) -> Result<()> {
        let k = self.kernel("shape", &Defines::new(), "block_copy")?;
        let args = [b.o, b.len, b.i, b.sa, b.soff, b.da, b.doff].map(|v| Arg::I32(v as i32));
        let mut args: Vec<Arg> = args.into_iter().collect();
        args.push(Arg::Mem(x.storage()));
        args.push(Arg::Mem(y.storage()));
        let range = [b.i, b.len, b.o];
        let (range, local, capped) = grid_3d(self, range);
        let k = if capped {
            self.kernel("shape", &grid_defines(&Defines::new(), true), &k.name)?
        } else {
            k
        };
        self.launch(&k, &args, &range, Some(&local))?;
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
        let k = self.kernel("shape", &Defines::new(), "index_select")?;
        let kk = idx.numel();
        let args = [
            Arg::I32(o as i32),
            Arg::I32(kk as i32),
            Arg::I32(a as i32),
            Arg::I32(i as i32),
            Arg::Mem(x.storage()),
            Arg::Mem(idx.storage()),
            Arg::Mem(y.storage()),
        ];
        let range = [i, kk, o];
        let (range, local, capped) = grid_3d(self, range);
        let k = if capped {
            self.kernel("shape", &grid_defines(&Defines::new(), true), &k.name)?
        } else {
            k
        };
        self.launch(&k, &args, &range, Some(&local))?;
        Ok(())
    }

    fn one_hot(&self, labels: &Tensor, y: &Tensor) -> Result<()> {
        let k = self.kernel("shape", &Defines::new(), "one_hot")?;
        let (n, c) = (y.shape()[0], y.shape()[1]);
        let args = [
            Arg::I32(n as i32),
            Arg::I32(c as i32),
            Arg::Mem(labels.storage()),
            Arg::Mem(y.storage()),
        ];
        let range = [c, n, 1];
        // one_hot strides over rows itself, so it needs no GRID_LOOP build.
        let (range, l, _) = grid_3d(self, range);
        self.launch(&k, &args, &range[..2], Some(&l[..2]))?;
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
        let k = self.kernel(
            "shape",
            &Defines::new(),
            if back { "pad2d_bwd" } else { "pad2d" },
        )?;
        let mut args: Vec<Arg> = [xs[0] * xs[1], xs[2], xs[3], ys[2], ys[3], top, left]
            .iter()
            .map(|&v| Arg::I32(v as i32))
            .collect();
        args.push(Arg::I32(i32::from(reflect)));
        args.push(Arg::Mem(src.storage()));
        args.push(Arg::Mem(dst.storage()));
        let range = if back {
            [xs[3], xs[2], xs[0] * xs[1]]
        } else {
            [ys[3], ys[2], ys[0] * ys[1]]
        };
        let (range, local, capped) = grid_3d(self, range);
        let k = if capped {
            self.kernel("shape", &grid_defines(&Defines::new(), true), &k.name)?
        } else {
            k
        };
        self.launch(&k, &args, &range, Some(&local))?;
        Ok(())
    }
}
