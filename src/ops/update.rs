//! In-place parameter updates on the device: the steps of SGD, Adam/AdamW and RMSProp, the weight EMA, and
//! in-place scaling (gradient clipping). Every hyper-parameter is a kernel argument.

use super::limit;
pub use crate::contract::update::Step;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

fn check(p: &Tensor, others: &[&Tensor], what: &str) -> Result<()> {
    p.expect_dtype(DType::F32, what)?;
    p.same_device(others, what)?;
    for o in others {
        o.expect_dtype(DType::F32, what)?;
        if o.shape() != p.shape() {
            return Err(Error::shape_mismatch(what, p.shape(), o.shape()));
        }
        if o.shares_storage(p) {
            return Err(Error::Invalid(format!(
                "{what}: a state or gradient tensor shares storage with the parameter"
            )));
        }
    }
    limit(p, what)?;
    Ok(())
}

/// Applies one optimiser step to `p` in place. `state` holds the step's buffers, zero-initialised by the caller.
pub fn apply_step(step: &Step, p: &Tensor, g: &Tensor, state: &[&Tensor]) -> Result<()> {
    let want = match step {
        Step::Sgd { .. } => 1,
        Step::Adam { .. } | Step::RmsProp { .. } => 2,
    };
    if state.len() != want {
        return Err(Error::Invalid(format!(
            "{step:?} needs {want} state tensors, got {}",
            state.len()
        )));
    }
    let mut all = vec![g];
    all.extend_from_slice(state);
    check(p, &all, "optimizer step")?;
    if p.numel() == 0 {
        return Ok(());
    }
    p.device().backend().update(step, p, g, state)
}

/// Exponential moving average of weights: shadow ← d·shadow + (1 − d)·p, in place.
pub fn ema_update(d: f32, shadow: &Tensor, p: &Tensor) -> Result<()> {
    if !(0.0..=1.0).contains(&d) {
        return Err(Error::Invalid(format!("EMA decay {d} must lie in [0, 1]")));
    }
    check(shadow, &[p], "ema")?;
    if p.numel() == 0 {
        return Ok(());
    }
    p.device().backend().ema(d, shadow, p)
}

/// Multiplies `x` by `s` in place.
pub fn scale_inplace(s: f32, x: &Tensor) -> Result<()> {
    check(x, &[], "scale_inplace")?;
    if x.numel() == 0 {
        return Ok(());
    }
    x.device().backend().scale_inplace(s, x)
}
