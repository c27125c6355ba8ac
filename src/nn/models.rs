//! Whole models: ResNet-18 as netcl 0.3.2 builds it and the standard MobileNetV2, as layer configs.
//!
//! Both are `Sequential` configs like every other preset, made of the stock layers plus two block layers that
//! hold their branch: [`BasicBlock`] (two 3×3 convolutions and a shortcut, added and rectified) and
//! [`InvertedResidual`] (1×1 expansion, depthwise 3×3, linear 1×1 projection, and the identity shortcut when
//! shapes allow). Every step goes through the engine's ops and autograd; the block's own join (add, then ReLU)
//! is one fused kernel forward and one backward.
//!
//! - [`resnet18`]: netcl 0.3.2's `netcl.nn.ResNet18(num_classes, base_channels, use_batchnorm)`: a CIFAR-style
//!   3×3 stem (stride 1, no pooling), four stages of two basic blocks (stride 2 from the second stage on),
//!   1×1 projection shortcuts where the shape changes, global average pooling and a Linear head. Every
//!   convolution has a bias, as netcl's has. [`resnet18_netcl032_parameters`] lists the parameters in netcl's
//!   `ResNet18.parameters()` order, the layout of its `save_params`/`load_params` files.
//! - [`mobilenet_v2`]: the standard MobileNetV2 (Sandler et al., 2018, "MobileNetV2: Inverted Residuals and
//!   Linear Bottlenecks", table 2; channel rounding as in its reference implementation): stride-2 3×3 stem of
//!   32 channels, seventeen inverted residual blocks, a 1×1 convolution to 1280 channels, global average
//!   pooling, dropout 0.2 and a Linear head. Convolutions have no bias; ReLU6 is `HardTanh(0, 6)`. netcl 0.3.2
//!   has no MobileNetV2.

use serde_json::{Map, Value, json};

use super::layers::{BatchNorm2d, Conv2d, DepthwiseConv2d};
use super::{LayerConfig, Module, Sequential, arg_bool, arg_usize, args, cfg, positive};
use crate::autograd::{Var, record};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::ops::norm::ActGrad;
use crate::ops::{self, UnaryOp};
use crate::tensor::Tensor;

/// `relu(a + b)` in one kernel, and its gradient (the output's gradient where the output is positive, for
/// both inputs) in one more: the join of a residual block.
fn add_relu(a: &Var, b: &Var) -> Result<Var> {
    if a.shape() != b.shape() {
        return Err(Error::shape_mismatch(
            "residual add: the branch and the shortcut",
            a.shape(),
            b.shape(),
        ));
    }
    let y = ops::fused("max(x0 + x1, 0)", &[a.value(), b.value()])?;
    let kept = y.clone();
    record("add_relu", y, &[a, b], move |g| {
        let gx = ops::fused("x0 * (x1 > 0)", &[g, &kept])?;
        Ok(vec![Some(gx.clone()), Some(gx)])
    })
}

/// A batch norm with netcl's defaults (momentum 0.1, ε 1e-5).
fn bn(device: &Device, c: usize) -> Result<BatchNorm2d> {
    BatchNorm2d::new(device, c, 0.1, BN_EPS)
}

/// A square convolution with padding `(k − 1) / 2`, dilation 1 and one group.
#[allow(clippy::too_many_arguments)]
fn conv(
    device: &Device,
    i: usize,
    o: usize,
    k: usize,
    stride: usize,
    bias: bool,
    seed: u64,
    part: u64,
) -> Result<Conv2d> {
    Conv2d::new(
        device,
        i,
        o,
        k,
        stride,
        (k - 1) / 2,
        1,
        1,
        bias,
        crate::rng::hash(seed, part),
    )
}

/// Redraws `w` (a convolution weight of `fan_in` inputs per output) from He's normal initialisation,
/// N(0, 2/fan_in), seeded: a deep stack keeps its activations' scale, so the network is usable in evaluation
/// mode before any statistics are gathered (the default uniform ±√(1/fan_in) shrinks the variance 6× a
/// layer, to nothing after MobileNetV2's fifty convolutions).
fn he_normal(w: &Var, fan_in: usize, seed: u64) -> Result<()> {
    let t = w.value();
    let std = (2.0 / fan_in.max(1) as f32).sqrt();
    t.assign(&Tensor::randn(t.device(), t.shape(), 0.0, std, seed)?)
}

