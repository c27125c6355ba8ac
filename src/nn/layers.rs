//! The layers.

use crate::autograd::record;
use serde_json::{Map, Value, json};

use super::init::{constant, kaiming_uniform, xavier_uniform};
use super::{Module, args, positive};
use crate::autograd::{Var, ops as ag};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::ops::{Conv2dOptions, ConvTranspose2dOptions, Pool2d, UnaryOp};
use crate::tensor::Tensor;

/// He-uniform weights (a = √5) of `shape`.
fn he_uniform(device: &Device, shape: &[usize], fan_in: usize, seed: u64) -> Result<Tensor> {
    kaiming_uniform(device, shape, fan_in, 5f32.sqrt(), seed)
}

/// A bias of `n` values uniform in ±1/√fan_in, seeded from the layer's seed.
fn uniform_bias(device: &Device, n: usize, fan_in: usize, seed: u64) -> Result<Var> {
    let bound = 1.0 / (fan_in.max(1) as f32).sqrt();
    Ok(Var::param(Tensor::rand_uniform(
        device,
        &[n],
        -bound,
        bound,
        crate::rng::hash(seed, 1),
    )?))
}

/// Fails unless `x` is N×C×H×W with `c` channels.
fn expect_nchw(x: &Var, c: usize, layer: &str) -> Result<()> {
    expect_channels(x, 4, 1, c, layer)
}

fn expect_channels(x: &Var, rank: usize, dim: usize, want: usize, layer: &str) -> Result<()> {
    let s = x.shape();
    if s.len() != rank || s[dim] != want {
        return Err(Error::Shape(format!(
            "{layer}: input has shape {s:?}; expected {rank} dimensions with {want} at dimension {dim}"
        )));
    }
    Ok(())
}

/// `y = x @ W + b` with `W` stored (in, out), as netcl does. An input of more than two dimensions whose last
/// dimension is `in_features` is mapped over that dimension (leading ones kept); otherwise it is flattened.
pub struct Linear {
    /// Weight (in, out).
    pub weight: Var,
    /// Bias (out), if any.
    pub bias: Option<Var>,
    in_f: usize,
    out_f: usize,
    training: bool,
}

impl Linear {
    /// A layer with Glorot-uniform weights and a bias uniform in ±1/√in.
    pub fn new(
        device: &Device,
        in_features: usize,
        out_features: usize,
        bias: bool,
        seed: u64,
    ) -> Result<Self> {
        positive!("Linear"; in_features, out_features);
        let w = xavier_uniform(
            device,
            &[in_features, out_features],
            in_features,
            out_features,
            seed,
        )?;
        let b = bias
            .then(|| uniform_bias(device, out_features, in_features, seed))
            .transpose()?;
        Ok(Linear {
            weight: Var::param(w),
            bias: b,
            in_f: in_features,
            out_f: out_features,
            training: true,
        })
    }
}

impl Module for Linear {
    module_state!("Linear", weight_bias);
    fn forward(&mut self, x: &Var) -> Result<Var> {
        let s = x.shape();
        if s.len() > 2 && s.last() == Some(&self.in_f) {
            // netcl applies a Linear to the last dimension and keeps the leading ones.
            return super::extra::linear_over_last(x, &self.weight, self.bias.as_ref());
        }
        let feat: usize = s.iter().skip(1).product();
        if s.len() < 2 || feat != self.in_f {
            return Err(Error::Shape(format!(
                "Linear({}→{}): input {s:?} has {feat} features per sample, expected {}",
                self.in_f, self.out_f, self.in_f
            )));
        }
        ag::linear(x, &self.weight, self.bias.as_ref())
    }
    fn config_args(&self) -> Map<String, Value> {
        args(
            json!({"in_features": self.in_f, "out_features": self.out_f, "bias": self.bias.is_some()}),
        )
    }
}

/// 2-D convolution (NCHW), weights (F, C/groups, K, K); He-uniform initialisation (a = √5).
pub struct Conv2d {
    /// Weight (F, C/groups, K, K).
    pub weight: Var,
    /// Bias (F), if any.
    pub bias: Option<Var>,
    in_c: usize,
    out_c: usize,
    k: usize,
    opts: Conv2dOptions,
    training: bool,
}

