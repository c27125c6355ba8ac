//! Layers behind one [`Module`] trait, `Sequential`, netcl's JSON layer configs and presets, and seeded
//! initialisers.
//!
//! A layer's `forward` takes and returns [`Var`]s: in training it records the graph for `backward`; inside
//! [`crate::autograd::no_grad`] (or with constant inputs and frozen parameters) it just computes. Parameter
//! layouts follow netcl: `Linear` stores its weight as (in, out), `Conv2d` as (F, C/groups, KH, KW),
//! `BatchNorm2d` holds `gamma`, `beta`, `running_mean`, `running_var`.

/// The `Module` methods that only depend on which tensors a layer owns and how it keeps its mode:
/// `parameters`, `set_training`, `is_training` and `state_dict`; with a leading `"Name",` also `type_name`.
///
/// - `module_state!(stateless)`: no parameters, no state, always in evaluation mode.
/// - `module_state!(flag)`: no parameters, no state, the mode kept in a `training` field.
/// - `module_state!(weight_bias)`: a `weight` and an optional `bias`, saved as `weight` then `bias`.
/// - `module_state!(layers)`: the parameters and mode of the `layers` field's layers, the mode also kept in
///   a `training` field (the container writes its own `state_dict`).
/// - `module_state!(parts [a, b])`: the parameters of the sub-layers `a`, `b` in turn, and their state under
///   `a.` and `b.` (the layer writes its own mode methods, or takes `module_state!(@mode)`, or
///   `module_state!(@mode a)` to pass the mode on to its sub-layer `a` too).
/// - `module_state!(params [a, b] buffers [c])`: the `Var` fields `a`, `b` are the parameters; the state is
///   each of them under its field name, then the `Tensor` fields `c` (the `buffers` part may be left out).
macro_rules! module_state {
    ($name:literal, stateless) => {
        module_state!(stateless);
        fn type_name(&self) -> &'static str {
            $name
        }
    };
    (stateless) => {
        fn parameters(&self) -> Vec<Var> {
            Vec::new()
        }
        fn set_training(&mut self, _on: bool) {}
        fn is_training(&self) -> bool {
            false
        }
        fn state_dict(&self) -> Vec<(String, Tensor)> {
            Vec::new()
        }
    };
    ($name:literal, layers) => {
        module_state!(layers);
        fn type_name(&self) -> &'static str {
            $name
        }
    };
    (layers) => {
        fn parameters(&self) -> Vec<Var> {
            self.layers.iter().flat_map(|l| l.parameters()).collect()
        }
        fn set_training(&mut self, on: bool) {
            self.training = on;
            self.layers.iter_mut().for_each(|l| l.set_training(on));
        }
        fn is_training(&self) -> bool {
            self.training
        }
    };
    ($name:literal, parts [$($p:ident),+]) => {
        module_state!(parts [$($p),+]);
        fn type_name(&self) -> &'static str {
            $name
        }
    };
    (parts [$($p:ident),+]) => {
        fn parameters(&self) -> Vec<Var> {
            let mut v = Vec::new();
            $(v.extend($crate::nn::Module::parameters(&self.$p));)+
            v
        }
        fn state_dict(&self) -> Vec<(String, Tensor)> {
            let mut s = Vec::new();
            $(s.extend($crate::nn::extra::prefixed(
                stringify!($p),
                $crate::nn::Module::state_dict(&self.$p),
            ));)+
            s
        }
    };
    (@mode $($sub:ident),*) => {
        fn set_training(&mut self, on: bool) {
            self.training = on;
            $(self.$sub.set_training(on);)*
        }
        fn is_training(&self) -> bool {
            self.training
        }
    };
    ($name:literal, flag) => {
        module_state!(flag);
        fn type_name(&self) -> &'static str {
            $name
        }
    };
    (flag) => {
        module_state!(@mode);
        fn parameters(&self) -> Vec<Var> {
            Vec::new()
        }
        fn state_dict(&self) -> Vec<(String, Tensor)> {
            Vec::new()
        }
    };
    ($name:literal, weight_bias) => {
        module_state!(weight_bias);
        fn type_name(&self) -> &'static str {
            $name
        }
    };
    (weight_bias) => {
        module_state!(@mode);
        fn parameters(&self) -> Vec<Var> {
            std::iter::once(self.weight.clone())
                .chain(self.bias.clone())
                .collect()
        }
        fn state_dict(&self) -> Vec<(String, Tensor)> {
            let mut v = vec![("weight".to_owned(), self.weight.value().clone())];
            if let Some(b) = &self.bias {
                v.push(("bias".into(), b.value().clone()));
            }
            v
        }
    };
    ($name:literal, params [$($p:ident),*] $(buffers [$($b:ident),*])?) => {
        module_state!(params [$($p),*] $(buffers [$($b),*])?);
        fn type_name(&self) -> &'static str {
            $name
        }
    };
    (params [$($p:ident),*] $(buffers [$($b:ident),*])?) => {
        module_state!(@mode);
        fn parameters(&self) -> Vec<Var> {
            vec![$(self.$p.clone()),*]
        }
        fn state_dict(&self) -> Vec<(String, Tensor)> {
            vec![
                $((stringify!($p).to_owned(), self.$p.value().clone()),)*
                $($((stringify!($b).to_owned(), self.$b.clone()),)*)?
            ]
        }
    };
}

