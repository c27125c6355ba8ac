//! The unary family on OpenCL: `kernels/unary.cl` built with the op's forward and backward expressions.

use crate::backend::opencl::ClDevice;
use crate::backend::opencl::abi::unary as abi;
use crate::backend::opencl::elementwise::half_defines;
use crate::backend::opencl::program::Defines;
use crate::contract::unary::{UnaryKernels, UnaryOp};
use crate::contract::vocab::instantiate;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// Forward and backward OpenCL C expressions of `op` on the scalars `v` and `g`, from the vocabulary's
/// templates; the op's parameters are the kernel arguments `p0` and `p1`.
fn cl(op: UnaryOp) -> Result<(String, String)> {
    let def = op.def();
    let operands = &["v", "p0", "p1"][..def.arity];
    let grad = def
        .grad
        .as_ref()
        .ok_or_else(|| Error::Unsupported(format!("{} has no gradient kernel", def.name)))?;
    Ok((
        instantiate(def.cl, operands, "g"),
        instantiate(grad.cl, operands, "g"),
    ))
}

impl ClDevice {
    fn unary_defines(op: UnaryOp) -> Result<Defines> {
        let (f, df) = cl(op)?;
        Ok(Defines::new().set("F(v)", f).set("DF(v,g)", df))
    }
}

impl ClDevice {
    /// `op` over `x` into `out`: the forward, or with the output gradient `g` the backward. Both kernels take
    /// four elements per work-item, eight when every buffer is f16 (`UN8`: 16-byte accesses as in f32).
    fn unary_pass(&self, op: UnaryOp, x: &Tensor, g: Option<&Tensor>, out: &Tensor) -> Result<()> {
        let (p0, p1) = op.params();
        let all_half = [Some(x), g, Some(out)]
            .into_iter()
            .flatten()
            .all(|t| t.dtype() == DType::F16);
        let width = if all_half { 8 } else { 4 };
        let (n, items) = (x.numel() as i32, x.numel().div_ceil(width));
        let mut d = ClDevice::unary_defines(op)?;
        if all_half {
            d = d.set("UN8", 1u8);
        }
        let (xs, outs) = (x.storage(), out.storage());
        match g {
            None => {
                let d = half_defines(d, &[("IN_HALF", x), ("OUT_HALF", out)]);
                let args = abi::UnaryFwd {
                    n,
                    p0,
                    p1,
                    x: xs,
                    out: outs,
                };
                self.run_1d(abi::UNARY_FWD, &d, &args, items, Some(256))?;
            }
            Some(g) => {
                let d = half_defines(d, &[("IN_HALF", x), ("B_HALF", g), ("OUT_HALF", out)]);
                let args = abi::UnaryBwd {
                    n,
                    p0,
                    p1,
                    x: xs,
                    g: g.storage(),
                    out: outs,
                };
                self.run_1d(abi::UNARY_BWD, &d, &args, items, Some(256))?;
            }
        }
        Ok(())
    }
}

impl UnaryKernels for ClDevice {
    fn unary(&self, op: UnaryOp, x: &Tensor, out: &Tensor) -> Result<()> {
        self.unary_pass(op, x, None, out)
    }

    fn unary_backward(&self, op: UnaryOp, x: &Tensor, g: &Tensor, out: &Tensor) -> Result<()> {
        self.unary_pass(op, x, Some(g), out)
    }
}
