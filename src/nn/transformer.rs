//! Attention and transformer blocks with netcl's constructor arguments, sub-layer names and parameter order
//! (`parameters()` lists them as netcl does, so a flat parameter file moves between the two):
//! `MultiheadAttention`, `TransformerEncoderLayer` (post-LN), `CausalSelfAttention`, `TransformerBlock`
//! (pre-LN), `RotaryAttention`, `SwiGLU`, `DecoderBlock` (RMSNorm + rotary attention + SwiGLU) and the
//! `KVCache` for incremental decoding.
//!
//! Inputs are [B, S, E]. Attention goes through the streaming kernel (`flash_attention`) unless attention
//! dropout is active in training or the query and key lengths differ; then the scores are formed with
//! batched products, masked, soft-maxed and dropped out as netcl does.

use serde_json::{Map, Value, json};

use super::extra::{RMSNorm, prefixed};
use super::graph_ops::{bmm, chunk_last, linear_last, permute};
use super::{LayerNorm, Linear, Module};
use crate::autograd::{Var, attention as aga, ops as ag};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::ops::{self, UnaryOp};
use crate::tensor::Tensor;

fn args(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

fn sub(seed: u64, k: u64) -> u64 {
    crate::rng::hash(seed, 1000 + k)
}

fn check_dropout(p: f32, layer: &str) -> Result<()> {
    if !(0.0..1.0).contains(&p) {
        return Err(Error::Invalid(format!(
            "{layer}: dropout {p} must lie in [0, 1)"
        )));
    }
    Ok(())
}

fn heads_of(dim: usize, heads: usize, layer: &str) -> Result<usize> {
    if dim == 0 || heads == 0 || !dim.is_multiple_of(heads) {
        return Err(Error::Invalid(format!(
            "{layer}: embed_dim {dim} must be a positive multiple of num_heads {heads}"
        )));
    }
    Ok(dim / heads)
}

fn bse(x: &Var, e: usize, layer: &str) -> Result<(usize, usize)> {
    match *x.shape() {
        [b, s, ee] if ee == e => Ok((b, s)),
        _ => Err(Error::Shape(format!(
            "{layer}: input {:?} is not [B, S, {e}]",
            x.shape()
        ))),
    }
}

/// Dropout state of a layer: the probability and a counter that gives every call its own mask.
struct Drop {
    p: f32,
    base: u64,
    calls: u64,
}

impl Drop {
    fn new(p: f32, seed: u64) -> Drop {
        Drop {
            p,
            base: seed,
            calls: 0,
        }
    }
    fn active(&self, training: bool) -> bool {
        training && self.p > 0.0
    }
    fn apply(&mut self, x: &Var, training: bool) -> Result<Var> {
        if !self.active(training) {
            return Ok(x.clone());
        }
        self.calls += 1;
        ag::dropout(x, self.p, crate::rng::hash(self.base, self.calls))
    }
}

/// [B, S, H·D] → [B, H, S, D].
fn split_heads(x: &Var, b: usize, s: usize, h: usize, d: usize) -> Result<Var> {
    permute(&ag::reshape(x, &[b, s, h, d])?, &[0, 2, 1, 3])
}

/// [B, H, S, D] → [B, S, H·D].
fn merge_heads(x: &Var) -> Result<Var> {
    let [b, h, s, d] = *x.shape() else {
        return Err(Error::Shape(format!(
            "attention output {:?} is not [B, H, S, D]",
            x.shape()
        )));
    };
    ag::reshape(&permute(x, &[0, 2, 1, 3])?, &[b, s, h * d])
}

/// Scaled dot-product attention over [B, H, S, D] (keys and values may have another length), optionally
/// causal, with dropout on the attention weights when `drop` is active.
fn attention(q: &Var, k: &Var, v: &Var, causal: bool, drop: Option<&mut Drop>) -> Result<Var> {
    let dropping = drop.as_ref().is_some_and(|d| d.p > 0.0);
    if !dropping && q.shape() == k.shape() && k.shape() == v.shape() {
        return aga::flash_attention(q, k, v, causal, None);
    }
    let [b, h, sq, d] = *q.shape() else {
        return Err(Error::Shape(format!(
            "attention: q {:?} is not [B, H, S, D]",
            q.shape()
        )));
    };
    let sk = k.shape().get(2).copied().unwrap_or(0);
    if k.shape() != [b, h, sk, d] || v.shape() != [b, h, sk, d] {
        return Err(Error::Shape(format!(
            "attention: q {:?}, k {:?} and v {:?} must share B, H and D, and k and v their length",
            q.shape(),
            k.shape(),
            v.shape()
        )));
    }
    let q3 = ag::reshape(q, &[b * h, sq, d])?;
    let k3 = ag::reshape(k, &[b * h, sk, d])?;
    let v3 = ag::reshape(v, &[b * h, sk, d])?;
    let mut scores = ag::mul_scalar(&bmm(&q3, &k3, false, true)?, 1.0 / (d as f32).sqrt())?;
    if causal {
        if sq != sk {
            return Err(Error::Shape(format!(
                "attention: a causal mask needs as many queries as keys, got {sq} and {sk}"
            )));
        }
        let mask = ops::causal_mask(q.value().device(), sq)?;
        scores = aga::masked_fill(&scores, &mask, -1e9)?;
    }
    let mut w = ag::softmax(&scores, -1)?;
    if let Some(dr) = drop {
        w = dr.apply(&w, true)?;
    }
    ag::reshape(&bmm(&w, &v3, false, false)?, &[b, h, sq, d])
}

fn lin(device: &Device, i: usize, o: usize, bias: bool, seed: u64) -> Result<Linear> {
    Linear::new(device, i, o, bias, seed)
}

fn lin_fwd(l: &Linear, x: &Var) -> Result<Var> {
    linear_last(x, &l.weight, l.bias.as_ref())
}

fn lin_params(l: &Linear) -> Vec<Var> {
    std::iter::once(l.weight.clone())
        .chain(l.bias.clone())
        .collect()
}

/// Multi-head attention with separate q, k, v and output projections (netcl's `MultiheadAttention`);
/// `forward(x)` is self-attention, [`MultiheadAttention::attend`] takes separate query, key and value.
pub struct MultiheadAttention {
    /// Query projection.
    pub q_proj: Linear,
    /// Key projection.
    pub k_proj: Linear,
    /// Value projection.
    pub v_proj: Linear,
    /// Output projection.
    pub out_proj: Linear,
    heads: usize,
    bias: bool,
    training: bool,
}

impl MultiheadAttention {
    /// `embed_dim` split into `num_heads` heads.
    pub fn new(
        device: &Device,
        embed_dim: usize,
        num_heads: usize,
        bias: bool,
        seed: u64,
    ) -> Result<Self> {
        heads_of(embed_dim, num_heads, "MultiheadAttention")?;
        let e = embed_dim;
        Ok(MultiheadAttention {
            q_proj: lin(device, e, e, bias, sub(seed, 0))?,
            k_proj: lin(device, e, e, bias, sub(seed, 1))?,
            v_proj: lin(device, e, e, bias, sub(seed, 2))?,
            out_proj: lin(device, e, e, bias, sub(seed, 3))?,
            heads: num_heads,
            bias,
            training: true,
        })
    }

    fn dim(&self) -> usize {
        self.q_proj.weight.shape()[0]
    }

    /// Attention of `query` [B, Sq, E] over `key` and `value` [B, Sk, E] (no mask).
    pub fn attend(&self, query: &Var, key: &Var, value: &Var) -> Result<Var> {
        let e = self.dim();
        let (b, sq) = bse(query, e, "MultiheadAttention query")?;
        let (bk, sk) = bse(key, e, "MultiheadAttention key")?;
        let (bv, sv) = bse(value, e, "MultiheadAttention value")?;
        if bk != b || bv != b || sv != sk {
            return Err(Error::Shape(format!(
                "MultiheadAttention: query {:?}, key {:?} and value {:?} must share B, and key and value S",
                query.shape(),
                key.shape(),
                value.shape()
            )));
        }
        let (h, d) = (self.heads, e / self.heads);
        let q = split_heads(&lin_fwd(&self.q_proj, query)?, b, sq, h, d)?;
        let k = split_heads(&lin_fwd(&self.k_proj, key)?, b, sk, h, d)?;
        let v = split_heads(&lin_fwd(&self.v_proj, value)?, b, sk, h, d)?;
        let o = attention(&q, &k, &v, false, None)?;
        lin_fwd(&self.out_proj, &merge_heads(&o)?)
    }
}

impl Module for MultiheadAttention {
    module_state!("MultiheadAttention", parts [q_proj, k_proj, v_proj, out_proj]);
    fn forward(&mut self, x: &Var) -> Result<Var> {
        self.attend(x, x, x)
    }
    module_state!(@mode);
    fn config_args(&self) -> Map<String, Value> {
        args(json!({"embed_dim": self.dim(), "num_heads": self.heads, "bias": self.bias}))
    }
}

/// Post-LN encoder layer: `x = norm1(src + attn(src))`, `out = norm2(x + linear2(relu(linear1(x))))`.
pub struct TransformerEncoderLayer {
    /// Self-attention.
    pub self_attn: MultiheadAttention,
    /// First feed-forward projection.
    pub linear1: Linear,
    /// Second feed-forward projection.
    pub linear2: Linear,
    /// Norm after attention.
    pub norm1: LayerNorm,
    /// Norm after the feed-forward.
    pub norm2: LayerNorm,
    training: bool,
}

impl TransformerEncoderLayer {
    /// `d_model` with `nhead` heads and a `dim_feedforward` hidden layer (netcl's default 2048).
    pub fn new(
        device: &Device,
        d_model: usize,
        nhead: usize,
        dim_feedforward: usize,
        seed: u64,
    ) -> Result<Self> {
        if dim_feedforward == 0 {
            return Err(Error::Invalid(
                "TransformerEncoderLayer: dim_feedforward must be at least 1".into(),
            ));
        }
        Ok(TransformerEncoderLayer {
            self_attn: MultiheadAttention::new(device, d_model, nhead, true, sub(seed, 0))?,
            linear1: lin(device, d_model, dim_feedforward, true, sub(seed, 1))?,
            linear2: lin(device, dim_feedforward, d_model, true, sub(seed, 2))?,
            norm1: LayerNorm::new(device, d_model, 1e-5)?,
            norm2: LayerNorm::new(device, d_model, 1e-5)?,
            training: true,
        })
    }
}

impl Module for TransformerEncoderLayer {
    module_state!("TransformerEncoderLayer", parts [self_attn, linear1, linear2, norm1, norm2]);
    fn forward(&mut self, x: &Var) -> Result<Var> {
        let a = self.self_attn.forward(x)?;
        let x = self.norm1.forward(&ag::add(x, &a)?)?;
        let h = lin_fwd(&self.linear2, &ag::relu(&lin_fwd(&self.linear1, &x)?)?)?;
        self.norm2.forward(&ag::add(&x, &h)?)
    }
    module_state!(@mode);
    fn config_args(&self) -> Map<String, Value> {
        args(json!({
            "d_model": self.self_attn.dim(), "nhead": self.self_attn.heads,
            "dim_feedforward": self.linear1.weight.shape()[1],
        }))
    }
}

/// Multi-head self-attention with one fused q/k/v projection (`qkv`), an optional causal mask and dropout
/// on the weights and the output in training.
pub struct CausalSelfAttention {
    /// The fused projection E → 3E (q, k, v in that order).
    pub qkv: Linear,
    /// Output projection.
    pub out_proj: Linear,
    heads: usize,
    causal: bool,
    bias: bool,
    attn_drop: Drop,
    out_drop: Drop,
    training: bool,
}

impl CausalSelfAttention {
    /// `embed_dim` split into `num_heads` heads.
    pub fn new(
        device: &Device,
        embed_dim: usize,
        num_heads: usize,
        causal: bool,
        dropout: f32,
        bias: bool,
        seed: u64,
    ) -> Result<Self> {
        heads_of(embed_dim, num_heads, "CausalSelfAttention")?;
        check_dropout(dropout, "CausalSelfAttention")?;
        Ok(CausalSelfAttention {
            qkv: lin(device, embed_dim, 3 * embed_dim, bias, sub(seed, 0))?,
            out_proj: lin(device, embed_dim, embed_dim, bias, sub(seed, 1))?,
            heads: num_heads,
            causal,
            bias,
            attn_drop: Drop::new(dropout, sub(seed, 2)),
            out_drop: Drop::new(dropout, sub(seed, 3)),
            training: true,
        })
    }

    fn dim(&self) -> usize {
        self.out_proj.weight.shape()[0]
    }
}

impl Module for CausalSelfAttention {
    module_state!("CausalSelfAttention", parts [qkv, out_proj]);
    fn forward(&mut self, x: &Var) -> Result<Var> {
        let e = self.dim();
        let (b, s) = bse(x, e, "CausalSelfAttention")?;
        let (h, d) = (self.heads, e / self.heads);
        let parts = chunk_last(&lin_fwd(&self.qkv, x)?, 3)?;
        let q = split_heads(&parts[0], b, s, h, d)?;
        let k = split_heads(&parts[1], b, s, h, d)?;
        let v = split_heads(&parts[2], b, s, h, d)?;
        let drop = if self.attn_drop.active(self.training) {
            Some(&mut self.attn_drop)
        } else {
            None
        };
        let o = attention(&q, &k, &v, self.causal, drop)?;
        let y = lin_fwd(&self.out_proj, &merge_heads(&o)?)?;
        self.out_drop.apply(&y, self.training)
    }
    module_state!(@mode);
    fn config_args(&self) -> Map<String, Value> {
        args(json!({
            "embed_dim": self.dim(), "num_heads": self.heads, "causal": self.causal,
            "dropout": self.attn_drop.p, "bias": self.bias,
        }))
    }
}

/// The feed-forward activation of a [`TransformerBlock`].
fn activation_op(name: &str) -> Result<UnaryOp> {
    match name {
        "gelu" => Ok(UnaryOp::GeluTanh),
        "relu" => Ok(UnaryOp::Relu),
        "silu" | "swish" => Ok(UnaryOp::Silu),
        other => Err(Error::Invalid(format!(
            "TransformerBlock: activation `{other}` is not gelu, relu, silu or swish"
        ))),
    }
}

/// Pre-LN decoder block: `x + attn(ln1(x))`, then `x + fc2(act(fc1(ln2(x))))` (dropout on the second branch
/// in training).
pub struct TransformerBlock {
    /// Norm before attention.
    pub ln1: LayerNorm,
    /// Self-attention.
    pub attn: CausalSelfAttention,
    /// Norm before the feed-forward.
    pub ln2: LayerNorm,
    /// First feed-forward projection.
    pub fc1: Linear,
    /// Second feed-forward projection.
    pub fc2: Linear,
    activation: String,
    act: UnaryOp,
    drop: Drop,
    training: bool,
}

impl TransformerBlock {
    /// `d_model` with `num_heads` heads; `dim_feedforward` defaults to 4·d_model; `activation` is gelu
    /// (tanh form), relu, silu or swish.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        device: &Device,
        d_model: usize,
        num_heads: usize,
        dim_feedforward: Option<usize>,
        dropout: f32,
        causal: bool,
        activation: &str,
        seed: u64,
    ) -> Result<Self> {
        let act = activation_op(activation)?;
        let ff = dim_feedforward.unwrap_or(4 * d_model);
        Ok(TransformerBlock {
            ln1: LayerNorm::new(device, d_model, 1e-5)?,
            attn: CausalSelfAttention::new(
                device,
                d_model,
                num_heads,
                causal,
                dropout,
                true,
                sub(seed, 0),
            )?,
            ln2: LayerNorm::new(device, d_model, 1e-5)?,
            fc1: lin(device, d_model, ff, true, sub(seed, 1))?,
            fc2: lin(device, ff, d_model, true, sub(seed, 2))?,
            activation: activation.to_owned(),
            act,
            drop: Drop::new(dropout, sub(seed, 3)),
            training: true,
        })
    }
}