/// Fails with the argument's name unless each of the `usize` variables is at least 1:
/// `positive!("Conv2d"; in_channels, stride)`.
macro_rules! positive {
    ($layer:expr; $($v:ident),+) => {
        $(positive($v, stringify!($v), $layer)?;)+
    };
}

pub mod extra;
mod graph_ops;
pub mod init;
mod layers;
pub mod losses_extra;
pub mod models;
pub mod registry;
pub mod transformer;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

pub use layers::{
    Activation, AvgPool2d, BatchNorm2d, Conv2d, ConvTranspose2d, DepthwiseConv2d, Dropout, Flatten,
    GlobalAvgPool2d, GroupNorm, LayerNorm, Linear, MaxPool2d, Upsample,
};

pub use extra::{
    AdaptiveAvgPool2d, Embedding, Identity, ModuleDict, ModuleList, PReLU, PositionalEmbedding,
    RMSNorm, Softmax, TiedLinear,
};
pub use losses_extra::{contrastive_loss, hinge_loss, info_nce_loss, triplet_loss};
pub use registry::{LayerCtor, register_layer, registered_layers};
pub use transformer::{
    CausalSelfAttention, DecoderBlock, KVCache, MultiheadAttention, RotaryAttention, SwiGLU,
    TransformerBlock, TransformerEncoderLayer,
};

use crate::autograd::Var;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::ops::UnaryOp;
use crate::tensor::Tensor;

/// A JSON object's entries (an empty map for any other value).
fn args(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

/// Fails unless `v`, the argument `what` of `layer`, is at least 1.
fn positive(v: usize, what: &str, layer: &str) -> Result<()> {
    if v == 0 {
        return Err(Error::Invalid(format!(
            "{layer}: {what} must be at least 1"
        )));
    }
    Ok(())
}

/// A layer or a container of layers.
pub trait Module {
    /// The layer's type name in configs (`Conv2d`, `ReLU`, …).
    fn type_name(&self) -> &'static str;
    /// Applies the layer.
    fn forward(&mut self, x: &Var) -> Result<Var>;
    /// Trainable parameters (leaves that require gradients), in a fixed order.
    fn parameters(&self) -> Vec<Var>;
    /// Switches between training (batch statistics, dropout) and evaluation behaviour.
    fn set_training(&mut self, on: bool);
    /// Whether the layer is in training mode.
    fn is_training(&self) -> bool;
    /// Named tensors that define the layer's state (parameters and buffers such as running statistics).
    fn state_dict(&self) -> Vec<(String, Tensor)>;
    /// The layer's constructor arguments, in netcl's config schema.
    fn config_args(&self) -> Map<String, Value>;

    /// The activation this layer is, when its gradient can be folded into the backward of the layer before it
    /// (ReLU; HardTanh as a clamp); `None` for every other layer.
    fn folded_act(&self) -> Option<crate::ops::norm::ActGrad> {
        None
    }

    /// This layer followed by the activation `act` as one step whose backward applies `act`'s gradient
    /// itself (BatchNorm2d in training); `Ok(None)` where the layer has no such form, and the caller then runs
    /// the two layers.
    fn forward_then(&mut self, _x: &Var, _act: crate::ops::norm::ActGrad) -> Result<Option<Var>> {
        Ok(None)
    }

    /// Replaces the state from named tensors. Every name and shape is checked first; on any mismatch nothing
    /// changes.
    fn load_state_dict(&mut self, state: &[(String, Tensor)]) -> Result<()> {
        let mine = self.state_dict();
        for (name, t) in state {
            match mine.iter().find(|(n, _)| n == name) {
                None => {
                    return Err(Error::Invalid(format!(
                        "{}: unknown state entry `{name}`",
                        self.type_name()
                    )));
                }
                Some((_, cur)) if cur.shape() != t.shape() => {
                    return Err(Error::shape_mismatch(
                        format!("{}: `{name}`", self.type_name()),
                        cur.shape(),
                        t.shape(),
                    ));
                }
                Some(_) => {}
            }
        }
        for (name, _) in &mine {
            if !state.iter().any(|(n, _)| n == name) {
                return Err(Error::Invalid(format!(
                    "{}: state entry `{name}` is missing",
                    self.type_name()
                )));
            }
        }
        for (name, t) in state {
            if let Some((_, cur)) = mine.iter().find(|(n, _)| n == name) {
                cur.assign(t)?;
            }
        }
        Ok(())
    }

    /// The layer as a netcl config entry: `{"type": …, "args": {…}}`.
    fn config(&self) -> LayerConfig {
        LayerConfig {
            kind: self.type_name().to_owned(),
            args: self.config_args(),
        }
    }

    /// Freezes (or unfreezes) every parameter: backward skips them and optimisers leave them unchanged.
    fn set_frozen(&self, frozen: bool) {
        self.parameters().iter().for_each(|p| p.set_frozen(frozen));
    }
}

/// One entry of netcl's layer-list config: `{"type": "Conv2d", "args": {…}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerConfig {
    /// The layer type.
    #[serde(rename = "type")]
    pub kind: String,
    /// Constructor arguments.
    #[serde(default)]
    pub args: Map<String, Value>,
}

