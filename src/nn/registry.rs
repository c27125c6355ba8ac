//! Layer types by config name beyond the convolutional core: the transformer and extra layers, and a registry
//! for layer types defined outside the crate (netcl's `register_layer`), consulted before the built-in names.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use serde_json::{Map, Value};

use super::extra::{
    AdaptiveAvgPool2d, Embedding, Identity, ModuleDict, ModuleList, PReLU, PositionalEmbedding,
    RMSNorm, Softmax,
};
use super::transformer::{
    CausalSelfAttention, DecoderBlock, MultiheadAttention, RotaryAttention, SwiGLU,
    TransformerBlock, TransformerEncoderLayer,
};
use super::{LayerConfig, Module, build_layer};
use crate::device::Device;
use crate::error::{Error, Result};

/// Builds a layer from its config arguments: `(device, args, seed)`.
pub type LayerCtor =
    dyn Fn(&Device, &Map<String, Value>, u64) -> Result<Box<dyn Module>> + Send + Sync;

struct Spec {
    ctor: Arc<LayerCtor>,
    required: Vec<String>,
}

static REGISTRY: RwLock<BTreeMap<String, Spec>> = RwLock::new(BTreeMap::new());

/// Registers (or replaces) the layer type `name` for configs, model files and checkpoints. `required_args`
/// are checked before `ctor` runs. The layer's `type_name` should return `name`, so a saved model names it.
pub fn register_layer(
    name: &str,
    ctor: impl Fn(&Device, &Map<String, Value>, u64) -> Result<Box<dyn Module>> + Send + Sync + 'static,
    required_args: &[&str],
) -> Result<()> {
    if name.is_empty() || name.chars().any(|c| c.is_control()) {
        return Err(Error::Invalid(format!(
            "register_layer: `{name}` is not a usable type name"
        )));
    }
    let mut reg = REGISTRY
        .write()
        .map_err(|_| Error::Invalid("register_layer: the registry is poisoned".into()))?;
    reg.insert(
        name.to_owned(),
        Spec {
            ctor: Arc::new(ctor),
            required: required_args.iter().map(|s| (*s).to_owned()).collect(),
        },
    );
    Ok(())
}

/// The names registered with [`register_layer`], sorted.
pub fn registered_layers() -> Vec<String> {
    REGISTRY
        .read()
        .map(|r| r.keys().cloned().collect())
        .unwrap_or_default()
}

/// The registered constructor for `name` and its required arguments, if any.
fn registered(name: &str) -> Option<(Arc<LayerCtor>, Vec<String>)> {
    REGISTRY
        .read()
        .ok()?
        .get(name)
        .map(|s| (s.ctor.clone(), s.required.clone()))
}

/// The registered layer `cfg.kind`, when one is registered.
pub(crate) fn build_registered(
    device: &Device,
    cfg: &LayerConfig,
    seed: u64,
) -> Option<Result<Box<dyn Module>>> {
    let (ctor, required) = registered(&cfg.kind)?;
    if let Some(miss) = required.iter().find(|r| !cfg.args.contains_key(*r)) {
        return Some(Err(Error::Invalid(format!(
            "{}: missing required argument `{miss}`",
            cfg.kind
        ))));
    }
    Some(ctor(device, &cfg.args, seed))
}

fn req_usize(a: &Map<String, Value>, key: &str, layer: &str) -> Result<usize> {
    opt_usize(a, key, layer)?
        .ok_or_else(|| Error::Invalid(format!("{layer}: missing required argument `{key}`")))
}

fn opt_usize(a: &Map<String, Value>, key: &str, layer: &str) -> Result<Option<usize>> {
    match a.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .or_else(|| v.as_array().and_then(|x| x.first()).and_then(Value::as_u64))
            .map(|x| Some(x as usize))
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "{layer}: argument `{key}` must be a non-negative integer, got {v}"
                ))
            }),
    }
}

fn num(a: &Map<String, Value>, key: &str, default: f32, layer: &str) -> Result<f32> {
    match a.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v.as_f64().map(|x| x as f32).ok_or_else(|| {
            Error::Invalid(format!(
                "{layer}: argument `{key}` must be a number, got {v}"
            ))
        }),
    }
}

fn flag(a: &Map<String, Value>, key: &str, default: bool, layer: &str) -> Result<bool> {
    match a.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v.as_bool().ok_or_else(|| {
            Error::Invalid(format!(
                "{layer}: argument `{key}` must be true or false, got {v}"
            ))
        }),
    }
}

fn sub_configs(a: &Map<String, Value>, empty: Value) -> Value {
    match a.get("modules") {
        None | Some(Value::Null) => empty,
        Some(v) => v.clone(),
    }
}

/// The config names [`build_extra`] knows.
pub const EXTRA_LAYERS: &[&str] = &[
    "Identity",
    "Softmax",
    "PReLU",
    "AdaptiveAvgPool2d",
    "Embedding",
    "RMSNorm",
    "PositionalEmbedding",
    "TiedLinear",
    "MultiheadAttention",
    "TransformerEncoderLayer",
    "CausalSelfAttention",
    "TransformerBlock",
    "RotaryAttention",
    "SwiGLU",
    "DecoderBlock",
    "ModuleList",
    "ModuleDict",
];

