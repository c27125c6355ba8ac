//! Depthwise convolution: one `K × K` filter per channel (weights `C × 1 × K × K`), square stride and padding.
//!
//! Algorithms (`NETCL_DWCONV_ALGO` forces one, as in netcl; otherwise measured per shape class): `local`
//! (32×8 output tiles with the input halo in local memory, K ≤ 7, stride 1 or 2; GPUs), `rows` (one output
//! row per work-item over bounds-free spans; CPU OpenCL), `tile` and `naive` (one output per work-item), and
//! the register blocks `block1x4`, `block1x8`, `block4x2`, `block8x2`, `block8x4` and `block16x4` (columns ×
//! rows of outputs per work-item read straight from global memory, K ≤ 7, stride 1 or 2, `block16x4`
//! stride 1 only; one-column blocks coalesce on GPUs, `float8` and `float16` rows walked by one work-item
//! suit CPU OpenCL). Backward: grad_x of a stride-1 convolution is the forward convolution of grad_out with
//! the flipped filter (so it uses the same kernels); at stride 2 the GPU register blocks gather, one pixel
//! or a 2×2 / 4×2 block of pixels per work-item (measured: `dwconv_bwd_x_s2`); the CPU ones and `rows` take
//! one input row per work-item. grad_w sums band partials (a channel × a range of output rows or units) and
//! reduces them; the GPU register blocks measure their unit height (`dwconv_bwd_w_unit`).

#![allow(clippy::too_many_arguments)]

use super::conv::{Conv2dGrads, check_inputs};
pub use crate::contract::depthwise::DwAlgo;
use crate::contract::depthwise::{DwBwd, DwFwd, DwGeom};
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// Validates an input of shape `x` (N, C, H, W) against weights `w` (C, 1, K, K).
fn geom(op: &str, x: &[usize], w: &[usize], stride: usize, pad: usize) -> Result<DwGeom> {
    if x.len() != 4 || w.len() != 4 {
        return Err(Error::Shape(format!(
            "{op}: the input must be (N, C, H, W) and the weight (C, 1, K, K), got {x:?} and {w:?}"
        )));
    }
    if w[0] != x[1] || w[1] != 1 {
        return Err(Error::Shape(format!(
            "{op}: mismatched channels: the input {x:?} has {} channels, so the weight must be ({}, 1, K, K), got {w:?}",
            x[1], x[1]
        )));
    }
    if w[2] != w[3] || w[2] == 0 {
        return Err(Error::Shape(format!(
            "{op}: the filter must be square and non-empty, got {w:?}"
        )));
    }
    if stride == 0 {
        return Err(Error::Invalid(format!(
            "{op}: stride must be at least 1, got 0"
        )));
    }
    let k = w[2];
    if k > x[2] + 2 * pad || k > x[3] + 2 * pad {
        return Err(Error::Shape(format!(
            "{op}: the kernel ({k}×{k}) is larger than the padded input ({:?} with padding {pad})",
            x
        )));
    }
    let g = DwGeom {
        n: x[0],
        c: x[1],
        h: x[2],
        w: x[3],
        oh: (x[2] + 2 * pad - k) / stride + 1,
        ow: (x[3] + 2 * pad - k) / stride + 1,
        s: stride,
        p: pad,
        k,
    };
    if g.n * g.c * g.h * g.w > i32::MAX as usize || g.n * g.c * g.oh * g.ow > i32::MAX as usize {
        return Err(Error::Limit(format!(
            "{op}: {x:?} has more than 2^31-1 elements"
        )));
    }
    Ok(g)
}

/// Depthwise convolution of `x` (N, C, H, W) with `w` (C, 1, K, K), plus an optional bias (C).
pub fn depthwise_conv2d(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    stride: usize,
    pad: usize,
) -> Result<Tensor> {
    depthwise_conv2d_algo(x, w, bias, stride, pad, None)
}

/// [`depthwise_conv2d`] with a forced algorithm (an error where it is not eligible).
pub fn depthwise_conv2d_algo(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    stride: usize,
    pad: usize,
    algo: Option<DwAlgo>,
) -> Result<Tensor> {
    check_inputs("depthwise_conv2d", &[x, w])?;
    let g = geom("depthwise_conv2d", x.shape(), w.shape(), stride, pad)?;
    if let Some(b) = bias {
        check_inputs("depthwise_conv2d", &[x, b])?;
        if b.shape() != [g.c] {
            return Err(Error::shape_mismatch(
                "depthwise_conv2d bias",
                &[g.c],
                b.shape(),
            ));
        }
    }
    let out = Tensor::empty(x.device(), &[g.n, g.c, g.oh, g.ow], DType::F32)?;
    if out.numel() > 0 {
        let op = DwFwd {
            x,
            w,
            bias,
            out: &out,
            g: &g,
        };
        x.device().backend().dw_fwd(x.device(), &op, algo)?;
    }
    Ok(out)
}

/// Gradients of [`depthwise_conv2d`] given `grad_out` (N, C, OH, OW): grad_x (when asked for), grad_w, and
/// grad_b (with `has_bias`).
pub fn depthwise_conv2d_backward(
    x: &Tensor,
    w: &Tensor,
    grad_out: &Tensor,
    has_bias: bool,
    need_grad_x: bool,
    stride: usize,
    pad: usize,
) -> Result<Conv2dGrads> {
    depthwise_conv2d_backward_algo(x, w, grad_out, has_bias, need_grad_x, stride, pad, None)
}

/// [`depthwise_conv2d_backward`] with a forced algorithm.
#[allow(clippy::too_many_arguments)]
pub fn depthwise_conv2d_backward_algo(
    x: &Tensor,
    w: &Tensor,
    grad_out: &Tensor,
    has_bias: bool,
    need_grad_x: bool,
    stride: usize,
    pad: usize,
    algo: Option<DwAlgo>,
) -> Result<Conv2dGrads> {
    check_inputs("depthwise_conv2d_backward", &[x, w, grad_out])?;
    let g = geom(
        "depthwise_conv2d_backward",
        x.shape(),
        w.shape(),
        stride,
        pad,
    )?;
    if grad_out.shape() != [g.n, g.c, g.oh, g.ow] {
        return Err(Error::shape_mismatch(
            "depthwise_conv2d_backward grad_out",
            &[g.n, g.c, g.oh, g.ow],
            grad_out.shape(),
        ));
    }
    let dev = x.device();
    let gx = if need_grad_x {
        Some(Tensor::empty(dev, x.shape(), DType::F32)?)
    } else {
        None
    };
    let gw = Tensor::empty(dev, w.shape(), DType::F32)?;
    if g.n * g.oh * g.ow == 0 {
        for t in gx.iter().chain([&gw]) {
            dev.backend().fill(t.storage(), [0; 4], t.numel() * 4)?;
        }
    } else {
        let op = DwBwd {
            x,
            w,
            go: grad_out,
            gx: gx.as_ref(),
            gw: &gw,
            g: &g,
        };
        dev.backend().dw_bwd(dev, &op, algo)?;
    }
    let gb = if has_bias {
        Some(super::conv::bias_grad(grad_out)?)
    } else {
        None
    };
    Ok(Conv2dGrads {
        grad_x: gx,
        grad_w: gw,
        grad_b: gb,
    })
}