impl Module for TransformerBlock {
    module_state!("TransformerBlock", parts [ln1, attn, ln2, fc1, fc2]);
    fn forward(&mut self, x: &Var) -> Result<Var> {
        let x = ag::add(x, &self.attn.forward(&self.ln1.forward(x)?)?)?;
        let h = ag::unary(self.act, &lin_fwd(&self.fc1, &self.ln2.forward(&x)?)?)?;
        let h = self.drop.apply(&lin_fwd(&self.fc2, &h)?, self.training)?;
        ag::add(&x, &h)
    }
    module_state!(@mode attn);
    fn config_args(&self) -> Map<String, Value> {
        args(json!({
            "d_model": self.attn.dim(), "num_heads": self.attn.heads,
            "dim_feedforward": self.fc1.weight.shape()[1], "dropout": self.drop.p,
            "causal": self.attn.causal, "activation": self.activation,
        }))
    }
}

/// Keys and values of every layer for incremental decoding, allocated once at `capacity`:
/// per layer k and v [batch, n_head, capacity, head_dim].
pub struct KVCache {
    k: Vec<Tensor>,
    v: Vec<Tensor>,
    capacity: usize,
    length: usize,
}

impl KVCache {
    /// Zeroed caches for `n_layer` layers.
    pub fn new(
        device: &Device,
        n_layer: usize,
        batch: usize,
        n_head: usize,
        head_dim: usize,
        capacity: usize,
    ) -> Result<Self> {
        for (v, n) in [
            (n_layer, "n_layer"),
            (batch, "batch"),
            (n_head, "n_head"),
            (head_dim, "head_dim"),
            (capacity, "capacity"),
        ] {
            if v == 0 {
                return Err(Error::Invalid(format!("KVCache: {n} must be at least 1")));
            }
        }
        let shape = [batch, n_head, capacity, head_dim];
        let mk = || Tensor::zeros(device, &shape);
        Ok(KVCache {
            k: (0..n_layer).map(|_| mk()).collect::<Result<_>>()?,
            v: (0..n_layer).map(|_| mk()).collect::<Result<_>>()?,
            capacity,
            length: 0,
        })
    }