/// The ε of every batch norm inside the blocks.
const BN_EPS: f32 = 1e-5;

/// `bn` (when present) then, when `clamp` is given, the activation `clamp(·, lo, hi)` (ReLU is `(0, ∞)`,
/// ReLU6 `(0, 6)`).
///
/// In evaluation mode without a graph (inference), the normalisation and the activation are one kernel,
/// `clamp((x − mean)·γ/√(var + ε) + β, lo, hi)`, instead of the half-dozen small ones of the layers' general
/// path; otherwise the layers run as they are, with their gradients.
fn bn_act(bn: &mut Option<BatchNorm2d>, x: Var, clamp: Option<(f32, f32)>) -> Result<Var> {
    let fused = bn
        .as_ref()
        .is_some_and(|b| !b.is_training() && !crate::autograd::is_grad_enabled());
    if let (true, Some(b)) = (fused, bn.as_ref()) {
        let c = b.running_mean.numel();
        let per = |t: &Tensor| t.reshape(&[1, c, 1, 1]);
        let affine = format!("(x0 - x1) * x2 * rsqrt(x3 + {BN_EPS:e}) + x4");
        let expr = match clamp {
            Some((lo, hi)) if hi.is_finite() => format!("clamp({affine}, {lo:?}, {hi:?})"),
            Some((lo, _)) => format!("max({affine}, {lo:?})"),
            None => affine,
        };
        let y = ops::fused(
            &expr,
            &[
                x.value(),
                &per(&b.running_mean)?,
                &per(b.gamma.value())?,
                &per(&b.running_var)?,
                &per(b.beta.value())?,
            ],
        )?;
        return Ok(Var::constant(y));
    }
    // Training: the activation's gradient runs inside the normalisation's backward.
    if let (Some(b), Some((lo, hi))) = (bn.as_mut(), clamp) {
        let act = if hi.is_finite() {
            ActGrad::Clamp(lo, hi)
        } else {
            ActGrad::Relu
        };
        if let Some(y) = b.forward_then(&x, act)? {
            return Ok(y);
        }
    }
    let h = match bn {
        Some(b) => b.forward(&x)?,
        None => x,
    };
    match clamp {
        Some((lo, hi)) if hi.is_finite() => crate::autograd::ops::unary(UnaryOp::Clamp(lo, hi), &h),
        Some(_) => crate::autograd::ops::relu(&h),
        None => Ok(h),
    }
}

/// `conv`, then `bn` and the activation as [`bn_act`] does. In inference (a batch norm in evaluation mode,
/// gradients off), where the convolution's output outweighs its weights ([`Conv2d::folding_pays`]), the
/// normalisation is folded into the convolution's weights and bias, and ReLU into its epilogue, so the block
/// writes its output once; a clamp to a finite bound (ReLU6) is applied after.
fn conv_bn_act(
    conv: &mut Conv2d,
    bn: &mut Option<BatchNorm2d>,
    x: &Var,
    clamp: Option<(f32, f32)>,
) -> Result<Var> {
    let inference = bn
        .as_ref()
        .is_some_and(|b| !b.is_training() && !crate::autograd::is_grad_enabled());
    if let (true, Some(b)) = (inference && conv.folding_pays(x.value()), bn.as_ref()) {
        let relu = clamp.is_some_and(|(lo, hi)| lo == 0.0 && hi.is_infinite());
        let y = conv.forward_folded(x.value(), b, relu)?;
        let y = match clamp {
            Some((lo, hi)) if !relu => ops::unary(UnaryOp::Clamp(lo, hi), &y)?,
            _ => y,
        };
        return Ok(Var::constant(y));
    }
    let h = conv.forward(x)?;
    bn_act(bn, h, clamp)
}

const RELU: Option<(f32, f32)> = Some((0.0, f32::INFINITY));
const RELU6: Option<(f32, f32)> = Some((0.0, 6.0));