/// Layers applied in order.
pub struct Sequential {
    layers: Vec<Box<dyn Module>>,
    training: bool,
}

impl std::fmt::Debug for Sequential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.layers.iter().map(|l| l.type_name()).collect();
        write!(f, "Sequential({})", names.join(", "))
    }
}

impl Sequential {
    /// A container of `layers`, in training mode.
    pub fn new(layers: Vec<Box<dyn Module>>) -> Self {
        Sequential {
            layers,
            training: true,
        }
    }

    /// The layers.
    pub fn layers(&self) -> &[Box<dyn Module>] {
        &self.layers
    }

    /// Runs a forward pass in evaluation mode without recording a graph.
    pub fn predict(&mut self, x: &Tensor) -> Result<Tensor> {
        let was = self.training;
        self.set_training(false);
        let r = crate::autograd::no_grad(|| self.forward(&Var::constant(x.clone())));
        self.set_training(was);
        Ok(r?.value().clone())
    }

    /// The configs of every layer, in order (netcl's `Sequential` config).
    pub fn configs(&self) -> Vec<LayerConfig> {
        self.layers.iter().map(|l| l.config()).collect()
    }

    /// Every layer's state, named `"{index}:{key}"` as netcl's model files do.
    pub fn indexed_state(&self) -> Vec<(String, Tensor)> {
        self.layers
            .iter()
            .enumerate()
            .flat_map(|(i, l)| {
                l.state_dict()
                    .into_iter()
                    .map(move |(k, t)| (format!("{i}:{k}"), t))
            })
            .collect()
    }
}

/// A shape error of layer `i` (of type `kind`) with the layer named in its message.
fn at_layer(i: usize, kind: &str, e: Error) -> Error {
    match e {
        Error::Shape(m) => Error::Shape(format!("layer {i} ({kind}): {m}")),
        Error::ShapeMismatch { op, expected, got } => Error::ShapeMismatch {
            op: format!("layer {i} ({kind}): {op}"),
            expected,
            got,
        },
        other => other,
    }
}

impl Module for Sequential {
    module_state!("Sequential", layers);

    fn forward(&mut self, x: &Var) -> Result<Var> {
        let mut h = x.clone();
        let mut i = 0;
        while i < self.layers.len() {
            // A layer and the activation after it as one step where the layer offers it (BatchNorm2d in
            // training): the activation's gradient is then applied inside the layer's backward.
            let act = self.layers.get(i + 1).and_then(|l| l.folded_act());
            let l = &mut self.layers[i];
            let kind = l.type_name();
            let fused = match act {
                Some(a) => l.forward_then(&h, a).map_err(|e| at_layer(i, kind, e))?,
                None => None,
            };
            match fused {
                Some(y) => {
                    h = y;
                    i += 2;
                }
                None => {
                    h = l.forward(&h).map_err(|e| at_layer(i, kind, e))?;
                    i += 1;
                }
            }
        }
        Ok(h)
    }

