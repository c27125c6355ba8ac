//! The update family's contract: an optimiser step's hyper-parameters and the in-place primitives a backend
//! provides.

use crate::error::Result;
use crate::tensor::Tensor;

/// One optimiser step's hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Step {
    /// SGD: g ← g + wd·p; with μ ≠ 0, v ← μv + g and g ← v (Nesterov: g + μv); p ← p − lr·g.
    Sgd {
        /// Learning rate.
        lr: f32,
        /// L2 weight decay.
        wd: f32,
        /// Momentum μ (0 for none).
        momentum: f32,
        /// Nesterov momentum.
        nesterov: bool,
    },
    /// Adam (L2 decay) or AdamW (decoupled decay p ← p − lr·wd·p); `bc1`/`bc2` are 1 − β^t.
    Adam {
        /// Learning rate.
        lr: f32,
        /// β1.
        b1: f32,
        /// β2.
        b2: f32,
        /// ε.
        eps: f32,
        /// Weight decay.
        wd: f32,
        /// Decoupled (AdamW) rather than L2 decay.
        decoupled: bool,
        /// 1 − β1^t.
        bc1: f32,
        /// 1 − β2^t.
        bc2: f32,
    },
    /// RMSProp: s ← αs + (1−α)g²; step = g/(√s + ε); with μ ≠ 0, b ← μb + lr·step and p ← p − b.
    RmsProp {
        /// Learning rate.
        lr: f32,
        /// α (smoothing).
        alpha: f32,
        /// ε.
        eps: f32,
        /// L2 weight decay.
        wd: f32,
        /// Momentum μ (0 for none).
        momentum: f32,
    },
}

operands! {
    /// The tensors of one optimiser step: the parameter `p`, its gradient `g` and the step's state buffers
    /// `state` (SGD: [v]; Adam: [m, v]; RMSProp: [s, b]). With `skip` (a GradScaler state buffer) the step
    /// changes nothing when its found-inf flag is set.
    StepOp {
        p: &'a Tensor,
        g: &'a Tensor,
        state: &'a [&'a Tensor],
        skip: Option<&'a Tensor>,
    }
}

/// Device primitives for in-place updates.
pub(crate) trait UpdateKernels {
    /// Applies `step` to the operands of `op`.
    fn update(&self, step: &Step, op: StepOp<'_>) -> Result<()>;
    /// Applies `step` to every operand set of `ops` (same device, same `skip`, no empty tensor), in as few
    /// launches as the device manages; by default one [`UpdateKernels::update`] each.
    fn update_many(&self, step: &Step, ops: &[StepOp<'_>]) -> Result<()> {
        ops.iter().try_for_each(|op| self.update(step, *op))
    }
    /// shadow ← d·shadow + (1 − d)·p.
    fn ema(&self, d: f32, shadow: &Tensor, p: &Tensor) -> Result<()>;
    /// x ← s·x.
    fn scale_inplace(&self, s: f32, x: &Tensor) -> Result<()>;
    /// GradScaler state [scale, good steps, found-inf, 1/scale]: clears the flag and sets 1/scale.
    fn amp_begin(&self, state: &Tensor) -> Result<()>;
    /// g ← g/scale in place (f32 or f16), raising the flag where a result is not finite.
    fn amp_unscale(&self, g: &Tensor, state: &Tensor) -> Result<()>;
    /// out ← x·scale.
    fn amp_scale(&self, x: &Tensor, state: &Tensor, out: &Tensor) -> Result<()>;
    /// Backs the scale off after an overflow, or counts a good step and grows it every `interval` of them.
    fn amp_update(&self, growth: f32, backoff: f32, interval: i32, state: &Tensor) -> Result<()>;
}
