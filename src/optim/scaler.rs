//! [`GradScaler`]: loss scaling for mixed-precision training, with every check on the device.
//!
//! f16 gradients underflow (anything below 6e-8 is zero), so the loss is multiplied by a large scale before
//! the backward pass and the gradients divided by it before the step. The scale, the count of good steps and
//! the found-inf flag live in one device buffer: one kernel pass per gradient unscales it and raises the flag
//! on a non-finite value, the optimiser's update kernels read the flag and leave every parameter and its state
//! untouched when it is set, and a one-item kernel backs the scale off (or grows it after `growth_interval`
//! good steps). A training step therefore reads nothing back to the host; [`GradScaler::get_scale`] does,
//! when asked.
//!
//! Because the host never learns whether a step was skipped, the optimiser's own step count still advances on
//! a skipped step (Adam's bias correction uses it; after the first few steps the correction is ≈ 1 and the
//! difference vanishes).

use crate::autograd::Var;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::ops::update::{amp_begin, amp_scale, amp_unscale, amp_update};
use crate::optim::Optimizer;
use crate::tensor::Tensor;

/// Dynamic loss scaling with netcl's constructor arguments (`init_scale`, `growth_factor`, `backoff_factor`,
/// `growth_interval`).
pub struct GradScaler {
    /// [scale, good steps since the last change, found-inf flag, 1/scale] on the device.
    state: Tensor,
    growth_factor: f32,
    backoff_factor: f32,
    growth_interval: u32,
    unscaled: bool,
}

impl GradScaler {
    /// A scaler on `device` starting at `init_scale` (netcl: 2^16), multiplying the scale by `growth_factor`
    /// (2.0) after `growth_interval` (2000) steps without overflow and by `backoff_factor` (0.5) after a step
    /// with one.
    pub fn new(
        device: &Device,
        init_scale: f32,
        growth_factor: f32,
        backoff_factor: f32,
        growth_interval: u32,
    ) -> Result<GradScaler> {
        if !(init_scale.is_finite() && init_scale > 0.0) {
            return Err(Error::Invalid(format!(
                "GradScaler: init_scale {init_scale} must be finite and > 0"
            )));
        }
        if !(growth_factor.is_finite() && growth_factor > 1.0) {
            return Err(Error::Invalid(format!(
                "GradScaler: growth_factor {growth_factor} must be finite and > 1"
            )));
        }
        if !(backoff_factor > 0.0 && backoff_factor < 1.0) {
            return Err(Error::Invalid(format!(
                "GradScaler: backoff_factor {backoff_factor} must lie in (0, 1)"
            )));
        }
        if growth_interval == 0 || growth_interval > i32::MAX as u32 {
            return Err(Error::Invalid(format!(
                "GradScaler: growth_interval {growth_interval} must lie in [1, {}]",
                i32::MAX
            )));
        }
        let state = Tensor::from_slice(device, &[init_scale, 0.0, 0.0, 1.0 / init_scale], &[4])?;
        Ok(GradScaler {
            state,
            growth_factor,
            backoff_factor,
            growth_interval,
            unscaled: false,
        })
    }

    /// netcl's defaults: init_scale 2^16, growth_factor 2, backoff_factor 0.5, growth_interval 2000.
    pub fn with_defaults(device: &Device) -> Result<GradScaler> {
        GradScaler::new(device, 65536.0, 2.0, 0.5, 2000)
    }

    /// `loss · scale`, differentiable (the incoming gradient times the scale), computed on the device and kept
    /// in the loss's dtype (f32 for netcl's losses) whatever the mixed-precision policy says: 2^16 itself is
    /// past f16's largest value.
    pub fn scale(&self, loss: &Var) -> Result<Var> {
        let out = amp_scale(loss.value(), &self.state)?;
        let state = self.state.clone();
        Ok(Var::from_op(
            "grad_scale",
            out,
            &[loss],
            Box::new(move |g| Ok(vec![Some(amp_scale(g, &state)?)])),
        ))
    }

    /// Divides every gradient of `opt`'s parameters by the scale in place (one kernel per gradient) and
    /// records on the device whether any value was not finite. [`GradScaler::step`] calls it unless it was
    /// called since the last [`GradScaler::update`] (to clip gradients between the two, for instance).
    pub fn unscale(&mut self, opt: &Optimizer) -> Result<()> {
        if self.unscaled {
            return Ok(());
        }
        amp_begin(&self.state)?;
        for p in opt.params() {
            if let Some(g) = p.grad() {
                amp_unscale(&g, &self.state)?;
            }
        }
        self.unscaled = true;
        Ok(())
    }

    /// Unscales (if not done yet) and takes `opt`'s step, which the update kernels skip on the device when a
    /// gradient was not finite.
    pub fn step(&mut self, opt: &mut Optimizer) -> Result<()> {
        self.unscale(opt)?;
        opt.step_unless(Some(&self.state))
    }

    /// Adjusts the scale on the device: × backoff_factor after a step with an overflow, × growth_factor after
    /// growth_interval good steps in a row.
    pub fn update(&mut self) -> Result<()> {
        amp_update(
            self.growth_factor,
            self.backoff_factor,
            self.growth_interval,
            &self.state,
        )?;
        self.unscaled = false;
        Ok(())
    }

    /// The current scale (reads the device).
    pub fn get_scale(&self) -> Result<f32> {
        Ok(self.state.to_vec::<f32>()?[0])
    }

    /// Whether the last unscale found a non-finite gradient, i.e. whether the last step was skipped (reads
    /// the device).
    pub fn found_inf(&self) -> Result<bool> {
        Ok(self.state.to_vec::<f32>()?[2] != 0.0)
    }
}