/// The built-in layers of this module by config name, or `None` for a name it does not know.
pub(crate) fn build_extra(
    device: &Device,
    cfg: &LayerConfig,
    seed: u64,
) -> Option<Result<Box<dyn Module>>> {
    let a = &cfg.args;
    let t = cfg.kind.as_str();
    if !EXTRA_LAYERS.contains(&t) {
        return None;
    }
    let built = || -> Result<Box<dyn Module>> {
        Ok(match t {
            "Identity" => Box::new(Identity),
            "Softmax" => Box::new(Softmax),
            "PReLU" => Box::new(PReLU::new(
                device,
                opt_usize(a, "num_parameters", t)?.unwrap_or(1),
                num(a, "init", 0.25, t)?,
            )?),
            "AdaptiveAvgPool2d" => Box::new(AdaptiveAvgPool2d::new(
                opt_usize(a, "output_size", t)?.unwrap_or(1),
            )?),
            "Embedding" => Box::new(Embedding::new(
                device,
                req_usize(a, "num_embeddings", t)?,
                req_usize(a, "embedding_dim", t)?,
                num(a, "init_std", 1.0, t)?,
                seed,
            )?),
            "RMSNorm" => Box::new(RMSNorm::new(
                device,
                req_usize(a, "dim", t)?,
                num(a, "eps", 1e-6, t)?,
            )?),
            "PositionalEmbedding" => Box::new(PositionalEmbedding::new(
                device,
                req_usize(a, "max_len", t)?,
                req_usize(a, "d_model", t)?,
                num(a, "init_std", 0.02, t)?,
                seed,
            )?),
            "MultiheadAttention" => Box::new(MultiheadAttention::new(
                device,
                req_usize(a, "embed_dim", t)?,
                req_usize(a, "num_heads", t)?,
                flag(a, "bias", true, t)?,
                seed,
            )?),
            "TransformerEncoderLayer" => Box::new(TransformerEncoderLayer::new(
                device,
                req_usize(a, "d_model", t)?,
                req_usize(a, "nhead", t)?,
                opt_usize(a, "dim_feedforward", t)?.unwrap_or(2048),
                seed,
            )?),
            "CausalSelfAttention" => Box::new(CausalSelfAttention::new(
                device,
                req_usize(a, "embed_dim", t)?,
                req_usize(a, "num_heads", t)?,
                flag(a, "causal", true, t)?,
                num(a, "dropout", 0.0, t)?,
                flag(a, "bias", true, t)?,
                seed,
            )?),
            "TransformerBlock" => Box::new(TransformerBlock::new(
                device,
                req_usize(a, "d_model", t)?,
                req_usize(a, "num_heads", t)?,
                opt_usize(a, "dim_feedforward", t)?,
                num(a, "dropout", 0.0, t)?,
                flag(a, "causal", true, t)?,
                a.get("activation")
                    .and_then(Value::as_str)
                    .unwrap_or("gelu"),
                seed,
            )?),
            "RotaryAttention" => Box::new(RotaryAttention::new(
                device,
                req_usize(a, "dim", t)?,
                req_usize(a, "n_head", t)?,
                num(a, "rope_base", 10000.0, t)?,
                num(a, "dropout", 0.0, t)?,
                flag(a, "bias", false, t)?,
                flag(a, "qk_norm", true, t)?,
                num(a, "eps", 1e-6, t)?,
                seed,
            )?),
            "SwiGLU" => Box::new(SwiGLU::new(
                device,
                req_usize(a, "dim", t)?,
                opt_usize(a, "hidden", t)?,
                flag(a, "bias", false, t)?,
                seed,
            )?),
            "DecoderBlock" => Box::new(DecoderBlock::new(
                device,
                req_usize(a, "dim", t)?,
                req_usize(a, "n_head", t)?,
                opt_usize(a, "hidden", t)?,
                num(a, "dropout", 0.0, t)?,
                num(a, "rope_base", 10000.0, t)?,
                num(a, "eps", 1e-6, t)?,
                flag(a, "qk_norm", true, t)?,
                seed,
            )?),
            "ModuleList" => {
                let list: Vec<LayerConfig> =
                    serde_json::from_value(sub_configs(a, Value::Array(Vec::new())))
                        .map_err(|e| Error::Invalid(format!("ModuleList: `modules`: {e}")))?;
                let layers = list
                    .iter()
                    .enumerate()
                    .map(|(i, c)| build_layer(device, c, crate::rng::hash(seed, i as u64)))
                    .collect::<Result<Vec<_>>>()?;
                Box::new(ModuleList::new(layers))
            }
            "ModuleDict" => {
                let map: BTreeMap<String, LayerConfig> =
                    serde_json::from_value(sub_configs(a, Value::Object(Map::new())))
                        .map_err(|e| Error::Invalid(format!("ModuleDict: `modules`: {e}")))?;
                let modules = map
                    .into_iter()
                    .enumerate()
                    .map(|(i, (k, c))| {
                        Ok((
                            k,
                            build_layer(device, &c, crate::rng::hash(seed, i as u64))?,
                        ))
                    })
                    .collect::<Result<Vec<_>>>()?;
                Box::new(ModuleDict::new(modules)?)
            }
            "TiedLinear" => {
                return Err(Error::Invalid(
                    "TiedLinear: ties to an earlier layer's weight, so it is built by build_sequential (args {\"tied_to\": layer index})".into(),
                ));
            }
            other => {
                return Err(Error::Invalid(format!("unknown layer type `{other}`")));
            }
        })
    };
    Some(built())
}
