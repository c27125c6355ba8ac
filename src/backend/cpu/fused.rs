//! Fused expressions on the built-in device: the expression tree evaluated along the broadcast plan.

use crate::backend::cpu::CpuDevice;
use crate::contract::fused::{Expr, FusedKernels, MultiPlan};
use crate::error::Result;
use crate::tensor::Tensor;

impl FusedKernels for CpuDevice {
    fn fused(&self, expr: &Expr, inputs: &[&Tensor], out: &Tensor, plan: &MultiPlan) -> Result<()> {
        crate::backend::cpu::host::map_f32(inputs, out, |ins, o| {
            let rank = plan.shape.len();
            let mut idx = vec![0usize; rank];
            let mut pos = vec![0usize; ins.len()];
            let mut vals = vec![0f32; ins.len()];
            for v in o.iter_mut() {
                for (k, x) in ins.iter().enumerate() {
                    vals[k] = x[pos[k]];
                }
                *v = expr.eval(&vals);
                for d in (0..rank).rev() {
                    idx[d] += 1;
                    for (k, p) in pos.iter_mut().enumerate() {
                        *p += plan.strides[k][d];
                    }
                    if idx[d] < plan.shape[d] {
                        break;
                    }
                    for (k, p) in pos.iter_mut().enumerate() {
                        *p -= plan.strides[k][d] * plan.shape[d];
                    }
                    idx[d] = 0;
                }
            }
        })
    }
}