/// The sub-layers of a block, by name, in parameter order.
trait Parts {
    fn parts(&self) -> Vec<(&'static str, &dyn Module)>;
    fn parts_mut(&mut self) -> Vec<&mut dyn Module>;
}

/// The `Module` methods of a block that follow from its [`Parts`] and a `training` field.
macro_rules! block_state {
    ($name:literal) => {
        fn type_name(&self) -> &'static str {
            $name
        }
        fn parameters(&self) -> Vec<Var> {
            self.parts()
                .into_iter()
                .flat_map(|(_, m)| m.parameters())
                .collect()
        }
        fn set_training(&mut self, on: bool) {
            self.training = on;
            self.parts_mut()
                .into_iter()
                .for_each(|m| m.set_training(on));
        }
        fn is_training(&self) -> bool {
            self.training
        }
        fn state_dict(&self) -> Vec<(String, Tensor)> {
            self.parts()
                .into_iter()
                .flat_map(|(n, m)| super::extra::prefixed(n, m.state_dict()))
                .collect()
        }
    };
}

/// ResNet's basic block as netcl 0.3.2 builds it: `conv3×3(stride) → BN → ReLU → conv3×3 → BN`, plus the
/// shortcut (the input, or `conv1×1(stride) → BN` when the stride or the channel count changes), added and
/// rectified. Convolutions carry a bias when `bias` is set (netcl's do); without `batchnorm` the BNs are left
/// out. State names: `conv1.weight`, `bn1.gamma`, …, `proj.weight`, `proj_bn.running_var`.
pub struct BasicBlock {
    conv1: Conv2d,
    bn1: Option<BatchNorm2d>,
    conv2: Conv2d,
    bn2: Option<BatchNorm2d>,
    proj: Option<Conv2d>,
    proj_bn: Option<BatchNorm2d>,
    in_c: usize,
    out_c: usize,
    stride: usize,
    batchnorm: bool,
    bias: bool,
    training: bool,
}

impl BasicBlock {
    /// A block from `in_channels` to `out_channels` whose first convolution and shortcut have `stride`.
    pub fn new(
        device: &Device,
        in_channels: usize,
        out_channels: usize,
        stride: usize,
        batchnorm: bool,
        bias: bool,
        seed: u64,
    ) -> Result<Self> {
        positive!("BasicBlock"; in_channels, out_channels, stride);
        let (i, o) = (in_channels, out_channels);
        let norm = |c| batchnorm.then(|| bn(device, c)).transpose();
        let projected = stride != 1 || i != o;
        Ok(BasicBlock {
            conv1: conv(device, i, o, 3, stride, bias, seed, 1)?,
            bn1: norm(o)?,
            conv2: conv(device, o, o, 3, 1, bias, seed, 2)?,
            bn2: norm(o)?,
            proj: projected
                .then(|| conv(device, i, o, 1, stride, bias, seed, 3))
                .transpose()?,
            proj_bn: if projected { norm(o)? } else { None },
            in_c: i,
            out_c: o,
            stride,
            batchnorm,
            bias,
            training: true,
        })
    }
}

impl Parts for BasicBlock {
    // netcl 0.3.2's order within a block: w1, b1, w2, b2, bn1, bn2, then the projection and its BN.
    fn parts(&self) -> Vec<(&'static str, &dyn Module)> {
        let mut v: Vec<(&'static str, &dyn Module)> =
            vec![("conv1", &self.conv1), ("conv2", &self.conv2)];
        for (n, b) in [("bn1", &self.bn1), ("bn2", &self.bn2)] {
            if let Some(b) = b {
                v.push((n, b));
            }
        }
        if let Some(p) = &self.proj {
            v.push(("proj", p));
        }
        if let Some(b) = &self.proj_bn {
            v.push(("proj_bn", b));
        }
        v
    }
    fn parts_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut v: Vec<&mut dyn Module> = vec![&mut self.conv1, &mut self.conv2];
        for b in [&mut self.bn1, &mut self.bn2, &mut self.proj_bn]
            .into_iter()
            .flatten()
        {
            v.push(b);
        }
        if let Some(p) = &mut self.proj {
            v.push(p);
        }
        v
    }
}

