//! 2-D convolution (NCHW activations, `F × C/groups × KH × KW` weights) and its transpose, forward and
//! backward.
//!
//! Algorithms: `direct` (one output per work-item), `im2col` + the autotuned GEMM, Winograd F(2×2, 3×3) with a
//! batched GEMM, and `pointwise` (1×1, stride 1, no padding) as a batched GEMM straight on the NCHW buffers.
//! Which one runs is decided by eligibility, then measurement (the autotuner, with every decision in the log);
//! [`Conv2dOptions::algo`] forces one. 1×1 convolutions follow netcl's measured pointwise dispatch
//! (`NETCL_CONV_POINTWISE=auto|1|0`, keys `conv2d_pointwise_fwd_select` / `conv2d_pointwise_bwd_select`).

#![allow(clippy::too_many_arguments)]

use super::policy::{store_as, via_f32, widen};
pub use crate::contract::conv::ConvAlgo;
use crate::contract::conv::{ConvBwd, ConvFwd, ConvGeom, ConvGrads};
use crate::contract::precision::{self, Precision};
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// Options of [`conv2d`] and its relatives. `[height, width]` pairs; the builder methods set both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conv2dOptions {
    /// Step between output positions.
    pub stride: [usize; 2],
    /// Zero padding on each side.
    pub padding: [usize; 2],
    /// Spacing of the filter taps.
    pub dilation: [usize; 2],
    /// Channel groups: input and output channels are split into this many independent convolutions.
    pub groups: usize,
    /// Forces an algorithm (an error if it cannot compute this convolution); `None` chooses by measurement.
    pub algo: Option<ConvAlgo>,
    /// Applies ReLU to the output (forward only).
    pub fuse_relu: bool,
}

impl Default for Conv2dOptions {
    fn default() -> Self {
        Conv2dOptions {
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
            algo: None,
            fuse_relu: false,
        }
    }
}

impl Conv2dOptions {
    /// Stride 1, no padding, no dilation, one group, algorithm chosen by measurement.
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets the stride in both directions.
    pub fn stride(mut self, s: usize) -> Self {
        self.stride = [s, s];
        self
    }
    /// Sets the padding on every side.
    pub fn padding(mut self, p: usize) -> Self {
        self.padding = [p, p];
        self
    }
    /// Sets the dilation in both directions.
    pub fn dilation(mut self, d: usize) -> Self {
        self.dilation = [d, d];
        self
    }
    /// Sets the number of groups.
    pub fn groups(mut self, g: usize) -> Self {
        self.groups = g;
        self
    }
    /// Forces an algorithm.
    pub fn algo(mut self, a: ConvAlgo) -> Self {
        self.algo = Some(a);
        self
    }
    /// Fuses a ReLU into the forward output.
    pub fn fuse_relu(mut self, on: bool) -> Self {
        self.fuse_relu = on;
        self
    }
}