    /// Positions filled so far.
    pub fn len(&self) -> usize {
        self.length
    }

    /// Whether nothing has been cached.
    pub fn is_empty(&self) -> bool {
        self.length == 0
    }

    /// The capacity in positions.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Forgets every position.
    pub fn reset(&mut self) {
        self.length = 0;
    }

    /// Bytes held by the caches (f32).
    pub fn bytes(&self) -> usize {
        self.k.iter().chain(&self.v).map(|t| t.numel() * 4).sum()
    }

    /// Layer `layer`'s caches (k, v).
    pub fn layer(&self, layer: usize) -> Result<(&Tensor, &Tensor)> {
        match (self.k.get(layer), self.v.get(layer)) {
            (Some(k), Some(v)) => Ok((k, v)),
            _ => Err(Error::Invalid(format!(
                "KVCache: layer {layer} of {}",
                self.k.len()
            ))),
        }
    }

    /// Writes this step's keys and values [batch, n_head, steps, head_dim] of `layer` at the current position.
    /// The length moves only with [`KVCache::advance`], once every layer has written.
    pub fn append(&mut self, layer: usize, k_new: &Tensor, v_new: &Tensor) -> Result<()> {
        let (kc, _) = self.layer(layer)?;
        let cs = kc.shape().to_vec();
        let steps = k_new.shape().get(2).copied().unwrap_or(0);
        let want = [cs[0], cs[1], steps, cs[3]];
        for (t, n) in [(k_new, "keys"), (v_new, "values")] {
            if t.shape() != want {
                return Err(Error::shape_mismatch(
                    format!("KVCache::append {n}"),
                    &want,
                    t.shape(),
                ));
            }
        }
        if self.length + steps > self.capacity {
            return Err(Error::Limit(format!(
                "KV cache full: {} + {steps} exceeds capacity {}",
                self.length, self.capacity
            )));
        }
        for (cache, new) in [(&self.k[layer], k_new), (&self.v[layer], v_new)] {
            let head = ops::narrow(cache, 2, 0, self.length)?;
            let tail_len = self.capacity - self.length - steps;
            let tail = ops::narrow(cache, 2, self.length + steps, tail_len)?;
            let parts: Vec<&Tensor> = [&head, new, &tail]
                .into_iter()
                .filter(|t| t.shape()[2] > 0)
                .collect();
            cache.assign(&ops::cat(&parts, 2)?)?;
        }
        Ok(())
    }

