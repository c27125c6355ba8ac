//! The fused family's contract: the expression language (parsed and validated into a tree, evaluated on the
//! host as the reference), the multi-input broadcast plan, and the primitive a backend provides.

use crate::contract::elementwise::MAX_BROADCAST_RANK;
use crate::contract::unary::erf;
use crate::error::{Error, Result};
use crate::tensor::{Tensor, strides};

/// The most inputs an expression may use.
pub const MAX_INPUTS: usize = 6;
const MAX_LEN: usize = 4096;
const MAX_DEPTH: usize = 64;

/// The functions of the expression language with their arity.
pub const FUNCTIONS: &[(&str, usize)] = &[
    ("exp", 1),
    ("log", 1),
    ("log1p", 1),
    ("sqrt", 1),
    ("rsqrt", 1),
    ("abs", 1),
    ("tanh", 1),
    ("sigmoid", 1),
    ("relu", 1),
    ("sin", 1),
    ("cos", 1),
    ("erf", 1),
    ("floor", 1),
    ("ceil", 1),
    ("max", 2),
    ("min", 2),
    ("pow", 2),
    ("where", 3),
    ("clamp", 3),
];

#[derive(Debug, Clone, Copy, PartialEq)]
enum Bin {
    Add,
    Sub,
    Mul,
    Div,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Num(f32),
    Var(usize),
    Neg(Box<Node>),
    Bin(Bin, Box<Node>, Box<Node>),
    Call(&'static str, Vec<Node>),
}

/// A parsed, validated expression.
#[derive(Debug, Clone)]
pub struct Expr {
    root: Node,
    inputs: usize,
    code: String,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(f32),
    Ident(String),
    Op(&'static str),
}

fn lex(text: &str) -> Result<Vec<Tok>> {
    let bad = |m: String| Error::Invalid(format!("expression `{text}`: {m}"));
    let b = text.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    while i < b.len() {
        let c = b[i] as char;
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() || c == '.' {
            let start = i;
            while i < b.len() && ((b[i] as char).is_ascii_digit() || b[i] == b'.') {
                i += 1;
            }
            if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
                i += 1;
                if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
                    i += 1;
                }
                while i < b.len() && (b[i] as char).is_ascii_digit() {
                    i += 1;
                }
            }
            let s = &text[start..i];
            let v: f32 = s
                .parse()
                .map_err(|_| bad(format!("`{s}` is not a number")))?;
            if !v.is_finite() {
                return Err(bad(format!("`{s}` is not a finite f32")));
            }
            out.push(Tok::Num(v));
        } else if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < b.len() && ((b[i] as char).is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(Tok::Ident(text[start..i].to_owned()));
        } else {
            let two = text.get(i..i + 2).unwrap_or("");
            let op = ["<=", ">=", "==", "!="].into_iter().find(|o| *o == two);
            if let Some(o) = op {
                out.push(Tok::Op(o));
                i += 2;
                continue;
            }
            let one = ["+", "-", "*", "/", "<", ">", "(", ")", ","]
                .into_iter()
                .find(|o| o.starts_with(c));
            match one {
                Some(o) => out.push(Tok::Op(o)),
                None => return Err(bad(format!("unexpected character `{c}` at byte {i}"))),
            }
            i += 1;
        }
    }
    Ok(out)
}

struct Parser<'a> {
    toks: Vec<Tok>,
    pos: usize,
    text: &'a str,
    depth: usize,
}