impl Module for BasicBlock {
    block_state!("BasicBlock");

    fn forward(&mut self, x: &Var) -> Result<Var> {
        let h = conv_bn_act(&mut self.conv1, &mut self.bn1, x, RELU)?;
        let h = conv_bn_act(&mut self.conv2, &mut self.bn2, &h, None)?;
        let skip = match &mut self.proj {
            Some(p) => conv_bn_act(p, &mut self.proj_bn, x, None)?,
            None => x.clone(),
        };
        add_relu(&h, &skip)
    }

    fn config_args(&self) -> Map<String, Value> {
        args(json!({
            "in_channels": self.in_c, "out_channels": self.out_c, "stride": self.stride,
            "batchnorm": self.batchnorm, "bias": self.bias,
        }))
    }
}

/// MobileNetV2's inverted residual block: `conv1×1 → BN → ReLU6` to `in · expand_ratio` channels (left out
/// when the ratio is 1), `depthwise 3×3(stride) → BN → ReLU6`, `conv1×1 → BN` to `out_channels` (linear: no
/// activation), and the input added when the stride is 1 and the channel counts match. No convolution has a
/// bias; their weights are He-normal (N(0, 2/fan_in)). State names: `expand.weight`, `expand_bn.gamma`,
/// `dw.weight`, `dw_bn.*`, `project.weight`, `project_bn.*`.
pub struct InvertedResidual {
    expand: Option<(Conv2d, Option<BatchNorm2d>)>,
    dw: DepthwiseConv2d,
    dw_bn: Option<BatchNorm2d>,
    project: Conv2d,
    project_bn: Option<BatchNorm2d>,
    in_c: usize,
    out_c: usize,
    stride: usize,
    expand_ratio: usize,
    training: bool,
}

impl InvertedResidual {
    /// A block from `in_channels` to `out_channels` with a depthwise stride of `stride` (1 or 2).
    pub fn new(
        device: &Device,
        in_channels: usize,
        out_channels: usize,
        stride: usize,
        expand_ratio: usize,
        seed: u64,
    ) -> Result<Self> {
        positive!("InvertedResidual"; in_channels, out_channels, stride, expand_ratio);
        let hidden = in_channels * expand_ratio;
        let expand = (expand_ratio != 1)
            .then(|| -> Result<_> {
                Ok((
                    conv(device, in_channels, hidden, 1, 1, false, seed, 1)?,
                    Some(bn(device, hidden)?),
                ))
            })
            .transpose()?;
        let dw = DepthwiseConv2d::new(
            device,
            hidden,
            3,
            stride,
            1,
            false,
            crate::rng::hash(seed, 2),
        )?;
        let project = conv(device, hidden, out_channels, 1, 1, false, seed, 3)?;
        if let Some((c, _)) = &expand {
            he_normal(&c.weight, in_channels, crate::rng::hash(seed, 4))?;
        }
        he_normal(&dw.weight, 9, crate::rng::hash(seed, 5))?;
        he_normal(&project.weight, hidden, crate::rng::hash(seed, 6))?;
        Ok(InvertedResidual {
            expand,
            dw,
            dw_bn: Some(bn(device, hidden)?),
            project,
            project_bn: Some(bn(device, out_channels)?),
            in_c: in_channels,
            out_c: out_channels,
            stride,
            expand_ratio,
            training: true,
        })
    }

    /// Whether the block adds its input to its output.
    pub fn has_residual(&self) -> bool {
        self.stride == 1 && self.in_c == self.out_c
    }
}

