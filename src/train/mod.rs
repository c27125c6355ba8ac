//! The trainer: `fit` and `evaluate` for classifiers, returning per-epoch metrics.
//!
//! Every batch counts towards the epoch's loss and accuracy (not a sample of them). Gradient accumulation,
//! clipping and a weight EMA are options; a callback receives every step and epoch as it happens (the
//! playground streams these), and a progress bar can be drawn on the terminal.

use std::io::Write as _;
use std::time::Instant;

use serde::Serialize;

use crate::autograd::{Var, no_grad, ops as ag};
use crate::data::{Batch, DataLoader};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::nn::{Module, Sequential};
use crate::optim::{Ema, Optimizer, clip_grad_norm};
use crate::tensor::Tensor;

/// Options of [`fit`].
#[derive(Debug, Clone, PartialEq)]
pub struct FitOptions {
    /// Passes over the training data.
    pub epochs: usize,
    /// Batches whose gradients are summed before each optimiser step (≥ 1); the loss is divided by it.
    pub accumulation_steps: usize,
    /// Clip the global gradient norm to this value before each step.
    pub grad_clip: Option<f32>,
    /// Keep an exponential moving average of the weights with this decay (evaluation then uses it).
    pub ema_decay: Option<f32>,
    /// Draw a progress bar on standard error.
    pub progress_bar: bool,
}

impl Default for FitOptions {
    fn default() -> Self {
        FitOptions {
            epochs: 1,
            accumulation_steps: 1,
            grad_clip: None,
            ema_decay: None,
            progress_bar: false,
        }
    }
}

/// One epoch's results.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct EpochMetrics {
    /// 1-based epoch number.
    pub epoch: usize,
    /// Mean training loss over every batch (weighted by batch size).
    pub train_loss: f32,
    /// Training accuracy over every sample.
    pub train_accuracy: f32,
    /// Validation loss, when a validation loader was given.
    pub val_loss: Option<f32>,
    /// Validation accuracy, when a validation loader was given.
    pub val_accuracy: Option<f32>,
    /// Learning rate at the end of the epoch.
    pub lr: f32,
    /// Wall time of the epoch in seconds (training and validation).
    pub seconds: f64,
    /// Training samples per second.
    pub samples_per_second: f64,
}

/// What the callback of [`fit`] receives.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum FitEvent {
    /// After each training batch.
    Step {
        /// 1-based epoch.
        epoch: usize,
        /// 1-based batch within the epoch.
        step: usize,
        /// Batches per epoch.
        steps: usize,
        /// The batch's loss.
        loss: f32,
    },
    /// After each epoch.
    Epoch(EpochMetrics),
}

fn upload(device: &Device, b: &Batch, classes: usize) -> Result<(Tensor, Tensor)> {
    if let Some(bad) = b.y.iter().find(|&&l| l < 0 || l as usize >= classes) {
        return Err(Error::Invalid(format!(
            "label {bad} is outside [0, {classes}) for a model with {classes} outputs"
        )));
    }
    Ok((
        Tensor::from_slice(device, &b.x, &b.x_shape)?,
        Tensor::from_slice(device, &b.y, &[b.y.len()])?,
    ))
}

fn correct(logits: &Tensor, labels: &[i32]) -> Result<usize> {
    let pred = crate::ops::argmax(logits, 1, false)?.to_vec::<i32>()?;
    Ok(pred.iter().zip(labels).filter(|(p, l)| p == l).count())
}

fn classes_of(model: &mut Sequential, device: &Device, loader: &DataLoader) -> Result<usize> {
    let probe = loader
        .epoch(0)
        .next()
        .ok_or_else(|| Error::Invalid("the training data is empty".into()))?;
    let x = Tensor::from_slice(device, &probe.x, &probe.x_shape)?;
    let was = model.is_training();
    model.set_training(false);
    let out = no_grad(|| model.forward(&Var::constant(x)));
    model.set_training(was);
    let out = out?;
    match out.shape() {
        [_, c] => Ok(*c),
        s => Err(Error::Shape(format!(
            "the model must output (batch, classes) logits, got {s:?}"
        ))),
    }
}

/// Mean loss and accuracy of `model` over `loader`, in evaluation mode, without recording a graph.
pub fn evaluate(
    model: &mut Sequential,
    device: &Device,
    loader: &DataLoader,
) -> Result<(f32, f32)> {
    let was = model.is_training();
    model.set_training(false);
    let r = no_grad(|| -> Result<(f32, f32)> {
        let (mut loss, mut hits, mut n) = (0f64, 0usize, 0usize);
        for b in loader.epoch(0) {
            let classes = usize::MAX;
            let (x, y) = upload(device, &b, classes)?;
            let logits = model.forward(&Var::constant(x))?;
            let l = crate::ops::cross_entropy(logits.value(), &y, -100)?.to_vec::<f32>()?[0];
            loss += l as f64 * b.y.len() as f64;
            hits += correct(logits.value(), &b.y)?;
            n += b.y.len();
        }
        Ok((
            (loss / n.max(1) as f64) as f32,
            hits as f32 / n.max(1) as f32,
        ))
    });
    model.set_training(was);
    r
}

