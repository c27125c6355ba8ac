//! The smaller layers netcl has beside its convolutional core, with its constructor arguments and state
//! names: `Identity`, `Softmax`, `PReLU`, `AdaptiveAvgPool2d`, `Embedding`, `RMSNorm`, `PositionalEmbedding`,
//! `TiedLinear`, and the containers `ModuleList` and `ModuleDict`.

use crate::autograd::record;
use serde_json::{Map, Value, json};

use super::graph_ops::{linear_last, matmul_nt, narrow};
use super::{LayerConfig, Module, args, positive};
use crate::autograd::{Var, attention as aga, ops as ag};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::ops;
use crate::tensor::{DType, Tensor};

/// A learnable table (rows, cols) drawn from N(0, init_std²), for `Embedding` and `PositionalEmbedding`;
/// `dims` names the two sizes for the error messages.
fn normal_table(
    device: &Device,
    layer: &str,
    dims: [(&str, usize); 2],
    init_std: f32,
    seed: u64,
) -> Result<Var> {
    for (name, v) in dims {
        positive(v, name, layer)?;
    }
    if !(init_std.is_finite() && init_std >= 0.0) {
        return Err(Error::Invalid(format!(
            "{layer}: init_std {init_std} must be finite and ≥ 0"
        )));
    }
    let t = Tensor::randn(device, &[dims[0].1, dims[1].1], 0.0, init_std, seed)?;
    Ok(Var::param(t))
}

/// Every entry of `state` renamed `"{prefix}.{name}"` (the state of a sub-layer inside a composite one).
pub(crate) fn prefixed(prefix: &str, state: Vec<(String, Tensor)>) -> Vec<(String, Tensor)> {
    state
        .into_iter()
        .map(|(k, t)| (format!("{prefix}.{k}"), t))
        .collect()
}

/// Passes its input through unchanged (it stands where a model's config leaves a branch empty).
pub struct Identity;

impl Module for Identity {
    module_state!("Identity", stateless);
    fn forward(&mut self, x: &Var) -> Result<Var> {
        Ok(x.clone())
    }
    fn config_args(&self) -> Map<String, Value> {
        Map::new()
    }
}

/// Softmax over the last axis.
pub struct Softmax;

impl Module for Softmax {
    module_state!("Softmax", stateless);
    fn forward(&mut self, x: &Var) -> Result<Var> {
        ag::softmax(x, -1)
    }
    fn config_args(&self) -> Map<String, Value> {
        Map::new()
    }
}

/// `x > 0 ? x : alpha[c]·x` with one learnable slope per channel (axis 1); state `alpha`.
pub struct PReLU {
    /// The slopes (num_parameters).
    pub alpha: Var,
    n: usize,
    init: f32,
    training: bool,
}

impl PReLU {
    /// `num_parameters` slopes (the input's channel count, or 1 shared), each starting at `init`.
    pub fn new(device: &Device, num_parameters: usize, init: f32) -> Result<Self> {
        positive!("PReLU"; num_parameters);
        if !init.is_finite() {
            return Err(Error::Invalid(format!("PReLU: init {init} is not finite")));
        }
        Ok(PReLU {
            alpha: Var::param(Tensor::full(device, &[num_parameters], init)?),
            n: num_parameters,
            init,
            training: true,
        })
    }
}

impl Module for PReLU {
    module_state!("PReLU", params[alpha]);
    fn forward(&mut self, x: &Var) -> Result<Var> {
        let y = ops::prelu(x.value(), self.alpha.value())?;
        let (tx, ta) = (x.value().clone(), self.alpha.value().clone());
        record("prelu", y, &[x, &self.alpha], move |g| {
            let (gx, ga) = ops::prelu_backward(&tx, &ta, g)?;
            Ok(vec![Some(gx), Some(ga)])
        })
    }
    fn config_args(&self) -> Map<String, Value> {
        args(json!({"num_parameters": self.n, "init": self.init}))
    }
}

/// Average pooling to a fixed output size; as in netcl, only `output_size = 1` (the classifier head):
/// (N, C, H, W) → (N, C, 1, 1).
pub struct AdaptiveAvgPool2d;

