//! The shape family's contract: the block-copy plan and the device primitives for data movement.

use crate::error::Result;
use crate::tensor::Tensor;

/// The copy of one block: `dst[o, doff + a, i] = src[o, soff + a, i]` for `a < len`, with the axis extents
/// `sa` and `da` of the source and destination views `[o, axis, i]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Block {
    pub(crate) o: usize,
    pub(crate) len: usize,
    pub(crate) i: usize,
    pub(crate) sa: usize,
    pub(crate) soff: usize,
    pub(crate) da: usize,
    pub(crate) doff: usize,
}

/// Device primitives for data movement.
pub(crate) trait ShapeKernels {
    /// `y[i] = x[offset of i over oshape with istride]` (both innermost first).
    fn permute(&self, x: &Tensor, oshape: &[usize], istride: &[usize], y: &Tensor) -> Result<()>;
    /// One block copy from `x` into `y`.
    fn block_copy(&self, x: &Tensor, y: &Tensor, b: Block) -> Result<()>;
    /// `y[o, k, i] = x[o, idx[k], i]` over `[o, a, i]`.
    fn index_select(
        &self,
        x: &Tensor,
        idx: &Tensor,
        o: usize,
        a: usize,
        i: usize,
        y: &Tensor,
    ) -> Result<()>;
    /// `y[n, c] = labels[n] == c`.
    fn one_hot(&self, labels: &Tensor, y: &Tensor) -> Result<()>;
    /// pad2d forward (`back` false: x → y) or backward (`back` true: gradient of y → gradient of x).
    fn pad2d(
        &self,
        src: &Tensor,
        dst: &Tensor,
        top: usize,
        left: usize,
        reflect: bool,
        back: bool,
    ) -> Result<()>;
    /// The first `k` of each lane along R of `[o, r, i]` in rank order into `vals` and `idx` (`[o, k, i]`).
    #[allow(clippy::too_many_arguments)]
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
    ) -> Result<()>;
}
