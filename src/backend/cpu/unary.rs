//! The unary family on the built-in device: the f64 reference formulas.

use crate::backend::cpu::CpuDevice;
use crate::contract::unary::{UnaryKernels, UnaryOp};
use crate::error::Result;
use crate::tensor::Tensor;

impl UnaryKernels for CpuDevice {
    fn unary(&self, op: UnaryOp, x: &Tensor, out: &Tensor) -> Result<()> {
        crate::backend::cpu::host::map_f32(&[x], out, |ins, o| {
            for (o, &v) in o.iter_mut().zip(ins[0]) {
                *o = op.forward_ref(v);
            }
        })
    }

    fn unary_backward(&self, op: UnaryOp, x: &Tensor, g: &Tensor, out: &Tensor) -> Result<()> {
        crate::backend::cpu::host::map_f32(&[x, g], out, |ins, o| {
            for ((o, &v), &g) in o.iter_mut().zip(ins[0]).zip(ins[1]) {
                *o = op.backward_ref(v, g);
            }
        })
    }
}