impl AdaptiveAvgPool2d {
    /// Checks `output_size` (1 is the only size netcl supports).
    pub fn new(output_size: usize) -> Result<Self> {
        if output_size != 1 {
            return Err(Error::Invalid(format!(
                "AdaptiveAvgPool2d: output_size {output_size} is not supported; only 1 (as in netcl)"
            )));
        }
        Ok(AdaptiveAvgPool2d)
    }
}

impl Module for AdaptiveAvgPool2d {
    module_state!("AdaptiveAvgPool2d", stateless);
    fn forward(&mut self, x: &Var) -> Result<Var> {
        ag::global_avg_pool2d(x)
    }
    fn config_args(&self) -> Map<String, Value> {
        args(json!({"output_size": 1}))
    }
}

/// A lookup table (num_embeddings, embedding_dim): i32 indices of any shape → their rows; state `weight`.
pub struct Embedding {
    /// The table (num_embeddings, embedding_dim).
    pub weight: Var,
    init_std: f32,
    training: bool,
}

impl Embedding {
    /// Rows drawn from N(0, init_std²) (netcl's default `init_std` is 1.0).
    pub fn new(
        device: &Device,
        num_embeddings: usize,
        embedding_dim: usize,
        init_std: f32,
        seed: u64,
    ) -> Result<Self> {
        Ok(Embedding {
            weight: normal_table(
                device,
                "Embedding",
                [
                    ("num_embeddings", num_embeddings),
                    ("embedding_dim", embedding_dim),
                ],
                init_std,
                seed,
            )?,
            init_std,
            training: true,
        })
    }
}

/// The indices of `x` as i32: i32 tensors pass; f32 tensors holding whole numbers are converted.
pub(crate) fn as_indices(x: &Tensor, layer: &str) -> Result<Tensor> {
    match x.dtype() {
        DType::I32 => Ok(x.clone()),
        DType::F32 => {
            let v = x.to_vec::<f32>()?;
            if let Some(bad) = v.iter().find(|f| f.fract() != 0.0 || !f.is_finite()) {
                return Err(Error::Invalid(format!(
                    "{layer}: the input holds {bad}, not a token index"
                )));
            }
            let idx: Vec<i32> = v.iter().map(|&f| f as i32).collect();
            Tensor::from_slice(x.device(), &idx, x.shape())
        }
        d => Err(Error::Invalid(format!(
            "{layer}: token indices must be i32, got {}",
            d.name()
        ))),
    }
}

impl Module for Embedding {
    module_state!("Embedding", params[weight]);
    fn forward(&mut self, x: &Var) -> Result<Var> {
        aga::embedding(&self.weight, &as_indices(x.value(), "Embedding")?)
    }
    fn config_args(&self) -> Map<String, Value> {
        let s = self.weight.shape();
        args(json!({"num_embeddings": s[0], "embedding_dim": s[1], "init_std": self.init_std}))
    }
}

/// `x · γ / √(mean(x²) + ε)` over the last axis; state `gamma`.
pub struct RMSNorm {
    /// The scale γ (dim).
    pub gamma: Var,
    eps: f32,
    training: bool,
}

impl RMSNorm {
    /// γ = 1.
    pub fn new(device: &Device, dim: usize, eps: f32) -> Result<Self> {
        positive!("RMSNorm"; dim);
        if !(eps.is_finite() && eps > 0.0) {
            return Err(Error::Invalid(format!("RMSNorm: eps {eps} must be > 0")));
        }
        Ok(RMSNorm {
            gamma: Var::param(Tensor::ones(device, &[dim])?),
            eps,
            training: true,
        })
    }
}

impl Module for RMSNorm {
    module_state!("RMSNorm", params[gamma]);
    fn forward(&mut self, x: &Var) -> Result<Var> {
        let d = self.gamma.shape()[0];
        if x.shape().last() != Some(&d) {
            return Err(Error::Shape(format!(
                "RMSNorm({d}): input {:?} does not end in {d}",
                x.shape()
            )));
        }
        aga::rms_norm(x, &self.gamma, self.eps)
    }
    fn config_args(&self) -> Map<String, Value> {
        args(json!({"dim": self.gamma.shape()[0], "eps": self.eps}))
    }
}

