//! Optimisers with their update on the device, gradient clipping, learning-rate schedules and a weight EMA.
//!
//! Update rules (netcl's, §7.3 of its inventory, without its defects):
//! - SGD: g ← g + wd·p; with momentum μ, v ← μv + g and g ← v (Nesterov: g + μv); p ← p − lr·g.
//! - Adam: g ← g + wd·p; m ← β1m + (1−β1)g; v ← β2v + (1−β2)g²; p ← p − lr·(m/(1−β1ᵗ))/(√(v/(1−β2ᵗ)) + ε).
//! - AdamW: as Adam with decoupled decay p ← p − lr·wd·p before the step.
//! - RMSProp: s ← αs + (1−α)g²; step = g/(√s + ε); with momentum μ, b ← μb + lr·step and p ← p − b.
//!
//! Every optimiser has a state that can be saved and restored (`state_dict`), Adam included.

mod schedule;

mod scaler;
pub use scaler::GradScaler;
pub use schedule::{CosineAnnealingLR, ReduceLROnPlateau, StepLR, WarmupCosine};

use serde::{Deserialize, Serialize};

use crate::autograd::Var;
use crate::contract::update::StepOp;
use crate::error::{Error, Result};
use crate::ops::update::{Step, apply_steps_unless, ema_update, scale_inplace};
use crate::tensor::Tensor;

/// Which update rule, with its hyper-parameters (the learning rate lives in [`Optimizer`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Rule {
    /// Stochastic gradient descent.
    Sgd {
        /// Momentum μ (0: none).
        momentum: f32,
        /// Nesterov momentum.
        nesterov: bool,
        /// L2 weight decay.
        weight_decay: f32,
    },
    /// Adam with L2 weight decay.
    Adam {
        /// β1.
        beta1: f32,
        /// β2.
        beta2: f32,
        /// ε.
        eps: f32,
        /// L2 weight decay.
        weight_decay: f32,
    },
    /// Adam with decoupled weight decay.
    AdamW {
        /// β1.
        beta1: f32,
        /// β2.
        beta2: f32,
        /// ε.
        eps: f32,
        /// Decoupled weight decay.
        weight_decay: f32,
    },
    /// RMSProp.
    RmsProp {
        /// Smoothing α.
        alpha: f32,
        /// ε.
        eps: f32,
        /// L2 weight decay.
        weight_decay: f32,
        /// Momentum μ (0: none).
        momentum: f32,
    },
}

impl Rule {
    fn check(&self) -> Result<()> {
        let unit = |name: &str, v: f32| -> Result<()> {
            if (0.0..1.0).contains(&v) {
                Ok(())
            } else {
                Err(Error::Invalid(format!("{name} = {v} must lie in [0, 1)")))
            }
        };
        let nonneg = |name: &str, v: f32| -> Result<()> {
            if v.is_finite() && v >= 0.0 {
                Ok(())
            } else {
                Err(Error::Invalid(format!(
                    "{name} = {v} must be finite and ≥ 0"
                )))
            }
        };
        let positive = |name: &str, v: f32| -> Result<()> {
            if v > 0.0 && v.is_finite() {
                Ok(())
            } else {
                Err(Error::Invalid(format!("{name} = {v} must be > 0")))
            }
        };
        // The device step carries every hyper-parameter under one variant per family.
        match self.step(1.0, 1) {
            Step::Sgd { momentum, wd, .. } => {
                unit("momentum", momentum)?;
                nonneg("weight_decay", wd)
            }
            Step::Adam {
                b1, b2, eps, wd, ..
            } => {
                unit("beta1", b1)?;
                unit("beta2", b2)?;
                nonneg("weight_decay", wd)?;
                positive("eps", eps)
            }
            Step::RmsProp {
                alpha,
                eps,
                wd,
                momentum,
                ..
            } => {
                unit("alpha", alpha)?;
                unit("momentum", momentum)?;
                nonneg("weight_decay", wd)?;
                positive("eps", eps)
            }
        }
    }

    /// The device step of this rule at learning rate `lr` and step number `t` (1 for the first).
    fn step(&self, lr: f32, t: i32) -> Step {
        match *self {
            Rule::Sgd {
                momentum,
                nesterov,
                weight_decay,
            } => Step::Sgd {
                lr,
                wd: weight_decay,
                momentum,
                nesterov,
            },
            Rule::Adam {
                beta1,
                beta2,
                eps,
                weight_decay,
            }
            | Rule::AdamW {
                beta1,
                beta2,
                eps,
                weight_decay,
            } => Step::Adam {
                lr,
                b1: beta1,
                b2: beta2,
                eps,
                wd: weight_decay,
                decoupled: matches!(self, Rule::AdamW { .. }),
                bc1: 1.0 - beta1.powi(t),
                bc2: 1.0 - beta2.powi(t),
            },
            Rule::RmsProp {
                alpha,
                eps,
                weight_decay,
                momentum,
            } => Step::RmsProp {
                lr,
                alpha,
                eps,
                wd: weight_decay,
                momentum,
            },
        }
    }

