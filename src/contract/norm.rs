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

/// How training batch_norm2d's backward runs; autotuned per shape bucket, cached as `"composed"`,
/// `["wg", local, groups]` or `["item", groups]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BnBackAlgo {
    /// The generic ops: four reductions over (N, H, W) and the elementwise passes between them.
    Composed,
    /// Two launches on `groups` chunks per channel: work-groups of `local` items sum Σg and Σg·(x − mean) per
    /// chunk with four loads in flight, then the same grid folds its channel's partials and writes dx walking
    /// each chunk from the end (GPUs).
    Wg(usize, usize),
    /// Two launches: one work-item per (chunk, channel) sums with float8 loads, then one work-item per (n, c)
    /// plane writes dx (CPU OpenCL).
    Item(usize),
}

impl Serialize for BnBackAlgo {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match *self {
            BnBackAlgo::Composed => "composed".serialize(s),
            BnBackAlgo::Wg(l, g) => ("wg", l, g).serialize(s),
            BnBackAlgo::Item(g) => ("item", g).serialize(s),
        }
    }
}

/// The activation that followed a training batch_norm2d, whose gradient its backward applies first: ReLU (the
/// gradient where the normalised value h > 0) or a clamp to [lo, hi] (where lo ≤ h ≤ hi; ReLU6 is (0, 6)).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ActGrad {
    /// `max(h, 0)`.
    Relu,
    /// `min(max(h, lo), hi)`.
    Clamp(f32, f32),
}

/// The tensors of one training batch_norm2d backward (all f32): the input gradient `dx` and the parameter
/// gradients from x, the output gradient `g`, γ and the forward's batch statistics.
pub(crate) struct BnBack<'a> {
    pub x: &'a Tensor,
    pub g: &'a Tensor,
    /// [1, C, 1, 1] each: the forward's batch mean and 1/√(var + ε).
    pub mean: &'a Tensor,
    pub rstd: &'a Tensor,
    pub gamma: Option<&'a Tensor>,
    /// Shaped like x.
    pub dx: &'a Tensor,
    /// [C] each: Σ g·x̂ and Σ g per channel.
    pub dgamma: &'a Tensor,
    pub dbeta: &'a Tensor,
    /// The activation after the layer and the layer's output h (its input), when its gradient is folded in.
    pub act: Option<(ActGrad, &'a Tensor)>,
    /// A forced algorithm other than `Composed` (else the autotuner chooses).
    pub algo: Option<BnBackAlgo>,
}

/// How layer_norm and rms_norm run over their rows; autotuned per shape class, cached as `"composed"`,
/// `["wg", local]`, `["reg", local, k]`, `["reg8", local, k]` or `"item"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowNormAlgo {
    /// The generic ops: reductions for the statistics, then one fused elementwise kernel for the output.
    Composed,
    /// One launch, one work-group of `local` items per row, x read twice (GPUs).
    Wg(usize),
    /// One launch, one work-group of `local` items per row holding `k` values each in registers, x read once
    /// (needs D ≤ k·local, 1 ≤ k ≤ 32).
    Reg(usize, usize),
    /// As `Reg`, for f16 rows of a multiple of 8: eight halves move as one 16-byte access and stay in
    /// registers as halves, so an item holds up to twice as many (1 ≤ k ≤ 2·[`MAX_ROW_HELD`]; forward only, the
    /// backward runs it as `Wg(local)`).
    Reg8(usize, usize),
    /// One launch, one work-item per row with float8 loads where D is a multiple of 8 and no barriers (CPU
    /// OpenCL).
    Item,
}

impl Serialize for RowNormAlgo {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match *self {
            RowNormAlgo::Composed => "composed".serialize(s),
            RowNormAlgo::Wg(l) => ("wg", l).serialize(s),
            RowNormAlgo::Reg(l, k) => ("reg", l, k).serialize(s),
            RowNormAlgo::Reg8(l, k) => ("reg8", l, k).serialize(s),
            RowNormAlgo::Item => "item".serialize(s),
        }
    }
}