/// Trains `model` with `optimizer` on `train` (cross-entropy on integer labels) and evaluates on `val` after
/// each epoch. Returns one [`EpochMetrics`] per epoch; `callback` sees every step and epoch as it happens.
pub fn fit(
    model: &mut Sequential,
    optimizer: &mut Optimizer,
    device: &Device,
    train: &DataLoader,
    val: Option<&DataLoader>,
    opts: &FitOptions,
    callback: &mut dyn FnMut(&FitEvent),
) -> Result<Vec<EpochMetrics>> {
    if opts.accumulation_steps == 0 {
        return Err(Error::Invalid(
            "accumulation_steps must be at least 1".into(),
        ));
    }
    let classes = classes_of(model, device, train)?;
    let params = model.parameters();
    let mut ema = opts.ema_decay.map(|d| Ema::new(&params, d)).transpose()?;
    let steps = train.len();
    let mut history = Vec::with_capacity(opts.epochs);
    for epoch in 1..=opts.epochs {
        let started = Instant::now();
        model.set_training(true);
        optimizer.zero_grad();
        let (mut loss_sum, mut hits, mut seen) = (0f64, 0usize, 0usize);
        for (i, b) in train.epoch(epoch as u64).enumerate() {
            let (x, y) = upload(device, &b, classes)?;
            let logits = model.forward(&Var::constant(x))?;
            let loss = ag::cross_entropy(&logits, &y, -100)?;
            let value = loss.value().to_vec::<f32>()?[0];
            if !value.is_finite() {
                return Err(Error::Invalid(format!(
                    "the loss became {value} at epoch {epoch}, step {}; lower the learning rate",
                    i + 1
                )));
            }
            let scaled = if opts.accumulation_steps > 1 {
                ag::mul_scalar(&loss, 1.0 / opts.accumulation_steps as f32)?
            } else {
                loss
            };
            scaled.backward()?;
            if (i + 1) % opts.accumulation_steps == 0 || i + 1 == steps {
                if let Some(max) = opts.grad_clip {
                    clip_grad_norm(&params, max)?;
                }
                optimizer.step()?;
                optimizer.zero_grad();
                if let Some(e) = ema.as_mut() {
                    e.update(&params)?;
                }
            }
            loss_sum += value as f64 * b.y.len() as f64;
            hits += correct(logits.value(), &b.y)?;
            seen += b.y.len();
            callback(&FitEvent::Step {
                epoch,
                step: i + 1,
                steps,
                loss: value,
            });
            if opts.progress_bar {
                draw_bar(
                    epoch,
                    opts.epochs,
                    i + 1,
                    steps,
                    (loss_sum / seen as f64) as f32,
                );
            }
        }
        let train_secs = started.elapsed().as_secs_f64();
        let (val_loss, val_accuracy) = match val {
            Some(v) => {
                let r = match ema.as_ref() {
                    Some(e) => with_weights(model, e.averaged(), |m| evaluate(m, device, v))?,
                    None => evaluate(model, device, v)?,
                };
                (Some(r.0), Some(r.1))
            }
            None => (None, None),
        };
        let m = EpochMetrics {
            epoch,
            train_loss: (loss_sum / seen.max(1) as f64) as f32,
            train_accuracy: hits as f32 / seen.max(1) as f32,
            val_loss,
            val_accuracy,
            lr: optimizer.lr(),
            seconds: started.elapsed().as_secs_f64(),
            samples_per_second: seen as f64 / train_secs.max(1e-9),
        };
        if opts.progress_bar {
            eprintln!(
                "\repoch {epoch}/{}: loss {:.4} acc {:.2}%{} ({:.0} samples/s)          ",
                opts.epochs,
                m.train_loss,
                m.train_accuracy * 100.0,
                match (m.val_loss, m.val_accuracy) {
                    (Some(l), Some(a)) => format!(", val loss {l:.4} acc {:.2}%", a * 100.0),
                    _ => String::new(),
                },
                m.samples_per_second
            );
        }
        callback(&FitEvent::Epoch(m.clone()));
        history.push(m);
    }
    Ok(history)
}

/// Runs `f` with the model's parameters temporarily replaced by `weights` (in parameter order).
fn with_weights<R>(
    model: &mut Sequential,
    weights: &[Tensor],
    f: impl FnOnce(&mut Sequential) -> Result<R>,
) -> Result<R> {
    let params = model.parameters();
    let saved = params
        .iter()
        .map(|p| p.value().deep_clone())
        .collect::<Result<Vec<_>>>()?;
    for (p, w) in params.iter().zip(weights) {
        p.value().assign(w)?;
    }
    let r = f(model);
    for (p, s) in params.iter().zip(&saved) {
        p.value().assign(s)?;
    }
    r
}

fn draw_bar(epoch: usize, epochs: usize, step: usize, steps: usize, loss: f32) {
    let width = 30;
    let done = width * step / steps.max(1);
    let bar = format!("{}{}", "█".repeat(done), "·".repeat(width - done));
    let mut err = std::io::stderr().lock();
    let _ = write!(
        err,
        "\repoch {epoch}/{epochs} {bar} {step}/{steps} loss {loss:.4}"
    );
    let _ = err.flush();
}