impl Parser<'_> {
    fn err(&self, m: &str) -> Error {
        Error::Invalid(format!(
            "expression `{}`: {m} (at token {})",
            self.text, self.pos
        ))
    }
    fn peek_op(&self) -> Option<&'static str> {
        match self.toks.get(self.pos) {
            Some(Tok::Op(o)) => Some(o),
            _ => None,
        }
    }
    fn expect(&mut self, o: &str) -> Result<()> {
        if self.peek_op() == Some(o) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.err(&format!("expected `{o}`")))
        }
    }
    fn enter(&mut self) -> Result<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            Err(self.err(&format!("nested deeper than {MAX_DEPTH} levels")))
        } else {
            Ok(())
        }
    }
    fn expr(&mut self) -> Result<Node> {
        self.enter()?;
        let lhs = self.additive()?;
        let op = match self.peek_op() {
            Some("<") => Some(Bin::Lt),
            Some("<=") => Some(Bin::Le),
            Some(">") => Some(Bin::Gt),
            Some(">=") => Some(Bin::Ge),
            Some("==") => Some(Bin::Eq),
            Some("!=") => Some(Bin::Ne),
            _ => None,
        };
        let r = match op {
            Some(op) => {
                self.pos += 1;
                let rhs = self.additive()?;
                Node::Bin(op, Box::new(lhs), Box::new(rhs))
            }
            None => lhs,
        };
        self.depth -= 1;
        Ok(r)
    }
    fn additive(&mut self) -> Result<Node> {
        let mut lhs = self.term()?;
        while let Some(o @ ("+" | "-")) = self.peek_op() {
            self.pos += 1;
            let rhs = self.term()?;
            lhs = Node::Bin(
                if o == "+" { Bin::Add } else { Bin::Sub },
                Box::new(lhs),
                Box::new(rhs),
            );
        }
        Ok(lhs)
    }
    fn term(&mut self) -> Result<Node> {
        let mut lhs = self.unary()?;
        while let Some(o @ ("*" | "/")) = self.peek_op() {
            self.pos += 1;
            let rhs = self.unary()?;
            lhs = Node::Bin(
                if o == "*" { Bin::Mul } else { Bin::Div },
                Box::new(lhs),
                Box::new(rhs),
            );
        }
        Ok(lhs)
    }
    fn unary(&mut self) -> Result<Node> {
        if self.peek_op() == Some("-") {
            self.pos += 1;
            self.enter()?;
            let r = Node::Neg(Box::new(self.unary()?));
            self.depth -= 1;
            return Ok(r);
        }
        self.primary()
    }
    fn primary(&mut self) -> Result<Node> {
        match self.toks.get(self.pos).cloned() {
            Some(Tok::Num(v)) => {
                self.pos += 1;
                Ok(Node::Num(v))
            }
            Some(Tok::Op("(")) => {
                self.pos += 1;
                let e = self.expr()?;
                self.expect(")")?;
                Ok(e)
            }
            Some(Tok::Ident(name)) => {
                self.pos += 1;
                if let Some(k) = name.strip_prefix('x').and_then(|d| d.parse::<usize>().ok())
                    && k < MAX_INPUTS
                    && name.len() == 2
                {
                    return Ok(Node::Var(k));
                }
                let Some(&(fname, arity)) = FUNCTIONS.iter().find(|(f, _)| *f == name) else {
                    return Err(self.err(&format!(
                        "unknown name `{name}`; inputs are x0..x{} and functions are {}",
                        MAX_INPUTS - 1,
                        FUNCTIONS.iter().map(|f| f.0).collect::<Vec<_>>().join(", ")
                    )));
                };
                self.expect("(")?;
                let mut args = Vec::new();
                if self.peek_op() != Some(")") {
                    args.push(self.expr()?);
                    while self.peek_op() == Some(",") {
                        self.pos += 1;
                        args.push(self.expr()?);
                    }
                }
                self.expect(")")?;
                if args.len() != arity {
                    return Err(self.err(&format!(
                        "`{fname}` takes {arity} argument(s), got {}",
                        args.len()
                    )));
                }
                Ok(Node::Call(fname, args))
            }
            _ => Err(self.err("expected a number, an input, a function call or `(`")),
        }
    }
}

fn max_var(n: &Node) -> Option<usize> {
    match n {
        Node::Num(_) => None,
        Node::Var(k) => Some(*k),
        Node::Neg(a) => max_var(a),
        Node::Bin(_, a, b) => max_var(a).max(max_var(b)),
        Node::Call(_, args) => args.iter().filter_map(max_var).max(),
    }
}

