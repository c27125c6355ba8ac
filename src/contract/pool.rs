//! The pooling family's contract: the window geometry and the device primitives for pooling.

use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// Window geometry of a 2-D pooling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool2d {
    /// Window height and width.
    pub kernel: (usize, usize),
    /// Vertical and horizontal stride.
    pub stride: (usize, usize),
    /// Zero-area padding on each side (top/bottom, left/right); at most half the window.
    pub padding: (usize, usize),
}

impl Pool2d {
    /// A square window `k` with stride `s` and padding `p`.
    pub fn square(k: usize, s: usize, p: usize) -> Pool2d {
        Pool2d {
            kernel: (k, k),
            stride: (s, s),
            padding: (p, p),
        }
    }

    pub(crate) fn out_hw(&self, h: usize, w: usize, op: &str) -> Result<(usize, usize)> {
        let (kh, kw) = self.kernel;
        let (sh, sw) = self.stride;
        let (ph, pw) = self.padding;
        if kh == 0 || kw == 0 || sh == 0 || sw == 0 {
            return Err(Error::Invalid(format!(
                "{op}: kernel {:?} and stride {:?} must be positive",
                self.kernel, self.stride
            )));
        }
        if 2 * ph > kh || 2 * pw > kw {
            return Err(Error::Invalid(format!(
                "{op}: padding {:?} must be at most half the kernel {:?}",
                self.padding, self.kernel
            )));
        }
        if h + 2 * ph < kh || w + 2 * pw < kw {
            return Err(Error::Shape(format!(
                "{op}: a {kh}×{kw} window does not fit a padded {h}×{w} input (padding {:?})",
                self.padding
            )));
        }
        Ok(((h + 2 * ph - kh) / sh + 1, (w + 2 * pw - kw) / sw + 1))
    }
}

/// Device primitives for pooling.
pub(crate) trait PoolKernels {
    /// Max pooling into `y` and `idx`.
    fn maxpool(&self, x: &Tensor, p: &Pool2d, y: &Tensor, idx: &Tensor) -> Result<()>;
    /// Routes `g` to the recorded maxima.
    fn maxpool_backward(&self, g: &Tensor, idx: &Tensor, p: &Pool2d, gx: &Tensor) -> Result<()>;
    /// Average pooling (divisor: the whole window when `incl`, else its in-bounds part).
    fn avgpool(&self, x: &Tensor, p: &Pool2d, incl: bool, y: &Tensor) -> Result<()>;
    /// Average pooling's backward.
    fn avgpool_backward(&self, g: &Tensor, p: &Pool2d, incl: bool, gx: &Tensor) -> Result<()>;
    /// Global average pooling's backward: `gx[p, :] = g[p] / HW`.
    fn gap_backward(&self, g: &Tensor, gx: &Tensor) -> Result<()>;
}