    fn state_dict(&self) -> Vec<(String, Tensor)> {
        self.indexed_state()
    }

    fn config_args(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert(
            "config".into(),
            serde_json::to_value(self.configs()).unwrap_or(Value::Null),
        );
        m
    }

    fn load_state_dict(&mut self, state: &[(String, Tensor)]) -> Result<()> {
        let mut per: Vec<Vec<(String, Tensor)>> = vec![Vec::new(); self.layers.len()];
        for (name, t) in state {
            let (i, key) = name
                .split_once(':')
                .and_then(|(i, k)| i.parse::<usize>().ok().map(|i| (i, k)))
                .ok_or_else(|| {
                    Error::Invalid(format!("state entry `{name}` is not named `index:key`"))
                })?;
            per.get_mut(i)
                .ok_or_else(|| {
                    Error::Invalid(format!(
                        "state entry `{name}`: the model has {} layers",
                        self.layers.len()
                    ))
                })?
                .push((key.to_owned(), t.clone()));
        }
        // Validate every layer before changing any.
        for (i, (l, s)) in self.layers.iter().zip(&per).enumerate() {
            let mine = l.state_dict();
            for (k, cur) in &mine {
                match s.iter().find(|(n, _)| n == k) {
                    None => {
                        return Err(Error::Invalid(format!(
                            "layer {i} ({}): `{i}:{k}` is missing",
                            l.type_name()
                        )));
                    }
                    Some((_, t)) if t.shape() != cur.shape() => {
                        return Err(Error::shape_mismatch(
                            format!("layer {i} ({}): `{i}:{k}`", l.type_name()),
                            cur.shape(),
                            t.shape(),
                        ));
                    }
                    Some(_) => {}
                }
            }
            if let Some((k, _)) = s.iter().find(|(n, _)| !mine.iter().any(|(m, _)| m == n)) {
                return Err(Error::Invalid(format!(
                    "layer {i} ({}) has no state entry `{k}`",
                    l.type_name()
                )));
            }
        }
        for (l, s) in self.layers.iter_mut().zip(&per) {
            l.load_state_dict(s)?;
        }
        Ok(())
    }
}

fn arg_usize(
    a: &Map<String, Value>,
    key: &str,
    default: Option<usize>,
    layer: &str,
) -> Result<usize> {
    match a.get(key) {
        Some(v) => v
            .as_u64()
            .map(|x| x as usize)
            .or_else(|| {
                v.as_array()
                    .and_then(|arr| arr.first())
                    .and_then(Value::as_u64)
                    .map(|x| x as usize)
            })
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "{layer}: argument `{key}` must be a non-negative integer, got {v}"
                ))
            }),
        None => default
            .ok_or_else(|| Error::Invalid(format!("{layer}: missing required argument `{key}`"))),
    }
}

fn arg_f32(a: &Map<String, Value>, key: &str, default: f32, layer: &str) -> Result<f32> {
    match a.get(key) {
        Some(v) => v.as_f64().map(|x| x as f32).ok_or_else(|| {
            Error::Invalid(format!(
                "{layer}: argument `{key}` must be a number, got {v}"
            ))
        }),
        None => Ok(default),
    }
}

fn arg_bool(a: &Map<String, Value>, key: &str, default: bool, layer: &str) -> Result<bool> {
    match a.get(key) {
        Some(v) => v.as_bool().ok_or_else(|| {
            Error::Invalid(format!(
                "{layer}: argument `{key}` must be true or false, got {v}"
            ))
        }),
        None => Ok(default),
    }
}

