//! The unary family on OpenCL: `kernels/unary.cl` built with the op's forward and backward expressions.

use crate::backend::opencl::ClDevice;
use crate::backend::opencl::abi::unary as abi;
use crate::backend::opencl::program::Defines;
use crate::contract::unary::{UnaryKernels, UnaryOp};
use crate::error::Result;
use crate::tensor::Tensor;

/// Forward and backward OpenCL C expressions of `op` (no spaces: they travel as `-D` build options).
fn cl(op: UnaryOp) -> (&'static str, &'static str) {
    match op {
        UnaryOp::Neg => ("(-(v))", "(-(g))"),
        UnaryOp::Abs => ("fabs(v)", "((v)>0.0f?(g):((v)<0.0f?-(g):0.0f))"),
        UnaryOp::Exp => ("exp(v)", "((g)*exp(v))"),
        UnaryOp::Log => ("log(v)", "((g)/(v))"),
        UnaryOp::Log1p => ("log1p(v)", "((g)/(1.0f+(v)))"),
        UnaryOp::Sqrt => ("sqrt(v)", "((g)*0.5f/sqrt(v))"),
        UnaryOp::Rsqrt => ("(1.0f/sqrt(v))", "(-0.5f*(g)/((v)*sqrt(v)))"),
        UnaryOp::Square => ("((v)*(v))", "(2.0f*(g)*(v))"),
        UnaryOp::Relu => ("((v)<0.0f?0.0f:(v))", "((v)>0.0f?(g):0.0f)"),
        UnaryOp::LeakyRelu(_) => ("((v)>0.0f?(v):p0*(v))", "((v)>0.0f?(g):p0*(g))"),
        UnaryOp::Sigmoid => ("sigm(v)", "((g)*sigm(v)*(1.0f-sigm(v)))"),
        UnaryOp::Tanh => ("tanh(v)", "((g)*(1.0f-tanh(v)*tanh(v)))"),
        // x·gate(x) forms take their limits at ±inf (0 and x; slopes 0 and 1) instead of inf·0 = NaN.
        UnaryOp::GeluTanh => (
            "(isinf(v)?XLIM(v):gelu_t(v))",
            "(isinf(v)?GLIM(v,g):(g)*gelu_t_d(v))",
        ),
        UnaryOp::GeluErf => (
            "(isinf(v)?XLIM(v):gelu_e(v))",
            "(isinf(v)?GLIM(v,g):(g)*gelu_e_d(v))",
        ),
        UnaryOp::Silu => (
            "(isinf(v)?XLIM(v):(v)*sigm(v))",
            "(isinf(v)?GLIM(v,g):(g)*sigm(v)*(1.0f+(v)*(1.0f-sigm(v))))",
        ),
        UnaryOp::Elu(_) => ("((v)>0.0f?(v):p0*expm1(v))", "((v)>0.0f?(g):(g)*p0*exp(v))"),
        UnaryOp::Softplus => ("softplus_f(v)", "((g)*sigm(v))"),
        UnaryOp::HardSigmoid => ("hsig(v)", "(((v)>-2.5f&&(v)<2.5f)?0.2f*(g):0.0f)"),
        // The seed's fused backward: g·(hard_sigmoid(x) + [−2.5 < x < 2.5]·0.2x).
        UnaryOp::HardSwish => (
            "(isinf(v)?XLIM(v):(v)*hsig(v))",
            "((g)*(hsig(v)+(((v)>-2.5f&&(v)<2.5f)?0.2f*(v):0.0f)))",
        ),
        UnaryOp::Clamp(..) => ("clampn(v,p0,p1)", "(((v)>=p0&&(v)<=p1)?(g):0.0f)"),
    }
}

impl ClDevice {
    fn unary_defines(op: UnaryOp) -> Defines {
        let (f, df) = cl(op);
        Defines::new().set("F(v)", f).set("DF(v,g)", df)
    }
}

impl UnaryKernels for ClDevice {
    fn unary(&self, op: UnaryOp, x: &Tensor, out: &Tensor) -> Result<()> {
        let k = self.kernel(abi::FAMILY, &ClDevice::unary_defines(op), abi::UNARY_FWD)?;
        let (p0, p1) = op.params();
        let n = x.numel();
        let args = abi::UnaryFwd {
            n: n as i32,
            p0,
            p1,
            x: x.storage(),
            out: out.storage(),
        };
        self.run(
            &k,
            &args,
            &[n.div_ceil(4)],
            Some(&[256.min(self.info.max_work_group_size.max(1))]),
        )?;
        Ok(())
    }

    fn unary_backward(&self, op: UnaryOp, x: &Tensor, g: &Tensor, out: &Tensor) -> Result<()> {
        let k = self.kernel(abi::FAMILY, &ClDevice::unary_defines(op), abi::UNARY_BWD)?;
        let (p0, p1) = op.params();
        let n = x.numel();
        let args = abi::UnaryBwd {
            n: n as i32,
            p0,
            p1,
            x: x.storage(),
            g: g.storage(),
            out: out.storage(),
        };
        self.run(
            &k,
            &args,
            &[n.div_ceil(4)],
            Some(&[256.min(self.info.max_work_group_size.max(1))]),
        )?;
        Ok(())
    }
}
