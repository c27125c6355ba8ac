//! Playground bindings of the transformer layers and the extra losses: `gpt(…)` builds the small GPT preset,
//! `layer_types()` lists every config name `sequential` takes, and `triplet_loss`, `contrastive_loss`,
//! `info_nce_loss`, `hinge_loss` are differentiable. The new layers themselves are built from configs by
//! `sequential`, whose parameter charge [`extra_layer_elements`] sizes.

use std::cell::RefCell;
use std::rc::Rc;

use rhai::{Array, Dynamic, Engine, INT};

use super::bindings::{R, float_arg, seed_arg, track_var};
use super::modelsize::{Model, charge_parameters};
use super::{Shared, engine_err, script_err};
use crate::autograd::Var;
use crate::nn::{self, build_sequential};

fn count(n: INT, what: &str) -> R<usize> {
    usize::try_from(n).map_err(|_| {
        script_err(
            "invalid",
            format!("{what} is a non-negative integer, got {n}"),
        )
    })
}

fn text(s: &str) -> String {
    s.to_owned()
}

/// Registers the layer and loss functions.
/// Registers the loss `name(a, b, c, margin)`: `loss` of three tensors and a number.
fn register_margin_loss(
    engine: &mut Engine,
    ctx: &Shared,
    name: &'static str,
    loss: fn(&Var, &Var, &Var, f32) -> crate::Result<Var>,
) {
    let c = ctx.clone();
    let what = format!("{name}'s margin");
    engine.register_fn(
        name,
        move |a: Var, b: Var, d: Var, margin: Dynamic| -> R<Var> {
            let margin = float_arg(&margin, &what)? as f32;
            track_var(&c, loss(&a, &b, &d, margin).map_err(engine_err)?)
        },
    );
}

/// Registers the loss `name(a, b, x)`: `loss` of two tensors and the number called `x_name`.
fn register_pair_loss(
    engine: &mut Engine,
    ctx: &Shared,
    (name, x_name): (&'static str, &str),
    loss: fn(&Var, &Var, f32) -> crate::Result<Var>,
) {
    let c = ctx.clone();
    let what = format!("{name}'s {x_name}");
    engine.register_fn(name, move |a: Var, b: Var, x: Dynamic| -> R<Var> {
        let x = float_arg(&x, &what)? as f32;
        track_var(&c, loss(&a, &b, x).map_err(engine_err)?)
    });
}

pub(crate) fn register(engine: &mut Engine, ctx: &Shared) {
    let c = ctx.clone();
    engine.register_fn(
        "gpt",
        move |vocab: INT,
              context: INT,
              d_model: INT,
              heads: INT,
              layers: INT,
              seed: INT|
              -> R<Model> {
            let cfg = nn::gpt_preset(
                count(vocab, "gpt's vocab")?,
                count(context, "gpt's context")?,
                count(d_model, "gpt's d_model")?,
                count(heads, "gpt's heads")?,
                count(layers, "gpt's layers")?,
            )
            .map_err(engine_err)?;
            charge_parameters(&c, &cfg)?;
            let d = c.borrow().device.clone();
            let m = build_sequential(&d, &cfg, seed_arg(seed)?).map_err(engine_err)?;
            Ok(Model(Rc::new(RefCell::new(m))))
        },
    );
    engine.register_fn("layer_types", || -> Array {
        let mut v: Vec<String> = [
            "Linear",
            "Conv2d",
            "DepthwiseConv2d",
            "ConvTranspose2d",
            "BatchNorm2d",
            "LayerNorm",
            "GroupNorm",
            "ReLU",
            "LeakyReLU",
            "Sigmoid",
            "Tanh",
            "GELU",
            "SiLU",
            "ELU",
            "Softplus",
            "HardSigmoid",
            "HardSwish",
            "HardTanh",
            "Dropout",
            "MaxPool2d",
            "AvgPool2d",
            "GlobalAvgPool2d",
            "Flatten",
            "Upsample",
        ]
        .into_iter()
        .map(text)
        .chain(nn::registry::EXTRA_LAYERS.iter().map(|s| text(s)))
        .chain(nn::registered_layers())
        .collect();
        v.sort();
        v.dedup();
        v.into_iter().map(Dynamic::from).collect()
    });

    register_margin_loss(engine, ctx, "triplet_loss", |a, p, n, margin| {
        nn::triplet_loss(a, p, n, margin, "squared", "mean")
    });
    register_margin_loss(engine, ctx, "contrastive_loss", |x1, x2, labels, margin| {
        nn::contrastive_loss(x1, x2, labels.value(), margin, "mean")
    });
    register_pair_loss(engine, ctx, ("info_nce_loss", "temperature"), |q, k, t| {
        nn::info_nce_loss(q, k, t, true, "mean", false)
    });
    register_pair_loss(
        engine,
        ctx,
        ("hinge_loss", "margin"),
        |logits, targets, margin| nn::hinge_loss(logits, targets.value(), margin),
    );
}
