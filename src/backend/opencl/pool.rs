//! OpenCL pooling: the `pool` kernels over a 3-D grid of output (or input) positions and planes.

use super::elementwise::{grid_3d, grid_defines};
use crate::backend::opencl::ClDevice;
use crate::backend::opencl::abi::{KernelArgs, pool as abi};
use crate::backend::opencl::program::Defines;
use crate::contract::PoolKernels;
use crate::contract::pool::Pool2d;
use crate::error::Result;
use crate::tensor::Tensor;

/// The window's kernel, stride and padding as the pool kernels' six int arguments.
fn window_args(p: &Pool2d) -> [i32; 6] {
    [
        p.kernel.0,
        p.kernel.1,
        p.stride.0,
        p.stride.1,
        p.padding.0,
        p.padding.1,
    ]
    .map(|v| v as i32)
}

fn geometry(x_shape: &[usize], y_shape: &[usize]) -> [i32; 5] {
    [
        x_shape[0] * x_shape[1],
        x_shape[2],
        x_shape[3],
        y_shape[2],
        y_shape[3],
    ]
    .map(|v| v as i32)
}

impl ClDevice {
    /// Launches pool kernel `name` with `args` over the 3-D `range` (the GRID_LOOP build where the range is
    /// capped).
    fn pool_launch<'a, A: KernelArgs<'a>>(
        &self,
        name: &str,
        args: &A,
        range: [usize; 3],
    ) -> Result<()> {
        let (range, local, capped) = grid_3d(self, range);
        let k = self.kernel(abi::FAMILY, &grid_defines(&Defines::new(), capped), name)?;
        self.run(&k, args, &range, Some(&local))?;
        Ok(())
    }
}

impl PoolKernels for ClDevice {
    fn maxpool(&self, x: &Tensor, p: &Pool2d, y: &Tensor, idx: &Tensor) -> Result<()> {
        let [planes, h, w, oh, ow] = geometry(x.shape(), y.shape());
        let [kh, kw, sh, sw, ph, pw] = window_args(p);
        let args = abi::MaxpoolFwd {
            P: planes,
            H: h,
            W: w,
            OH: oh,
            OW: ow,
            kh,
            kw,
            sh,
            sw,
            ph,
            pw,
            x: x.storage(),
            y: y.storage(),
            idx: idx.storage(),
        };
        let range = [ow, oh, planes].map(|v| v as usize);
        self.pool_launch(abi::MAXPOOL_FWD, &args, range)
    }
    fn maxpool_backward(&self, g: &Tensor, idx: &Tensor, p: &Pool2d, gx: &Tensor) -> Result<()> {
        let [planes, h, w, oh, ow] = geometry(gx.shape(), g.shape());
        let [kh, kw, sh, sw, ph, pw] = window_args(p);
        let args = abi::MaxpoolBwd {
            P: planes,
            H: h,
            W: w,
            OH: oh,
            OW: ow,
            kh,
            kw,
            sh,
            sw,
            ph,
            pw,
            g: g.storage(),
            idx: idx.storage(),
            gx: gx.storage(),
        };
        let range = [w, h, planes].map(|v| v as usize);
        self.pool_launch(abi::MAXPOOL_BWD, &args, range)
    }
    fn avgpool(&self, x: &Tensor, p: &Pool2d, incl: bool, y: &Tensor) -> Result<()> {
        let [planes, h, w, oh, ow] = geometry(x.shape(), y.shape());
        let [kh, kw, sh, sw, ph, pw] = window_args(p);
        let args = abi::AvgpoolFwd {
            P: planes,
            H: h,
            W: w,
            OH: oh,
            OW: ow,
            kh,
            kw,
            sh,
            sw,
            ph,
            pw,
            incl: i32::from(incl),
            x: x.storage(),
            y: y.storage(),
        };
        let range = [ow, oh, planes].map(|v| v as usize);
        self.pool_launch(abi::AVGPOOL_FWD, &args, range)
    }
    fn avgpool_backward(&self, g: &Tensor, p: &Pool2d, incl: bool, gx: &Tensor) -> Result<()> {
        let [planes, h, w, oh, ow] = geometry(gx.shape(), g.shape());
        let [kh, kw, sh, sw, ph, pw] = window_args(p);
        let args = abi::AvgpoolBwd {
            P: planes,
            H: h,
            W: w,
            OH: oh,
            OW: ow,
            kh,
            kw,
            sh,
            sw,
            ph,
            pw,
            incl: i32::from(incl),
            g: g.storage(),
            gx: gx.storage(),
        };
        let range = [w, h, planes].map(|v| v as usize);
        self.pool_launch(abi::AVGPOOL_BWD, &args, range)
    }
    fn gap_backward(&self, g: &Tensor, gx: &Tensor) -> Result<()> {
        let k = self.kernel(abi::FAMILY, &Defines::new(), abi::GAP_BWD)?;
        let n = gx.numel();
        let hw = gx.shape()[2] * gx.shape()[3];
        let args = abi::GapBwd {
            n: n as i32,
            HW: hw as i32,
            inv: 1.0 / hw as f32,
            g: g.storage(),
            gx: gx.storage(),
        };
        self.run(
            &k,
            &args,
            &[n],
            Some(&[256.min(self.info.max_work_group_size.max(1))]),
        )?;
        Ok(())
    }
}
