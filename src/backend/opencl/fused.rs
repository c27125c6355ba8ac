//! Fused expressions on OpenCL: `kernels/fused.cl` built with the expression's OpenCL C form, written from the
//! vocabulary's templates.

use crate::backend::opencl::ClDevice;
use crate::backend::opencl::abi::fused as abi;
use crate::backend::opencl::elementwise::half_bits;
use crate::backend::opencl::program::Defines;
use crate::contract::fused::{Expr, FusedKernels, MAX_INPUTS, MultiPlan, Node};
use crate::contract::vocab::instantiate;
use crate::error::Result;
use crate::tensor::{DType, Tensor};

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

/// `abi::$ty` with the fields in braces, then (where given) the six input slots' strides `$s`, then the six
/// input slots `$a` and the output buffer `$out`: the parameters every fused kernel ends with.
macro_rules! fused_args {
    ($ty:ident { $($f:ident $(: $v:expr)?),* $(,)? }, $a:expr, $out:expr) => {{
        let [a0, a1, a2, a3, a4, a5] = $a;
        abi::$ty { $($f $(: $v)?,)* a0, a1, a2, a3, a4, a5, out: $out }
    }};
    ($ty:ident { $($f:ident $(: $v:expr)?),* $(,)? }, $s:expr, $a:expr, $out:expr) => {{
        let [s0, s1, s2, s3, s4, s5] = $s;
        let [a0, a1, a2, a3, a4, a5] = $a;
        abi::$ty { $($f $(: $v)?,)* s0, s1, s2, s3, s4, s5, a0, a1, a2, a3, a4, a5, out: $out }
    }};
}

impl FusedKernels for ClDevice {
    fn fused(&self, expr: &Expr, inputs: &[&Tensor], out: &Tensor, plan: &MultiPlan) -> Result<()> {
        let mut defines = Defines::new()
            .set("NIN", inputs.len())
            .set("EXPR", cl_code(expr));
        let mut all = inputs.to_vec();
        all.push(out);
        let halves = half_bits(&all);
        if halves != 0 {
            // Every slot's switch is set (kernels/fused.cl); the slots past NIN are never read.
            defines = defines
                .set("FUSED_HALF", 1)
                .set("OUT_HALF", u8::from(out.dtype() == DType::F16));
            for k in 0..MAX_INPUTS {
                let h = inputs.get(k).is_some_and(|t| t.dtype() == DType::F16);
                defines = defines.set(&format!("H{k}"), u8::from(h));
            }
        }
        let n = out.numel();
        // Every input slot gets a buffer; the slots past NIN are never read.
        let slot = |k: usize| inputs.get(k).unwrap_or(&inputs[0]).storage();
        let slots = [0, 1, 2, 3, 4, 5].map(slot);
        let out = out.storage();
        // Per input slot: its strides, or zeros for the slots past NIN.
        let strides = |per: &dyn Fn(&[usize]) -> [i32; 8]| -> [[i32; 8]; MAX_INPUTS] {
            std::array::from_fn(|k| plan.strides.get(k).map_or([0; 8], |s| per(s)))
        };
        if plan.same {
            let args = fused_args!(FusedSame { n: n as i32 }, slots, out);
            // Quads where the loads are the cost (GPUs, halves); CPU compilers vectorise f32 across items.
            if self.info.kind != "cpu" || halves != 0 {
                self.run_1d(abi::FUSED_SAME4, &defines, &args, n.div_ceil(4), Some(256))?;
            } else {
                self.run_1d(abi::FUSED_SAME, &defines, &args, n, Some(256))?;
            }
        } else if plan.shape.len() <= 3 {
            // Pad to three dimensions on the outside; strides of d0, d1, d2 per input in .s0..s2.
            let r = plan.shape.len();
            let mut d = [1usize; 3];
            d[3 - r..].copy_from_slice(&plan.shape);
            let st = strides(&|s| {
                let mut st = [0i32; 8];
                for (j, v) in s.iter().enumerate() {
                    st[3 - r + j] = *v as i32;
                }
                st
            });
            // Four elements per work-item where every input runs along the innermost dimension with aligned
            // rows or repeats one value along it.
            let quads = d[2] % 4 == 0
                && st[..inputs.len()]
                    .iter()
                    .all(|s| s[2] == 0 || (s[2] == 1 && s[0] % 4 == 0 && s[1] % 4 == 0));
            let [d0, d1, d2] = d.map(|v| v as i32);
            let args = fused_args!(Fused3d { d0, d1, d2 }, st, slots, out);
            if quads {
                self.run_grid(abi::FUSED_3D4, &defines, &args, [d[2] / 4, d[1], d[0]])?;
            } else {
                self.run_grid(abi::FUSED_3D, &defines, &args, [d[2], d[1], d[0]])?;
            }
        } else {
            let mut shape = [1i32; 8];
            for (i, d) in plan.shape.iter().rev().enumerate() {
                shape[i] = *d as i32;
            }
            let rank = plan.shape.len() as i32;
            let args = fused_args!(
                FusedBcast {
                    n: n as i32,
                    rank,
                    shape,
                },
                strides(&int8),
                slots,
                out
            );
            self.run_1d(abi::FUSED_BCAST, &defines, &args, n, Some(256))?;
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