/// Learned absolute positions (max_len, d_model); state `weight`.
///
/// netcl's `forward(seq_len)` returns the first `seq_len` rows, to be added by the caller; that is
/// [`PositionalEmbedding::positions`] here. As a layer in a `Sequential`, `forward(x)` with x [..., S, d_model]
/// returns `x + positions(S)`.
pub struct PositionalEmbedding {
    /// The table (max_len, d_model).
    pub weight: Var,
    init_std: f32,
    training: bool,
}

impl PositionalEmbedding {
    /// Rows drawn from N(0, init_std²) (netcl's default `init_std` is 0.02).
    pub fn new(
        device: &Device,
        max_len: usize,
        d_model: usize,
        init_std: f32,
        seed: u64,
    ) -> Result<Self> {
        Ok(PositionalEmbedding {
            weight: normal_table(
                device,
                "PositionalEmbedding",
                [("max_len", max_len), ("d_model", d_model)],
                init_std,
                seed,
            )?,
            init_std,
            training: true,
        })
    }

    /// The embeddings of positions 0..seq_len: (seq_len, d_model).
    pub fn positions(&self, seq_len: usize) -> Result<Var> {
        let max = self.weight.shape()[0];
        if seq_len > max {
            return Err(Error::Invalid(format!(
                "PositionalEmbedding: sequence length {seq_len} exceeds max_len {max}"
            )));
        }
        narrow(&self.weight, 0, 0, seq_len)
    }
}

impl Module for PositionalEmbedding {
    module_state!("PositionalEmbedding", params[weight]);
    fn forward(&mut self, x: &Var) -> Result<Var> {
        let s = x.shape();
        let e = self.weight.shape()[1];
        if s.len() < 2 || s[s.len() - 1] != e {
            return Err(Error::Shape(format!(
                "PositionalEmbedding(d_model {e}): input {s:?} is not [..., S, {e}]"
            )));
        }
        ag::add(x, &self.positions(s[s.len() - 2])?)
    }
    fn config_args(&self) -> Map<String, Value> {
        let s = self.weight.shape();
        args(json!({"max_len": s[0], "d_model": s[1], "init_std": self.init_std}))
    }
}

/// An output projection that reuses an embedding table (num_embeddings, dim): x [..., dim] → x·Wᵀ
/// [..., num_embeddings]. It owns no parameters and no state (the embedding reports the weight, so an
/// optimiser updates it once); gradients from both uses add up on the shared weight.
///
/// In a config, `{"type": "TiedLinear", "args": {"tied_to": i}}` names the earlier layer `i` whose first
/// parameter is the table.
pub struct TiedLinear {
    weight: Var,
    tied_to: Option<usize>,
}

impl TiedLinear {
    /// Ties to `weight` (num_embeddings, dim); `tied_to` is the layer index recorded in configs.
    pub fn new(weight: Var, tied_to: Option<usize>) -> Result<Self> {
        if weight.shape().len() != 2 {
            return Err(Error::Shape(format!(
                "TiedLinear: the tied weight must be (num_embeddings, dim), got {:?}",
                weight.shape()
            )));
        }
        Ok(TiedLinear { weight, tied_to })
    }
}

impl Module for TiedLinear {
    module_state!("TiedLinear", stateless);
    fn forward(&mut self, x: &Var) -> Result<Var> {
        let (v, e) = (self.weight.shape()[0], self.weight.shape()[1]);
        let s = x.shape().to_vec();
        if s.last() != Some(&e) {
            return Err(Error::Shape(format!(
                "TiedLinear({e}→{v}): input {s:?} does not end in {e}"
            )));
        }
        let rows: usize = s[..s.len() - 1].iter().product();
        let y = matmul_nt(&ag::reshape(x, &[rows, e])?, &self.weight)?;
        let mut shape = s[..s.len() - 1].to_vec();
        shape.push(v);
        ag::reshape(&y, &shape)
    }
    fn config_args(&self) -> Map<String, Value> {
        match self.tied_to {
            Some(i) => args(json!({"tied_to": i})),
            None => Map::new(),
        }
    }
}

