//! The transformer ops' contract: rotary position embedding, masked fill and the embedding gradient.

use crate::error::Result;
use crate::tensor::Tensor;

/// A rotary embedding over x viewed as [rows, d] with rows = lead·s.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RopePlan {
    pub rows: usize,
    pub s: usize,
    pub d: usize,
    pub base: f32,
    /// Rotate by the negated angle (the inverse, and the gradient).
    pub inverse: bool,
}

/// Device primitives of the transformer ops.
pub(crate) trait TransformerKernels {
    /// `y` = x with each pair (2t, 2t+1) of a row at position `pos[row mod s]` rotated.
    fn rope(&self, p: RopePlan, x: &Tensor, pos: &Tensor, y: &Tensor) -> Result<()>;
    /// `y[i] = value` where `mask[i mod mask.numel()] ≠ 0`, else `x[i]`.
    fn masked_fill(&self, x: &Tensor, mask: &Tensor, value: f32, y: &Tensor) -> Result<()>;
    /// `dw[idx[n]] += g[n]` for rows of `e` floats; `dw` arrives zeroed and indices in range.
    fn embedding_grad(&self, idx: &Tensor, g: &Tensor, e: usize, dw: &Tensor) -> Result<()>;
}
