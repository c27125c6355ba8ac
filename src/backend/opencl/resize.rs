//! Upsampling on OpenCL: `kernels/resize.cl` over a 3-D range.

use crate::backend::opencl::ClDevice;
use crate::backend::opencl::abi::resize as abi;
use crate::backend::opencl::elementwise::{grid_3d, grid_defines};
use crate::backend::opencl::program::Defines;
use crate::contract::resize::{ResizeKernels, Upsample};
use crate::error::Result;
use crate::tensor::Tensor;

impl ResizeKernels for ClDevice {
    fn upsample(
        &self,
        mode: Upsample,
        xs: &[usize],
        ys: &[usize],
        src: &Tensor,
        dst: &Tensor,
        back: bool,
    ) -> Result<()> {
        let (bil, align) = match mode {
            Upsample::Nearest => (0, 0),
            Upsample::Bilinear { align_corners } => (1, u8::from(align_corners)),
        };
        let d = Defines::new().set("BILINEAR", bil).set("ALIGN", align);
        let [p, h, w, oh, ow] = [xs[0] * xs[1], xs[2], xs[3], ys[2], ys[3]].map(|v| v as i32);
        let range = if back {
            [xs[3], xs[2], xs[0] * xs[1]]
        } else {
            [ys[3], ys[2], ys[0] * ys[1]]
        };
        let (range, local, capped) = grid_3d(self, range);
        let d = grid_defines(&d, capped);
        if back {
            let k = self.kernel(abi::FAMILY, &d, abi::UPSAMPLE_BWD)?;
            let args = abi::UpsampleBwd {
                P: p,
                H: h,
                W: w,
                OH: oh,
                OW: ow,
                g: src.storage(),
                gx: dst.storage(),
            };
            self.run(&k, &args, &range, Some(&local))?;
        } else {
            let k = self.kernel(abi::FAMILY, &d, abi::UPSAMPLE_FWD)?;
            let args = abi::UpsampleFwd {
                P: p,
                H: h,
                W: w,
                OH: oh,
                OW: ow,
                x: src.storage(),
                y: dst.storage(),
            };
            self.run(&k, &args, &range, Some(&local))?;
        }
        Ok(())
    }
}
