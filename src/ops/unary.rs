//! Unary ops and activations, forward and backward.
//!
//! Each op is an OpenCL C expression pair (forward on the input `v`, backward on `v` and the incoming gradient
//! `g`) built into `kernels/unary.cl`, with its parameters (slopes, bounds) passed as kernel arguments. The
//! built-in device evaluates the same formulas in f64. The backward recomputes from the forward input, so no
//! activation needs to be kept; hard_swish's backward is one fused kernel.

use serde::Serialize;

use crate::backend::cpu::CpuDevice;
use crate::backend::opencl::Arg;
use crate::backend::opencl::ClDevice;
use crate::backend::opencl::program::Defines;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// A unary op with its parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UnaryOp {
    /// `-x`
    Neg,
    /// `|x|`
    Abs,
    /// `e^x`
    Exp,
    /// `ln x`
    Log,
    /// `ln(1 + x)`
    Log1p,
    /// `√x`
    Sqrt,
    /// `1/√x`
    Rsqrt,
    /// `x²`
    Square,
    /// `max(x, 0)` (NaN stays NaN)
    Relu,
    /// `x > 0 ? x : slope·x`
    LeakyRelu(f32),
    /// `1 / (1 + e^−x)`
    Sigmoid,
    /// `tanh x`
    Tanh,
    /// `0.5x(1 + tanh(√(2/π)(x + 0.044715x³)))`
    GeluTanh,
    /// `0.5x(1 + erf(x/√2))`
    GeluErf,
    /// `x·sigmoid(x)` (swish)
    Silu,
    /// `x > 0 ? x : alpha(e^x − 1)`
    Elu(f32),
    /// `ln(1 + e^x)`, computed stably as `max(x,0) + ln(1 + e^−|x|)`
    Softplus,
    /// `clip(0.2x + 0.5, 0, 1)` (netcl's Keras-style form)
    HardSigmoid,
    /// `x·hard_sigmoid(x)`
    HardSwish,
    /// `min(max(x, lo), hi)`; the gradient passes where `lo ≤ x ≤ hi`
    Clamp(f32, f32),
}

