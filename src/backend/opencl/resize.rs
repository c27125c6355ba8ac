//! Upsampling on OpenCL: `kernels/resize.cl` over a 3-D range.

// The kernels' parameter names (`P`, `OH`, …) name the local values built for them.
#![allow(non_snake_case)]

use crate::backend::opencl::ClDevice;
use crate::backend::opencl::abi::resize as abi;
use crate::backend::opencl::shape::io_defines;
use crate::contract::resize::{ResizeKernels, Upsample, Upsampling};
use crate::error::Result;

impl ResizeKernels for ClDevice {
    fn upsample(&self, op: &Upsampling<'_>) -> Result<()> {
        let (mode, xs, ys, src, dst, back) = op.parts();
        let (bil, align) = match mode {
            Upsample::Nearest => (0, 0),
            Upsample::Bilinear { align_corners } => (1, u8::from(align_corners)),
        };
        let d = io_defines(src, dst)
            .set("BILINEAR", bil)
            .set("ALIGN", align);
        let [P, H, W, OH, OW] = [xs[0] * xs[1], xs[2], xs[3], ys[2], ys[3]].map(|v| v as i32);
        let (src, dst) = (src.storage(), dst.storage());
        if back {
            let args = abi::UpsampleBwd {
                P,
                H,
                W,
                OH,
                OW,
                g: src,
                gx: dst,
            };
            self.run_grid(abi::UPSAMPLE_BWD, &d, &args, [xs[3], xs[2], xs[0] * xs[1]])?;
        } else {
            let args = abi::UpsampleFwd {
                P,
                H,
                W,
                OH,
                OW,
                x: src,
                y: dst,
            };
            self.run_grid(abi::UPSAMPLE_FWD, &d, &args, [ys[3], ys[2], ys[0] * ys[1]])?;
        }
        Ok(())
    }
}