    fn buffers(&self) -> usize {
        match self {
            Rule::Sgd { .. } => 1,
            _ => 2,
        }
    }

    /// The rule's name (`sgd`, `adam`, `adamw`, `rmsprop`).
    pub fn name(&self) -> &'static str {
        match self {
            Rule::Sgd { .. } => "sgd",
            Rule::Adam { .. } => "adam",
            Rule::AdamW { .. } => "adamw",
            Rule::RmsProp { .. } => "rmsprop",
        }
    }
}

/// Saved optimiser state: the rule, the learning rate, the step count and every state buffer on the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OptimState {
    /// The update rule.
    pub rule: Rule,
    /// The learning rate.
    pub lr: f32,
    /// Steps taken.
    pub t: u64,
    /// Per parameter: its state buffers (empty until the parameter's first step).
    pub buffers: Vec<Vec<Vec<f32>>>,
}

/// An optimiser over a list of parameters.
pub struct Optimizer {
    params: Vec<Var>,
    rule: Rule,
    lr: f32,
    t: u64,
    state: Vec<Vec<Tensor>>,
}

impl Optimizer {
    /// An optimiser with `rule` and learning rate `lr` over `params` (leaves that require gradients).
    pub fn new(params: Vec<Var>, rule: Rule, lr: f32) -> Result<Self> {
        rule.check()?;
        check_lr(lr)?;
        if let Some(p) = params.iter().find(|p| !p.is_leaf()) {
            return Err(Error::Invalid(format!(
                "optimizer parameters must be leaves; got the output of {}",
                p.op_name()
            )));
        }
        let n = params.len();
        Ok(Optimizer {
            params,
            rule,
            lr,
            t: 0,
            state: vec![Vec::new(); n],
        })
    }

    /// SGD with momentum μ (0: none) and L2 weight decay.
    pub fn sgd(params: Vec<Var>, lr: f32, momentum: f32, weight_decay: f32) -> Result<Self> {
        Optimizer::new(
            params,
            Rule::Sgd {
                momentum,
                nesterov: false,
                weight_decay,
            },
            lr,
        )
    }

    /// Adam with the usual β = (0.9, 0.999), ε = 1e-8.
    pub fn adam(params: Vec<Var>, lr: f32, weight_decay: f32) -> Result<Self> {
        Optimizer::new(
            params,
            Rule::Adam {
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay,
            },
            lr,
        )
    }

    /// AdamW with β = (0.9, 0.999), ε = 1e-8.
    pub fn adamw(params: Vec<Var>, lr: f32, weight_decay: f32) -> Result<Self> {
        Optimizer::new(
            params,
            Rule::AdamW {
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay,
            },
            lr,
        )
    }

    /// RMSProp with α = 0.99, ε = 1e-8.
    pub fn rmsprop(params: Vec<Var>, lr: f32, momentum: f32) -> Result<Self> {
        Optimizer::new(
            params,
            Rule::RmsProp {
                alpha: 0.99,
                eps: 1e-8,
                weight_decay: 0.0,
                momentum,
            },
            lr,
        )
    }

    /// The learning rate.
    pub fn lr(&self) -> f32 {
        self.lr
    }

    /// Sets the learning rate (schedulers call this).
    pub fn set_lr(&mut self, lr: f32) -> Result<()> {
        check_lr(lr)?;
        self.lr = lr;
        Ok(())
    }

    /// The update rule.
    pub fn rule(&self) -> Rule {
        self.rule
    }

    /// Steps taken.
    pub fn steps(&self) -> u64 {
        self.t
    }

    /// The parameters.
    pub fn params(&self) -> &[Var] {
        &self.params
    }

    /// Forgets every parameter's gradient.
    pub fn zero_grad(&self) {
        self.params.iter().for_each(Var::zero_grad);
    }

    /// One update of every parameter that has a gradient (frozen ones and those without a gradient are skipped).
    pub fn step(&mut self) -> Result<()> {
        self.step_unless(None)
    }

    /// [`Optimizer::step`] whose kernels skip the update on the device when the found-inf flag of the
    /// GradScaler state `skip` is set (see [`GradScaler`]).
    pub(crate) fn step_unless(&mut self, skip: Option<&Tensor>) -> Result<()> {
        // Every parameter's state exists before the step, so the device can update many in one launch.
        let mut grads = Vec::with_capacity(self.params.len());
        for (p, st) in self.params.iter().zip(self.state.iter_mut()) {
            let Some(g) = p.grad() else { continue };
            if !p.requires_grad() {
                continue;
            }
            if st.is_empty() {
                for _ in 0..self.rule.buffers() {
                    st.push(Tensor::zeros(p.value().device(), p.shape())?);
                }
            }
            grads.push((p.value(), g, st.iter().collect::<Vec<&Tensor>>()));
        }
        let step = self.rule.step(self.lr, self.t as i32 + 1);
        let ops: Vec<StepOp<'_>> = grads
            .iter()
            .map(|(p, g, st)| StepOp::new(p, g, st, skip))
            .collect();
        apply_steps_unless(&step, &ops)?;
        self.t += 1;
        Ok(())
    }

