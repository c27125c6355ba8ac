//! Model handles and what a model costs a run: [`Model`], the script's handle on a `Sequential`, and the
//! parameter count of every layer config, charged against the run's element limits before anything is
//! allocated. The model bindings (`sequential`, `preset`, `gpt`, `load_model`) share it.

use std::cell::RefCell;
use std::rc::Rc;

use super::bindings::R;
use super::{Shared, script_err};
use crate::nn::{self, LayerConfig, Sequential};

/// A model handle in scripts.
#[derive(Clone)]
pub(crate) struct Model(pub(crate) Rc<RefCell<Sequential>>);

/// The largest tensor and the total elements a layer's parameters (and their state) take, from its config;
/// `None` when the arithmetic overflows.
pub(crate) fn layer_elements(cfg: &LayerConfig) -> Option<(usize, usize)> {
    let a = &cfg.args;
    let get = |key: &str, default: usize| -> usize {
        a.get(key)
            .and_then(|v| {
                v.as_u64().or_else(|| {
                    v.as_array()
                        .and_then(|x| x.first())
                        .and_then(|x| x.as_u64())
                })
            })
            .map_or(default, |x| usize::try_from(x).unwrap_or(usize::MAX))
    };
    let mul = |xs: &[usize]| xs.iter().try_fold(1usize, |acc, &x| acc.checked_mul(x));
    let (weight, vectors) = match cfg.kind.as_str() {
        "Linear" => (mul(&[get("in_features", 0), get("out_features", 0)])?, 1),
        "Conv2d" => {
            let k = get("kernel_size", 1);
            let per_group = get("in_channels", 0) / get("groups", 1).max(1);
            (mul(&[get("out_channels", 0), per_group, k, k])?, 1)
        }
        "ConvTranspose2d" => {
            let k = get("kernel_size", 1);
            (
                mul(&[get("in_channels", 0), get("out_channels", 0), k, k])?,
                1,
            )
        }
        "DepthwiseConv2d" => {
            let k = get("kernel_size", 1);
            (mul(&[get("channels", 0), k, k])?, 1)
        }
        // weight, bias, running mean and variance
        "BatchNorm2d" => (get("num_features", 0), 4),
        "LayerNorm" => (get("normalized_shape", 0), 2),
        "GroupNorm" => (get("num_channels", 0), 2),
        _ => return extra_layer_elements(cfg),
    };
    let width = match cfg.kind.as_str() {
        "Linear" => get("out_features", 0),
        "Conv2d" | "ConvTranspose2d" => get("out_channels", 0),
        "DepthwiseConv2d" => get("channels", 0),
        _ => 0,
    };
    let total = weight.checked_add(width.checked_mul(vectors)?)?;
    Some((weight.max(width), total))
}

/// Charges a model's parameters against the run's limits before any of them is allocated.
pub(crate) fn charge_parameters(ctx: &Shared, cfg: &[LayerConfig]) -> R<()> {
    let mut c = ctx.borrow_mut();
    let (max_tensor, max_run) = (c.limits.max_tensor_elements, c.limits.max_run_elements);
    let mut total = 0usize;
    for layer in cfg {
        let Some((largest, elements)) = layer_elements(layer) else {
            return Err(script_err(
                "limit",
                format!("the {} layer's parameter count overflows", layer.kind),
            ));
        };
        if largest > max_tensor {
            return Err(script_err(
                "limit",
                format!(
                    "a {} layer's weight has {largest} elements; max_tensor_elements is {max_tensor}",
                    layer.kind
                ),
            ));
        }
        total = total.saturating_add(elements);
    }
    let run = c.elements.saturating_add(total);
    if run > max_run {
        return Err(script_err(
            "limit",
            format!(
                "the model's {total} parameters would bring this run to {run} tensor elements; max_run_elements is {max_run}"
            ),
        ));
    }
    c.elements = run;
    Ok(())
}

/// The largest tensor and the total elements of a transformer or extra layer's parameters, from its config;
/// `Some((0, 0))` for a layer without parameters or a name this function does not size, `None` on overflow.
pub(crate) fn extra_layer_elements(cfg: &LayerConfig) -> Option<(usize, usize)> {
    let a = &cfg.args;
    let get = |key: &str, default: usize| -> usize {
        a.get(key)
            .and_then(|v| v.as_u64())
            .map_or(default, |x| usize::try_from(x).unwrap_or(usize::MAX))
    };
    let m = |x: usize, y: usize| x.checked_mul(y);
    // (in, out) linear with bias: in·out + out.
    let lin = |i: usize, o: usize| m(i, o)?.checked_add(o);
    let sum = |xs: &[Option<usize>]| xs.iter().try_fold(0usize, |acc, x| acc.checked_add((*x)?));
    Some(match cfg.kind.as_str() {
        "PReLU" => (get("num_parameters", 1), get("num_parameters", 1)),
        "RMSNorm" => (get("dim", 0), get("dim", 0)),
        "Embedding" => {
            let t = m(get("num_embeddings", 0), get("embedding_dim", 0))?;
            (t, t)
        }
        "PositionalEmbedding" => {
            let t = m(get("max_len", 0), get("d_model", 0))?;
            (t, t)
        }
        "MultiheadAttention" => {
            let e = get("embed_dim", 0);
            (m(e, e)?, m(lin(e, e)?, 4)?)
        }
        "CausalSelfAttention" => {
            let e = get("embed_dim", 0);
            (m(e, m(3, e)?)?, sum(&[lin(e, m(3, e)?), lin(e, e)])?)
        }
        "RotaryAttention" => {
            let e = get("dim", 0);
            (
                m(e, m(3, e)?)?,
                sum(&[lin(e, m(3, e)?), lin(e, e), Some(m(2, e)?)])?,
            )
        }
        "TransformerEncoderLayer" | "TransformerBlock" => {
            let e = get("d_model", 0);
            let default = if cfg.kind == "TransformerBlock" {
                m(4, e)?
            } else {
                2048
            };
            let f = get("dim_feedforward", default);
            let attn = m(lin(e, e)?, 4)?;
            (
                m(e, f)?.max(m(e, m(3, e)?)?),
                sum(&[Some(attn), lin(e, f), lin(f, e), Some(m(4, e)?)])?,
            )
        }
        "SwiGLU" | "DecoderBlock" => {
            let e = get("dim", 0);
            let h = get("hidden", nn::transformer::swiglu_hidden(e));
            let ffn = m(lin(e, h)?, 3)?;
            let attn = if cfg.kind == "DecoderBlock" {
                sum(&[lin(e, m(3, e)?), lin(e, e), Some(m(4, e)?)])?
            } else {
                0
            };
            (m(e, h)?.max(m(e, m(3, e)?)?), ffn.checked_add(attn)?)
        }
        "ModuleList" | "ModuleDict" => {
            let subs: Vec<LayerConfig> = match a.get("modules") {
                Some(serde_json::Value::Array(v)) => v
                    .iter()
                    .filter_map(|c| serde_json::from_value(c.clone()).ok())
                    .collect(),
                Some(serde_json::Value::Object(o)) => o
                    .values()
                    .filter_map(|c| serde_json::from_value(c.clone()).ok())
                    .collect(),
                _ => Vec::new(),
            };
            let mut big = (0usize, 0usize);
            for s in &subs {
                let (l, t) = layer_elements(s)?;
                big = (big.0.max(l), big.1.checked_add(t)?);
            }
            big
        }
        _ => (0, 0),
    })
}
