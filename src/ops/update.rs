//! In-place parameter updates on the device: the steps of SGD, Adam/AdamW and RMSProp, the weight EMA, and
//! in-place scaling (gradient clipping). Every hyper-parameter is a kernel argument.

use super::limit;
pub use crate::contract::update::Step;
use crate::contract::update::StepOp;
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
    apply_step_unless(step, StepOp::new(p, g, state, None))
}

/// [`apply_step`] that, with `skip` (a GradScaler state buffer), changes nothing when the buffer's found-inf
/// flag is set: the kernel reads the flag, so the host reads nothing.
pub(crate) fn apply_step_unless(step: &Step, op: StepOp<'_>) -> Result<()> {
    apply_steps_unless(step, &[op])
}

/// The operands of one step, checked: the state count of the rule, dtypes, shapes, one device, no aliasing.
fn check_step(step: &Step, op: &StepOp<'_>) -> Result<()> {
    let (p, g, state, skip) = op.parts();
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
    if let Some(s) = skip {
        check_scaler(s, p)?;
    }
    Ok(())
}

/// [`apply_step_unless`] for many parameters at once: every operand set is checked before anything changes,
/// then consecutive sets on one device go to the device together, which updates several parameters per launch
/// where it can (a parameter that appears twice is updated twice, in order, as one step each would).
pub(crate) fn apply_steps_unless(step: &Step, ops: &[StepOp<'_>]) -> Result<()> {
    for op in ops {
        check_step(step, op)?;
    }
    let live: Vec<StepOp<'_>> = ops.iter().copied().filter(|o| o.p.numel() > 0).collect();
    let mut i = 0;
    while i < live.len() {
        let dev = live[i].p.device();
        let mut j = i + 1;
        while j < live.len()
            && live[j].p.device() == dev
            && live[j].skip.map(|t| t.storage() as *const _)
                == live[i].skip.map(|t| t.storage() as *const _)
            && !live[i..j].iter().any(|o| o.p.shares_storage(live[j].p))
        {
            j += 1;
        }
        dev.backend().update_many(step, &live[i..j])?;
        i = j;
    }
    Ok(())
}

/// A GradScaler state buffer: four f32 on `like`'s device.
fn check_scaler(state: &Tensor, like: &Tensor) -> Result<()> {
    state.expect_dtype(DType::F32, "grad scaler state")?;
    like.same_device(&[state], "grad scaler")?;
    if state.shape() != [4] {
        return Err(Error::shape_mismatch(
            "grad scaler state",
            &[4],
            state.shape(),
        ));
    }
    Ok(())
}

/// Clears a GradScaler state's found-inf flag and computes 1/scale on the device.
pub(crate) fn amp_begin(state: &Tensor) -> Result<()> {
    check_scaler(state, state)?;
    state.device().backend().amp_begin(state)
}

/// Divides the gradient `g` (f32 or f16) by the scale in place, raising the state's flag on a non-finite value.
pub(crate) fn amp_unscale(g: &Tensor, state: &Tensor) -> Result<()> {
    check_scaler(state, g)?;
    super::policy::expect_float(g, "unscale")?;
    limit(g, "unscale")?;
    if g.numel() == 0 {
        return Ok(());
    }
    g.device().backend().amp_unscale(g, state)
}

/// `x · scale` in x's dtype.
pub(crate) fn amp_scale(x: &Tensor, state: &Tensor) -> Result<Tensor> {
    check_scaler(state, x)?;
    super::policy::expect_float(x, "scale")?;
    limit(x, "scale")?;
    let out = Tensor::empty(x.device(), x.shape(), x.dtype())?;
    if out.numel() > 0 {
        x.device().backend().amp_scale(x, state, &out)?;
    }
    Ok(out)
}

/// Backs the scale off after an overflow, else counts a good step and grows the scale every `interval`.
pub(crate) fn amp_update(growth: f32, backoff: f32, interval: u32, state: &Tensor) -> Result<()> {
    check_scaler(state, state)?;
    let interval = i32::try_from(interval)
        .map_err(|_| Error::Invalid(format!("growth_interval {interval} exceeds {}", i32::MAX)))?;
    state
        .device()
        .backend()
        .amp_update(growth, backoff, interval, state)
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