impl Conv2d {
    /// A square convolution.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        device: &Device,
        in_channels: usize,
        out_channels: usize,
        kernel_size: usize,
        stride: usize,
        pad: usize,
        dilation: usize,
        groups: usize,
        bias: bool,
        seed: u64,
    ) -> Result<Self> {
        positive!("Conv2d"; in_channels, out_channels, kernel_size, stride, dilation, groups);
        if !in_channels.is_multiple_of(groups) || !out_channels.is_multiple_of(groups) {
            return Err(Error::Invalid(format!(
                "Conv2d: groups {groups} must divide in_channels {in_channels} and out_channels {out_channels}"
            )));
        }
        let fan_in = in_channels / groups * kernel_size * kernel_size;
        let w = he_uniform(
            device,
            &[out_channels, in_channels / groups, kernel_size, kernel_size],
            fan_in,
            seed,
        )?;
        let b = bias
            .then(|| uniform_bias(device, out_channels, fan_in, seed))
            .transpose()?;
        let opts = Conv2dOptions {
            stride: [stride; 2],
            padding: [pad; 2],
            dilation: [dilation; 2],
            groups,
            ..Conv2dOptions::default()
        };
        Ok(Conv2d {
            weight: Var::param(w),
            bias: b,
            in_c: in_channels,
            out_c: out_channels,
            k: kernel_size,
            opts,
            training: true,
        })
    }
}

impl Conv2d {
    /// Whether folding a batch norm into this convolution saves memory traffic for input `x`: the fold reads and
    /// writes the weights once more per call and saves a write and a read of the output, so it pays when the
    /// output has more elements than the weights (large batches and maps; not the deep layers of a small batch).
    pub(crate) fn folding_pays(&self, x: &Tensor) -> bool {
        let [n, _, h, w] = match *x.shape() {
            [n, c, h, w] => [n, c, h, w],
            _ => return false,
        };
        let out = |size: usize, i: usize| {
            let span = self.opts.dilation[i] * (self.k - 1) + 1;
            (size + 2 * self.opts.padding[i]).saturating_sub(span) / self.opts.stride[i] + 1
        };
        n * out(h, 0) * out(w, 1) > self.in_c / self.opts.groups * self.k * self.k
    }

    /// Inference with a batch norm folded in: `conv(x, w·s) + (b − mean)·s + β` with `s = γ/√(var + ε)` per
    /// output channel, then ReLU in the same epilogue when `relu`; one pass over the output instead of the
    /// convolution's and the normalisation's. No graph is recorded (callers use it without gradients).
    pub(crate) fn forward_folded(
        &self,
        x: &Tensor,
        bn: &BatchNorm2d,
        relu: bool,
    ) -> Result<Tensor> {
        let c = self.out_c;
        if bn.running_mean.numel() != c {
            return Err(Error::Shape(format!(
                "folding BatchNorm2d({}) into Conv2d(…→{c})",
                bn.running_mean.numel()
            )));
        }
        let scale = crate::ops::fused(
            &format!("x0 * rsqrt(x1 + {:e})", bn.eps),
            &[bn.gamma.value(), &bn.running_var],
        )?;
        let w = crate::ops::fused(
            "x0 * x1",
            &[self.weight.value(), &scale.reshape(&[c, 1, 1, 1])?],
        )?;
        let shift = match &self.bias {
            Some(b) => crate::ops::fused(
                "(x0 - x1) * x2 + x3",
                &[b.value(), &bn.running_mean, &scale, bn.beta.value()],
            )?,
            None => {
                crate::ops::fused("x2 - x0 * x1", &[&bn.running_mean, &scale, bn.beta.value()])?
            }
        };
        crate::ops::conv2d(x, &w, Some(&shift), &self.opts.clone().fuse_relu(relu))
    }
}

impl Module for Conv2d {
    module_state!("Conv2d", weight_bias);
    fn forward(&mut self, x: &Var) -> Result<Var> {
        expect_nchw(
            x,
            self.in_c,
            &format!(
                "Conv2d({}→{}, {}×{})",
                self.in_c, self.out_c, self.k, self.k
            ),
        )?;
        ag::conv2d(x, &self.weight, self.bias.as_ref(), &self.opts)
    }
    fn config_args(&self) -> Map<String, Value> {
        args(json!({
            "in_channels": self.in_c, "out_channels": self.out_c, "kernel_size": self.k,
            "stride": self.opts.stride[0], "pad": self.opts.padding[0], "bias": self.bias.is_some(),
            "dilation": self.opts.dilation[0], "groups": self.opts.groups,
        }))
    }
}