impl Parts for InvertedResidual {
    fn parts(&self) -> Vec<(&'static str, &dyn Module)> {
        let mut v: Vec<(&'static str, &dyn Module)> = Vec::new();
        if let Some((c, b)) = &self.expand {
            v.push(("expand", c));
            v.extend(b.iter().map(|b| ("expand_bn", b as &dyn Module)));
        }
        v.push(("dw", &self.dw));
        v.extend(self.dw_bn.iter().map(|b| ("dw_bn", b as &dyn Module)));
        v.push(("project", &self.project));
        v.extend(
            self.project_bn
                .iter()
                .map(|b| ("project_bn", b as &dyn Module)),
        );
        v
    }
    fn parts_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut v: Vec<&mut dyn Module> = vec![&mut self.dw, &mut self.project];
        if let Some((c, b)) = &mut self.expand {
            v.push(c);
            v.extend(b.iter_mut().map(|b| b as &mut dyn Module));
        }
        for b in [&mut self.dw_bn, &mut self.project_bn]
            .into_iter()
            .flatten()
        {
            v.push(b);
        }
        v
    }
}

impl Module for InvertedResidual {
    block_state!("InvertedResidual");

    fn forward(&mut self, x: &Var) -> Result<Var> {
        let mut h = x.clone();
        if let Some((c, b)) = &mut self.expand {
            h = conv_bn_act(c, b, &h, RELU6)?;
        }
        h = bn_act(&mut self.dw_bn, self.dw.forward(&h)?, RELU6)?;
        h = conv_bn_act(&mut self.project, &mut self.project_bn, &h, None)?;
        if self.has_residual() {
            h = crate::autograd::ops::add(&h, x)?;
        }
        Ok(h)
    }

    fn config_args(&self) -> Map<String, Value> {
        args(json!({
            "in_channels": self.in_c, "out_channels": self.out_c, "stride": self.stride,
            "expand_ratio": self.expand_ratio,
        }))
    }
}

/// The block layer `cfg.kind` (`BasicBlock` or `InvertedResidual`), when it names one.
pub(crate) fn build_block(
    device: &Device,
    cfg: &LayerConfig,
    seed: u64,
) -> Option<Result<Box<dyn Module>>> {
    let (a, t) = (&cfg.args, cfg.kind.as_str());
    let built = || -> Result<Box<dyn Module>> {
        let (i, o) = (
            arg_usize(a, "in_channels", None, t)?,
            arg_usize(a, "out_channels", None, t)?,
        );
        let stride = arg_usize(a, "stride", Some(1), t)?;
        Ok(match t {
            "BasicBlock" => Box::new(BasicBlock::new(
                device,
                i,
                o,
                stride,
                arg_bool(a, "batchnorm", true, t)?,
                arg_bool(a, "bias", true, t)?,
                seed,
            )?),
            _ => Box::new(InvertedResidual::new(
                device,
                i,
                o,
                stride,
                arg_usize(a, "expand_ratio", Some(6), t)?,
                seed,
            )?),
        })
    };
    matches!(t, "BasicBlock" | "InvertedResidual").then(built)
}

/// netcl 0.3.2's `ResNet18(num_classes, base_channels, use_batchnorm)` for `in_channels`-channel images of any
/// size (the head follows a global average pool). netcl's is `resnet18(3, 10, 64, true)`.
pub fn resnet18(
    in_channels: usize,
    num_classes: usize,
    base_channels: usize,
    batchnorm: bool,
) -> Result<Vec<LayerConfig>> {
    positive!("resnet18"; in_channels, num_classes, base_channels);
    let b = base_channels;
    let mut c = vec![cfg(
        "Conv2d",
        json!({"in_channels": in_channels, "out_channels": b, "kernel_size": 3, "stride": 1, "pad": 1, "bias": true}),
    )];
    if batchnorm {
        c.push(cfg("BatchNorm2d", json!({"num_features": b})));
    }
    c.push(cfg("ReLU", json!({})));
    let mut in_c = b;
    for (stage, out) in [b, 2 * b, 4 * b, 8 * b].into_iter().enumerate() {
        for block in 0..2 {
            let stride = if stage > 0 && block == 0 { 2 } else { 1 };
            c.push(cfg(
                "BasicBlock",
                json!({"in_channels": in_c, "out_channels": out, "stride": stride, "batchnorm": batchnorm, "bias": true}),
            ));
            in_c = out;
        }
    }
    c.push(cfg("GlobalAvgPool2d", json!({})));
    c.push(cfg("Flatten", json!({})));
    c.push(cfg(
        "Linear",
        json!({"in_features": in_c, "out_features": num_classes}),
    ));
    Ok(c)
}

