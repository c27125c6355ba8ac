//! Benchmark cases of the GEMM and convolution family: the named cases of the peer script (same shapes;
//! `--small` divides the batch by 4 and uses matmul 1024), plus `<case>_bwd` (grad_x and grad_w, counted as
//! twice the forward FLOPs, as the peer counts them).

use super::{Case, Work};
use crate::Device;
use crate::error::Result;
use crate::ops::{self, Conv2dOptions};
use crate::tensor::Tensor;

/// One convolution case: (N at full size, C, H = W, F, K, stride, pad, depthwise).
type Shape = (usize, usize, usize, usize, usize, usize, usize, bool);

fn batch(n: usize, small: bool) -> usize {
    if small { n / 4 } else { n }
}

/// Forward FLOPs as the peer counts them (2 · N · F · OH · OW · C/groups · K²).
fn flops(s: Shape, small: bool) -> f64 {
    let (n, c, h, f, k, st, p, dw) = s;
    let o = (h + 2 * p - k) / st + 1;
    let cg = if dw { 1 } else { c };
    2.0 * (batch(n, small) * f * o * o * cg * k * k) as f64
}

type Inputs = (Tensor, Tensor, Conv2dOptions, bool);

fn inputs(dev: &Device, s: Shape, small: bool) -> Result<Inputs> {
    let (n, c, h, f, k, st, p, dw) = s;
    let x = Tensor::randn(dev, &[batch(n, small), c, h, h], 0.0, 1.0, 21)?;
    let w = Tensor::randn(dev, &[f, if dw { 1 } else { c }, k, k], 0.0, 0.1, 22)?;
    Ok((x, w, Conv2dOptions::new().stride(st).padding(p), dw))
}

fn forward(dev: &Device, s: Shape, small: bool) -> Result<Box<dyn FnMut() -> Result<Vec<Tensor>>>> {
    let (x, w, o, dw) = inputs(dev, s, small)?;
    Ok(Box::new(move || {
        Ok(vec![if dw {
            ops::depthwise_conv2d(&x, &w, None, o.stride[0], o.padding[0])?
        } else {
            ops::conv2d(&x, &w, None, &o)?
        }])
    }))
}

fn backward(dev: &Device, s: Shape, small: bool) -> Result<Box<dyn FnMut() -> Result<Vec<Tensor>>>> {
    let (x, w, o, dw) = inputs(dev, s, small)?;
    let y = if dw {
        ops::depthwise_conv2d(&x, &w, None, o.stride[0], o.padding[0])?
    } else {
        ops::conv2d(&x, &w, None, &o)?
    };
    let go = Tensor::randn(dev, y.shape(), 0.0, 1.0, 23)?;
    Ok(Box::new(move || {
        if dw {
            let g = ops::depthwise_conv2d_backward(&x, &w, &go, false, true, o.stride[0], o.padding[0])?;
            Ok(g.grad_x.into_iter().chain([g.grad_w]).collect())
        } else {
            let g = ops::conv2d_backward(&x, &w, &go, false, true, &o)?;
            Ok(g.grad_x.into_iter().chain([g.grad_w]).collect())
        }
    }))
}

macro_rules! conv_cases {
    ($v:ident; $($name:literal, $bwd:literal => $shape:expr;)*) => {
        $(
            $v.extend([
                Case { name: $name, work: |small| Work::Flops(flops($shape, small)), setup: |dev, small| forward(dev, $shape, small) },
                Case { name: $bwd, work: |small| Work::Flops(2.0 * flops($shape, small)), setup: |dev, small| backward(dev, $shape, small) },
            ]);
        )*
    };
}

fn matmul_case(dev: &Device, n: usize) -> Result<Box<dyn FnMut() -> Result<Vec<Tensor>>>> {
    let a = Tensor::randn(dev, &[n, n], 0.0, 1.0, 11)?;
    let b = Tensor::randn(dev, &[n, n], 0.0, 1.0, 12)?;
    Ok(Box::new(move || Ok(vec![ops::matmul(&a, &b)?])))
}

/// Every case of the family, in the peer script's order.
pub(super) fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    conv_cases! { v;
        "pw_mbv2_56", "pw_mbv2_56_bwd" => (32, 32, 56, 192, 1, 1, 0, false);
        "pw_mbv2_14", "pw_mbv2_14_bwd" => (32, 384, 14, 64, 1, 1, 0, false);
        "pw_resnet_28", "pw_resnet_28_bwd" => (32, 256, 28, 512, 1, 1, 0, false);
        "conv3x3_56", "conv3x3_56_bwd" => (32, 64, 56, 64, 3, 1, 1, false);
        "conv3x3_14", "conv3x3_14_bwd" => (32, 256, 14, 256, 3, 1, 1, false);
        "dw3x3_56", "dw3x3_56_bwd" => (32, 144, 56, 144, 3, 1, 1, true);
        "dw3x3_s2_112", "dw3x3_s2_112_bwd" => (16, 96, 112, 96, 3, 2, 1, true);
    }
    v.push(Case {
        name: "matmul_1024",
        work: |_| Work::Flops(2.0 * 1024f64.powi(3)),
        setup: |dev, _| matmul_case(dev, 1024),
    });
    v.push(Case {
        name: "matmul_2048",
        work: |_| Work::Flops(2.0 * 2048f64.powi(3)),
        setup: |dev, _| matmul_case(dev, 2048),
    });
    v
}