/// Depthwise convolution: one K×K filter per channel, weights (C, 1, K, K).
pub struct DepthwiseConv2d {
    /// Weight (C, 1, K, K).
    pub weight: Var,
    /// Bias (C), if any.
    pub bias: Option<Var>,
    c: usize,
    k: usize,
    stride: usize,
    pad: usize,
    training: bool,
}

impl DepthwiseConv2d {
    /// A depthwise layer with He-uniform (a = √5) weights.
    pub fn new(
        device: &Device,
        channels: usize,
        kernel_size: usize,
        stride: usize,
        pad: usize,
        bias: bool,
        seed: u64,
    ) -> Result<Self> {
        positive!("DepthwiseConv2d"; channels, kernel_size, stride);
        let fan_in = kernel_size * kernel_size;
        let w = he_uniform(
            device,
            &[channels, 1, kernel_size, kernel_size],
            fan_in,
            seed,
        )?;
        let b = bias
            .then(|| uniform_bias(device, channels, fan_in, seed))
            .transpose()?;
        Ok(DepthwiseConv2d {
            weight: Var::param(w),
            bias: b,
            c: channels,
            k: kernel_size,
            stride,
            pad,
            training: true,
        })
    }
}

impl Module for DepthwiseConv2d {
    module_state!("DepthwiseConv2d", weight_bias);
    fn forward(&mut self, x: &Var) -> Result<Var> {
        expect_nchw(
            x,
            self.c,
            &format!("DepthwiseConv2d({}, {}×{})", self.c, self.k, self.k),
        )?;
        ag::depthwise_conv2d(x, &self.weight, self.bias.as_ref(), self.stride, self.pad)
    }
    fn config_args(&self) -> Map<String, Value> {
        args(
            json!({"channels": self.c, "kernel_size": self.k, "stride": self.stride, "pad": self.pad, "bias": self.bias.is_some()}),
        )
    }
}

/// Transposed convolution, weights (Cin, Cout, K, K).
pub struct ConvTranspose2d {
    /// Weight (Cin, Cout, K, K).
    pub weight: Var,
    /// Bias (Cout), if any.
    pub bias: Option<Var>,
    in_c: usize,
    out_c: usize,
    k: usize,
    opts: ConvTranspose2dOptions,
    training: bool,
}

impl ConvTranspose2d {
    /// A transposed convolution with He-uniform (a = √5) weights.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        device: &Device,
        in_channels: usize,
        out_channels: usize,
        kernel_size: usize,
        stride: usize,
        pad: usize,
        bias: bool,
        seed: u64,
    ) -> Result<Self> {
        positive!("ConvTranspose2d"; in_channels, out_channels, kernel_size, stride);
        let fan_in = out_channels * kernel_size * kernel_size;
        let w = he_uniform(
            device,
            &[in_channels, out_channels, kernel_size, kernel_size],
            fan_in,
            seed,
        )?;
        let b = bias
            .then(|| uniform_bias(device, out_channels, fan_in, seed))
            .transpose()?;
        let opts = ConvTranspose2dOptions {
            conv: Conv2dOptions {
                stride: [stride; 2],
                padding: [pad; 2],
                ..Conv2dOptions::default()
            },
            output_padding: [0, 0],
        };
        Ok(ConvTranspose2d {
            weight: Var::param(w),
            bias: b,
            in_c: in_channels,
            out_c: out_channels,
            k: kernel_size,
            opts,
            training: true,
        })
    }
}

impl Module for ConvTranspose2d {
    module_state!("ConvTranspose2d", weight_bias);
    fn forward(&mut self, x: &Var) -> Result<Var> {
        expect_nchw(
            x,
            self.in_c,
            &format!("ConvTranspose2d({}→{})", self.in_c, self.out_c),
        )?;
        ag::conv_transpose2d(x, &self.weight, self.bias.as_ref(), &self.opts)
    }
    fn config_args(&self) -> Map<String, Value> {
        args(json!({
            "in_channels": self.in_c, "out_channels": self.out_c, "kernel_size": self.k,
            "stride": self.opts.conv.stride[0], "pad": self.opts.conv.padding[0], "bias": self.bias.is_some(),
        }))
    }
}

