//! Nearest and bilinear upsampling of N×C×H×W to a given size, with the gather-based backward.

use super::limit;
pub use crate::contract::resize::Upsample;
use crate::contract::resize::Upsampling;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

use super::policy::{OpClass, expect_float, output_dtype};

fn check(shape: &[usize], size: (usize, usize), op: &str) -> Result<Vec<usize>> {
    match *shape {
        [n, c, h, w] if h > 0 && w > 0 && size.0 > 0 && size.1 > 0 => {
            Ok(vec![n, c, size.0, size.1])
        }
        _ => Err(Error::Shape(format!(
            "{op}: needs a non-empty N×C×H×W input and output size, got {shape:?} → {size:?}"
        ))),
    }
}

/// Resizes the last two dimensions to `size` = (height, width).
pub fn upsample(x: &Tensor, size: (usize, usize), mode: Upsample) -> Result<Tensor> {
    let dt = output_dtype(OpClass::Store16, &[x], "upsample")?;
    let shape = check(x.shape(), size, "upsample")?;
    let y = Tensor::empty(x.device(), &shape, dt)?;
    if y.numel() > i32::MAX as usize || x.numel() > i32::MAX as usize {
        return Err(Error::Limit(format!(
            "upsample: {} elements exceed the 2^31-1 per-op limit",
            y.numel()
        )));
    }
    if y.numel() > 0 {
        let op = Upsampling::new(mode, x.shape(), &shape, x, &y, false);
        x.device().backend().upsample(&op)?;
    }
    Ok(y)
}

/// The input gradient of [`upsample`].
pub fn upsample_backward(grad: &Tensor, input_shape: &[usize], mode: Upsample) -> Result<Tensor> {
    expect_float(grad, "upsample_backward")?;
    let size = match *grad.shape() {
        [_, _, h, w] => (h, w),
        _ => {
            return Err(Error::Shape(format!(
                "upsample_backward: gradient {:?} is not N×C×H×W",
                grad.shape()
            )));
        }
    };
    let shape = check(input_shape, size, "upsample_backward")?;
    if shape != grad.shape() {
        return Err(Error::shape_mismatch(
            "upsample_backward gradient",
            &shape,
            grad.shape(),
        ));
    }
    let gx = Tensor::empty(grad.device(), input_shape, grad.dtype())?;
    limit(grad, "upsample_backward")?;
    if gx.numel() > 0 {
        let op = Upsampling::new(mode, input_shape, grad.shape(), grad, &gx, true);
        grad.device().backend().upsample(&op)?;
    }
    Ok(gx)
}