    /// Moves the length by `n` positions.
    pub fn advance(&mut self, n: usize) -> Result<()> {
        if self.length + n > self.capacity {
            return Err(Error::Limit(format!(
                "KV cache full: {} + {n} exceeds capacity {}",
                self.length, self.capacity
            )));
        }
        self.length += n;
        Ok(())
    }
}

/// Causal self-attention with rotary positions, optional RMS normalisation of q and k per head (`q_norm`,
/// `k_norm`) and the streaming kernel; with a [`KVCache`], [`RotaryAttention::forward_cached`] decodes.
pub struct RotaryAttention {
    /// The fused projection dim → 3·dim.
    pub qkv: Linear,
    /// Output projection.
    pub proj: Linear,
    /// Per-head scale of q (head_dim), when `qk_norm`.
    pub q_norm: Option<Var>,
    /// Per-head scale of k (head_dim), when `qk_norm`.
    pub k_norm: Option<Var>,
    heads: usize,
    rope_base: f32,
    eps: f32,
    bias: bool,
    drop: Drop,
    training: bool,
}

impl RotaryAttention {
    /// `dim` split into `n_head` heads of even size.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        device: &Device,
        dim: usize,
        n_head: usize,
        rope_base: f32,
        dropout: f32,
        bias: bool,
        qk_norm: bool,
        eps: f32,
        seed: u64,
    ) -> Result<Self> {
        let hd = heads_of(dim, n_head, "RotaryAttention")?;
        if hd % 2 != 0 {
            return Err(Error::Invalid(format!(
                "RotaryAttention: head_dim {hd} must be even for RoPE"
            )));
        }
        check_dropout(dropout, "RotaryAttention")?;
        if !(rope_base.is_finite() && rope_base > 0.0 && eps.is_finite() && eps > 0.0) {
            return Err(Error::Invalid(format!(
                "RotaryAttention: rope_base {rope_base} and eps {eps} must be positive"
            )));
        }
        let norm = || -> Result<Option<Var>> {
            Ok(if qk_norm {
                Some(Var::param(Tensor::ones(device, &[hd])?))
            } else {
                None
            })
        };
        Ok(RotaryAttention {
            qkv: lin(device, dim, 3 * dim, bias, sub(seed, 0))?,
            proj: lin(device, dim, dim, bias, sub(seed, 1))?,
            q_norm: norm()?,
            k_norm: norm()?,
            heads: n_head,
            rope_base,
            eps,
            bias,
            drop: Drop::new(dropout, sub(seed, 2)),
            training: true,
        })
    }

    fn dim(&self) -> usize {
        self.proj.weight.shape()[0]
    }

    fn project(&self, x: &Var, start: usize) -> Result<(Var, Var, Var)> {
        let e = self.dim();
        let (b, s) = bse(x, e, "RotaryAttention")?;
        let (h, d) = (self.heads, e / self.heads);
        let parts = chunk_last(&lin_fwd(&self.qkv, x)?, 3)?;
        let mut q = split_heads(&parts[0], b, s, h, d)?;
        let mut k = split_heads(&parts[1], b, s, h, d)?;
        let v = split_heads(&parts[2], b, s, h, d)?;
        if let (Some(gq), Some(gk)) = (&self.q_norm, &self.k_norm) {
            q = aga::rms_norm(&q, gq, self.eps)?;
            k = aga::rms_norm(&k, gk, self.eps)?;
        }
        let pos: Vec<i32> = (start..start + s).map(|p| p as i32).collect();
        let pos = Tensor::from_slice(x.value().device(), &pos, &[s])?;
        let q = aga::rope(&q, Some(&pos), self.rope_base)?;
        let k = aga::rope(&k, Some(&pos), self.rope_base)?;
        Ok((q, k, v))
    }

    fn finish(&mut self, o: &Var) -> Result<Var> {
        let y = lin_fwd(&self.proj, &merge_heads(o)?)?;
        self.drop.apply(&y, self.training)
    }

    /// Decoding with `cache`: positions start at `cache.len()`; this step's keys and values are written to
    /// layer `layer`'s cache and the query attends to the whole prefix. More than one new position is a
    /// prefill and needs an empty cache (as in netcl). Call `cache.advance` after every layer has run.
    pub fn forward_cached(&mut self, x: &Var, cache: &mut KVCache, layer: usize) -> Result<Var> {
        let start = cache.len();
        let (q, k, v) = self.project(x, start)?;
        cache.append(layer, k.value(), v.value())?;
        let s = q.shape()[2];
        let total = start + s;
        let (kc, vc) = cache.layer(layer)?;
        let o = if s == 1 {
            ops::attention_decode(q.value(), kc, vc, total, None)?
        } else {
            if start != 0 {
                return Err(Error::Invalid(
                    "RotaryAttention: a multi-token prefill needs an empty cache; feed the continuation one token at a time".into(),
                ));
            }
            let ka = ops::narrow(kc, 2, 0, total)?;
            let va = ops::narrow(vc, 2, 0, total)?;
            ops::flash_attention(q.value(), &ka, &va, true, None)?.out
        };
        self.finish(&Var::constant(o))
    }
}

