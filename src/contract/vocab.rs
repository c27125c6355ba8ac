//! The one vocabulary of elementwise ops: every unary op, binary op and fused-expression function, with its
//! name, arity, OpenCL C expression template and reference maths.
//!
//! The unary and binary front-ends name their ops by entries of this table ([`UnaryOp`](super::unary::UnaryOp)
//! and [`BinaryOp`](super::elementwise::BinaryOp) map onto it), the expression language of fused kernels reads
//! its function names from it, the built-in device computes with its reference functions and the OpenCL
//! backend writes its kernels' expressions from its templates. A new op is one entry here.
//!
//! Templates are OpenCL C with the operands written `$0`, `$1`, `$2` (and `$g`, the incoming gradient, in a
//! gradient template); [`instantiate`] substitutes them. Templates contain no spaces (they travel as `-D`
//! build options) and name each operand once where an operand may be a whole sub-expression, so nesting does
//! not duplicate work; repeated uses go through the helper functions every elementwise kernel family defines
//! (`sigm`, `fmaxn`, `gelu_t`, …, see `kernels/fused.cl`). Operands after the first are an op's parameters
//! where it has them (`leaky_relu(x, slope)`, `clamp(x, lo, hi)`).

/// The gradient of an op with respect to its first operand, given the incoming gradient `g`.
#[derive(Debug)]
pub struct Grad {
    /// OpenCL C template over the operands and `$g`.
    pub cl: &'static str,
    /// The reference: operands and `g` to the gradient.
    pub eval: fn(&[f32], f32) -> f32,
}

/// One op of the vocabulary.
#[derive(Debug)]
pub struct OpDef {
    /// The op's name: the public op's name and the function name in fused expressions.
    pub name: &'static str,
    /// How many operands it takes (the first is the tensor value; later ones may be parameters).
    pub arity: usize,
    /// OpenCL C expression template over `$0`..`$2`.
    pub cl: &'static str,
    /// The reference maths on host values (the semantics the kernels are tested against).
    pub eval: fn(&[f32]) -> f32,
    /// The gradient, for ops with a backward kernel (the unary family).
    pub grad: Option<Grad>,
}

impl OpDef {
    /// The reference value of the op on `args` (`arity` values).
    pub fn apply(&self, args: &[f32]) -> f32 {
        (self.eval)(args)
    }
}

/// `template` with `$0`, `$1`, `$2` replaced by `args` and `$g` by `g`. Operands are inserted as given;
/// templates parenthesise every operand they use in an operator context, so a name, a macro parameter or a
/// parenthesised expression may be passed.
pub fn instantiate(template: &str, args: &[&str], g: &str) -> String {
    let mut out = String::with_capacity(template.len() + 16);
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('g') => out.push_str(g),
            Some(d @ '0'..='9') => {
                let k = d as usize - '0' as usize;
                out.push_str(args.get(k).copied().unwrap_or("0.0f"));
            }
            Some(other) => {
                out.push('$');
                out.push(other);
            }
            None => out.push('$'),
        }
    }
    out
}

/// The entry named `name`, if the vocabulary has one.
pub fn lookup(name: &str) -> Option<&'static OpDef> {
    OPS.iter().copied().find(|d| d.name == name)
}

fn f64op(v: f32, f: fn(f64) -> f64) -> f32 {
    f(v as f64) as f32
}

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

/// `max` that keeps NaN (IEEE `fmax` drops it).
fn nan_max(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        a + b
    } else {
        a.max(b)
    }
}

/// `min` that keeps NaN.
fn nan_min(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        a + b
    } else {
        a.min(b)
    }
}

fn flag(c: bool) -> f32 {
    f32::from(u8::from(c))
}

/// `x·gate(x)` forms take their limits at ±inf (x and 0) instead of inf·0 = NaN.
fn gated(v: f32, f: fn(f64) -> f64) -> f32 {
    if v.is_infinite() {
        if v > 0.0 { v } else { 0.0 }
    } else {
        f(v as f64) as f32
    }
}

/// Their gradients' limits at ±inf: `g` and 0.
fn gated_grad(v: f32, g: f32, f: fn(f64) -> f64) -> f32 {
    if v.is_infinite() {
        if v > 0.0 { g } else { 0.0 }
    } else {
        (g as f64 * f(v as f64)) as f32
    }
}