/// A list of layers that shares `parameters`, training mode and state (`"{index}.{key}"`) but is not
/// callable: iterate over it, or use `Sequential`.
#[derive(Default)]
pub struct ModuleList {
    /// The layers.
    pub layers: Vec<Box<dyn Module>>,
    training: bool,
}

impl ModuleList {
    /// A list of `layers`.
    pub fn new(layers: Vec<Box<dyn Module>>) -> Self {
        ModuleList {
            layers,
            training: true,
        }
    }
}

impl Module for ModuleList {
    module_state!("ModuleList", layers);
    fn forward(&mut self, _x: &Var) -> Result<Var> {
        Err(Error::Invalid(
            "ModuleList is not callable; iterate over it or use Sequential".into(),
        ))
    }
    fn state_dict(&self) -> Vec<(String, Tensor)> {
        self.layers
            .iter()
            .enumerate()
            .flat_map(|(i, l)| prefixed(&i.to_string(), l.state_dict()))
            .collect()
    }
    fn config_args(&self) -> Map<String, Value> {
        let c: Vec<LayerConfig> = self.layers.iter().map(|l| l.config()).collect();
        args(json!({ "modules": c }))
    }
}

/// Named layers in insertion order, sharing `parameters`, training mode and state (`"{name}.{key}"`); not
/// callable: index into it.
#[derive(Default)]
pub struct ModuleDict {
    /// The named layers.
    pub modules: Vec<(String, Box<dyn Module>)>,
    training: bool,
}

impl ModuleDict {
    /// A dict of `modules`; names must be distinct.
    pub fn new(modules: Vec<(String, Box<dyn Module>)>) -> Result<Self> {
        for (i, (k, _)) in modules.iter().enumerate() {
            if modules[..i].iter().any(|(n, _)| n == k) {
                return Err(Error::Invalid(format!(
                    "ModuleDict: the name `{k}` appears twice"
                )));
            }
        }
        Ok(ModuleDict {
            modules,
            training: true,
        })
    }

    /// The layer named `key`.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut Box<dyn Module>> {
        self.modules
            .iter_mut()
            .find(|(k, _)| k == key)
            .map(|(_, m)| m)
    }
}

impl Module for ModuleDict {
    fn type_name(&self) -> &'static str {
        "ModuleDict"
    }
    fn forward(&mut self, _x: &Var) -> Result<Var> {
        Err(Error::Invalid(
            "ModuleDict is not callable; index into it".into(),
        ))
    }
    fn parameters(&self) -> Vec<Var> {
        self.modules
            .iter()
            .flat_map(|(_, l)| l.parameters())
            .collect()
    }
    fn set_training(&mut self, on: bool) {
        self.training = on;
        self.modules
            .iter_mut()
            .for_each(|(_, l)| l.set_training(on));
    }
    fn is_training(&self) -> bool {
        self.training
    }
    fn state_dict(&self) -> Vec<(String, Tensor)> {
        self.modules
            .iter()
            .flat_map(|(k, l)| prefixed(k, l.state_dict()))
            .collect()
    }
    fn config_args(&self) -> Map<String, Value> {
        let m: Map<String, Value> = self
            .modules
            .iter()
            .map(|(k, l)| {
                (
                    k.clone(),
                    serde_json::to_value(l.config()).unwrap_or(Value::Null),
                )
            })
            .collect();
        args(json!({ "modules": m }))
    }
}

/// `Linear` over the last dimension of an input of rank other than 2 (netcl's behaviour), used by
/// `Linear::forward` when the input's last dimension is its `in_features`.
pub(crate) fn linear_over_last(x: &Var, w: &Var, b: Option<&Var>) -> Result<Var> {
    linear_last(x, w, b)
}
