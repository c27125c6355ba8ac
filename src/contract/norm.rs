//! The normalisation family's contract: the training batch_norm2d algorithms, the tensors of one call, and
//! the device primitives of the normalisation layers.

use serde::Serialize;

use crate::device::Device;
use crate::error::Result;
use crate::tensor::Tensor;

/// The most units one item of [`BnStats::Held`] may hold in registers.
pub const MAX_HELD: usize = 32;

/// How training batch_norm2d computes its per-channel statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BnStats {
    /// `["wg", local, groups]`: work-groups of `local` items with a local-memory tree, `groups` chunks per
    /// channel, then a fold of the chunks (GPUs).
    Wg(usize, usize),
    /// `["wide", local, groups]`: as `Wg`, with four independent loads in flight per work-item and iteration.
    Wide(usize, usize),
    /// `["item", groups]`: one work-item per (channel, chunk) with float8 loads and no barriers (CPU OpenCL).
    Item(usize),
    /// `["held", local, units]`: work-groups of `local` items, each item holding `units` float4s (floats when
    /// H·W is not a multiple of 4) of its channel in registers until the channel's statistics are complete;
    /// goes with [`BnApply::Hold`].
    Held(usize, usize),
}

/// How training batch_norm2d writes its output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BnApply {
    /// One float4 (when H·W is a multiple of 4, else one float) per work-item over every element (GPUs).
    Flat,
    /// One work-item per (n, c) plane with float8 loads (CPU OpenCL).
    Plane,
    /// On the statistics pass's own (chunk, channel) work-groups, each walking its chunk from the end (what
    /// that pass read last is still cached) with four loads in flight per item, and folding the channel's
    /// partials itself: no separate finishing launch (GPUs).
    Back,
    /// One launch for everything (`bn_pipe`): work-groups take tickets in the order they start, sum their
    /// chunk, and then normalise the same chunk of the previous channel once all its chunks are summed, while
    /// that channel is still cached. Uses the statistics' `wide` chunking. Offered on GPUs: the work-groups
    /// wait for each other, which is fast only where groups that started keep running side by side; the wait
    /// is bounded, so it ends on any device.
    Pipe,
    /// One launch that reads x once (`bn_hold`, with [`BnStats::Held`]): each work-group sums a chunk it keeps
    /// in registers, waits until every chunk of its channel is summed, and normalises the chunk it holds. The
    /// wait is bounded: a group that waits too long sums the channel itself, so the kernel ends on any device,
    /// fast where a channel's groups all fit on the device at once (GPUs).
    Hold,
}

/// The training batch_norm2d kernels; autotuned per shape bucket, cached as `{"stats": [...], "apply": ...}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BatchNormAlgo {
    /// The statistics pass.
    pub stats: BnStats,
    /// The normalising pass.
    pub apply: BnApply,
}

impl Serialize for BnStats {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match *self {
            BnStats::Wg(l, g) => ("wg", l, g).serialize(s),
            BnStats::Wide(l, g) => ("wide", l, g).serialize(s),
            BnStats::Item(g) => ("item", g).serialize(s),
            BnStats::Held(l, u) => ("held", l, u).serialize(s),
        }
    }
}

/// The tensors of one training batch_norm2d call.
pub(crate) struct BnTrain<'a> {
    pub x: &'a Tensor,
    pub gamma: Option<&'a Tensor>,
    pub beta: Option<&'a Tensor>,
    pub rm: &'a Tensor,
    pub rv: &'a Tensor,
    pub momentum: f32,
    pub eps: f32,
    /// The output, shaped like `x`.
    pub y: &'a Tensor,
    /// [1, C, 1, 1] each: the batch mean and 1/√(var + ε).
    pub mean: &'a Tensor,
    pub rstd: &'a Tensor,
    /// [2, C]: γ·rstd and β per channel (the normalising pass's scale and shift).
    pub stat: &'a Tensor,
    pub rm_out: &'a Tensor,
    pub rv_out: &'a Tensor,
    /// A forced algorithm (else the autotuner chooses).
    pub algo: Option<BatchNormAlgo>,
}

/// Device primitives of the normalisation layers.
pub(crate) trait NormKernels {
    /// Training batch_norm2d: statistics over (N, H, W) per channel, the output, the running statistics.
    fn batch_norm_train(&self, device: &Device, bn: &BnTrain<'_>) -> Result<()>;
}
