//! The dropout family's contract: the primitive a backend provides.

use crate::error::Result;
use crate::tensor::Tensor;

/// Device primitives for dropout.
pub(crate) trait DropoutKernels {
    /// `out = keep(i) ? x·scale : 0`.
    fn dropout_apply(&self, x: &Tensor, p: f32, seed: u64, out: &Tensor) -> Result<()>;
}