/// Validates an input of shape `x` (N, C, H, W) against weights `w` (F, C/groups, KH, KW).
fn geom(op: &str, x: &[usize], w: &[usize], o: &Conv2dOptions) -> Result<ConvGeom> {
    if x.len() != 4 {
        return Err(Error::Shape(format!(
            "{op}: the input must be 4-D (N, C, H, W), got {x:?}"
        )));
    }
    if w.len() != 4 {
        return Err(Error::Shape(format!(
            "{op}: the weight must be 4-D (F, C/groups, KH, KW), got {w:?}"
        )));
    }
    if o.stride.contains(&0) {
        return Err(Error::Invalid(format!(
            "{op}: stride {:?} must be at least 1",
            o.stride
        )));
    }
    if o.dilation.contains(&0) {
        return Err(Error::Invalid(format!(
            "{op}: dilation {:?} must be at least 1",
            o.dilation
        )));
    }
    let g = o.groups;
    let (n, c, h, wd) = (x[0], x[1], x[2], x[3]);
    let (f, cg, kh, kw) = (w[0], w[1], w[2], w[3]);
    if g == 0 || !c.is_multiple_of(g) || !f.is_multiple_of(g) {
        return Err(Error::Invalid(format!(
            "{op}: groups = {g} must divide the input channels ({c}) and the filters ({f})"
        )));
    }
    if cg * g != c {
        return Err(Error::Shape(format!(
            "{op}: mismatched channels: the input {x:?} has {c} channels, but the weight {w:?} expects {} ({cg} per group × {g} groups)",
            cg * g
        )));
    }
    if kh == 0 || kw == 0 {
        return Err(Error::Shape(format!("{op}: the kernel {w:?} is empty")));
    }
    let ekh = (kh - 1) * o.dilation[0] + 1;
    let ekw = (kw - 1) * o.dilation[1] + 1;
    let (hp, wp) = (h + 2 * o.padding[0], wd + 2 * o.padding[1]);
    if ekh > hp || ekw > wp {
        return Err(Error::Shape(format!(
            "{op}: the kernel ({ekh}×{ekw} with dilation {:?}) is larger than the padded input ({hp}×{wp} from {x:?} with padding {:?})",
            o.dilation, o.padding
        )));
    }
    let geom = ConvGeom {
        n,
        c,
        h,
        w: wd,
        f,
        oh: (hp - ekh) / o.stride[0] + 1,
        ow: (wp - ekw) / o.stride[1] + 1,
        groups: g,
        kh,
        kw,
        sh: o.stride[0],
        sw: o.stride[1],
        ph: o.padding[0],
        pw: o.padding[1],
        dh: o.dilation[0],
        dw: o.dilation[1],
        prec: precision::current()?,
    };
    let lim = i32::MAX as usize;
    let biggest = [
        n * c * h * wd,
        n * f * geom.oh * geom.ow,
        f * cg * kh * kw,
        n * c * kh * kw * geom.oh * geom.ow / n.max(1),
    ];
    if biggest.iter().any(|&e| e > lim) {
        return Err(Error::Limit(format!(
            "{op}: {x:?} * {w:?} addresses more than 2^31-1 elements"
        )));
    }
    Ok(geom)
}

/// Every tensor of `ts` is f32 and on the device of the first.
pub(super) fn check_inputs(op: &str, ts: &[&Tensor]) -> Result<()> {
    for t in ts {
        t.expect_dtype(DType::F32, op)?;
    }
    ts[0].same_device(&ts[1..], op)
}

fn check_bias(op: &str, bias: Option<&Tensor>, f: usize) -> Result<()> {
    if let Some(b) = bias
        && b.shape() != [f]
    {
        return Err(Error::shape_mismatch(
            format!("{op} bias (one per output channel)"),
            &[f],
            b.shape(),
        ));
    }
    Ok(())
}

fn check_algo(op: &str, g: &ConvGeom, algo: Option<ConvAlgo>) -> Result<()> {
    if let Some(a) = algo
        && !g.eligible(a)
    {
        return Err(Error::Invalid(format!(
            "{op}: algorithm `{}` cannot compute this convolution (kernel {}×{}, stride {}×{}, padding {}×{}, dilation {}×{}, groups {})",
            a.name(),
            g.kh,
            g.kw,
            g.sh,
            g.sw,
            g.ph,
            g.pw,
            g.dh,
            g.dw,
            g.groups
        )));
    }
    Ok(())
}

/// 2-D convolution of `x` (N, C, H, W) with `w` (F, C/groups, KH, KW), plus an optional bias (F).
///
/// ```
/// use netcl::{Device, Tensor, ops::{self, Conv2dOptions}};
/// let dev = Device::builtin();
/// let x = Tensor::ones(&dev, &[1, 1, 3, 3])?;
/// let w = Tensor::ones(&dev, &[1, 1, 3, 3])?;
/// let y = ops::conv2d(&x, &w, None, &Conv2dOptions::new().padding(1))?;
/// assert_eq!(y.to_vec::<f32>()?, vec![4.0, 6.0, 4.0, 6.0, 9.0, 6.0, 4.0, 6.0, 4.0]);
/// # Ok::<(), netcl::Error>(())
/// ```
///
/// f16 inputs are widened to f32 on the device and the output stored back in f16 ([`crate::ops::policy`]).
pub fn conv2d(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    opts: &Conv2dOptions,
) -> Result<Tensor> {
    let mut ins = vec![x, w];
    ins.extend(bias);
    via_f32(&ins, "conv2d", |t| {
        conv2d_f32(t[0], t[1], t.get(2).copied(), opts)
    })
}