impl Module for RotaryAttention {
    fn type_name(&self) -> &'static str {
        "RotaryAttention"
    }
    fn forward(&mut self, x: &Var) -> Result<Var> {
        let (q, k, v) = self.project(x, 0)?;
        let o = aga::flash_attention(&q, &k, &v, true, None)?;
        self.finish(&o)
    }
    fn parameters(&self) -> Vec<Var> {
        let mut p = lin_params(&self.qkv);
        p.extend(lin_params(&self.proj));
        p.extend(self.q_norm.clone());
        p.extend(self.k_norm.clone());
        p
    }
    module_state!(@mode);
    fn state_dict(&self) -> Vec<(String, Tensor)> {
        let mut s = prefixed("qkv", self.qkv.state_dict());
        s.extend(prefixed("proj", self.proj.state_dict()));
        if let (Some(q), Some(k)) = (&self.q_norm, &self.k_norm) {
            s.push(("q_norm".into(), q.value().clone()));
            s.push(("k_norm".into(), k.value().clone()));
        }
        s
    }
    fn config_args(&self) -> Map<String, Value> {
        args(json!({
            "dim": self.dim(), "n_head": self.heads, "rope_base": self.rope_base,
            "dropout": self.drop.p, "bias": self.bias, "qk_norm": self.q_norm.is_some(), "eps": self.eps,
        }))
    }
}

