//! Elementwise binary ops on the built-in device, walking the broadcast plan.

use crate::backend::cpu::CpuDevice;
use crate::contract::Backend;
use crate::contract::elementwise::{BinaryKernels, BinaryOperands, ScalarOperands};
use crate::error::Result;
use crate::tensor::{DType, Tensor};

impl BinaryKernels for CpuDevice {
    fn copy_dense(&self, x: &Tensor, out: &Tensor) -> Result<()> {
        self.copy(x.storage(), out.storage(), x.numel() * x.dtype().size())
    }

    fn cast(&self, x: &Tensor, out: &Tensor) -> Result<()> {
        let src = crate::backend::cpu::host::read_f32(x)?;
        if out.dtype() == DType::I32 {
            let v: Vec<i32> = src.iter().map(|&x| x as i32).collect();
            return self.write(out.storage(), 0, bytemuck::cast_slice(&v));
        }
        crate::backend::cpu::host::write_f32(out, &src)
    }

    fn binary(&self, operands: BinaryOperands<'_>) -> Result<()> {
        let (op, a, b, out, plan) = operands.parts();
        crate::backend::cpu::host::map_f32(&[a, b], out, |ins, o| {
            let (x, y) = (ins[0], ins[1]);
            if plan.same {
                for ((o, &x), &y) in o.iter_mut().zip(x).zip(y) {
                    *o = op.apply(x, y);
                }
                return;
            }
            let rank = plan.shape.len();
            let mut idx = vec![0usize; rank];
            let (mut ia, mut ib) = (0usize, 0usize);
            for v in o.iter_mut() {
                *v = op.apply(x[ia], y[ib]);
                for d in (0..rank).rev() {
                    idx[d] += 1;
                    ia += plan.sa[d];
                    ib += plan.sb[d];
                    if idx[d] < plan.shape[d] {
                        break;
                    }
                    ia -= plan.sa[d] * plan.shape[d];
                    ib -= plan.sb[d] * plan.shape[d];
                    idx[d] = 0;
                }
            }
        })
    }

    fn binary_scalar(&self, operands: ScalarOperands<'_>) -> Result<()> {
        let (op, a, s, swap, out) = operands.parts();
        crate::backend::cpu::host::map_f32(&[a], out, |ins, o| {
            for (o, &x) in o.iter_mut().zip(ins[0]) {
                *o = if swap { op.apply(s, x) } else { op.apply(x, s) };
            }
        })
    }
}
