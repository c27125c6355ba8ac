//! OpenCL pooling: the `pool` kernels over a 3-D grid of output (or input) positions and planes.

// The kernels' parameter names (`P`, `OH`, …) name the local values built for them.
#![allow(non_snake_case)]

use crate::backend::opencl::ClDevice;
use crate::backend::opencl::abi::pool as abi;
use crate::backend::opencl::shape::io_defines as io;
use crate::contract::PoolKernels;
use crate::contract::pool::Pool2d;
use crate::error::Result;
use crate::tensor::Tensor;

/// The pool kernels' argument struct `abi::$ty` for input shape `$xs`, output shape `$ys` and window `$p`,
/// with the buffers (and any other fields) given in braces.
macro_rules! pool_args {
    ($ty:ident, $xs:expr, $ys:expr, $p:expr, { $($rest:tt)* }) => {{
        let (xs, ys, p): (&[usize], &[usize], &Pool2d) = ($xs, $ys, $p);
        let [P, H, W, OH, OW] = [xs[0] * xs[1], xs[2], xs[3], ys[2], ys[3]].map(|v| v as i32);
        let (kh, kw, sh, sw, ph, pw) = (p.kernel.0, p.kernel.1, p.stride.0, p.stride.1, p.padding.0, p.padding.1);
        let [kh, kw, sh, sw, ph, pw] = [kh, kw, sh, sw, ph, pw].map(|v| v as i32);
        abi::$ty { P, H, W, OH, OW, kh, kw, sh, sw, ph, pw, $($rest)* }
    }};
}

/// The 3-D range over the planes of `s` (x fastest).
fn planes(s: &[usize]) -> [usize; 3] {
    [s[3], s[2], s[0] * s[1]]
}

impl PoolKernels for ClDevice {
    fn maxpool(&self, x: &Tensor, p: &Pool2d, y: &Tensor, idx: &Tensor) -> Result<()> {
        let (xs, ys, d) = (x.shape(), y.shape(), io(x, y));
        let (x, y, idx) = (x.storage(), y.storage(), idx.storage());
        let args = pool_args!(MaxpoolFwd, xs, ys, p, { x, y, idx });
        self.run_grid(abi::MAXPOOL_FWD, &d, &args, planes(ys))?;
        Ok(())
    }
    fn maxpool_backward(&self, g: &Tensor, idx: &Tensor, p: &Pool2d, gx: &Tensor) -> Result<()> {
        let (xs, ys, d) = (gx.shape(), g.shape(), io(g, gx));
        let (g, idx, gx) = (g.storage(), idx.storage(), gx.storage());
        let args = pool_args!(MaxpoolBwd, xs, ys, p, { g, idx, gx });
        self.run_grid(abi::MAXPOOL_BWD, &d, &args, planes(xs))?;
        Ok(())
    }
    fn avgpool(&self, x: &Tensor, p: &Pool2d, incl: bool, y: &Tensor) -> Result<()> {
        let (xs, ys, incl, d) = (x.shape(), y.shape(), i32::from(incl), io(x, y));
        let (x, y) = (x.storage(), y.storage());
        let args = pool_args!(AvgpoolFwd, xs, ys, p, { incl, x, y });
        self.run_grid(abi::AVGPOOL_FWD, &d, &args, planes(ys))?;
        Ok(())
    }
    fn avgpool_backward(&self, g: &Tensor, p: &Pool2d, incl: bool, gx: &Tensor) -> Result<()> {
        let (xs, ys, incl, d) = (gx.shape(), g.shape(), i32::from(incl), io(g, gx));
        let (g, gx) = (g.storage(), gx.storage());
        let args = pool_args!(AvgpoolBwd, xs, ys, p, { incl, g, gx });
        self.run_grid(abi::AVGPOOL_BWD, &d, &args, planes(xs))?;
        Ok(())
    }
    fn gap_backward(&self, g: &Tensor, gx: &Tensor) -> Result<()> {
        let n = gx.numel();
        let hw = gx.shape()[2] * gx.shape()[3];
        let args = abi::GapBwd {
            n: n as i32,
            HW: hw as i32,
            inv: 1.0 / hw as f32,
            g: g.storage(),
            gx: gx.storage(),
        };
        self.run_1d(abi::GAP_BWD, &io(g, gx), &args, n, Some(256))?;
        Ok(())
    }
}