/// Batch normalisation over (N, H, W) per channel, with running statistics for evaluation.
pub struct BatchNorm2d {
    /// Scale γ (C).
    pub gamma: Var,
    /// Shift β (C).
    pub beta: Var,
    /// Running mean (C).
    pub running_mean: Tensor,
    /// Running (biased) variance (C).
    pub running_var: Tensor,
    c: usize,
    momentum: f32,
    eps: f32,
    training: bool,
}

impl BatchNorm2d {
    /// γ = 1, β = 0, running mean 0 and variance 1.
    pub fn new(device: &Device, num_features: usize, momentum: f32, eps: f32) -> Result<Self> {
        positive!("BatchNorm2d"; num_features);
        if !((0.0..=1.0).contains(&momentum) && eps > 0.0 && eps.is_finite()) {
            return Err(Error::Invalid(format!(
                "BatchNorm2d: momentum {momentum} must be in [0, 1] and eps {eps} > 0"
            )));
        }
        Ok(BatchNorm2d {
            gamma: Var::param(constant(device, &[num_features], 1.0)?),
            beta: Var::param(constant(device, &[num_features], 0.0)?),
            running_mean: Tensor::zeros(device, &[num_features])?,
            running_var: Tensor::ones(device, &[num_features])?,
            c: num_features,
            momentum,
            eps,
            training: true,
        })
    }
}

impl BatchNorm2d {
    /// The training forward, with `act` after it when given; the running statistics are updated in place.
    fn train_step(&mut self, x: &Var, act: Option<crate::ops::norm::ActGrad>) -> Result<Var> {
        expect_nchw(x, self.c, &format!("BatchNorm2d({})", self.c))?;
        let (g, b) = (&self.gamma, &self.beta);
        let (rm, rvar) = (&self.running_mean, &self.running_var);
        let (y, rm, rv) = match act {
            Some(a) => ag::batch_norm2d_train_act(x, g, b, rm, rvar, self.momentum, self.eps, a)?,
            None => ag::batch_norm2d_train(x, g, b, rm, rvar, self.momentum, self.eps)?,
        };
        // Keep the buffers' identity (views and saved references see the update).
        self.running_mean.assign(&rm)?;
        self.running_var.assign(&rv)?;
        Ok(y)
    }
}

impl Module for BatchNorm2d {
    module_state!("BatchNorm2d", params [gamma, beta] buffers [running_mean, running_var]);
    fn forward(&mut self, x: &Var) -> Result<Var> {
        if self.training {
            self.train_step(x, None)
        } else {
            expect_nchw(x, self.c, &format!("BatchNorm2d({})", self.c))?;
            ag::batch_norm2d_eval(
                x,
                &self.gamma,
                &self.beta,
                &self.running_mean,
                &self.running_var,
                self.eps,
            )
        }
    }
    fn config_args(&self) -> Map<String, Value> {
        args(json!({"num_features": self.c, "momentum": self.momentum, "eps": self.eps}))
    }
    /// Training-mode forward followed by `act`, with the activation's gradient folded into the normalisation's
    /// backward ([`ag::batch_norm2d_train_act`]); `None` in evaluation mode (the caller runs the layers).
    fn forward_then(&mut self, x: &Var, act: crate::ops::norm::ActGrad) -> Result<Option<Var>> {
        if !self.training {
            return Ok(None);
        }
        self.train_step(x, Some(act)).map(Some)
    }
}

/// Layer normalisation over the last dimension of size `normalized_shape`.
pub struct LayerNorm {
    /// Scale.
    pub gamma: Var,
    /// Shift.
    pub beta: Var,
    n: usize,
    eps: f32,
    training: bool,
}

impl LayerNorm {
    /// γ = 1, β = 0.
    pub fn new(device: &Device, normalized_shape: usize, eps: f32) -> Result<Self> {
        positive!("LayerNorm"; normalized_shape);
        Ok(LayerNorm {
            gamma: Var::param(constant(device, &[normalized_shape], 1.0)?),
            beta: Var::param(constant(device, &[normalized_shape], 0.0)?),
            n: normalized_shape,
            eps,
            training: true,
        })
    }
}

impl Module for LayerNorm {
    module_state!("LayerNorm", params [gamma, beta]);
    fn forward(&mut self, x: &Var) -> Result<Var> {
        if x.shape().last() != Some(&self.n) {
            return Err(Error::Shape(format!(
                "LayerNorm({}): input {:?} does not end in {}",
                self.n,
                x.shape(),
                self.n
            )));
        }
        ag::layer_norm(x, 1, &self.gamma, &self.beta, self.eps)
    }
    fn config_args(&self) -> Map<String, Value> {
        args(json!({"normalized_shape": self.n, "eps": self.eps}))
    }
}