impl UnaryOp {
    /// The op's name.
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Abs => "abs",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Log1p => "log1p",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Square => "square",
            UnaryOp::Relu => "relu",
            UnaryOp::LeakyRelu(_) => "leaky_relu",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Tanh => "tanh",
            UnaryOp::GeluTanh => "gelu_tanh",
            UnaryOp::GeluErf => "gelu_erf",
            UnaryOp::Silu => "silu",
            UnaryOp::Elu(_) => "elu",
            UnaryOp::Softplus => "softplus",
            UnaryOp::HardSigmoid => "hard_sigmoid",
            UnaryOp::HardSwish => "hard_swish",
            UnaryOp::Clamp(..) => "clamp",
        }
    }

    /// Every op with sample parameters (for tests and listings).
    pub fn all() -> Vec<UnaryOp> {
        use UnaryOp::*;
        vec![
            Neg,
            Abs,
            Exp,
            Log,
            Log1p,
            Sqrt,
            Rsqrt,
            Square,
            Relu,
            LeakyRelu(0.1),
            Sigmoid,
            Tanh,
            GeluTanh,
            GeluErf,
            Silu,
            Elu(1.0),
            Softplus,
            HardSigmoid,
            HardSwish,
            Clamp(-0.5, 0.75),
        ]
    }

    fn params(self) -> (f32, f32) {
        match self {
            UnaryOp::LeakyRelu(s) | UnaryOp::Elu(s) => (s, 0.0),
            UnaryOp::Clamp(lo, hi) => (lo, hi),
            _ => (0.0, 0.0),
        }
    }

    /// Forward and backward OpenCL C expressions (no spaces: they travel as `-D` build options).
    fn cl(self) -> (&'static str, &'static str) {
        match self {
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

    /// Whether the op is `x·gate(x)` with a gate going to 0 and 1 at ∓inf (its value at ±inf is the limit).
    fn gated(self) -> bool {
        matches!(
            self,
            UnaryOp::GeluTanh | UnaryOp::GeluErf | UnaryOp::Silu | UnaryOp::HardSwish
        )
    }

    /// The forward on the host, in f64 (the reference).
    pub fn forward_ref(self, x: f32) -> f32 {
        let v = x as f64;
        if self.gated() && v.is_infinite() {
            return if v > 0.0 { x } else { 0.0 };
        }
        let (p0, p1) = (self.params().0 as f64, self.params().1 as f64);
        let r = match self {
            UnaryOp::Neg => -v,
            UnaryOp::Abs => v.abs(),
            UnaryOp::Exp => v.exp(),
            UnaryOp::Log => v.ln(),
            UnaryOp::Log1p => v.ln_1p(),
            UnaryOp::Sqrt => v.sqrt(),
            UnaryOp::Rsqrt => 1.0 / v.sqrt(),
            UnaryOp::Square => v * v,
            UnaryOp::Relu => {
                if v < 0.0 {
                    0.0
                } else {
                    v
                }
            }
            UnaryOp::LeakyRelu(_) => {
                if v > 0.0 {
                    v
                } else {
                    p0 * v
                }
            }
            UnaryOp::Sigmoid => sigmoid64(v),
            UnaryOp::Tanh => v.tanh(),
            UnaryOp::GeluTanh => 0.5 * v * (1.0 + (GELU_K * (v + GELU_C * v * v * v)).tanh()),
            UnaryOp::GeluErf => 0.5 * v * (1.0 + erf(v * std::f64::consts::FRAC_1_SQRT_2)),
            UnaryOp::Silu => v * sigmoid64(v),
            UnaryOp::Elu(_) => {
                if v > 0.0 {
                    v
                } else {
                    p0 * v.exp_m1()
                }
            }
            UnaryOp::Softplus => v.max(0.0) + (-v.abs()).exp().ln_1p(),
            UnaryOp::HardSigmoid => clampn(0.2 * v + 0.5, 0.0, 1.0),
            UnaryOp::HardSwish => v * clampn(0.2 * v + 0.5, 0.0, 1.0),
            UnaryOp::Clamp(..) => clampn(v, p0, p1),
        };
        r as f32
    }

    /// The backward on the host, in f64 (the reference): the gradient with respect to `x` given `g`.
    pub fn backward_ref(self, x: f32, g: f32) -> f32 {
        let (v, g) = (x as f64, g as f64);
        if v.is_nan() {
            return x;
        }
        if self.gated() && self != UnaryOp::HardSwish && v.is_infinite() {
            return if v > 0.0 { g as f32 } else { 0.0 };
        }
        let (p0, p1) = (self.params().0 as f64, self.params().1 as f64);
        let inside = |v: f64| v > -2.5 && v < 2.5;
        let r = match self {
            UnaryOp::Neg => -g,
            UnaryOp::Abs => {
                if v > 0.0 {
                    g
                } else if v < 0.0 {
                    -g
                } else {
                    0.0
                }
            }
            UnaryOp::Exp => g * v.exp(),
            UnaryOp::Log => g / v,
            UnaryOp::Log1p => g / (1.0 + v),
            UnaryOp::Sqrt => g * 0.5 / v.sqrt(),
            UnaryOp::Rsqrt => -0.5 * g / (v * v.sqrt()),
            UnaryOp::Square => 2.0 * g * v,
            UnaryOp::Relu => {
                if v > 0.0 {
                    g
                } else {
                    0.0
                }
            }
            UnaryOp::LeakyRelu(_) => {
                if v > 0.0 {
                    g
                } else {
                    p0 * g
                }
            }
            UnaryOp::Sigmoid => {
                let s = sigmoid64(v);
                g * s * (1.0 - s)
            }
            UnaryOp::Tanh => g * (1.0 - v.tanh() * v.tanh()),
            UnaryOp::GeluTanh => {
                let t = (GELU_K * (v + GELU_C * v * v * v)).tanh();
                g * (0.5 * (1.0 + t)
                    + 0.5 * v * (1.0 - t * t) * GELU_K * (1.0 + 3.0 * GELU_C * v * v))
            }
            UnaryOp::GeluErf => {
                let c = 1.0 / (2.0 * std::f64::consts::PI).sqrt();
                g * (0.5 * (1.0 + erf(v * std::f64::consts::FRAC_1_SQRT_2))
                    + v * (-0.5 * v * v).exp() * c)
            }
            UnaryOp::Silu => {
                let s = sigmoid64(v);
                g * s * (1.0 + v * (1.0 - s))
            }
            UnaryOp::Elu(_) => {
                if v > 0.0 {
                    g
                } else {
                    g * p0 * v.exp()
                }
            }
            UnaryOp::Softplus => g * sigmoid64(v),
            UnaryOp::HardSigmoid => {
                if inside(v) {
                    0.2 * g
                } else {
                    0.0
                }
            }
            UnaryOp::HardSwish => {
                g * (clampn(0.2 * v + 0.5, 0.0, 1.0) + if inside(v) { 0.2 * v } else { 0.0 })
            }
            UnaryOp::Clamp(..) => {
                if v >= p0 && v <= p1 {
                    g
                } else {
                    0.0
                }
            }
        };
        r as f32
    }

    fn validate(self) -> Result<()> {
        let (p0, p1) = self.params();
        if !(p0.is_finite() && p1.is_finite()) {
            return Err(Error::Invalid(format!(
                "{}: parameters must be finite, got {p0} and {p1}",
                self.name()
            )));
        }
        if let UnaryOp::Clamp(lo, hi) = self
            && lo > hi
        {
            return Err(Error::Invalid(format!(
                "clamp: lower bound {lo} is above upper bound {hi}"
            )));
        }
        Ok(())
    }
}

const GELU_K: f64 = 0.797_884_560_802_865_4;
const GELU_C: f64 = 0.044715;

fn sigmoid64(v: f64) -> f64 {
    1.0 / (1.0 + (-v).exp())
}

fn clampn(v: f64, lo: f64, hi: f64) -> f64 {
    if v < lo {
        lo
    } else if v > hi {
        hi
    } else {
        v
    }
}

/// The error function in f64: its Maclaurin series below |x| = 4 (cancellation costs under 7 of 16 digits
/// there), ±1 beyond (erfc(4) < 2e-8, below f32 resolution near 1).
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    if a >= 4.0 {
        return x.signum();
    }
    let (mut term, mut sum, x2) = (a, a, a * a);
    for n in 1..200 {
        term *= -x2 / n as f64;
        let t = term / (2 * n + 1) as f64;
        sum += t;
        if t.abs() < 1e-17 * sum.abs() {
            break;
        }
    }
    x.signum() * sum * 2.0 / std::f64::consts::PI.sqrt()
}