fn emit(n: &Node, out: &mut String) {
    match n {
        Node::Num(v) => out.push_str(&format!("({v:?}f)")),
        Node::Var(k) => out.push_str(&format!("x{k}")),
        Node::Neg(a) => {
            out.push_str("(-");
            emit(a, out);
            out.push(')');
        }
        Node::Bin(op, a, b) => {
            let (sym, cmp) = match op {
                Bin::Add => ("+", false),
                Bin::Sub => ("-", false),
                Bin::Mul => ("*", false),
                Bin::Div => ("/", false),
                Bin::Lt => ("<", true),
                Bin::Le => ("<=", true),
                Bin::Gt => (">", true),
                Bin::Ge => (">=", true),
                Bin::Eq => ("==", true),
                Bin::Ne => ("!=", true),
            };
            out.push_str("((");
            emit(a, out);
            out.push_str(sym);
            emit(b, out);
            out.push_str(if cmp { ")?1.0f:0.0f)" } else { "))" });
        }
        Node::Call(f, args) => {
            let cl = match *f {
                "abs" => "fabs",
                "sigmoid" => "sigm",
                "relu" => "relun",
                "max" => "fmaxn",
                "min" => "fminn",
                "rsqrt" => "1.0f/sqrt",
                "where" => {
                    out.push_str("((");
                    emit(&args[0], out);
                    out.push_str(")!=0.0f?(");
                    emit(&args[1], out);
                    out.push_str("):(");
                    emit(&args[2], out);
                    out.push_str("))");
                    return;
                }
                "clamp" => {
                    // Keeps NaN, like the unary clamp.
                    out.push_str("fminn(fmaxn(");
                    emit(&args[0], out);
                    out.push(',');
                    emit(&args[1], out);
                    out.push_str("),");
                    emit(&args[2], out);
                    out.push(')');
                    return;
                }
                other => other,
            };
            out.push('(');
            out.push_str(cl);
            out.push('(');
            for (i, a) in args.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                emit(a, out);
            }
            out.push_str("))");
        }
    }
}

fn nan_max(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        a + b
    } else {
        a.max(b)
    }
}
fn nan_min(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        a + b
    } else {
        a.min(b)
    }
}

fn eval(n: &Node, x: &[f32]) -> f32 {
    match n {
        Node::Num(v) => *v,
        Node::Var(k) => x[*k],
        Node::Neg(a) => -eval(a, x),
        Node::Bin(op, a, b) => {
            let (a, b) = (eval(a, x), eval(b, x));
            let t = |c: bool| f32::from(u8::from(c));
            match op {
                Bin::Add => a + b,
                Bin::Sub => a - b,
                Bin::Mul => a * b,
                Bin::Div => a / b,
                Bin::Lt => t(a < b),
                Bin::Le => t(a <= b),
                Bin::Gt => t(a > b),
                Bin::Ge => t(a >= b),
                Bin::Eq => t(a == b),
                Bin::Ne => t(a != b),
            }
        }
        Node::Call(f, args) => {
            let v: Vec<f32> = args.iter().map(|a| eval(a, x)).collect();
            let d = v[0] as f64;
            match *f {
                "exp" => d.exp() as f32,
                "log" => d.ln() as f32,
                "log1p" => d.ln_1p() as f32,
                "sqrt" => d.sqrt() as f32,
                "rsqrt" => (1.0 / d.sqrt()) as f32,
                "abs" => v[0].abs(),
                "tanh" => d.tanh() as f32,
                "sigmoid" => (1.0 / (1.0 + (-d).exp())) as f32,
                "relu" => {
                    if v[0] < 0.0 {
                        0.0
                    } else {
                        v[0]
                    }
                }
                "sin" => d.sin() as f32,
                "cos" => d.cos() as f32,
                "erf" => erf(d) as f32,
                "floor" => v[0].floor(),
                "ceil" => v[0].ceil(),
                "max" => nan_max(v[0], v[1]),
                "min" => nan_min(v[0], v[1]),
                "pow" => (d.powf(v[1] as f64)) as f32,
                "where" => {
                    if v[0] != 0.0 {
                        v[1]
                    } else {
                        v[2]
                    }
                }
                "clamp" => nan_min(nan_max(v[0], v[1]), v[2]),
                _ => f32::NAN,
            }
        }
    }
}

impl Expr {
    /// Parses and validates `text`.
    pub fn parse(text: &str) -> Result<Expr> {
        if text.len() > MAX_LEN {
            return Err(Error::Limit(format!(
                "expression of {} bytes; at most {MAX_LEN}",
                text.len()
            )));
        }
        let toks = lex(text)?;
        let mut p = Parser {
            toks,
            pos: 0,
            text,
            depth: 0,
        };
        let root = p.expr()?;
        if p.pos != p.toks.len() {
            return Err(p.err("unexpected trailing input"));
        }
        let inputs = max_var(&root).map_or(0, |k| k + 1);
        let mut code = String::new();
        emit(&root, &mut code);
        Ok(Expr { root, inputs, code })
    }

