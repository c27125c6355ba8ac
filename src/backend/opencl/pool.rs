//! OpenCL pooling: the `pool` kernels over a 3-D grid of output (or input) positions and planes.

use super::elementwise::{grid_3d, grid_defines};
use crate::backend::opencl::program::Defines;
use crate::backend::opencl::{Arg, ClDevice};
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
    #[allow(clippy::too_many_arguments)]
    fn pool_launch(
        &self,
        name: &str,
        geo: [i32; 5],
        p: &Pool2d,
        incl: Option<bool>,
        bufs: &[&Tensor],
        range: [usize; 3],
    ) -> Result<()> {
        let (range, local, capped) = grid_3d(self, range);
        let k = self.kernel("pool", &grid_defines(&Defines::new(), capped), name)?;
        let mut args: Vec<Arg> = geo
            .iter()
            .chain(window_args(p).iter())
            .map(|&v| Arg::I32(v))
            .collect();
        if let Some(i) = incl {
            args.push(Arg::I32(i32::from(i)));
        }
        args.extend(bufs.iter().map(|t| Arg::Mem(t.storage())));
        self.launch(&k, &args, &range, Some(&local))?;
        Ok(())
    }
}

impl PoolKernels for ClDevice {
    fn maxpool(&self, x: &Tensor, p: &Pool2d, y: &Tensor, idx: &Tensor) -> Result<()> {
        let g = geometry(x.shape(), y.shape());
        self.pool_launch(
            "maxpool_fwd",
            g,
            p,
            None,
            &[x, y, idx],
            [g[4] as usize, g[3] as usize, g[0] as usize],
        )
    }
    fn maxpool_backward(&self, g: &Tensor, idx: &Tensor, p: &Pool2d, gx: &Tensor) -> Result<()> {
        let geo = geometry(gx.shape(), g.shape());
        self.pool_launch(
            "maxpool_bwd",
            geo,
            p,
            None,
            &[g, idx, gx],
            [geo[2] as usize, geo[1] as usize, geo[0] as usize],
        )
    }
    fn avgpool(&self, x: &Tensor, p: &Pool2d, incl: bool, y: &Tensor) -> Result<()> {
        let g = geometry(x.shape(), y.shape());
        self.pool_launch(
            "avgpool_fwd",
            g,
            p,
            Some(incl),
            &[x, y],
            [g[4] as usize, g[3] as usize, g[0] as usize],
        )
    }
    fn avgpool_backward(&self, g: &Tensor, p: &Pool2d, incl: bool, gx: &Tensor) -> Result<()> {
        let geo = geometry(gx.shape(), g.shape());
        self.pool_launch(
            "avgpool_bwd",
            geo,
            p,
            Some(incl),
            &[g, gx],
            [geo[2] as usize, geo[1] as usize, geo[0] as usize],
        )
    }
    fn gap_backward(&self, g: &Tensor, gx: &Tensor) -> Result<()> {
        let k = self.kernel("pool", &Defines::new(), "gap_bwd")?;
        let n = gx.numel();
        let hw = gx.shape()[2] * gx.shape()[3];
        let args = [
            Arg::I32(n as i32),
            Arg::I32(hw as i32),
            Arg::F32(1.0 / hw as f32),
            Arg::Mem(g.storage()),
            Arg::Mem(gx.storage()),
        ];
        self.launch(
            &k,
            &args,
            &[n],
            Some(&[256.min(self.info.max_work_group_size.max(1))]),
        )?;
        Ok(())
    }
}