/// Device primitives for unary ops.
pub(crate) trait UnaryKernels {
    /// `out = op(x)`.
    fn unary(&self, op: UnaryOp, x: &Tensor, out: &Tensor) -> Result<()>;
    /// `out = ∂op/∂x · g`.
    fn unary_backward(&self, op: UnaryOp, x: &Tensor, g: &Tensor, out: &Tensor) -> Result<()>;
}

fn check(op: UnaryOp, x: &Tensor) -> Result<()> {
    op.validate()?;
    x.expect_dtype(DType::F32, op.name())?;
    if x.numel() > i32::MAX as usize {
        return Err(Error::Limit(format!(
            "{}: {} elements exceed the 2^31-1 per-op limit",
            op.name(),
            x.numel()
        )));
    }
    Ok(())
}

/// `op(x)` elementwise.
pub fn unary(op: UnaryOp, x: &Tensor) -> Result<Tensor> {
    check(op, x)?;
    let out = Tensor::empty(x.device(), x.shape(), DType::F32)?;
    if out.numel() > 0 {
        x.device().backend().unary(op, x, &out)?;
    }
    Ok(out)
}

/// The gradient of `op` at `x` given the output gradient `grad` (same shape as `x`).
pub fn unary_backward(op: UnaryOp, x: &Tensor, grad: &Tensor) -> Result<Tensor> {
    check(op, x)?;
    x.same_device(&[grad], op.name())?;
    grad.expect_dtype(DType::F32, op.name())?;
    if grad.shape() != x.shape() {
        return Err(Error::Shape(format!(
            "{} backward: gradient shape {:?} differs from input shape {:?}",
            op.name(),
            grad.shape(),
            x.shape()
        )));
    }
    let out = Tensor::empty(x.device(), x.shape(), DType::F32)?;
    if out.numel() > 0 {
        x.device().backend().unary_backward(op, x, grad, &out)?;
    }
    Ok(out)
}