/// Builds one layer from its config, with parameters initialised from `seed`.
pub fn build_layer(device: &Device, cfg: &LayerConfig, seed: u64) -> Result<Box<dyn Module>> {
    if let Some(r) = registry::build_registered(device, cfg, seed) {
        return r;
    }
    if let Some(r) = registry::build_extra(device, cfg, seed) {
        return r;
    }
    if let Some(r) = models::build_block(device, cfg, seed) {
        return r;
    }
    let a = &cfg.args;
    let t = cfg.kind.as_str();
    let act = |op: UnaryOp| -> Result<Box<dyn Module>> { Ok(Box::new(Activation::new(t, op))) };
    Ok(match t {
        "Linear" => Box::new(Linear::new(
            device,
            arg_usize(a, "in_features", None, t)?,
            arg_usize(a, "out_features", None, t)?,
            arg_bool(a, "bias", true, t)?,
            seed,
        )?),
        "Conv2d" => Box::new(Conv2d::new(
            device,
            arg_usize(a, "in_channels", None, t)?,
            arg_usize(a, "out_channels", None, t)?,
            arg_usize(a, "kernel_size", None, t)?,
            arg_usize(a, "stride", Some(1), t)?,
            arg_usize(a, "pad", Some(0), t)?,
            arg_usize(a, "dilation", Some(1), t)?,
            arg_usize(a, "groups", Some(1), t)?,
            arg_bool(a, "bias", true, t)?,
            seed,
        )?),
        "DepthwiseConv2d" => Box::new(DepthwiseConv2d::new(
            device,
            arg_usize(a, "channels", None, t)?,
            arg_usize(a, "kernel_size", None, t)?,
            arg_usize(a, "stride", Some(1), t)?,
            arg_usize(a, "pad", Some(0), t)?,
            arg_bool(a, "bias", true, t)?,
            seed,
        )?),
        "ConvTranspose2d" => Box::new(ConvTranspose2d::new(
            device,
            arg_usize(a, "in_channels", None, t)?,
            arg_usize(a, "out_channels", None, t)?,
            arg_usize(a, "kernel_size", None, t)?,
            arg_usize(a, "stride", Some(1), t)?,
            arg_usize(a, "pad", Some(0), t)?,
            arg_bool(a, "bias", true, t)?,
            seed,
        )?),
        "BatchNorm2d" => Box::new(BatchNorm2d::new(
            device,
            arg_usize(a, "num_features", None, t)?,
            arg_f32(a, "momentum", 0.1, t)?,
            arg_f32(a, "eps", 1e-5, t)?,
        )?),
        "LayerNorm" => Box::new(LayerNorm::new(
            device,
            arg_usize(a, "normalized_shape", None, t)?,
            arg_f32(a, "eps", 1e-5, t)?,
        )?),
        "GroupNorm" => Box::new(GroupNorm::new(
            device,
            arg_usize(a, "num_groups", None, t)?,
            arg_usize(a, "num_channels", None, t)?,
            arg_f32(a, "eps", 1e-5, t)?,
        )?),
        "ReLU" => act(UnaryOp::Relu)?,
        "LeakyReLU" => act(UnaryOp::LeakyRelu(arg_f32(a, "negative_slope", 0.01, t)?))?,
        "Sigmoid" => act(UnaryOp::Sigmoid)?,
        "Tanh" => act(UnaryOp::Tanh)?,
        "GELU" => act(if arg_bool(a, "approximate", true, t)? {
            UnaryOp::GeluTanh
        } else {
            UnaryOp::GeluErf
        })?,
        "SiLU" | "Swish" => act(UnaryOp::Silu)?,
        "ELU" => act(UnaryOp::Elu(arg_f32(a, "alpha", 1.0, t)?))?,
        "Softplus" => act(UnaryOp::Softplus)?,
        "HardSigmoid" => act(UnaryOp::HardSigmoid)?,
        "HardSwish" => act(UnaryOp::HardSwish)?,
        "HardTanh" => act(UnaryOp::Clamp(
            arg_f32(a, "min_val", -1.0, t)?,
            arg_f32(a, "max_val", 1.0, t)?,
        ))?,
        "Dropout" => {
            let layer_seed = match a.get("seed") {
                Some(Value::Number(n)) => n.as_u64(),
                _ => None,
            };
            Box::new(Dropout::new(arg_f32(a, "p", 0.5, t)?, layer_seed, seed)?)
        }
        "MaxPool2d" => {
            let k = arg_usize(a, "kernel_size", Some(2), t)?;
            Box::new(MaxPool2d::new(
                k,
                arg_usize(a, "stride", Some(k), t)?,
                arg_usize(a, "padding", Some(0), t)?,
            )?)
        }
        "AvgPool2d" => {
            let k = arg_usize(a, "kernel_size", Some(2), t)?;
            Box::new(AvgPool2d::new(
                k,
                arg_usize(a, "stride", Some(k), t)?,
                arg_usize(a, "padding", Some(0), t)?,
            )?)
        }
        "GlobalAvgPool2d" => Box::new(GlobalAvgPool2d),
        "Flatten" => Box::new(Flatten),
        "Upsample" => Box::new(Upsample::new(
            arg_usize(a, "scale_factor", Some(2), t)?,
            match a.get("mode").and_then(Value::as_str).unwrap_or("nearest") {
                "nearest" => crate::ops::Upsample::Nearest,
                "bilinear" => crate::ops::Upsample::Bilinear {
                    align_corners: arg_bool(a, "align_corners", false, t)?,
                },
                m => {
                    return Err(Error::Invalid(format!(
                        "Upsample: mode `{m}` is not nearest or bilinear"
                    )));
                }
            },
        )?),
        other => return Err(Error::Invalid(format!("unknown layer type `{other}`"))),
    })
}