/// Group normalisation of N×C×H×W.
pub struct GroupNorm {
    /// Scale (C).
    pub gamma: Var,
    /// Shift (C).
    pub beta: Var,
    groups: usize,
    c: usize,
    eps: f32,
    training: bool,
}

impl GroupNorm {
    /// γ = 1, β = 0; `num_groups` must divide `num_channels`.
    pub fn new(device: &Device, num_groups: usize, num_channels: usize, eps: f32) -> Result<Self> {
        positive!("GroupNorm"; num_groups);
        if !num_channels.is_multiple_of(num_groups) {
            return Err(Error::Invalid(format!(
                "GroupNorm: {num_groups} groups do not divide {num_channels} channels"
            )));
        }
        Ok(GroupNorm {
            gamma: Var::param(constant(device, &[num_channels], 1.0)?),
            beta: Var::param(constant(device, &[num_channels], 0.0)?),
            groups: num_groups,
            c: num_channels,
            eps,
            training: true,
        })
    }
}

impl Module for GroupNorm {
    module_state!("GroupNorm", params [gamma, beta]);
    fn forward(&mut self, x: &Var) -> Result<Var> {
        expect_nchw(
            x,
            self.c,
            &format!("GroupNorm({}, {})", self.groups, self.c),
        )?;
        ag::group_norm(x, self.groups, &self.gamma, &self.beta, self.eps)
    }
    fn config_args(&self) -> Map<String, Value> {
        args(json!({"num_groups": self.groups, "num_channels": self.c, "eps": self.eps}))
    }
}

/// A parameter-free elementwise activation (ReLU, LeakyReLU, Sigmoid, Tanh, GELU, SiLU, ELU, Softplus,
/// HardSigmoid, HardSwish, HardTanh).
pub struct Activation {
    name: &'static str,
    op: UnaryOp,
    training: bool,
}

impl Activation {
    /// The activation `op` under the config name `name`.
    pub fn new(name: &str, op: UnaryOp) -> Self {
        let name = match name {
            "ReLU" => "ReLU",
            "LeakyReLU" => "LeakyReLU",
            "Sigmoid" => "Sigmoid",
            "Tanh" => "Tanh",
            "GELU" => "GELU",
            "SiLU" | "Swish" => "SiLU",
            "ELU" => "ELU",
            "Softplus" => "Softplus",
            "HardSigmoid" => "HardSigmoid",
            "HardSwish" => "HardSwish",
            _ => "HardTanh",
        };
        Activation {
            name,
            op,
            training: true,
        }
    }
}

impl Module for Activation {
    fn type_name(&self) -> &'static str {
        self.name
    }
    fn forward(&mut self, x: &Var) -> Result<Var> {
        ag::unary(self.op, x)
    }
    fn folded_act(&self) -> Option<crate::ops::norm::ActGrad> {
        match self.op {
            UnaryOp::Relu => Some(crate::ops::norm::ActGrad::Relu),
            UnaryOp::Clamp(lo, hi) if lo <= hi => Some(crate::ops::norm::ActGrad::Clamp(lo, hi)),
            _ => None,
        }
    }
    module_state!(flag);
    fn config_args(&self) -> Map<String, Value> {
        match self.op {
            UnaryOp::LeakyRelu(s) => args(json!({"negative_slope": s})),
            UnaryOp::Elu(a) => args(json!({"alpha": a})),
            UnaryOp::Clamp(lo, hi) => args(json!({"min_val": lo, "max_val": hi})),
            UnaryOp::GeluErf => args(json!({"approximate": false})),
            _ => Map::new(),
        }
    }
}

/// Inverted dropout in training, identity in evaluation. Each forward draws a new mask: call `k` uses the
/// seed `hash(seed, k)`, so a run is reproducible.
pub struct Dropout {
    p: f32,
    seed: Option<u64>,
    base: u64,
    calls: u64,
    training: bool,
}

impl Dropout {
    /// Drops with probability `p` in [0, 1); `seed` is the config's (netcl's `seed` argument), else `fallback`.
    pub fn new(p: f32, seed: Option<u64>, fallback: u64) -> Result<Self> {
        if !(0.0..1.0).contains(&p) {
            return Err(Error::Invalid(format!(
                "Dropout: p = {p} must lie in [0, 1)"
            )));
        }
        Ok(Dropout {
            p,
            seed,
            base: seed.unwrap_or(fallback),
            calls: 0,
            training: true,
        })
    }
}