/// The most values one item of [`RowNormAlgo::Reg`] holds in registers.
pub const MAX_ROW_HELD: usize = 32;

/// The tensors of one layer_norm or rms_norm call over `rows` rows of `d` contiguous elements.
pub(crate) struct RowNorm<'a> {
    pub x: &'a Tensor,
    /// γ and β of `d` elements each, when the layer has them.
    pub gamma: Option<&'a Tensor>,
    pub beta: Option<&'a Tensor>,
    pub eps: f32,
    /// Whether the rows are centred (layer_norm) or only scaled (rms_norm).
    pub center: bool,
    pub rows: usize,
    pub d: usize,
    /// The output, shaped like `x`, and the statistics, `rows` f32 each (the mean is 0 for rms_norm).
    pub y: &'a Tensor,
    pub mean: &'a Tensor,
    pub rstd: &'a Tensor,
    /// A forced algorithm (else the autotuner chooses).
    pub algo: Option<RowNormAlgo>,
}

/// The tensors of one layer_norm or rms_norm backward over `rows` rows of `d` elements: the input's gradient
/// `dx` from x, the output gradient `g`, γ and the forward's statistics.
pub(crate) struct RowNormBack<'a> {
    pub x: &'a Tensor,
    pub g: &'a Tensor,
    pub gamma: Option<&'a Tensor>,
    /// The forward's mean per row (f32) for layer_norm, whose rows are centred; `None` for rms_norm.
    pub mean: Option<&'a Tensor>,
    /// The forward's 1/√(var + ε) per row (f32).
    pub rstd: &'a Tensor,
    pub rows: usize,
    pub d: usize,
    pub dx: &'a Tensor,
    /// A forced algorithm (else the autotuner chooses); `Reg(local, _)` runs as `Wg(local)`.
    pub algo: Option<RowNormAlgo>,
}

/// Device primitives of the normalisation layers.
pub(crate) trait NormKernels {
    /// Training batch_norm2d: statistics over (N, H, W) per channel, the output, the running statistics.
    fn batch_norm_train(&self, device: &Device, bn: &BnTrain<'_>) -> Result<()>;

    /// Training batch_norm2d's backward: `Ok(true)` when the device's kernels wrote `dx`, `dgamma` and `dbeta`;
    /// `Ok(false)` when the caller runs the composed path (the built-in device has only that path).
    fn batch_norm_backward(&self, _device: &Device, _bb: &BnBack<'_>) -> Result<bool> {
        Ok(false)
    }

    /// layer_norm or rms_norm over rows: `Ok(true)` when a one-launch kernel wrote `y`, `mean` and `rstd`;
    /// `Ok(false)` when the composed path is the choice, which the caller then runs. `composed` runs that path
    /// once (the tuner times it beside the kernels). The built-in device has only its reference, the composed
    /// path.
    fn row_norm(
        &self,
        _device: &Device,
        _rn: &RowNorm<'_>,
        _composed: &mut dyn FnMut() -> Result<()>,
    ) -> Result<bool> {
        Ok(false)
    }

    /// rms_norm's input gradient over rows, as [`NormKernels::row_norm`]: `Ok(true)` when a one-launch
    /// kernel wrote `dx`, `Ok(false)` when the caller runs `composed`.
    fn rms_norm_backward_rows(
        &self,
        _device: &Device,
        _rb: &RowNormBack<'_>,
        _composed: &mut dyn FnMut() -> Result<()>,
    ) -> Result<bool> {
        Ok(false)
    }

    /// layer_norm's input gradient over rows (`rb.mean` given), as
    /// [`NormKernels::rms_norm_backward_rows`].
    fn layer_norm_backward_rows(
        &self,
        _device: &Device,
        _rb: &RowNormBack<'_>,
        _composed: &mut dyn FnMut() -> Result<()>,
    ) -> Result<bool> {
        Ok(false)
    }
}