macro_rules! unary_fns {
    ($($(#[$m:meta])* $f:ident => $op:expr;)*) => {
        $( $(#[$m])* pub fn $f(x: &Tensor) -> Result<Tensor> { unary($op, x) } )*
    };
}
unary_fns! {
    /// `-x`.
    neg => UnaryOp::Neg;
    /// `|x|`.
    abs => UnaryOp::Abs;
    /// `e^x`.
    exp => UnaryOp::Exp;
    /// `ln x`.
    log => UnaryOp::Log;
    /// `√x`.
    sqrt => UnaryOp::Sqrt;
    /// `max(x, 0)`.
    relu => UnaryOp::Relu;
    /// `1/(1+e^−x)`.
    sigmoid => UnaryOp::Sigmoid;
    /// `tanh x`.
    tanh => UnaryOp::Tanh;
    /// `x·sigmoid(x)`.
    silu => UnaryOp::Silu;
    /// `ln(1+e^x)`.
    softplus => UnaryOp::Softplus;
    /// `clip(0.2x + 0.5, 0, 1)`.
    hard_sigmoid => UnaryOp::HardSigmoid;
    /// `x·hard_sigmoid(x)`.
    hard_swish => UnaryOp::HardSwish;
}

/// `x > 0 ? x : slope·x`.
pub fn leaky_relu(x: &Tensor, slope: f32) -> Result<Tensor> {
    unary(UnaryOp::LeakyRelu(slope), x)
}
/// `x > 0 ? x : alpha·(e^x − 1)`.
pub fn elu(x: &Tensor, alpha: f32) -> Result<Tensor> {
    unary(UnaryOp::Elu(alpha), x)
}
/// GELU, in its tanh approximation (`approximate`, netcl's default) or the exact erf form.
pub fn gelu(x: &Tensor, approximate: bool) -> Result<Tensor> {
    unary(
        if approximate {
            UnaryOp::GeluTanh
        } else {
            UnaryOp::GeluErf
        },
        x,
    )
}
/// `min(max(x, lo), hi)`.
pub fn clamp(x: &Tensor, lo: f32, hi: f32) -> Result<Tensor> {
    unary(UnaryOp::Clamp(lo, hi), x)
}
/// `clamp(x, −1, 1)`.
pub fn hard_tanh(x: &Tensor) -> Result<Tensor> {
    unary(UnaryOp::Clamp(-1.0, 1.0), x)
}

impl ClDevice {
    fn unary_defines(op: UnaryOp) -> Defines {
        let (f, df) = op.cl();
        Defines::new().set("F(v)", f).set("DF(v,g)", df)
    }
}

impl UnaryKernels for ClDevice {
    fn unary(&self, op: UnaryOp, x: &Tensor, out: &Tensor) -> Result<()> {
        let k = self.kernel("unary", &ClDevice::unary_defines(op), "unary_fwd")?;
        let (p0, p1) = op.params();
        let n = x.numel();
        let args = [
            Arg::I32(n as i32),
            Arg::F32(p0),
            Arg::F32(p1),
            Arg::Mem(x.storage()),
            Arg::Mem(out.storage()),
        ];
        self.launch(
            &k,
            &args,
            &[n.div_ceil(4)],
            Some(&[256.min(self.info.max_work_group_size.max(1))]),
        )?;
        Ok(())
    }

    fn unary_backward(&self, op: UnaryOp, x: &Tensor, g: &Tensor, out: &Tensor) -> Result<()> {
        let k = self.kernel("unary", &ClDevice::unary_defines(op), "unary_bwd")?;
        let (p0, p1) = op.params();
        let n = x.numel();
        let args = [
            Arg::I32(n as i32),
            Arg::F32(p0),
            Arg::F32(p1),
            Arg::Mem(x.storage()),
            Arg::Mem(g.storage()),
            Arg::Mem(out.storage()),
        ];
        self.launch(
            &k,
            &args,
            &[n.div_ceil(4)],
            Some(&[256.min(self.info.max_work_group_size.max(1))]),
        )?;
        Ok(())
    }
}

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

/// The per-channel slope `alpha` ([C], or [1] for one shared slope) shaped to broadcast over axis 1 of `x`.
fn prelu_alpha(x: &Tensor, alpha: &Tensor) -> Result<Tensor> {
    x.same_device(&[alpha], "prelu")?;
    x.expect_dtype(DType::F32, "prelu")?;
    alpha.expect_dtype(DType::F32, "prelu")?;
    if x.rank() < 2 {
        return Err(Error::Shape(format!(
            "prelu: the input needs a channel axis 1, got {:?}",
            x.shape()
        )));
    }
    let c = x.shape()[1];
    if alpha.numel() != c && alpha.numel() != 1 {
        return Err(Error::Shape(format!(
            "prelu: alpha {:?} must hold 1 or {c} slopes for input {:?}",
            alpha.shape(),
            x.shape()
        )));
    }
    let mut shape = vec![1usize; x.rank() - 1];
    shape[0] = alpha.numel();
    alpha.reshape(&shape)
}

/// `x > 0 ? x : alpha[c]·x` with one slope per channel (axis 1), as one fused kernel.
pub fn prelu(x: &Tensor, alpha: &Tensor) -> Result<Tensor> {
    let a = prelu_alpha(x, alpha)?;
    super::fused::fused("where(x0 > 0, x0, x1 * x0)", &[x, &a])
}

/// The gradients of [`prelu`]: (input gradient, slope gradient of `alpha`'s shape).
pub fn prelu_backward(x: &Tensor, alpha: &Tensor, grad: &Tensor) -> Result<(Tensor, Tensor)> {
    let a = prelu_alpha(x, alpha)?;
    if grad.shape() != x.shape() {
        return Err(Error::Shape(format!(
            "prelu_backward: gradient {:?} differs from input {:?}",
            grad.shape(),
            x.shape()
        )));
    }
    let gx = super::fused::fused("where(x0 > 0, x2, x1 * x2)", &[x, &a, grad])?;
    let ga = super::fused::fused("where(x0 > 0, 0, x0 * x1)", &[x, grad])?;
    let ga = super::reduce::reduce_to_shape(&ga, a.shape())?.reshape(alpha.shape())?;
    Ok((gx, ga))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_known_values() {
        for (x, want) in [
            (0.0, 0.0),
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (-2.0, -0.995_322_265_018_952_7),
            (3.5, 0.999_999_256_901_627_7),
        ] {
            assert!(
                (erf(x) - want).abs() < 1e-12,
                "erf({x}) = {} want {want}",
                erf(x)
            );
        }
    }

    #[test]
    fn hard_sigmoid_is_keras_form() {
        assert_eq!(UnaryOp::HardSigmoid.forward_ref(1.0), 0.7);
        assert_eq!(UnaryOp::HardSigmoid.forward_ref(3.0), 1.0);
        assert_eq!(UnaryOp::HardSigmoid.forward_ref(-3.0), 0.0);
        assert!((UnaryOp::HardSwish.backward_ref(1.0, 1.0) - 0.9).abs() < 1e-6);
    }
}