/// `v` rounded to the nearest multiple of 8, at least 8, and never below 90 % of `v` (MobileNetV2's channel
/// rounding).
fn divisible8(v: f32) -> usize {
    let r = (((v + 4.0) as usize) / 8 * 8).max(8);
    if (r as f32) < 0.9 * v { r + 8 } else { r }
}

/// The inverted residual stages of MobileNetV2: (expansion, channels, repeats, first stride).
const MBV2_STAGES: [(usize, usize, usize, usize); 7] = [
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
];

/// The standard MobileNetV2 with width multiplier `width` (1.0 is the standard network) for `in_channels`-channel
/// images; the last convolution has `1280 · max(1, width)` channels (rounded).
pub fn mobilenet_v2(
    in_channels: usize,
    num_classes: usize,
    width: f32,
) -> Result<Vec<LayerConfig>> {
    positive!("mobilenet_v2"; in_channels, num_classes);
    if !(width.is_finite() && width > 0.0 && width <= 8.0) {
        return Err(Error::Invalid(format!(
            "mobilenet_v2: width multiplier {width} must lie in (0, 8]"
        )));
    }
    let relu6 = || cfg("HardTanh", json!({"min_val": 0.0, "max_val": 6.0}));
    let conv_bn = |i: usize, o: usize, k: usize, s: usize| {
        [
            cfg(
                "Conv2d",
                json!({"in_channels": i, "out_channels": o, "kernel_size": k, "stride": s, "pad": (k - 1) / 2, "bias": false}),
            ),
            cfg("BatchNorm2d", json!({"num_features": o})),
            relu6(),
        ]
    };
    let mut in_c = divisible8(32.0 * width);
    let mut c: Vec<LayerConfig> = conv_bn(in_channels, in_c, 3, 2).into();
    for (t, ch, n, s) in MBV2_STAGES {
        let out = divisible8(ch as f32 * width);
        for i in 0..n {
            c.push(cfg(
                "InvertedResidual",
                json!({"in_channels": in_c, "out_channels": out, "stride": if i == 0 { s } else { 1 }, "expand_ratio": t}),
            ));
            in_c = out;
        }
    }
    let last = divisible8(1280.0 * width.max(1.0));
    c.extend(conv_bn(in_c, last, 1, 1));
    c.push(cfg("GlobalAvgPool2d", json!({})));
    c.push(cfg("Flatten", json!({})));
    c.push(cfg("Dropout", json!({"p": 0.2})));
    c.push(cfg(
        "Linear",
        json!({"in_features": last, "out_features": num_classes}),
    ));
    Ok(c)
}

