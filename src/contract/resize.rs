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

/// Device primitives for resizing.
pub(crate) trait ResizeKernels {
    /// Forward (`back` false: x → y) or backward (`back` true: gradient of y → gradient of x).
    fn upsample(
        &self,
        mode: Upsample,
        x_shape: &[usize],
        y_shape: &[usize],
        src: &Tensor,
        dst: &Tensor,
        back: bool,
    ) -> Result<()>;
}