    /// How many inputs (`x0`..) the expression reads: one more than the highest index used.
    pub fn inputs(&self) -> usize {
        self.inputs
    }

    /// The generated OpenCL C form (the program cache key).
    pub fn code(&self) -> &str {
        &self.code
    }

    /// Evaluates the expression on host values (the reference semantics).
    pub fn eval(&self, x: &[f32]) -> f32 {
        eval(&self.root, x)
    }
}

/// How the inputs map onto the output: collapsed shape and per-input strides (0 = repeated).
#[derive(Debug, Clone)]
pub(crate) struct MultiPlan {
    pub(crate) shape: Vec<usize>,
    pub(crate) strides: Vec<Vec<usize>>,
    pub(crate) same: bool,
}

pub(crate) fn plan(shapes: &[&[usize]], out: &[usize]) -> Result<MultiPlan> {
    let same = shapes.iter().all(|s| *s == out);
    let full: Vec<Vec<usize>> = shapes
        .iter()
        .map(|s| {
            let pad = out.len() - s.len();
            let f: Vec<usize> = std::iter::repeat_n(1, pad)
                .chain(s.iter().copied())
                .collect();
            let st = strides(&f);
            f.iter()
                .zip(st)
                .zip(out)
                .map(|((&d, s), &o)| if d == 1 && o != 1 { 0 } else { s })
                .collect()
        })
        .collect();
    let mut shape: Vec<usize> = Vec::new();
    let mut cs: Vec<Vec<usize>> = vec![Vec::new(); shapes.len()];
    for (i, &o) in out.iter().enumerate() {
        if o == 1 {
            continue;
        }
        let mergeable = !shape.is_empty()
            && cs
                .iter()
                .zip(&full)
                .all(|(c, f)| c[c.len() - 1] == f[i] * o);
        if mergeable {
            let k = shape.len() - 1;
            shape[k] *= o;
            for (c, f) in cs.iter_mut().zip(&full) {
                c[k] = f[i];
            }
        } else {
            shape.push(o);
            for (c, f) in cs.iter_mut().zip(&full) {
                c.push(f[i]);
            }
        }
    }
    if shape.len() > MAX_BROADCAST_RANK {
        return Err(Error::Shape(format!(
            "broadcasting {shapes:?} needs {} independent dimensions; at most {MAX_BROADCAST_RANK} are supported",
            shape.len()
        )));
    }
    Ok(MultiPlan {
        shape,
        strides: cs,
        same,
    })
}

/// Device primitives for fused expressions.
pub(crate) trait FusedKernels {
    /// Writes `expr(inputs…)` into `out` following `plan`.
    fn fused(&self, expr: &Expr, inputs: &[&Tensor], out: &Tensor, plan: &MultiPlan) -> Result<()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_generates_code_from_the_tree() {
        let e = Expr::parse("max(x0 * 2 + x1, 0) - -x2").ok();
        assert_eq!(e.as_ref().map(|e| e.inputs()), Some(3));
        assert_eq!(e.as_ref().map(|e| e.eval(&[1.0, 0.5, 1.0])), Some(3.5));
        let code = e.map(|e| e.code().to_owned()).unwrap_or_default();
        assert!(!code.contains(' ') && code.contains("fmaxn"), "{code}");
    }

    #[test]
    fn rejects_anything_outside_the_language() {
        for bad in [
            "x0; }",
            "system(x0)",
            "x0 +",
            "x6",
            "exp(x0, x1)",
            "1e99",
            "x0 # 2",
            "((((x0)",
            "x0 x1",
        ] {
            assert!(Expr::parse(bad).is_err(), "{bad} accepted");
        }
        let deep = format!("{}x0{}", "(".repeat(100), ")".repeat(100));
        assert!(Expr::parse(&deep).is_err());
    }

    #[test]
    fn comparisons_and_where() {
        let e = Expr::parse("where(x0 >= 1, x1, 7)").ok();
        assert_eq!(e.as_ref().map(|e| e.eval(&[1.0, 3.0])), Some(3.0));
        assert_eq!(e.map(|e| e.eval(&[0.5, 3.0])), Some(7.0));
    }
}