    /// The optimiser's state, copied to the host.
    pub fn state_dict(&self) -> Result<OptimState> {
        let buffers = self
            .state
            .iter()
            .map(|st| {
                st.iter()
                    .map(|t| t.to_vec::<f32>())
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<_>>()?;
        Ok(OptimState {
            rule: self.rule,
            lr: self.lr,
            t: self.t,
            buffers,
        })
    }

    /// Restores a state saved by [`Optimizer::state_dict`] for the same parameter list; on a mismatch nothing changes.
    pub fn load_state_dict(&mut self, s: &OptimState) -> Result<()> {
        if s.rule.name() != self.rule.name() {
            return Err(Error::Invalid(format!(
                "state of a {} optimizer cannot load into {}",
                s.rule.name(),
                self.rule.name()
            )));
        }
        if s.buffers.len() != self.params.len() {
            return Err(Error::Shape(format!(
                "state has {} parameters, the optimizer {}",
                s.buffers.len(),
                self.params.len()
            )));
        }
        let mut new_state = Vec::with_capacity(self.params.len());
        for (i, (p, bufs)) in self.params.iter().zip(&s.buffers).enumerate() {
            if !bufs.is_empty() && bufs.len() != s.rule.buffers() {
                return Err(Error::Shape(format!(
                    "parameter {i}: {} state buffers, expected {}",
                    bufs.len(),
                    s.rule.buffers()
                )));
            }
            let mut st = Vec::with_capacity(bufs.len());
            for b in bufs {
                st.push(
                    Tensor::from_slice(p.value().device(), b, p.shape()).map_err(|e| {
                        Error::Shape(format!("parameter {i} of shape {:?}: {e}", p.shape()))
                    })?,
                );
            }
            new_state.push(st);
        }
        s.rule.check()?;
        check_lr(s.lr)?;
        self.rule = s.rule;
        self.lr = s.lr;
        self.t = s.t;
        self.state = new_state;
        Ok(())
    }
}

fn check_lr(lr: f32) -> Result<()> {
    if lr.is_finite() && lr >= 0.0 {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "learning rate {lr} must be finite and ≥ 0"
        )))
    }
}

/// The global L2 norm of every gradient; when it exceeds `max_norm`, scales them all by `max_norm / norm`.
///
/// Returns the norm before clipping. Parameters without a gradient are ignored.
pub fn clip_grad_norm(params: &[Var], max_norm: f32) -> Result<f32> {
    if !(max_norm.is_finite() && max_norm > 0.0) {
        return Err(Error::Invalid(format!(
            "max_norm {max_norm} must be finite and > 0"
        )));
    }
    let grads: Vec<Tensor> = params.iter().filter_map(Var::grad).collect();
    if grads.is_empty() {
        return Ok(0.0);
    }
    let refs: Vec<&Tensor> = grads.iter().collect();
    let norm = crate::ops::global_l2_norm(&refs)?.to_vec::<f32>()?[0];
    if norm > max_norm {
        let s = max_norm / (norm + 1e-6);
        for g in &grads {
            scale_inplace(s, g)?;
        }
    }
    Ok(norm)
}

/// An exponential moving average of parameters: shadow ← d·shadow + (1 − d)·p with the warm-up
/// d = min(decay, (1 + step)/(10 + step)).
pub struct Ema {
    decay: f32,
    steps: u64,
    shadows: Vec<Tensor>,
}

impl Ema {
    /// Starts from copies of the parameters' current values.
    pub fn new(params: &[Var], decay: f32) -> Result<Self> {
        if !(0.0..=1.0).contains(&decay) {
            return Err(Error::Invalid(format!(
                "EMA decay {decay} must lie in [0, 1]"
            )));
        }
        let shadows = params
            .iter()
            .map(|p| p.value().deep_clone())
            .collect::<Result<_>>()?;
        Ok(Ema {
            decay,
            steps: 0,
            shadows,
        })
    }

    /// Folds the parameters' current values into the average.
    pub fn update(&mut self, params: &[Var]) -> Result<()> {
        if params.len() != self.shadows.len() {
            return Err(Error::Shape(format!(
                "EMA tracks {} parameters, got {}",
                self.shadows.len(),
                params.len()
            )));
        }
        let d = self
            .decay
            .min((1.0 + self.steps as f32) / (10.0 + self.steps as f32));
        for (s, p) in self.shadows.iter().zip(params) {
            ema_update(d, s, p.value())?;
        }
        self.steps += 1;
        Ok(())
    }

    /// The averaged values, in parameter order.
    pub fn averaged(&self) -> &[Tensor] {
        &self.shadows
    }
}