/// netcl's default SwiGLU width: 8·dim/3 rounded up to a multiple of 64.
pub fn swiglu_hidden(dim: usize) -> usize {
    (8 * dim / 3).div_ceil(64) * 64
}

/// Gated feed-forward `down(silu(gate(x)) · up(x))`.
pub struct SwiGLU {
    /// Gate projection dim → hidden.
    pub gate: Linear,
    /// Up projection dim → hidden.
    pub up: Linear,
    /// Down projection hidden → dim.
    pub down: Linear,
    bias: bool,
    training: bool,
}

impl SwiGLU {
    /// `hidden` defaults to [`swiglu_hidden`]`(dim)`.
    pub fn new(
        device: &Device,
        dim: usize,
        hidden: Option<usize>,
        bias: bool,
        seed: u64,
    ) -> Result<Self> {
        let h = hidden.unwrap_or_else(|| swiglu_hidden(dim));
        Ok(SwiGLU {
            gate: lin(device, dim, h, bias, sub(seed, 0))?,
            up: lin(device, dim, h, bias, sub(seed, 1))?,
            down: lin(device, h, dim, bias, sub(seed, 2))?,
            bias,
            training: true,
        })
    }
}

impl Module for SwiGLU {
    module_state!("SwiGLU", parts [gate, up, down]);
    fn forward(&mut self, x: &Var) -> Result<Var> {
        let g = ag::unary(UnaryOp::Silu, &lin_fwd(&self.gate, x)?)?;
        lin_fwd(&self.down, &ag::mul(&g, &lin_fwd(&self.up, x)?)?)
    }
    module_state!(@mode);
    fn config_args(&self) -> Map<String, Value> {
        args(json!({
            "dim": self.gate.weight.shape()[0], "hidden": self.gate.weight.shape()[1], "bias": self.bias,
        }))
    }
}

