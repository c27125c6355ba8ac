//! The shape family's contract: the block-copy plan and the device primitives for data movement.

use crate::contract::reduce::Ori;
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
    /// `y[o, k, i] = x[o, idx[k], i]` over the view `[o, r, i]` of `x` (`r` the indexed axis).
    fn index_select(&self, x: &Tensor, idx: &Tensor, v: Ori, y: &Tensor) -> Result<()>;
    /// `y[n, c] = labels[n] == c`.
    fn one_hot(&self, labels: &Tensor, y: &Tensor) -> Result<()>;
    /// pad2d from `src` into `dst` as `pad` says.
    fn pad2d(&self, src: &Tensor, dst: &Tensor, pad: Pad) -> Result<()>;
    /// The first `t.k` of each lane along R of `t.v` in rank order into `vals` and `idx` (`[o, k, i]`).
    fn topk(&self, x: &Tensor, t: TopK, vals: &Tensor, idx: &Tensor) -> Result<()>;
}

/// One pad2d launch: the input's place in the output (`top` rows, `left` columns in), the border (reflected or
/// zero), and the direction: forward (`back` false: x → y) or backward (gradient of y → gradient of x).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pad {
    pub(crate) top: usize,
    pub(crate) left: usize,
    pub(crate) reflect: bool,
    pub(crate) back: bool,
}

/// One top-k: the `k` largest (`largest`) or smallest of each lane along R of the view `v`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TopK {
    pub(crate) v: Ori,
    pub(crate) k: usize,
    pub(crate) largest: bool,
}
