//! Fused expressions on OpenCL: `kernels/fused.cl` built with the expression's OpenCL C form, written from the
//! vocabulary's templates.

use crate::backend::opencl::ClDevice;
use crate::backend::opencl::abi::fused as abi;
use crate::backend::opencl::elementwise::{grid_3d, grid_defines};
use crate::backend::opencl::program::Defines;
use crate::contract::fused::{Expr, FusedKernels, MAX_INPUTS, MultiPlan, Node};
use crate::contract::vocab::instantiate;
use crate::error::Result;
use crate::tensor::Tensor;

/// The OpenCL C form of `expr` (the program cache key): each op's template with its operands' forms
/// substituted. No spaces, so it travels as a `-D` option.
pub(crate) fn cl_code(expr: &Expr) -> String {
    let mut out = String::new();
    emit(expr.root(), &mut out);
    out
}

fn emit(n: &Node, out: &mut String) {
    match n {
        Node::Num(v) => out.push_str(&format!("({v:?}f)")),
        Node::Var(k) => out.push_str(&format!("x{k}")),
        Node::Call(def, args) => {
            let operands: Vec<String> = args
                .iter()
                .map(|a| {
                    let mut s = String::new();
                    emit(a, &mut s);
                    s
                })
                .collect();
            let refs: Vec<&str> = operands.iter().map(String::as_str).collect();
            out.push_str(&instantiate(def.cl, &refs, ""));
        }
    }
}

fn int8(v: &[usize]) -> [i32; 8] {
    let mut out = [0i32; 8];
    for (i, x) in v.iter().rev().enumerate() {
        out[i] = *x as i32;
    }
    out
}

impl FusedKernels for ClDevice {
    fn fused(&self, expr: &Expr, inputs: &[&Tensor], out: &Tensor, plan: &MultiPlan) -> Result<()> {
        let defines = Defines::new()
            .set("NIN", inputs.len())
            .set("EXPR", cl_code(expr));
        let n = out.numel();
        // Every input slot gets a buffer; the slots past NIN are never read.
        let slot = |k: usize| inputs.get(k).unwrap_or(&inputs[0]).storage();
        let [a0, a1, a2, a3, a4, a5] = [0, 1, 2, 3, 4, 5].map(slot);
        // Per input slot: its strides, or zeros for the slots past NIN.
        let strides = |per: &dyn Fn(&[usize]) -> [i32; 8]| -> [[i32; 8]; MAX_INPUTS] {
            std::array::from_fn(|k| plan.strides.get(k).map_or([0; 8], |s| per(s)))
        };
        let local = [256.min(self.info.max_work_group_size.max(1))];
        if plan.same {
            let k = self.kernel(abi::FAMILY, &defines, abi::FUSED_SAME)?;
            let args = abi::FusedSame {
                n: n as i32,
                a0,
                a1,
                a2,
                a3,
                a4,
                a5,
                out: out.storage(),
            };
            self.run(&k, &args, &[n], Some(&local))?;
        } else if plan.shape.len() <= 3 {
            // Pad to three dimensions on the outside; strides of d0, d1, d2 per input in .s0..s2.
            let r = plan.shape.len();
            let mut d = [1usize; 3];
            d[3 - r..].copy_from_slice(&plan.shape);
            let range = [d[2], d[1], d[0]];
            let (range, local, capped) = grid_3d(self, range);
            let defines = grid_defines(&defines, capped);
            let k = self.kernel(abi::FAMILY, &defines, abi::FUSED_3D)?;
            let [s0, s1, s2, s3, s4, s5] = strides(&|s| {
                let mut st = [0i32; 8];
                for (j, v) in s.iter().enumerate() {
                    st[3 - r + j] = *v as i32;
                }
                st
            });
            let args = abi::Fused3d {
                d0: d[0] as i32,
                d1: d[1] as i32,
                d2: d[2] as i32,
                s0,
                s1,
                s2,
                s3,
                s4,
                s5,
                a0,
                a1,
                a2,
                a3,
                a4,
                a5,
                out: out.storage(),
            };
            self.run(&k, &args, &range, Some(&local))?;
        } else {
            let k = self.kernel(abi::FAMILY, &defines, abi::FUSED_BCAST)?;
            let mut shape = [1i32; 8];
            for (i, d) in plan.shape.iter().rev().enumerate() {
                shape[i] = *d as i32;
            }
            let [s0, s1, s2, s3, s4, s5] = strides(&int8);
            let args = abi::FusedBcast {
                n: n as i32,
                rank: plan.shape.len() as i32,
                shape,
                s0,
                s1,
                s2,
                s3,
                s4,
                s5,
                a0,
                a1,
                a2,
                a3,
                a4,
                a5,
                out: out.storage(),
            };
            self.run(&k, &args, &[n], Some(&local))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_comes_from_the_vocabulary_templates() {
        let e = Expr::parse("max(x0 * 2 + x1, 0) - -x2").ok();
        let code = e.as_ref().map(cl_code).unwrap_or_default();
        assert_eq!(code, "((fmaxn(((((x0)*((2.0f))))+(x1)),(0.0f)))-((-(x2))))");
        let e = Expr::parse("where(x0 >= 1, x1, 7)").ok();
        let code = e.as_ref().map(cl_code).unwrap_or_default();
        assert!(!code.contains(' ') && code.contains("?1.0f:0.0f"), "{code}");
    }

    /// The helper functions the templates call stand in two kernel families; they must not drift apart.
    #[test]
    fn unary_and_fused_define_the_same_helpers() {
        let block = |family: &str| {
            let src = crate::backend::opencl::program::kernel_source(family).unwrap_or_default();
            let start = src.find("// BEGIN op vocabulary helpers");
            let end = src.find("// END op vocabulary helpers");
            match (start, end) {
                (Some(s), Some(e)) => src[s..e].to_owned(),
                _ => String::new(),
            }
        };
        let unary = block("unary");
        assert!(unary.contains("gelu_t"), "no helper block in unary.cl");
        assert_eq!(unary, block("fused"));
    }
}