impl Module for Dropout {
    module_state!("Dropout", flag);
    fn forward(&mut self, x: &Var) -> Result<Var> {
        if !self.training || self.p == 0.0 {
            return Ok(x.clone());
        }
        self.calls += 1;
        ag::dropout(x, self.p, crate::rng::hash(self.base, self.calls))
    }
    fn config_args(&self) -> Map<String, Value> {
        args(json!({"p": self.p, "seed": self.seed}))
    }
}

macro_rules! pool_layer {
    ($name:ident, $type_name:literal, $doc:literal, $fwd:expr) => {
        #[doc = $doc]
        pub struct $name {
            p: Pool2d,
            training: bool,
        }

        impl $name {
            /// A square window `kernel_size` with `stride` and `padding` (at most half the window).
            pub fn new(kernel_size: usize, stride: usize, padding: usize) -> Result<Self> {
                positive!($type_name; kernel_size, stride);
                Ok($name { p: Pool2d::square(kernel_size, stride, padding), training: true })
            }
        }

        impl Module for $name {
            module_state!($type_name, flag);
            fn forward(&mut self, x: &Var) -> Result<Var> {
                let f: fn(&Var, Pool2d) -> Result<Var> = $fwd;
                f(x, self.p)
            }
            fn config_args(&self) -> Map<String, Value> {
                args(json!({"kernel_size": self.p.kernel.0, "stride": self.p.stride.0, "padding": self.p.padding.0}))
            }
        }
    };
}

pool_layer!(
    MaxPool2d,
    "MaxPool2d",
    "Max pooling over square windows.",
    |x, p| ag::max_pool2d(x, p)
);
pool_layer!(
    AvgPool2d,
    "AvgPool2d",
    "Average pooling over square windows (padding counted in the divisor).",
    |x, p| ag::avg_pool2d(x, p, true)
);

macro_rules! stateless {
    ($name:ident, $type_name:literal, $doc:literal, $fwd:expr) => {
        #[doc = $doc]
        pub struct $name;

        impl Module for $name {
            module_state!($type_name, stateless);
            fn forward(&mut self, x: &Var) -> Result<Var> {
                let f: fn(&Var) -> Result<Var> = $fwd;
                f(x)
            }
            fn config_args(&self) -> Map<String, Value> {
                Map::new()
            }
        }
    };
}

stateless!(
    GlobalAvgPool2d,
    "GlobalAvgPool2d",
    "The mean of each channel's plane: (N, C, H, W) → (N, C, 1, 1).",
    ag::global_avg_pool2d
);
stateless!(
    Flatten,
    "Flatten",
    "(N, …) → (N, rest), as a view.",
    ag::flatten
);

/// Nearest or bilinear upsampling by an integer factor.
pub struct Upsample {
    factor: usize,
    mode: crate::ops::Upsample,
}

impl Upsample {
    /// Scales height and width by `scale_factor` ≥ 1.
    pub fn new(scale_factor: usize, mode: crate::ops::Upsample) -> Result<Self> {
        positive!("Upsample"; scale_factor);
        Ok(Upsample {
            factor: scale_factor,
            mode,
        })
    }
}

impl Module for Upsample {
    module_state!("Upsample", stateless);
    fn forward(&mut self, x: &Var) -> Result<Var> {
        let s = x.shape();
        if s.len() != 4 {
            return Err(Error::Shape(format!(
                "Upsample: input {s:?} is not N×C×H×W"
            )));
        }
        let size = (s[2] * self.factor, s[3] * self.factor);
        let (mode, in_shape) = (self.mode, s.to_vec());
        let y = crate::ops::upsample(x.value(), size, mode)?;
        record("upsample", y, &[x], move |g| {
            Ok(vec![Some(crate::ops::upsample_backward(
                g, &in_shape, mode,
            )?)])
        })
    }
    fn config_args(&self) -> Map<String, Value> {
        let (mode, align) = match self.mode {
            crate::ops::Upsample::Nearest => ("nearest", false),
            crate::ops::Upsample::Bilinear { align_corners } => ("bilinear", align_corners),
        };
        args(json!({"scale_factor": self.factor, "mode": mode, "align_corners": align}))
    }
}