fn conv2d_f32(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    opts: &Conv2dOptions,
) -> Result<Tensor> {
    check_inputs("conv2d", &[x, w])?;
    if let Some(b) = bias {
        check_inputs("conv2d", &[x, b])?;
    }
    let g = geom("conv2d", x.shape(), w.shape(), opts)?;
    check_bias("conv2d", bias, g.f)?;
    check_algo("conv2d", &g, opts.algo)?;
    let out = Tensor::empty(x.device(), &g.y_shape(), DType::F32)?;
    if out.numel() == 0 {
        return Ok(out);
    }
    let op = ConvFwd {
        x,
        w,
        bias,
        out: &out,
        g: &g,
        relu: opts.fuse_relu,
    };
    x.device()
        .backend()
        .conv2d_fwd(x.device(), &op, opts.algo)?;
    Ok(out)
}

/// Gradients of a convolution: `grad_x` (when asked for), `grad_w`, and `grad_b` (when it had a bias).
#[derive(Debug, Clone)]
pub struct Conv2dGrads {
    /// Gradient of the input, shape (N, C, H, W).
    pub grad_x: Option<Tensor>,
    /// Gradient of the weight, shape (F, C/groups, KH, KW).
    pub grad_w: Tensor,
    /// Gradient of the bias, shape (F).
    pub grad_b: Option<Tensor>,
}

/// The backward pass of [`conv2d`]: given the output gradient `grad_out` (N, F, OH, OW), the gradients of
/// the input, the weight and (with `has_bias`) the bias. With `fuse_relu`, `grad_out` must already be masked
/// by the ReLU; `opts.fuse_relu` is ignored here.
pub fn conv2d_backward(
    x: &Tensor,
    w: &Tensor,
    grad_out: &Tensor,
    has_bias: bool,
    need_grad_x: bool,
    opts: &Conv2dOptions,
) -> Result<Conv2dGrads> {
    if [x, w, grad_out].iter().any(|t| t.dtype() == DType::F16) {
        // Widened on the device; each gradient is stored in its tensor's dtype.
        let (xw, ww, gw) = (widen(x)?, widen(w)?, widen(grad_out)?);
        let g = conv2d_backward(&xw, &ww, &gw, has_bias, need_grad_x, opts)?;
        return Ok(Conv2dGrads {
            grad_x: g.grad_x.map(|t| store_as(t, x.dtype())).transpose()?,
            grad_w: store_as(g.grad_w, w.dtype())?,
            grad_b: g.grad_b,
        });
    }
    check_inputs("conv2d_backward", &[x, w, grad_out])?;
    let g = geom("conv2d_backward", x.shape(), w.shape(), opts)?;
    if grad_out.shape() != g.y_shape() {
        return Err(Error::shape_mismatch(
            "conv2d_backward grad_out",
            &g.y_shape(),
            grad_out.shape(),
        ));
    }
    check_algo("conv2d_backward", &g, opts.algo)?;
    let dev = x.device();
    let gx = if need_grad_x {
        Some(Tensor::empty(dev, &g.x_shape(), DType::F32)?)
    } else {
        None
    };
    let gw = Tensor::empty(dev, &g.w_shape(), DType::F32)?;
    let gb = if has_bias {
        Some(Tensor::empty(dev, &[g.f], DType::F32)?)
    } else {
        None
    };
    backward_into(
        &g,
        x,
        w,
        grad_out,
        gx.as_ref(),
        Some(&gw),
        gb.as_ref(),
        opts.algo,
    )?;
    Ok(Conv2dGrads {
        grad_x: gx,
        grad_w: gw,
        grad_b: gb,
    })
}

/// Runs the backward primitive, zero-filling gradients of empty reductions.
#[allow(clippy::too_many_arguments)]
fn backward_into(
    g: &ConvGeom,
    x: &Tensor,
    w: &Tensor,
    go: &Tensor,
    gx: Option<&Tensor>,
    gw: Option<&Tensor>,
    gb: Option<&Tensor>,
    algo: Option<ConvAlgo>,
) -> Result<()> {
    let dev = x.device();
    if g.n == 0 || g.p() == 0 || g.f == 0 || g.c == 0 {
        for t in [gx, gw, gb].into_iter().flatten() {
            dev.backend().fill(t.storage(), [0; 4], t.numel() * 4)?;
        }
        return Ok(());
    }
    let gr = ConvGrads { gx, gw, gb };
    let op = ConvBwd {
        x,
        w,
        go,
        gr: &gr,
        g,
    };
    dev.backend().conv2d_bwd(dev, &op, algo)
}

