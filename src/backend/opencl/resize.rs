//! Upsampling on OpenCL: `kernels/resize.cl` over a 3-D range.

use crate::backend::opencl::elementwise::{grid_3d, grid_defines};
use crate::backend::opencl::program::Defines;
use crate::backend::opencl::{Arg, ClDevice};
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
        let k = self.kernel(
            "resize",
            &d,
            if back { "upsample_bwd" } else { "upsample_fwd" },
        )?;
        let mut args: Vec<Arg> = [xs[0] * xs[1], xs[2], xs[3], ys[2], ys[3]]
            .iter()
            .map(|&v| Arg::I32(v as i32))
            .collect();
        args.push(Arg::Mem(src.storage()));
        args.push(Arg::Mem(dst.storage()));
        let range = if back {
            [xs[3], xs[2], xs[0] * xs[1]]
        } else {
            [ys[3], ys[2], ys[0] * ys[1]]
        };
        let (range, local, capped) = grid_3d(self, range);
        let k = if capped {
            self.kernel("resize", &grid_defines(&d, true), &k.name)?
        } else {
            k
        };
        self.launch(&k, &args, &range, Some(&local))?;
        Ok(())
    }
}
