//! The fused family's contract: the expression language (parsed and validated into a tree over the ops of
//! the [vocabulary](crate::contract::vocab), evaluated on the host as the reference), the multi-input broadcast
//! plan, and the primitive a backend provides. Backends turn the tree into their own code (the OpenCL backend
//! writes it from the vocabulary's templates).

use crate::contract::elementwise::{broadcast_rank, broadcast_strides};
use crate::contract::vocab::{self, OPS, OpDef};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// The most inputs an expression may use.
pub const MAX_INPUTS: usize = 6;
const MAX_LEN: usize = 4096;
const MAX_DEPTH: usize = 64;

/// Short spellings the expression language accepts for entries of the vocabulary.
pub const ALIASES: &[(&str, &str)] = &[("max", "maximum"), ("min", "minimum")];

/// A node of an expression tree: a literal, an input, or an op of the vocabulary applied to its operands.
#[derive(Debug, Clone)]
pub(crate) enum Node {
    Num(f32),
    Var(usize),
    Call(&'static OpDef, Vec<Node>),
}

/// A parsed, validated expression.
#[derive(Debug, Clone)]
pub struct Expr {
    root: Node,
    inputs: usize,
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
            Some("<") => Some(&vocab::LT),
            Some("<=") => Some(&vocab::LE),
            Some(">") => Some(&vocab::GT),
            Some(">=") => Some(&vocab::GE),
            Some("==") => Some(&vocab::EQ),
            Some("!=") => Some(&vocab::NE),
            _ => None,
        };
        let r = match op {
            Some(op) => {
                self.pos += 1;
                let rhs = self.additive()?;
                Node::Call(op, vec![lhs, rhs])
            }
            None => lhs,
        };
        self.depth -= 1;
        Ok(r)
    }
    fn additive(&mut self) -> Result<Node> {
        self.left_assoc(("+", &vocab::ADD), ("-", &vocab::SUB), Self::term)
    }
    fn term(&mut self) -> Result<Node> {
        self.left_assoc(("*", &vocab::MUL), ("/", &vocab::DIV), Self::unary)
    }
    /// One left-associative level of two operators over operands parsed by `next`.
    fn left_assoc(
        &mut self,
        a: (&str, &'static OpDef),
        b: (&str, &'static OpDef),
        next: fn(&mut Self) -> Result<Node>,
    ) -> Result<Node> {
        let mut lhs = next(self)?;
        while let Some(o) = self.peek_op().filter(|o| *o == a.0 || *o == b.0) {
            self.pos += 1;
            let rhs = next(self)?;
            let op = if o == a.0 { a.1 } else { b.1 };
            lhs = Node::Call(op, vec![lhs, rhs]);
        }
        Ok(lhs)
    }
    fn unary(&mut self) -> Result<Node> {
        if self.peek_op() == Some("-") {
            self.pos += 1;
            self.enter()?;
            let r = Node::Call(&vocab::NEG, vec![self.unary()?]);
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
                let canonical = ALIASES
                    .iter()
                    .find(|(a, _)| *a == name)
                    .map_or(name.as_str(), |(_, c)| *c);
                let Some(def) = vocab::lookup(canonical) else {
                    return Err(self.err(&format!(
                        "unknown name `{name}`; inputs are x0..x{} and functions are {}",
                        MAX_INPUTS - 1,
                        function_names().join(", ")
                    )));
                };
                let (fname, arity) = (name.as_str(), def.arity);
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
                Ok(Node::Call(def, args))
            }
            _ => Err(self.err("expected a number, an input, a function call or `(`")),
        }
    }
}

/// The function names the expression language accepts: every op of the vocabulary and the aliases.
pub fn function_names() -> Vec<&'static str> {
    OPS.iter()
        .map(|d| d.name)
        .chain(ALIASES.iter().map(|(a, _)| *a))
        .collect()
}

fn max_var(n: &Node) -> Option<usize> {
    match n {
        Node::Num(_) => None,
        Node::Var(k) => Some(*k),
        Node::Call(_, args) => args.iter().filter_map(max_var).max(),
    }
}

fn eval(n: &Node, x: &[f32]) -> f32 {
    match n {
        Node::Num(v) => *v,
        Node::Var(k) => x[*k],
        Node::Call(def, args) => {
            let mut v = [0f32; 3];
            for (slot, a) in v.iter_mut().zip(args) {
                *slot = eval(a, x);
            }
            def.apply(&v[..args.len()])
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
        Ok(Expr { root, inputs })
    }

    /// How many inputs (`x0`..) the expression reads: one more than the highest index used.
    pub fn inputs(&self) -> usize {
        self.inputs
    }

    /// The expression tree (backends generate their code from it).
    pub(crate) fn root(&self) -> &Node {
        &self.root
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
    let full: Vec<Vec<usize>> = shapes.iter().map(|s| broadcast_strides(s, out)).collect();
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
    broadcast_rank(shape.len(), || format!("{shapes:?}"))?;
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
    fn parses_into_a_tree_of_vocabulary_ops() {
        let e = Expr::parse("max(x0 * 2 + x1, 0) - -x2").ok();
        assert_eq!(e.as_ref().map(|e| e.inputs()), Some(3));
        assert_eq!(e.as_ref().map(|e| e.eval(&[1.0, 0.5, 1.0])), Some(3.5));
        let root = e.as_ref().map(|e| e.root());
        assert!(
            matches!(root, Some(Node::Call(d, args)) if d.name == "sub" && args.len() == 2),
            "{root:?}"
        );
        let e = Expr::parse("leaky_relu(x0, 0.1) + gelu_tanh(x1)").ok();
        assert_eq!(e.map(|e| e.eval(&[-1.0, 0.0])), Some(-0.1));
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