/// Options of [`conv_transpose2d`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConvTranspose2dOptions {
    /// The convolution whose adjoint this is (stride, padding, dilation, groups, algorithm).
    pub conv: Conv2dOptions,
    /// Extra rows and columns added at the bottom and right of the output (less than the stride).
    pub output_padding: [usize; 2],
}

/// The geometry of the convolution whose grad_x is this transposed convolution.
fn transpose_geom(
    op: &str,
    x: &[usize],
    w: &[usize],
    o: &ConvTranspose2dOptions,
) -> Result<ConvGeom> {
    if x.len() != 4 || w.len() != 4 {
        return Err(Error::Shape(format!(
            "{op}: the input must be (N, Cin, H, W) and the weight (Cin, Cout/groups, KH, KW), got {x:?} and {w:?}"
        )));
    }
    let c = &o.conv;
    if c.stride.contains(&0) || c.dilation.contains(&0) {
        return Err(Error::Invalid(format!(
            "{op}: stride {:?} and dilation {:?} must be at least 1",
            c.stride, c.dilation
        )));
    }
    if o.output_padding[0] >= c.stride[0].max(c.dilation[0])
        || o.output_padding[1] >= c.stride[1].max(c.dilation[1])
    {
        return Err(Error::Invalid(format!(
            "{op}: output_padding {:?} must be smaller than the stride {:?} or the dilation {:?}",
            o.output_padding, c.stride, c.dilation
        )));
    }
    let g = c.groups;
    if g == 0 || !x[1].is_multiple_of(g) {
        return Err(Error::Invalid(format!(
            "{op}: groups = {g} must divide the input channels ({})",
            x[1]
        )));
    }
    if w[0] != x[1] {
        return Err(Error::Shape(format!(
            "{op}: mismatched channels: the input {x:?} has {} channels, but the weight {w:?} has {}",
            x[1], w[0]
        )));
    }
    let mut out = [0usize; 2];
    for d in 0..2 {
        let k = w[2 + d];
        let full = (x[2 + d].max(1) - 1) * c.stride[d]
            + c.dilation[d] * (k.max(1) - 1)
            + 1
            + o.output_padding[d];
        if k == 0 || full <= 2 * c.padding[d] {
            return Err(Error::Shape(format!(
                "{op}: input {x:?} with weight {w:?}, stride {:?} and padding {:?} gives an empty output",
                c.stride, c.padding
            )));
        }
        out[d] = full - 2 * c.padding[d];
    }
    // The equivalent convolution maps the output (N, Cout, OH, OW) back to the input's spatial size.
    let y = [x[0], w[1] * g, out[0], out[1]];
    let geom = geom(
        op,
        &y,
        &[w[0], w[1], w[2], w[3]],
        &Conv2dOptions {
            algo: None,
            fuse_relu: false,
            ..c.clone()
        },
    )?;
    if geom.oh != x[2] || geom.ow != x[3] {
        return Err(Error::Shape(format!(
            "{op}: input {x:?} is not reachable with these options"
        )));
    }
    Ok(geom)
}

/// Transposed convolution (the adjoint of [`conv2d`]): `x` (N, Cin, H, W), `w` (Cin, Cout/groups, KH, KW),
/// output (N, Cout, (H−1)·s − 2p + d·(K−1) + 1 + output_padding, …), plus an optional bias (Cout).
pub fn conv_transpose2d(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    opts: &ConvTranspose2dOptions,
) -> Result<Tensor> {
    check_inputs("conv_transpose2d", &[x, w])?;
    let g = transpose_geom("conv_transpose2d", x.shape(), w.shape(), opts)?;
    check_bias("conv_transpose2d", bias, g.c)?;
    if let Some(b) = bias {
        check_inputs("conv_transpose2d", &[x, b])?;
    }
    let algo = opts.conv.algo;
    check_algo("conv_transpose2d", &g, algo)?;
    let dev = x.device();
    let out = Tensor::empty(dev, &g.x_shape(), DType::F32)?;
    if out.numel() == 0 {
        return Ok(out);
    }
    // grad_x of the equivalent convolution, with x as its output gradient; the weight is only read.
    backward_into(&g, &out, w, x, Some(&out), None, None, algo)?;
    if let Some(b) = bias {
        let b4 = b.reshape(&[1, g.c, 1, 1])?;
        let sum = super::add(&out, &b4)?;
        return Ok(sum);
    }
    Ok(out)
}

