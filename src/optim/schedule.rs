//! Learning-rate schedules: plain objects that compute a rate; the caller (or the trainer) sets it.

use std::f32::consts::PI;

use crate::error::{Error, Result};

fn finite_nonneg(name: &str, v: f32) -> Result<()> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "{name} = {v} must be finite and ≥ 0"
        )))
    }
}

/// Linear warm-up to `base` over `warmup` epochs, then a cosine from `base` to `min` by `max_epochs`.
///
/// Unlike netcl's, epoch 0 does not get a rate of 0: warm-up epoch e (0-based) gets base·(e+1)/warmup.
#[derive(Debug, Clone, PartialEq)]
pub struct WarmupCosine {
    base: f32,
    min: f32,
    warmup: u32,
    max_epochs: u32,
}

impl WarmupCosine {
    /// A schedule; `warmup < max_epochs`.
    pub fn new(base: f32, min: f32, warmup: u32, max_epochs: u32) -> Result<Self> {
        finite_nonneg("base", base)?;
        finite_nonneg("min", min)?;
        if warmup >= max_epochs {
            return Err(Error::Invalid(format!(
                "warmup {warmup} must be shorter than max_epochs {max_epochs}"
            )));
        }
        Ok(WarmupCosine {
            base,
            min,
            warmup,
            max_epochs,
        })
    }

    /// The rate for `epoch` (0-based); after `max_epochs` it stays at `min`.
    pub fn lr(&self, epoch: u32) -> f32 {
        if epoch < self.warmup {
            return self.base * (epoch + 1) as f32 / self.warmup as f32;
        }
        let t = ((epoch - self.warmup) as f32 / (self.max_epochs - self.warmup) as f32).min(1.0);
        self.min + 0.5 * (self.base - self.min) * (1.0 + (PI * t).cos())
    }
}

/// Cosine annealing from `base` to `eta_min` over `t_max` steps (then it stays at `eta_min`).
#[derive(Debug, Clone, PartialEq)]
pub struct CosineAnnealingLR {
    base: f32,
    eta_min: f32,
    t_max: u32,
    t: u32,
}

impl CosineAnnealingLR {
    /// A schedule over `t_max` ≥ 1 steps.
    pub fn new(base: f32, eta_min: f32, t_max: u32) -> Result<Self> {
        finite_nonneg("base", base)?;
        finite_nonneg("eta_min", eta_min)?;
        if t_max == 0 {
            return Err(Error::Invalid("t_max must be at least 1".into()));
        }
        Ok(CosineAnnealingLR {
            base,
            eta_min,
            t_max,
            t: 0,
        })
    }

    /// Advances one step and returns the new rate.
    pub fn step(&mut self) -> f32 {
        self.t = (self.t + 1).min(self.t_max);
        self.eta_min
            + 0.5
                * (self.base - self.eta_min)
                * (1.0 + (PI * self.t as f32 / self.t_max as f32).cos())
    }
}

/// Multiplies the rate by `gamma` every `step_size` steps.
#[derive(Debug, Clone, PartialEq)]
pub struct StepLR {
    base: f32,
    step_size: u32,
    gamma: f32,
    t: u32,
}

impl StepLR {
    /// A schedule; `step_size` ≥ 1, `gamma` in (0, 1].
    pub fn new(base: f32, step_size: u32, gamma: f32) -> Result<Self> {
        finite_nonneg("base", base)?;
        if step_size == 0 || !(gamma > 0.0 && gamma <= 1.0) {
            return Err(Error::Invalid(format!(
                "step_size {step_size} must be ≥ 1 and gamma {gamma} in (0, 1]"
            )));
        }
        Ok(StepLR {
            base,
            step_size,
            gamma,
            t: 0,
        })
    }

    /// Advances one step and returns the new rate.
    pub fn step(&mut self) -> f32 {
        self.t += 1;
        self.base * self.gamma.powi((self.t / self.step_size) as i32)
    }
}

/// Lowers the rate by `factor` when a metric stops improving for `patience` checks.
#[derive(Debug, Clone, PartialEq)]
pub struct ReduceLROnPlateau {
    lr: f32,
    factor: f32,
    patience: u32,
    threshold: f32,
    min_lr: f32,
    maximize: bool,
    best: Option<f32>,
    bad: u32,
}

impl ReduceLROnPlateau {
    /// Watches a metric to minimise (`maximize = false`, e.g. a loss) or maximise (accuracy).
    pub fn new(
        lr: f32,
        factor: f32,
        patience: u32,
        threshold: f32,
        min_lr: f32,
        maximize: bool,
    ) -> Result<Self> {
        finite_nonneg("lr", lr)?;
        finite_nonneg("threshold", threshold)?;
        finite_nonneg("min_lr", min_lr)?;
        if !(factor > 0.0 && factor < 1.0) {
            return Err(Error::Invalid(format!(
                "factor {factor} must lie in (0, 1)"
            )));
        }
        Ok(ReduceLROnPlateau {
            lr,
            factor,
            patience,
            threshold,
            min_lr,
            maximize,
            best: None,
            bad: 0,
        })
    }

    /// Records `metric` and returns the rate to use next. An improvement is relative: beyond best·(1 ± threshold).
    pub fn step(&mut self, metric: f32) -> f32 {
        let improved = match self.best {
            None => true,
            Some(b) if self.maximize => metric > b + b.abs() * self.threshold,
            Some(b) => metric < b - b.abs() * self.threshold,
        };
        if improved && metric.is_finite() {
            self.best = Some(metric);
            self.bad = 0;
        } else {
            self.bad += 1;
            if self.bad > self.patience {
                self.lr = (self.lr * self.factor).max(self.min_lr);
                self.bad = 0;
            }
        }
        self.lr
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_follow_their_formulas() {
        let w = WarmupCosine::new(0.1, 0.0, 2, 10).expect("w");
        assert_eq!(w.lr(0), 0.05);
        assert_eq!(w.lr(1), 0.1);
        assert!((w.lr(2) - 0.1).abs() < 1e-7);
        assert!((w.lr(6) - 0.05).abs() < 1e-6);
        assert!(w.lr(10).abs() < 1e-7 && w.lr(50).abs() < 1e-7);
        let mut c = CosineAnnealingLR::new(1.0, 0.0, 4).expect("c");
        let v: Vec<f32> = (0..5).map(|_| c.step()).collect();
        assert!(
            (v[1] - 0.5).abs() < 1e-6 && v[3].abs() < 1e-6 && v[4].abs() < 1e-6,
            "{v:?}"
        );
        let mut s = StepLR::new(1.0, 2, 0.5).expect("s");
        assert_eq!(
            (0..4).map(|_| s.step()).collect::<Vec<_>>(),
            vec![1.0, 0.5, 0.5, 0.25]
        );
        let mut p = ReduceLROnPlateau::new(1.0, 0.5, 1, 0.0, 0.1, false).expect("p");
        assert_eq!(
            [3.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0].map(|m| p.step(m)),
            [1.0, 1.0, 1.0, 0.5, 0.5, 0.25, 0.25, 0.125]
        );
        assert!(WarmupCosine::new(0.1, 0.0, 10, 10).is_err());
        assert!(StepLR::new(0.1, 0, 0.5).is_err());
        assert!(ReduceLROnPlateau::new(0.1, 1.5, 1, 0.0, 0.0, true).is_err());
    }
}
