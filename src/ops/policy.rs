//! The dtype policy: which dtype an op stores its output in.
//!
//! Storage and compute precision are separate: every kernel computes in f32, and an f16 tensor is only a
//! 16-bit way of storing its values. Without a policy an op's output follows one promotion rule over its float
//! inputs: f16 when every float input is f16, f32 as soon as one is f32 (the wider type wins, so no f32 value
//! is rounded behind the caller's back). Under [`autocast`] (mixed precision) the policy overrides that per
//! class of op: memory-bound ops whose cost is the bytes they move ([`OpClass::Store16`]: elementwise, unary,
//! fused, softmax, the norms' outputs, copies, and the activations GEMM and convolutions write) store f16, while
//! reductions that feed losses, the norms' statistics, the losses themselves and the optimizer's state
//! ([`OpClass::Keep32`]) stay f32. Parameters are the caller's: they stay f32 master weights.

use std::cell::Cell;

use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// How an op's output dtype is chosen under a mixed-precision policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpClass {
    /// Memory-bound: stores f16 under [`autocast`], else follows promotion.
    Store16,
    /// Numerically sensitive (reductions into losses, statistics, optimizer state): always f32.
    Keep32,
}

/// A mixed-precision policy: the dtype [`OpClass::Store16`] ops store their outputs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// The storage dtype of memory-bound outputs (f16 for mixed precision).
    pub store: DType,
}

impl Policy {
    /// netcl's mixed precision: memory-bound outputs in f16, the rest in f32.
    pub fn mixed() -> Policy {
        Policy { store: DType::F16 }
    }
}

thread_local! {
    static ACTIVE: Cell<Option<Policy>> = const { Cell::new(None) };
}

/// The policy in force on this thread, if any.
pub fn current() -> Option<Policy> {
    ACTIVE.with(Cell::get)
}

/// Restores the previous policy when dropped (see [`autocast`]).
#[must_use = "the policy holds only while the guard lives"]
pub struct AutocastGuard {
    previous: Option<Policy>,
}

impl Drop for AutocastGuard {
    fn drop(&mut self) {
        ACTIVE.with(|c| c.set(self.previous));
    }
}

/// Turns the mixed-precision policy on (`enabled`) or off for this thread until the guard drops; scopes nest.
pub fn autocast(enabled: bool) -> AutocastGuard {
    let previous = current();
    ACTIVE.with(|c| c.set(enabled.then(Policy::mixed)));
    AutocastGuard { previous }
}

/// Fails unless `t` holds floats (f32, the working type, or f16), naming `op`: a dtype mismatch that expects
/// f32.
pub(crate) fn expect_float(t: &Tensor, op: &str) -> Result<()> {
    match t.dtype() {
        DType::F32 | DType::F16 => Ok(()),
        d => Err(Error::DTypeMismatch {
            op: op.to_owned(),
            expected: DType::F32.name(),
            got: d.name(),
        }),
    }
}

/// The promotion rule: f16 when every input is f16, else f32.
pub fn promote(inputs: &[&Tensor]) -> DType {
    if !inputs.is_empty() && inputs.iter().all(|t| t.dtype() == DType::F16) {
        DType::F16
    } else {
        DType::F32
    }
}

/// Checks that every input holds floats and returns the dtype an op of `class` stores its output in.
pub(crate) fn output_dtype(class: OpClass, inputs: &[&Tensor], op: &str) -> Result<DType> {
    for t in inputs {
        expect_float(t, op)?;
    }
    Ok(match (class, current()) {
        (OpClass::Keep32, _) => DType::F32,
        (OpClass::Store16, Some(p)) => p.store,
        (OpClass::Store16, None) => promote(inputs),
    })
}

/// `t` as f32: itself when it already is, else a device cast (f16 widens exactly). For the ops whose kernels
/// read f32 only (GEMM, convolutions, attention, …): their inputs are widened on the device and their
/// outputs narrowed back, never through the host.
pub(crate) fn widen(t: &Tensor) -> Result<Tensor> {
    if t.dtype() == DType::F16 {
        t.cast(DType::F32)
    } else {
        Ok(t.clone())
    }
}

/// `t` stored as `dtype` (a device cast where it differs).
pub(crate) fn store_as(t: Tensor, dtype: DType) -> Result<Tensor> {
    if t.dtype() == dtype {
        Ok(t)
    } else {
        t.cast(dtype)
    }
}

/// Runs `f` (an op whose kernels read f32 only: GEMM, convolutions, attention, …) on `inputs` widened
/// to f32 on the device, and stores its output in the dtype the policy gives for `inputs`. All-f32 inputs
/// outside [`autocast`] go straight through. Converting costs one extra pass over each f16 input and the
/// output, which is small beside these compute-bound ops; their kernels stay one f32 source each.
pub(crate) fn via_f32(
    inputs: &[&Tensor],
    op: &str,
    f: impl FnOnce(&[&Tensor]) -> Result<Tensor>,
) -> Result<Tensor> {
    if current().is_none() && inputs.iter().all(|t| t.dtype() != DType::F16) {
        return f(inputs);
    }
    let dtype = output_dtype(OpClass::Store16, inputs, op)?;
    let wide: Vec<Tensor> = inputs.iter().map(|t| widen(t)).collect::<Result<_>>()?;
    let refs: Vec<&Tensor> = wide.iter().collect();
    let out = {
        let _f32 = autocast(false);
        f(&refs)?
    };
    store_as(out, dtype)
}
