//! Fused elementwise expressions: a chain of elementwise ops over up to six broadcast inputs, compiled into
//! one kernel.
//!
//! The expression language is small and closed: numbers, the inputs `x0`..`x5`, `+ - * /`, unary minus,
//! comparisons `< <= > >= == !=` (giving 0 or 1), parentheses and every op of the vocabulary [`OPS`] as a
//! function (`relu(x0)`, `leaky_relu(x0, 0.1)`, `clamp(x0, 0, 6)`, `where(c, a, b)`, `max`/`min`). Text
//! is parsed into a tree and validated; the kernel source is generated from the tree, never from the text,
//! so nothing a user writes reaches the OpenCL compiler. Programs are cached by the generated form, so the
//! same expression (in any spelling) builds once per device. The built-in device evaluates the tree.

use super::limit;
use super::policy::{OpClass, expect_float, output_dtype};
use crate::contract::fused::plan;
pub use crate::contract::fused::{ALIASES, Expr, MAX_INPUTS, function_names};
pub use crate::contract::vocab::{Grad, OPS, OpDef};
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

use super::elementwise::broadcast_shape;

/// Evaluates `expr` (text in the expression language) over `inputs` with broadcasting, in one kernel.
///
/// ```text
/// fused("max(x0 * x1 + x2, 0)", &[&a, &b, &bias])
/// ```
pub fn fused(expr: &str, inputs: &[&Tensor]) -> Result<Tensor> {
    let e = Expr::parse(expr)?;
    fused_expr(&e, inputs)
}

/// Evaluates a parsed expression over `inputs` with broadcasting.
pub fn fused_expr(e: &Expr, inputs: &[&Tensor]) -> Result<Tensor> {
    fused_checked(e, inputs, None)
}

/// [`fused`] with the output stored as `dtype` (f32 or f16) whatever the inputs' dtypes: the norms keep their
/// statistics in f32 and write their outputs in the policy's dtype in the same pass.
pub(crate) fn fused_as(expr: &str, inputs: &[&Tensor], dtype: DType) -> Result<Tensor> {
    fused_checked(&Expr::parse(expr)?, inputs, Some(dtype))
}

fn fused_checked(e: &Expr, inputs: &[&Tensor], dtype: Option<DType>) -> Result<Tensor> {
    let Some(first) = inputs.first() else {
        return Err(Error::Invalid(
            "fused: at least one input tensor is needed".into(),
        ));
    };
    if inputs.len() > MAX_INPUTS {
        return Err(Error::Invalid(format!(
            "fused: {} inputs given; at most {MAX_INPUTS}",
            inputs.len()
        )));
    }
    if e.inputs() > inputs.len() {
        return Err(Error::Invalid(format!(
            "fused: the expression reads x{} but only {} input(s) were given",
            e.inputs() - 1,
            inputs.len()
        )));
    }
    first.same_device(&inputs[1..], "fused")?;
    fused_shaped(e, inputs, first.shape(), dtype)
}

/// `x` repeated along its size-1 (or missing leading) axes to `shape` (NumPy broadcasting; the gradient of a
/// reduction with keepdims, for instance).
pub fn broadcast_to(x: &Tensor, shape: &[usize]) -> Result<Tensor> {
    if broadcast_shape(x.shape(), shape)? != shape {
        return Err(Error::Shape(format!(
            "broadcast_to: {:?} cannot be broadcast to {shape:?}",
            x.shape()
        )));
    }
    fused_shaped(&Expr::parse("x0")?, &[x], shape, None)
}

/// Evaluates `e` over `inputs` broadcast together with `base` (the output shape is their common shape).
/// `dtype` overrides the output dtype the policy gives (see [`crate::ops::policy`]).
fn fused_shaped(
    e: &Expr,
    inputs: &[&Tensor],
    base: &[usize],
    dtype: Option<DType>,
) -> Result<Tensor> {
    let first = inputs[0];
    let mut shape: Vec<usize> = base.to_vec();
    let dtype = match dtype {
        Some(d) => {
            for t in inputs {
                expect_float(t, "fused")?;
            }
            d
        }
        None => output_dtype(OpClass::Store16, inputs, "fused")?,
    };
    for t in inputs {
        shape = broadcast_shape(&shape, t.shape())?;
    }
    let shapes: Vec<&[usize]> = inputs.iter().map(|t| t.shape()).collect();
    let p = plan(&shapes, &shape)?;
    let out = Tensor::empty(first.device(), &shape, dtype)?;
    if out.numel() == 0 {
        return Ok(out);
    }
    limit(&out, "fused")?;
    first.device().backend().fused(e, inputs, &out, &p)?;
    Ok(out)
}

/// `cond != 0 ? a : b` elementwise with broadcasting (a NaN condition selects `a`).
pub fn where_(cond: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    fused("where(x0, x1, x2)", &[cond, a, b])
}
