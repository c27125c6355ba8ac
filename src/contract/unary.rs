//! The unary family's contract: the op enum with its host reference maths, and the primitives a backend
//! provides.

use serde::Serialize;

pub use crate::contract::vocab::erf;
use crate::contract::vocab::{self, OpDef};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

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
    /// `0.5x(1 + tanh(√(2/π)(x + 0.044715x³)))`, computed as `x·σ(2√(2/π)(x + 0.044715x³))` (no
    /// cancellation of `1 + tanh` in the negative tail)
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
        self.def().name
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

    pub(crate) fn params(self) -> (f32, f32) {
        match self {
            UnaryOp::LeakyRelu(s) | UnaryOp::Elu(s) => (s, 0.0),
            UnaryOp::Clamp(lo, hi) => (lo, hi),
            _ => (0.0, 0.0),
        }
    }

    /// The op's entry in the vocabulary: its OpenCL templates and reference maths.
    pub fn def(self) -> &'static OpDef {
        match self {
            UnaryOp::Neg => &vocab::NEG,
            UnaryOp::Abs => &vocab::ABS,
            UnaryOp::Exp => &vocab::EXP,
            UnaryOp::Log => &vocab::LOG,
            UnaryOp::Log1p => &vocab::LOG1P,
            UnaryOp::Sqrt => &vocab::SQRT,
            UnaryOp::Rsqrt => &vocab::RSQRT,
            UnaryOp::Square => &vocab::SQUARE,
            UnaryOp::Relu => &vocab::RELU,
            UnaryOp::LeakyRelu(_) => &vocab::LEAKY_RELU,
            UnaryOp::Sigmoid => &vocab::SIGMOID,
            UnaryOp::Tanh => &vocab::TANH,
            UnaryOp::GeluTanh => &vocab::GELU_TANH,
            UnaryOp::GeluErf => &vocab::GELU_ERF,
            UnaryOp::Silu => &vocab::SILU,
            UnaryOp::Elu(_) => &vocab::ELU,
            UnaryOp::Softplus => &vocab::SOFTPLUS,
            UnaryOp::HardSigmoid => &vocab::HARD_SIGMOID,
            UnaryOp::HardSwish => &vocab::HARD_SWISH,
            UnaryOp::Clamp(..) => &vocab::CLAMP,
        }
    }

    /// The operands after `x` in the vocabulary's order (`slope`, `alpha`, `lo, hi`), padded to two.
    fn operands(self, x: f32) -> [f32; 3] {
        let (p0, p1) = self.params();
        [x, p0, p1]
    }

    /// The forward on the host (the reference the kernels are tested against).
    pub fn forward_ref(self, x: f32) -> f32 {
        let d = self.def();
        d.apply(&self.operands(x)[..d.arity])
    }

    /// The backward on the host (the reference): the gradient with respect to `x` given `g`. A NaN input
    /// gives a NaN gradient.
    pub fn backward_ref(self, x: f32, g: f32) -> f32 {
        if x.is_nan() {
            return x;
        }
        let d = self.def();
        match &d.grad {
            Some(grad) => (grad.eval)(&self.operands(x)[..d.arity], g),
            None => f32::NAN,
        }
    }

    pub(crate) fn validate(self) -> Result<()> {
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

/// Device primitives for unary ops.
pub(crate) trait UnaryKernels {
    /// `out = op(x)`.
    fn unary(&self, op: UnaryOp, x: &Tensor, out: &Tensor) -> Result<()>;
    /// `out = ∂op/∂x · g`.
    fn unary_backward(&self, op: UnaryOp, x: &Tensor, g: &Tensor, out: &Tensor) -> Result<()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_has_a_gradient_and_a_matching_name() {
        for op in UnaryOp::all() {
            assert_eq!(op.def().name, op.name());
            assert!(op.def().grad.is_some(), "{}", op.name());
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
