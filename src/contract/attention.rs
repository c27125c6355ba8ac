//! The attention family's contract: the problem shapes, the kernel layouts the tuner chooses between, and the
//! device primitives of scaled dot-product attention (forward, backward, decode against a KV cache).

use serde::Serialize;

use crate::device::Device;
use crate::error::Result;
use crate::tensor::Tensor;

/// The largest head dimension the kernels take (their accumulators are sized by it at compile time).
pub const MAX_HEAD_DIM: usize = 256;

/// One attention problem over contiguous [B, H, S, D] tensors, B·H flattened.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttnShape {
    /// B·H.
    pub bh: usize,
    /// The sequence length (queries and keys).
    pub s: usize,
    /// The head dimension.
    pub d: usize,
    /// Whether query i sees only keys j ≤ i.
    pub causal: bool,
    /// The factor of q·k (1/√D by default).
    pub scale: f32,
}

/// How the attention kernels lay out their work; the cache form is `["tile", bq, bk, tpr]`,
/// `["block", bq, bk, rq, rk]`, `["fused", n, vw]`, `["rows", rq]` or `["lanes", vw, kb]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttnAlgo {
    /// One work-group of `bq`·`tpr` items per `bq` rows; `tpr` items share a row and the streamed operand goes
    /// through local memory in tiles of `bk` rows (GPUs).
    Tile(usize, usize, usize),
    /// One work-group of (`bq`/`rq`)·(`bk`/`rk`) items per `bq` rows (query rows; key rows in dk/dv), the other
    /// side streamed `bk` rows at a time; each item computes `rq` × `rk` blocks of scores and `rq` rows of its
    /// outputs from float4 local-memory reads; `rq` and `rk` are 4 or 8 in the forward and 4 in the backward;
    /// head dimensions a multiple of 4 up to 128 (GPUs).
    Block(usize, usize, usize, usize),
    /// The backward in one kernel (GPUs): the block layout's dk/dv kernel with `n` key rows per work-group,
    /// `n` query rows streamed and 4 × 4 register blocks, whose dS tiles also give dq, added into a zeroed dq
    /// atomically (`vw` floats per atomic instruction: 1, or 4 on NVIDIA GPUs of sm_90 and later). The scores
    /// are computed once for the three gradients; dq's sums are added in any order.
    Fused(usize, usize),
    /// One work-item per `rq` rows, private accumulators, no barriers (CPU OpenCL).
    Rows(usize),
    /// One work-item per `vw` rows held across the lanes of a float vector (4, 8 or 16), the other operand
    /// streamed `kb` rows at a time, no barriers (CPU OpenCL).
    Lanes(usize, usize),
}

impl Serialize for AttnAlgo {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match *self {
            AttnAlgo::Tile(bq, bk, t) => ("tile", bq, bk, t).serialize(s),
            AttnAlgo::Block(bq, bk, rq, rk) => ("block", bq, bk, rq, rk).serialize(s),
            AttnAlgo::Fused(n, vw) => ("fused", n, vw).serialize(s),
            AttnAlgo::Rows(r) => ("rows", r).serialize(s),
            AttnAlgo::Lanes(w, b) => ("lanes", w, b).serialize(s),
        }
    }
}

/// One decode step: a query per (b, h) against the first `len` of `cap` cached positions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecodeShape {
    /// B·H.
    pub bh: usize,
    /// The cache capacity (its third dimension).
    pub cap: usize,
    /// The number of valid cached positions, 1 ≤ len ≤ cap.
    pub len: usize,
    /// The head dimension.
    pub d: usize,
    /// The factor of q·k.
    pub scale: f32,
}

/// How a decode step splits its keys; the cache form is `["wg", local, chunks]`, `["item", chunks]` or
/// `["lanes", vw, chunks]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeAlgo {
    /// One work-group of `local` items per (b·h, chunk) of the cache (GPUs).
    Wg(usize, usize),
    /// One work-item per (b·h, chunk) (CPU OpenCL).
    Item(usize),
    /// One work-item per (b·h, chunk), vectorised along the head dimension in vectors of `vw` floats (4, 8 or
    /// 16, dividing the head dimension), no combine pass with one chunk (CPU OpenCL).
    Lanes(usize, usize),
}

impl Serialize for DecodeAlgo {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match *self {
            DecodeAlgo::Wg(l, c) => ("wg", l, c).serialize(s),
            DecodeAlgo::Item(c) => ("item", c).serialize(s),
            DecodeAlgo::Lanes(w, c) => ("lanes", w, c).serialize(s),
        }
    }
}

/// The tensors of one attention backward call.
pub(crate) struct AttnGrads<'a> {
    pub q: &'a Tensor,
    pub k: &'a Tensor,
    pub v: &'a Tensor,
    /// The forward output and its row log-sum-exp [B, H, S].
    pub o: &'a Tensor,
    pub lse: &'a Tensor,
    /// The output gradient.
    pub g: &'a Tensor,
    pub dq: &'a Tensor,
    pub dk: &'a Tensor,
    pub dv: &'a Tensor,
}

/// Device primitives of scaled dot-product attention.
pub(crate) trait AttentionKernels {
    /// `o = softmax(q·kᵀ·scale [+ causal mask])·v` and `lse` = the log-sum-exp of each score row.
    #[allow(clippy::too_many_arguments)]
    fn attention_forward(
        &self,
        device: &Device,
        p: AttnShape,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        o: &Tensor,
        lse: &Tensor,
        algo: Option<AttnAlgo>,
    ) -> Result<()>;
    /// dq, dk and dv from the forward's inputs, output, lse and the output gradient.
    fn attention_backward(
        &self,
        device: &Device,
        p: AttnShape,
        t: &AttnGrads<'_>,
        algo: Option<AttnAlgo>,
    ) -> Result<()>;
    /// One decode step: `o[b, h, 0] = softmax(q·k[:len]ᵀ·scale)·v[:len]`.
    #[allow(clippy::too_many_arguments)]
    fn attention_decode(
        &self,
        device: &Device,
        p: DecodeShape,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        o: &Tensor,
        algo: Option<DecodeAlgo>,
    ) -> Result<()>;
}