/// Gradients of [`conv_transpose2d`] given the output gradient: `grad_x` (when asked for), `grad_w`, `grad_b`.
pub fn conv_transpose2d_backward(
    x: &Tensor,
    w: &Tensor,
    grad_out: &Tensor,
    has_bias: bool,
    need_grad_x: bool,
    opts: &ConvTranspose2dOptions,
) -> Result<Conv2dGrads> {
    check_inputs("conv_transpose2d_backward", &[x, w, grad_out])?;
    let g = transpose_geom("conv_transpose2d_backward", x.shape(), w.shape(), opts)?;
    if grad_out.shape() != g.x_shape() {
        return Err(Error::shape_mismatch(
            "conv_transpose2d_backward grad_out",
            &g.x_shape(),
            grad_out.shape(),
        ));
    }
    let algo = opts.conv.algo;
    check_algo("conv_transpose2d_backward", &g, algo)?;
    let dev = x.device();
    // grad_x is the forward convolution of grad_out; grad_w is the equivalent convolution's weight gradient
    // with grad_out as its input and x as its output gradient.
    let grad_x = if need_grad_x && x.numel() > 0 {
        let gx = Tensor::empty(dev, x.shape(), DType::F32)?;
        if grad_out.numel() > 0 {
            let op = ConvFwd {
                x: grad_out,
                w,
                bias: None,
                out: &gx,
                g: &g,
                relu: false,
            };
            dev.backend().conv2d_fwd(dev, &op, algo)?;
        } else {
            dev.backend().fill(gx.storage(), [0; 4], gx.numel() * 4)?;
        }
        Some(gx)
    } else if need_grad_x {
        Some(Tensor::empty(dev, x.shape(), DType::F32)?)
    } else {
        None
    };
    let gw = Tensor::empty(dev, w.shape(), DType::F32)?;
    backward_into(&g, grad_out, w, x, None, Some(&gw), None, algo)?;
    let gb = if has_bias {
        let t = Tensor::empty(dev, &[g.c], DType::F32)?;
        // The bias gradient sums grad_out over (N, H, W): the equivalent convolution's input channels.
        let swapped = ConvGeom {
            f: g.c,
            oh: g.h,
            ow: g.w,
            ..g
        };
        if grad_out.numel() > 0 {
            cl_or_cpu_bias_grad(dev, grad_out, &t, &swapped)?;
        } else {
            dev.backend().fill(t.storage(), [0; 4], t.numel() * 4)?;
        }
        Some(t)
    } else {
        None
    };
    Ok(Conv2dGrads {
        grad_x,
        grad_w: gw,
        grad_b: gb,
    })
}

/// The bias gradient of an (N, F, OH, OW) output gradient: its sum over N, OH and OW.
pub(crate) fn bias_grad(go: &Tensor) -> Result<Tensor> {
    let s = go.shape();
    let dev = go.device();
    let gb = Tensor::empty(dev, &[s[1]], DType::F32)?;
    if go.numel() == 0 {
        dev.backend().fill(gb.storage(), [0; 4], gb.numel() * 4)?;
        return Ok(gb);
    }
    let g = ConvGeom {
        n: s[0],
        c: s[1],
        h: s[2],
        w: s[3],
        f: s[1],
        oh: s[2],
        ow: s[3],
        groups: 1,
        kh: 1,
        kw: 1,
        sh: 1,
        sw: 1,
        ph: 0,
        pw: 0,
        dh: 1,
        dw: 1,
        prec: Precision::Fp32,
    };
    cl_or_cpu_bias_grad(dev, go, &gb, &g)?;
    Ok(gb)
}

/// The per-channel sum of `go` (N, F, OH, OW) through the device's backward primitive (bias gradient only).
fn cl_or_cpu_bias_grad(dev: &crate::Device, go: &Tensor, gb: &Tensor, g: &ConvGeom) -> Result<()> {
    let gr = ConvGrads {
        gx: None,
        gw: None,
        gb: Some(gb),
    };
    let op = ConvBwd {
        x: go,
        w: go,
        go,
        gr: &gr,
        g,
    };
    dev.backend().conv2d_bwd(dev, &op, None)
}