const GELU_K: f64 = 0.797_884_560_802_865_4;
const GELU_C: f64 = 0.044715;

/// `0.5v(1 + tanh(u))` computed as `v·σ(2u)` (the same function, without the cancellation of `1 + tanh(u)`
/// near −1), as the kernels do.
fn gelu_tanh(v: f64) -> f64 {
    v * sigmoid64(2.0 * GELU_K * (v + GELU_C * v * v * v))
}
fn gelu_tanh_d(v: f64) -> f64 {
    let s = sigmoid64(2.0 * GELU_K * (v + GELU_C * v * v * v));
    let q = s * (1.0 - s);
    if q == 0.0 {
        s
    } else {
        s + 2.0 * v * q * GELU_K * (1.0 + 3.0 * GELU_C * v * v)
    }
}
fn gelu_erf(v: f64) -> f64 {
    0.5 * v * (1.0 + erf(v * std::f64::consts::FRAC_1_SQRT_2))
}
fn gelu_erf_d(v: f64) -> f64 {
    let c = 1.0 / (2.0 * std::f64::consts::PI).sqrt();
    0.5 * (1.0 + erf(v * std::f64::consts::FRAC_1_SQRT_2)) + v * (-0.5 * v * v).exp() * c
}
fn silu(v: f64) -> f64 {
    v * sigmoid64(v)
}
fn silu_d(v: f64) -> f64 {
    let s = sigmoid64(v);
    s * (1.0 + v * (1.0 - s))
}
fn hard_sigmoid(v: f64) -> f64 {
    clampn(0.2 * v + 0.5, 0.0, 1.0)
}
/// The linear part of the hard forms: `-2.5 < x < 2.5`.
fn inside(v: f64) -> bool {
    v > -2.5 && v < 2.5
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

const fn op(name: &'static str, arity: usize, cl: &'static str, eval: fn(&[f32]) -> f32) -> OpDef {
    OpDef {
        name,
        arity,
        cl,
        eval,
        grad: None,
    }
}

const fn op_grad(
    name: &'static str,
    arity: usize,
    cl: &'static str,
    eval: fn(&[f32]) -> f32,
    grad_cl: &'static str,
    grad: fn(&[f32], f32) -> f32,
) -> OpDef {
    OpDef {
        name,
        arity,
        cl,
        eval,
        grad: Some(Grad {
            cl: grad_cl,
            eval: grad,
        }),
    }
}

// The unary family (forward and gradient).

/// `-x`
pub static NEG: OpDef = op_grad("neg", 1, "(-($0))", |a| -a[0], "(-($g))", |_, g| -g);
/// `|x|`
pub static ABS: OpDef = op_grad(
    "abs",
    1,
    "fabs($0)",
    |a| a[0].abs(),
    "(($0)>0.0f?($g):(($0)<0.0f?-($g):0.0f))",
    |a, g| {
        if a[0] > 0.0 {
            g
        } else if a[0] < 0.0 {
            -g
        } else {
            0.0
        }
    },
);
/// `e^x`
pub static EXP: OpDef = op_grad(
    "exp",
    1,
    "exp($0)",
    |a| f64op(a[0], f64::exp),
    "(($g)*exp($0))",
    |a, g| (g as f64 * (a[0] as f64).exp()) as f32,
);
/// `ln x`
pub static LOG: OpDef = op_grad(
    "log",
    1,
    "log($0)",
    |a| f64op(a[0], f64::ln),
    "(($g)/($0))",
    |a, g| (g as f64 / a[0] as f64) as f32,
);
/// `ln(1 + x)`
pub static LOG1P: OpDef = op_grad(
    "log1p",
    1,
    "log1p($0)",
    |a| f64op(a[0], f64::ln_1p),
    "(($g)/(1.0f+($0)))",
    |a, g| (g as f64 / (1.0 + a[0] as f64)) as f32,
);
/// `√x`
pub static SQRT: OpDef = op_grad(
    "sqrt",
    1,
    "sqrt($0)",
    |a| f64op(a[0], f64::sqrt),
    "(($g)*0.5f/sqrt($0))",
    |a, g| (g as f64 * 0.5 / (a[0] as f64).sqrt()) as f32,
);
/// `1/√x`
pub static RSQRT: OpDef = op_grad(
    "rsqrt",
    1,
    "(1.0f/sqrt($0))",
    |a| f64op(a[0], |v| 1.0 / v.sqrt()),
    "(-0.5f*($g)/(($0)*sqrt($0)))",
    |a, g| {
        let v = a[0] as f64;
        (-0.5 * g as f64 / (v * v.sqrt())) as f32
    },
);
/// `x²`
pub static SQUARE: OpDef = op_grad(
    "square",
    1,
    "sq($0)",
    |a| f64op(a[0], |v| v * v),
    "(2.0f*($g)*($0))",
    |a, g| (2.0 * g as f64 * a[0] as f64) as f32,
);
/// `max(x, 0)` (NaN stays NaN)
pub static RELU: OpDef = op_grad(
    "relu",
    1,
    "relun($0)",
    |a| if a[0] < 0.0 { 0.0 } else { a[0] },
    "(($0)>0.0f?($g):0.0f)",
    |a, g| if a[0] > 0.0 { g } else { 0.0 },
);
/// `x` where `x > 0`, else `neg(a)`: the host side of the two-operand ramps (leaky ReLU, ELU).
fn ramp(a: &[f32], neg: fn(&[f32]) -> f32) -> f32 {
    if a[0] > 0.0 { a[0] } else { neg(a) }
}

/// The gradient `g` where `x > 0`, else `neg(a, g)`.
fn ramp_grad(a: &[f32], g: f32, neg: fn(&[f32], f32) -> f32) -> f32 {
    if a[0] > 0.0 { g } else { neg(a, g) }
}

/// `x > 0 ? x : slope·x`, operands `(x, slope)`
pub static LEAKY_RELU: OpDef = op_grad(
    "leaky_relu",
    2,
    "lrelu($0,$1)",
    |a| ramp(a, |a| (a[1] as f64 * a[0] as f64) as f32),
    "(($0)>0.0f?($g):($1)*($g))",
    |a, g| ramp_grad(a, g, |a, g| a[1] * g),
);
/// `1 / (1 + e^−x)`
pub static SIGMOID: OpDef = op_grad(
    "sigmoid",
    1,
    "sigm($0)",
    |a| f64op(a[0], sigmoid64),
    "(($g)*sigm($0)*(1.0f-sigm($0)))",
    |a, g| {
        let s = sigmoid64(a[0] as f64);
        (g as f64 * s * (1.0 - s)) as f32
    },
);
/// `tanh x`
pub static TANH: OpDef = op_grad(
    "tanh",
    1,
    "tanh($0)",
    |a| f64op(a[0], f64::tanh),
    "(($g)*(1.0f-tanh($0)*tanh($0)))",
    |a, g| {
        let t = (a[0] as f64).tanh();
        (g as f64 * (1.0 - t * t)) as f32
    },
);
/// A unary op whose value is `cl($0)` in OpenCL and `f` on the host, and whose gradient is `g·grad` in
/// OpenCL and `g·d` on the host, both taking `GLIM`'s limits at ±∞.
macro_rules! gated_op {
    ($name:literal; $cl:literal, $f:ident; $grad:literal, $d:ident) => {
        op_grad(
            $name,
            1,
            concat!($cl, "($0)"),
            |a| gated(a[0], $f),
            concat!("(isinf($0)?GLIM($0,$g):($g)*", $grad, ")"),
            |a, g| gated_grad(a[0], g, $d),
        )
    };
}
/// `0.5x(1 + tanh(√(2/π)(x + 0.044715x³)))`, computed as `x·σ(2√(2/π)(x + 0.044715x³))` (no cancellation
/// of `1 + tanh` in the negative tail)
pub static GELU_TANH: OpDef =
    gated_op!("gelu_tanh"; "gelu_t", gelu_tanh; "gelu_t_d($0)", gelu_tanh_d);
/// `0.5x(1 + erf(x/√2))`
pub static GELU_ERF: OpDef = gated_op!("gelu_erf"; "gelu_e", gelu_erf; "gelu_e_d($0)", gelu_erf_d);
/// `x·sigmoid(x)` (swish)
pub static SILU: OpDef =
    gated_op!("silu"; "silu_f", silu; "sigm($0)*(1.0f+($0)*(1.0f-sigm($0)))", silu_d);
/// `x > 0 ? x : alpha(e^x − 1)`, operands `(x, alpha)`
pub static ELU: OpDef = op_grad(
    "elu",
    2,
    "elu_f($0,$1)",
    |a| ramp(a, |a| (a[1] as f64 * (a[0] as f64).exp_m1()) as f32),
    "(($0)>0.0f?($g):($g)*($1)*exp($0))",
    |a, g| {
        ramp_grad(a, g, |a, g| {
            (g as f64 * a[1] as f64 * (a[0] as f64).exp()) as f32
        })
    },
);
/// `ln(1 + e^x)`, computed stably as `max(x,0) + ln(1 + e^−|x|)`
pub static SOFTPLUS: OpDef = op_grad(
    "softplus",
    1,
    "softplus_f($0)",
    |a| f64op(a[0], |v| v.max(0.0) + (-v.abs()).exp().ln_1p()),
    "(($g)*sigm($0))",
    |a, g| (g as f64 * sigmoid64(a[0] as f64)) as f32,
);
/// `clip(0.2x + 0.5, 0, 1)` (netcl's Keras-style form)
pub static HARD_SIGMOID: OpDef = op_grad(
    "hard_sigmoid",
    1,
    "hsig($0)",
    |a| f64op(a[0], hard_sigmoid),
    "((($0)>-2.5f&&($0)<2.5f)?0.2f*($g):0.0f)",
    |a, g| {
        if inside(a[0] as f64) {
            (0.2 * g as f64) as f32
        } else {
            0.0
        }
    },
);
/// `x·hard_sigmoid(x)`; its gradient is the seed's fused form `g·(hard_sigmoid(x) + [−2.5 < x < 2.5]·0.2x)`
pub static HARD_SWISH: OpDef = op_grad(
    "hard_swish",
    1,
    "hswish($0)",
    |a| gated(a[0], |v| v * hard_sigmoid(v)),
    "(($g)*(hsig($0)+((($0)>-2.5f&&($0)<2.5f)?0.2f*($0):0.0f)))",
    |a, g| {
        let v = a[0] as f64;
        (g as f64 * (hard_sigmoid(v) + if inside(v) { 0.2 * v } else { 0.0 })) as f32
    },
);
/// `min(max(x, lo), hi)` keeping NaN, operands `(x, lo, hi)`; the gradient passes where `lo ≤ x ≤ hi`
pub static CLAMP: OpDef = op_grad(
    "clamp",
    3,
    "fminn(fmaxn($0,$1),$2)",
    |a| nan_min(nan_max(a[0], a[1]), a[2]),
    "((($0)>=($1)&&($0)<=($2))?($g):0.0f)",
    |a, g| if a[0] >= a[1] && a[0] <= a[2] { g } else { 0.0 },
);

// Functions of the expression language with no unary kernel of their own.

/// `sin x`
pub static SIN: OpDef = op("sin", 1, "sin($0)", |a| f64op(a[0], f64::sin));
/// `cos x`
pub static COS: OpDef = op("cos", 1, "cos($0)", |a| f64op(a[0], f64::cos));
/// The error function.
pub static ERF: OpDef = op("erf", 1, "erf($0)", |a| f64op(a[0], erf));
/// `⌊x⌋`
pub static FLOOR: OpDef = op("floor", 1, "floor($0)", |a| a[0].floor());
/// `⌈x⌉`
pub static CEIL: OpDef = op("ceil", 1, "ceil($0)", |a| a[0].ceil());
/// `c != 0 ? a : b` (a NaN condition selects `a`)
pub static WHERE: OpDef = op("where", 3, "((($0)!=0.0f)?($1):($2))", |a| {
    if a[0] != 0.0 { a[1] } else { a[2] }
});

// The binary family (the expression language's operators are these entries too).

/// `a + b`
pub static ADD: OpDef = op("add", 2, "(($0)+($1))", |a| a[0] + a[1]);
/// `a - b`
pub static SUB: OpDef = op("sub", 2, "(($0)-($1))", |a| a[0] - a[1]);
/// `a * b`
pub static MUL: OpDef = op("mul", 2, "(($0)*($1))", |a| a[0] * a[1]);
/// `a / b` (IEEE: division by zero gives ±inf or NaN)
pub static DIV: OpDef = op("div", 2, "(($0)/($1))", |a| a[0] / a[1]);
/// The larger of `a` and `b`; NaN if either is NaN.
pub static MAXIMUM: OpDef = op("maximum", 2, "fmaxn($0,$1)", |a| nan_max(a[0], a[1]));
/// The smaller of `a` and `b`; NaN if either is NaN.
pub static MINIMUM: OpDef = op("minimum", 2, "fminn($0,$1)", |a| nan_min(a[0], a[1]));
/// `a` raised to `b`.
pub static POW: OpDef = op("pow", 2, "pow($0,$1)", |a| {
    (a[0] as f64).powf(a[1] as f64) as f32
});
/// `1` where `a < b`, else `0` (NaN compares false).
pub static LT: OpDef = op("lt", 2, "((($0)<($1))?1.0f:0.0f)", |a| flag(a[0] < a[1]));
/// `1` where `a <= b`, else `0`.
pub static LE: OpDef = op("le", 2, "((($0)<=($1))?1.0f:0.0f)", |a| flag(a[0] <= a[1]));
/// `1` where `a > b`, else `0`.
pub static GT: OpDef = op("gt", 2, "((($0)>($1))?1.0f:0.0f)", |a| flag(a[0] > a[1]));
/// `1` where `a >= b`, else `0`.
pub static GE: OpDef = op("ge", 2, "((($0)>=($1))?1.0f:0.0f)", |a| flag(a[0] >= a[1]));
/// `1` where `a == b`, else `0`.
pub static EQ: OpDef = op("eq", 2, "((($0)==($1))?1.0f:0.0f)", |a| flag(a[0] == a[1]));
/// `1` where `a != b` (also where either is NaN), else `0`.
pub static NE: OpDef = op("ne", 2, "((($0)!=($1))?1.0f:0.0f)", |a| flag(a[0] != a[1]));

/// Every op of the vocabulary.
pub static OPS: &[&OpDef] = &[
    &NEG,
    &ABS,
    &EXP,
    &LOG,
    &LOG1P,
    &SQRT,
    &RSQRT,
    &SQUARE,
    &RELU,
    &LEAKY_RELU,
    &SIGMOID,
    &TANH,
    &GELU_TANH,
    &GELU_ERF,
    &SILU,
    &ELU,
    &SOFTPLUS,
    &HARD_SIGMOID,
    &HARD_SWISH,
    &CLAMP,
    &SIN,
    &COS,
    &ERF,
    &FLOOR,
    &CEIL,
    &WHERE,
    &ADD,
    &SUB,
    &MUL,
    &DIV,
    &MAXIMUM,
    &MINIMUM,
    &POW,
    &LT,
    &LE,
    &GT,
    &GE,
    &EQ,
    &NE,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_templates_fit_their_arity() {
        for (i, d) in OPS.iter().enumerate() {
            assert!(
                OPS[..i].iter().all(|o| o.name != d.name),
                "{} twice",
                d.name
            );
            assert!(!d.cl.contains(' '), "{}: spaces in {}", d.name, d.cl);
            assert!((1..=3).contains(&d.arity), "{}: arity {}", d.name, d.arity);
            for k in 0..3 {
                let used = d.cl.contains(&format!("${k}"));
                assert_eq!(used, k < d.arity, "{}: operand {k} in {}", d.name, d.cl);
            }
            if let Some(g) = &d.grad {
                assert!(g.cl.contains("$g") && !g.cl.contains(' '), "{}", g.cl);
            }
            assert_eq!(lookup(d.name).map(|o| o.name), Some(d.name));
        }
    }

    #[test]
    fn instantiate_substitutes_operands_and_gradient() {
        assert_eq!(
            instantiate(CLAMP.cl, &["v", "p0", "p1"], ""),
            "fminn(fmaxn(v,p0),p1)"
        );
        let g = LEAKY_RELU.grad.as_ref().map(|g| g.cl).unwrap_or_default();
        assert_eq!(instantiate(g, &["v", "p0"], "g"), "((v)>0.0f?(g):(p0)*(g))");
    }

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
}
