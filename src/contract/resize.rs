//! The resize family's contract: the interpolation modes and the primitive a backend provides.

use crate::error::Result;
use crate::tensor::Tensor;

/// Interpolation modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upsample {
    /// `src = ⌊o·in/out⌋`.
    Nearest,
    /// Bilinear; `align_corners` maps corner to corner, else half-pixel centres (clamped at 0).
    Bilinear {
        /// Corner-aligned coordinates.
        align_corners: bool,
    },
}

operands! {
    /// One upsampling pass of `mode` between the shapes `xs` (input) and `ys` (output): forward (`back` false:
    /// `src` is x, `dst` is y) or backward (`back` true: `src` is the gradient of y, `dst` that of x).
    Upsampling {
        mode: Upsample,
        xs: &'a [usize],
        ys: &'a [usize],
        src: &'a Tensor,
        dst: &'a Tensor,
        back: bool,
    }
}

/// Device primitives for resizing.
pub(crate) trait ResizeKernels {
    /// Runs the pass `op`.
    fn upsample(&self, op: &Upsampling<'_>) -> Result<()>;
}