/// Builds a `Sequential` from netcl's config list; layer `i` is initialised from `hash(seed, i)`.
pub fn build_sequential(device: &Device, config: &[LayerConfig], seed: u64) -> Result<Sequential> {
    let mut layers: Vec<Box<dyn Module>> = Vec::with_capacity(config.len());
    for (i, c) in config.iter().enumerate() {
        let layer = if c.kind == "TiedLinear" {
            tied_linear(&layers, c)
        } else {
            build_layer(device, c, crate::rng::hash(seed, i as u64))
        };
        layers.push(layer.map_err(|e| Error::Invalid(format!("layer {i}: {e}")))?);
    }
    Ok(Sequential::new(layers))
}

/// A `TiedLinear` sharing the first parameter of the earlier layer `args.tied_to`.
fn tied_linear(built: &[Box<dyn Module>], c: &LayerConfig) -> Result<Box<dyn Module>> {
    let i = arg_usize(&c.args, "tied_to", None, "TiedLinear")?;
    let w = built
        .get(i)
        .and_then(|l| l.parameters().into_iter().next())
        .ok_or_else(|| {
            Error::Invalid(format!(
                "TiedLinear: `tied_to` {i} is not an earlier layer with a weight"
            ))
        })?;
    Ok(Box::new(TiedLinear::new(w, Some(i))?))
}

/// Parses a config list from JSON text (netcl's `build_sequential_from_json` format).
pub fn configs_from_json(text: &str) -> Result<Vec<LayerConfig>> {
    let v: Value = serde_json::from_str(text)
        .map_err(|e| Error::Invalid(format!("layer config JSON: {e}")))?;
    let list = match &v {
        Value::Array(_) => v,
        Value::Object(o) => o
            .get("config")
            .or_else(|| o.get("layers"))
            .cloned()
            .unwrap_or(Value::Null),
        _ => Value::Null,
    };
    serde_json::from_value(list).map_err(|e| {
        Error::Invalid(format!(
            "layer config: expected a list of {{\"type\", \"args\"}}: {e}"
        ))
    })
}

fn cfg(kind: &str, args: Value) -> LayerConfig {
    LayerConfig {
        kind: kind.into(),
        args: args.as_object().cloned().unwrap_or_default(),
    }
}

/// The presets by name: `tiny_cnn`, `fast_cnn`, `fast_bn_cnn`, `example_cnn`, `example_mlp`, `digits_cnn`,
/// `small_gpt` (see [`gpt_preset`]), `resnet18` and `mobilenet_v2` (see [`models`]).
pub const PRESETS: &[&str] = &[
    "tiny_cnn",
    "fast_cnn",
    "fast_bn_cnn",
    "example_cnn",
    "example_mlp",
    "digits_cnn",
    "small_gpt",
    "resnet18",
    "mobilenet_v2",
];

