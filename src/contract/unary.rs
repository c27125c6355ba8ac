//! The unary family's contract: the op enum with its host reference maths, and the primitives a backend
//! provides.

use serde::Serialize;

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

    pub(crate) fn params(self) -> (f32, f32) {
        match self {
            UnaryOp::LeakyRelu(s) | UnaryOp::Elu(s) => (s, 0.0),
            UnaryOp::Clamp(lo, hi) => (lo, hi),
            _ => (0.0, 0.0),
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