/// Floating-point operations of one forward pass of `config` on an input of `shape` (N, C, H, W): two per
/// multiply-add of every convolution (depthwise included) and Linear layer. Normalisation, activations,
/// pooling and residual additions are left out (a few percent of a convolutional network's work), as is usual
/// when a network's FLOPs are quoted. A training step is counted as three times this (forward, input gradient,
/// weight gradient).
pub fn forward_flops(config: &[LayerConfig], shape: [usize; 4]) -> Result<f64> {
    let [n, mut c, mut h, mut w] = shape;
    let n = n as f64;
    let mut total = 0.0;
    // One convolution: its FLOPs at the current size, and the size after it.
    let conv = |c_per_group: usize, f: usize, k: usize, s: usize, h: usize, w: usize| {
        let p = (k - 1) / 2;
        let (oh, ow) = ((h + 2 * p - k) / s + 1, (w + 2 * p - k) / s + 1);
        (2.0 * n * (f * oh * ow * c_per_group * k * k) as f64, oh, ow)
    };
    for (i, l) in config.iter().enumerate() {
        let (a, t) = (&l.args, l.kind.as_str());
        let get = |k: &str, d: Option<usize>| arg_usize(a, k, d, t);
        match t {
            "Conv2d" => {
                let (f, k, s) = (
                    get("out_channels", None)?,
                    get("kernel_size", None)?,
                    get("stride", Some(1))?,
                );
                let groups = get("groups", Some(1))?;
                if get("pad", Some(0))? != (k - 1) / 2 || get("dilation", Some(1))? != 1 {
                    return Err(Error::Invalid(format!(
                        "forward_flops: layer {i} (Conv2d) must pad by (kernel_size − 1)/2 without dilation"
                    )));
                }
                let (fl, oh, ow) = conv(c / groups.max(1), f, k, s, h, w);
                (total, c, h, w) = (total + fl, f, oh, ow);
            }
            "BasicBlock" => {
                let (f, s) = (get("out_channels", None)?, get("stride", Some(1))?);
                let (f1, oh, ow) = conv(c, f, 3, s, h, w);
                let (f2, _, _) = conv(f, f, 3, 1, oh, ow);
                let fp = if s != 1 || c != f {
                    conv(c, f, 1, s, h, w).0
                } else {
                    0.0
                };
                (total, c, h, w) = (total + f1 + f2 + fp, f, oh, ow);
            }
            "InvertedResidual" => {
                let (f, s, e) = (
                    get("out_channels", None)?,
                    get("stride", Some(1))?,
                    get("expand_ratio", Some(6))?,
                );
                let hid = c * e;
                let fe = if e != 1 {
                    conv(c, hid, 1, 1, h, w).0
                } else {
                    0.0
                };
                let (fd, oh, ow) = conv(1, hid, 3, s, h, w);
                let (fp, _, _) = conv(hid, f, 1, 1, oh, ow);
                (total, c, h, w) = (total + fe + fd + fp, f, oh, ow);
            }
            "Linear" => {
                let f = get("out_features", None)?;
                total += 2.0 * n * (c * h * w * f) as f64;
                (c, h, w) = (f, 1, 1);
            }
            "GlobalAvgPool2d" => (h, w) = (1, 1),
            "Flatten" => (c, h, w) = (c * h * w, 1, 1),
            "BatchNorm2d" | "ReLU" | "HardTanh" | "Dropout" => {}
            other => {
                return Err(Error::Invalid(format!(
                    "forward_flops: layer {i} (`{other}`) is not counted; it takes Conv2d, BasicBlock, \
                     InvertedResidual, Linear, pooling and shape-keeping layers"
                )));
            }
        }
    }
    Ok(total)
}

/// The parameters of a [`resnet18`] model in netcl 0.3.2's `ResNet18.parameters()` order: stem convolution
/// (weight, bias), head (weight (in, out), bias), stem BN (γ, β), then per block `w1, b1, w2, b2`, its two BNs'
/// γ and β, and the projection's weight, bias, γ, β. netcl's `save_params(model.parameters(), path)` writes
/// them as `p0`, `p1`, … in an NPZ file, so [`crate::io::save_params`] and [`crate::io::load_params`] on this
/// list read and write its files. Running statistics are not among them (netcl's ResNet18 always normalises
/// with the batch's statistics).
pub fn resnet18_netcl032_parameters(model: &Sequential) -> Result<Vec<Var>> {
    let layers = model.layers();
    let kinds: Vec<&str> = layers.iter().map(|l| l.type_name()).collect();
    let blocks = kinds.iter().filter(|k| **k == "BasicBlock").count();
    let stem_bn = kinds.get(1) == Some(&"BatchNorm2d");
    let shaped = kinds.first() == Some(&"Conv2d")
        && kinds.last() == Some(&"Linear")
        && blocks == 8
        && layers.len() == 8 + 5 + usize::from(stem_bn);
    if !shaped {
        return Err(Error::Invalid(format!(
            "resnet18_netcl032_parameters: expected the resnet18 preset's layers (Conv2d, [BatchNorm2d], ReLU, \
             8 BasicBlock, GlobalAvgPool2d, Flatten, Linear), got {kinds:?}"
        )));
    }
    let mut v = layers[0].parameters();
    v.extend(layers[layers.len() - 1].parameters());
    if stem_bn {
        v.extend(layers[1].parameters());
    }
    for l in layers.iter().filter(|l| l.type_name() == "BasicBlock") {
        v.extend(l.parameters());
    }
    Ok(v)
}