/// A preset config for inputs of `in_ch` channels and `hw`×`hw` pixels with `classes` outputs.
///
/// The CNN presets are netcl's (two 2×2 poolings, then a Linear over the flattened maps), with the Linear's
/// input size computed from `hw` rather than fixed for 32×32 inputs. `digits_cnn` is sized for the 8×8 digits.
pub fn preset(name: &str, in_ch: usize, hw: usize, classes: usize) -> Result<Vec<LayerConfig>> {
    let conv = |i: usize, o: usize| {
        cfg(
            "Conv2d",
            json!({"in_channels": i, "out_channels": o, "kernel_size": 3, "stride": 1, "pad": 1}),
        )
    };
    let pool = || cfg("MaxPool2d", json!({"kernel_size": 2, "stride": 2}));
    let relu = || cfg("ReLU", json!({}));
    let bn = |c: usize| cfg("BatchNorm2d", json!({"num_features": c}));
    let linear = |i: usize, o: usize| cfg("Linear", json!({"in_features": i, "out_features": o}));
    if name == "small_gpt" {
        // Here `in_ch` is the vocabulary, `hw` the context length; `classes` is unused (the output is the
        // vocabulary).
        return gpt_preset(in_ch, hw, 64, 4, 2);
    }
    match name {
        "resnet18" => return models::resnet18(in_ch, classes, 64, true),
        "mobilenet_v2" => return models::mobilenet_v2(in_ch, classes, 1.0),
        _ => {}
    }
    let q = hw / 4;
    if q == 0 && name != "example_mlp" {
        return Err(Error::Invalid(format!(
            "preset {name} pools twice by 2, so inputs need at least 4×4 pixels, got {hw}"
        )));
    }
    Ok(match name {
        "tiny_cnn" => vec![
            conv(in_ch, 8),
            relu(),
            pool(),
            conv(8, 16),
            relu(),
            pool(),
            cfg("Flatten", json!({})),
            linear(16 * q * q, classes),
        ],
        "fast_cnn" => vec![
            conv(in_ch, 16),
            relu(),
            conv(16, 16),
            relu(),
            pool(),
            conv(16, 32),
            relu(),
            pool(),
            cfg("Flatten", json!({})),
            linear(32 * q * q, classes),
        ],
        "fast_bn_cnn" => vec![
            conv(in_ch, 32),
            bn(32),
            relu(),
            conv(32, 32),
            bn(32),
            relu(),
            pool(),
            conv(32, 64),
            bn(64),
            relu(),
            pool(),
            cfg("Flatten", json!({})),
            cfg("Dropout", json!({"p": 0.3})),
            linear(64 * q * q, classes),
        ],
        "example_cnn" => vec![
            conv(in_ch, 32),
            relu(),
            pool(),
            conv(32, 64),
            relu(),
            pool(),
            cfg("Flatten", json!({})),
            linear(64 * q * q, classes),
        ],
        "example_mlp" => vec![
            cfg("Flatten", json!({})),
            linear(in_ch * hw * hw, 128),
            relu(),
            linear(128, classes),
        ],
        "digits_cnn" => vec![
            conv(in_ch, 16),
            bn(16),
            relu(),
            pool(),
            conv(16, 32),
            bn(32),
            relu(),
            pool(),
            cfg("Flatten", json!({})),
            linear(32 * q * q, classes),
        ],
        other => {
            return Err(Error::Invalid(format!(
                "unknown preset `{other}`; presets: {}",
                PRESETS.join(", ")
            )));
        }
    })
}

/// A small GPT: token `Embedding` (std 0.02), learned `PositionalEmbedding`, `layers` pre-LN
/// `TransformerBlock`s (causal, GELU, 4·d feed-forward), a final `LayerNorm` and a `TiedLinear` head
/// sharing the token table. Input: i32 tokens [B, S] with S ≤ `context`; output: logits [B, S, vocab].
pub fn gpt_preset(
    vocab: usize,
    context: usize,
    d_model: usize,
    heads: usize,
    layers: usize,
) -> Result<Vec<LayerConfig>> {
    if vocab == 0 || context == 0 || heads == 0 || !d_model.is_multiple_of(heads) || d_model == 0 {
        return Err(Error::Invalid(format!(
            "gpt preset: vocab {vocab} and context {context} must be ≥ 1, d_model {d_model} a positive multiple of heads {heads}"
        )));
    }
    let mut c = vec![
        cfg(
            "Embedding",
            json!({"num_embeddings": vocab, "embedding_dim": d_model, "init_std": 0.02}),
        ),
        cfg(
            "PositionalEmbedding",
            json!({"max_len": context, "d_model": d_model, "init_std": 0.02}),
        ),
    ];
    for _ in 0..layers {
        c.push(cfg(
            "TransformerBlock",
            json!({"d_model": d_model, "num_heads": heads, "causal": true, "activation": "gelu"}),
        ));
    }
    c.push(cfg("LayerNorm", json!({"normalized_shape": d_model})));
    c.push(cfg("TiedLinear", json!({"tied_to": 0})));
    Ok(c)
}
