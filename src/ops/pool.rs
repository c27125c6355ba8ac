//! 2-D max, average and global-average pooling of N×C×H×W with any kernel, stride and padding, forward and
//! backward. Max pooling keeps the index of each window's maximum for its backward.

use super::limit;
pub use crate::contract::pool::Pool2d;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

use super::policy::{OpClass, expect_float, output_dtype, store_as};
use super::reduce::mean;

/// Max pooling's output with the flat in-plane index (h·W + w, i32) of each maximum.
#[derive(Debug, Clone)]
pub struct MaxPoolOut {
    /// The pooled values.
    pub y: Tensor,
    /// Where each maximum came from, for the backward.
    pub indices: Tensor,
}

fn nchw(x: &Tensor, op: &str) -> Result<[usize; 4]> {
    expect_float(x, op)?;
    limit(x, op)?;
    match *x.shape() {
        [n, c, h, w] => Ok([n, c, h, w]),
        _ => Err(Error::Shape(format!(
            "{op}: expected an N×C×H×W input, got {:?}",
            x.shape()
        ))),
    }
}

/// A pooling backward's input gradient, allocated once `grad` (and the forward's `indices`, where given) are
/// checked against the output shape `p` gives `input_shape`; it is stored in the gradient's dtype.
fn backward_out(
    grad: &Tensor,
    indices: Option<&Tensor>,
    input_shape: &[usize],
    p: Pool2d,
    op: &str,
) -> Result<Tensor> {
    let [n, c, h, w] = match *input_shape {
        [n, c, h, w] => [n, c, h, w],
        _ => {
            return Err(Error::Shape(format!(
                "{op}: input shape {input_shape:?} is not N×C×H×W"
            )));
        }
    };
    let (oh, ow) = p.out_hw(h, w, op)?;
    if grad.shape() != [n, c, oh, ow] || indices.is_some_and(|i| i.shape() != grad.shape()) {
        return Err(Error::shape_mismatch(
            format!("{op} gradient"),
            &[n, c, oh, ow],
            grad.shape(),
        ));
    }
    expect_float(grad, op)?;
    Tensor::empty(grad.device(), input_shape, grad.dtype())
}

/// Max pooling; the indices feed [`max_pool2d_backward`].
pub fn max_pool2d(x: &Tensor, p: Pool2d) -> Result<MaxPoolOut> {
    let [n, c, h, w] = nchw(x, "max_pool2d")?;
    let (oh, ow) = p.out_hw(h, w, "max_pool2d")?;
    let dt = output_dtype(OpClass::Store16, &[x], "max_pool2d")?;
    let y = Tensor::empty(x.device(), &[n, c, oh, ow], dt)?;
    let indices = Tensor::empty(x.device(), &[n, c, oh, ow], DType::I32)?;
    if y.numel() > 0 {
        x.device().backend().maxpool(x, &p, &y, &indices)?;
    }
    Ok(MaxPoolOut { y, indices })
}

/// The input gradient of max pooling: each output gradient goes to its window's (first) maximum.
pub fn max_pool2d_backward(
    grad: &Tensor,
    out: &MaxPoolOut,
    input_shape: &[usize],
    p: Pool2d,
) -> Result<Tensor> {
    let gx = backward_out(
        grad,
        Some(&out.indices),
        input_shape,
        p,
        "max_pool2d_backward",
    )?;
    if gx.numel() > 0 {
        grad.device()
            .backend()
            .maxpool_backward(grad, &out.indices, &p, &gx)?;
    }
    Ok(gx)
}

/// Average pooling; `count_include_pad` divides by the whole window, else by its in-bounds part.
pub fn avg_pool2d(x: &Tensor, p: Pool2d, count_include_pad: bool) -> Result<Tensor> {
    let [n, c, h, w] = nchw(x, "avg_pool2d")?;
    let (oh, ow) = p.out_hw(h, w, "avg_pool2d")?;
    let dt = output_dtype(OpClass::Store16, &[x], "avg_pool2d")?;
    let y = Tensor::empty(x.device(), &[n, c, oh, ow], dt)?;
    if y.numel() > 0 {
        x.device().backend().avgpool(x, &p, count_include_pad, &y)?;
    }
    Ok(y)
}

/// The input gradient of [`avg_pool2d`].
pub fn avg_pool2d_backward(
    grad: &Tensor,
    input_shape: &[usize],
    p: Pool2d,
    count_include_pad: bool,
) -> Result<Tensor> {
    let gx = backward_out(grad, None, input_shape, p, "avg_pool2d_backward")?;
    if gx.numel() > 0 {
        grad.device()
            .backend()
            .avgpool_backward(grad, &p, count_include_pad, &gx)?;
    }
    Ok(gx)
}

/// The mean of each plane: N×C×H×W → N×C×1×1. An f16 input is read as f16 by the reduction (which sums in
/// f32); the N×C means are stored in the dtype the policy gives pooling outputs.
pub fn global_avg_pool2d(x: &Tensor) -> Result<Tensor> {
    nchw(x, "global_avg_pool2d")?;
    let dt = output_dtype(OpClass::Store16, &[x], "global_avg_pool2d")?;
    store_as(mean(x, Some(&[2, 3]), true)?, dt)
}

/// The input gradient of [`global_avg_pool2d`].
pub fn global_avg_pool2d_backward(grad: &Tensor, input_shape: &[usize]) -> Result<Tensor> {
    let [n, c, _, _] = match *input_shape {
        [n, c, h, w] => [n, c, h, w],
        _ => {
            return Err(Error::Shape(format!(
                "global_avg_pool2d_backward: input shape {input_shape:?} is not N×C×H×W"
            )));
        }
    };
    if grad.numel() != n * c {
        return Err(Error::shape_mismatch(
            "global_avg_pool2d_backward gradient",
            &[n, c, 1, 1],
            grad.shape(),
        ));
    }
    expect_float(grad, "global_avg_pool2d_backward")?;
    let gx = Tensor::empty(grad.device(), input_shape, grad.dtype())?;
    if gx.numel() > 0 {
        grad.device().backend().gap_backward(grad, &gx)?;
    }
    Ok(gx)
}