/// Pre-norm block of the LLaMA shape: `x + attn(norm1(x))`, then `x + ffn(norm2(x))` with RMSNorm, rotary
/// attention (no biases) and SwiGLU.
pub struct DecoderBlock {
    /// Norm before attention.
    pub norm1: RMSNorm,
    /// Rotary attention.
    pub attn: RotaryAttention,
    /// Norm before the feed-forward.
    pub norm2: RMSNorm,
    /// Feed-forward.
    pub ffn: SwiGLU,
    drop: Drop,
    training: bool,
}

impl DecoderBlock {
    /// `dim` with `n_head` heads; `hidden` defaults to [`swiglu_hidden`]`(dim)`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        device: &Device,
        dim: usize,
        n_head: usize,
        hidden: Option<usize>,
        dropout: f32,
        rope_base: f32,
        eps: f32,
        qk_norm: bool,
        seed: u64,
    ) -> Result<Self> {
        Ok(DecoderBlock {
            norm1: RMSNorm::new(device, dim, eps)?,
            attn: RotaryAttention::new(
                device,
                dim,
                n_head,
                rope_base,
                dropout,
                false,
                qk_norm,
                eps,
                sub(seed, 0),
            )?,
            norm2: RMSNorm::new(device, dim, eps)?,
            ffn: SwiGLU::new(device, dim, hidden, false, sub(seed, 1))?,
            drop: Drop::new(dropout, sub(seed, 2)),
            training: true,
        })
    }

    fn rest(&mut self, x: &Var, a: &Var) -> Result<Var> {
        let x = ag::add(x, a)?;
        let h = self.ffn.forward(&self.norm2.forward(&x)?)?;
        let h = self.drop.apply(&h, self.training)?;
        ag::add(&x, &h)
    }

    /// One decoding step through `cache` (see [`RotaryAttention::forward_cached`]).
    pub fn forward_cached(&mut self, x: &Var, cache: &mut KVCache, layer: usize) -> Result<Var> {
        let a = self
            .attn
            .forward_cached(&self.norm1.forward(x)?, cache, layer)?;
        self.rest(x, &a)
    }
}

impl Module for DecoderBlock {
    module_state!("DecoderBlock", parts [norm1, attn, norm2, ffn]);
    fn forward(&mut self, x: &Var) -> Result<Var> {
        let a = self.attn.forward(&self.norm1.forward(x)?)?;
        self.rest(x, &a)
    }
    module_state!(@mode attn);
    fn config_args(&self) -> Map<String, Value> {
        let a = self.attn.config_args();
        args(json!({
            "dim": a["dim"], "n_head": a["n_head"], "hidden": self.ffn.gate.weight.shape()[1],
            "dropout": self.drop.p, "rope_base": a["rope_base"], "eps": a["eps"], "qk_norm": a["qk_norm"],
        }))
    }
}
