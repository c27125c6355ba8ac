//! A TeX subset rendered to MathML on the server, so formulas need no script and no CDN: fractions, roots,
//! sub- and superscripts, Greek letters, common operators and relations, big operators, named functions, text.
//! Anything else shows as an error mark with its source, never as broken markup.

use super::html::escape_into;

/// Brackets that MathML would stretch to their row unless told not to.
const FENCES: &[char] = &['(', ')', '[', ']', '|'];

/// Nesting deeper than this is shown as an error instead of recursing further.
const MAX_DEPTH: usize = 24;

const GREEK: &[(&str, &str)] = &[
    ("alpha", "α"),
    ("beta", "β"),
    ("gamma", "γ"),
    ("delta", "δ"),
    ("epsilon", "ϵ"),
    ("varepsilon", "ε"),
    ("zeta", "ζ"),
    ("eta", "η"),
    ("theta", "θ"),
    ("iota", "ι"),
    ("kappa", "κ"),
    ("lambda", "λ"),
    ("mu", "μ"),
    ("nu", "ν"),
    ("xi", "ξ"),
    ("pi", "π"),
    ("rho", "ρ"),
    ("sigma", "σ"),
    ("tau", "τ"),
    ("phi", "ϕ"),
    ("varphi", "φ"),
    ("chi", "χ"),
    ("psi", "ψ"),
    ("omega", "ω"),
    ("Gamma", "Γ"),
    ("Delta", "Δ"),
    ("Theta", "Θ"),
    ("Lambda", "Λ"),
    ("Xi", "Ξ"),
    ("Pi", "Π"),
    ("Sigma", "Σ"),
    ("Phi", "Φ"),
    ("Psi", "Ψ"),
    ("Omega", "Ω"),
];

const OPERATORS: &[(&str, &str)] = &[
    ("cdot", "⋅"),
    ("times", "×"),
    ("div", "÷"),
    ("pm", "±"),
    ("mp", "∓"),
    ("le", "≤"),
    ("leq", "≤"),
    ("ge", "≥"),
    ("geq", "≥"),
    ("ne", "≠"),
    ("neq", "≠"),
    ("approx", "≈"),
    ("equiv", "≡"),
    ("sim", "∼"),
    ("propto", "∝"),
    ("in", "∈"),
    ("notin", "∉"),
    ("subset", "⊂"),
    ("subseteq", "⊆"),
    ("cup", "∪"),
    ("cap", "∩"),
    ("to", "→"),
    ("rightarrow", "→"),
    ("leftarrow", "←"),
    ("Rightarrow", "⇒"),
    ("mapsto", "↦"),
    ("infty", "∞"),
    ("partial", "∂"),
    ("nabla", "∇"),
    ("forall", "∀"),
    ("exists", "∃"),
    ("ldots", "…"),
    ("cdots", "⋯"),
    ("odot", "⊙"),
    ("otimes", "⊗"),
    ("oplus", "⊕"),
    ("circ", "∘"),
    ("ast", "∗"),
    ("star", "⋆"),
    ("lfloor", "⌊"),
    ("rfloor", "⌋"),
    ("lceil", "⌈"),
    ("rceil", "⌉"),
    ("langle", "⟨"),
    ("rangle", "⟩"),
    ("mid", "∣"),
    ("|", "‖"),
    ("{", "{"),
    ("}", "}"),
    ("sum", "∑"),
    ("prod", "∏"),
    ("int", "∫"),
    ("lim", "lim"),
];

const FUNCTIONS: &[&str] = &[
    "sin", "cos", "tan", "exp", "log", "ln", "max", "min", "argmax", "argmin", "tanh", "sup",
    "inf", "det",
];

/// Renders TeX `src` as a `<math>` element; `display` selects block layout.
pub fn to_mathml(src: &str, display: bool) -> String {
    let mut parser = Parser {
        src,
        pos: 0,
        depth: 0,
        display,
    };
    let body = parser.row(None);
    let mut out = String::with_capacity(body.len() + src.len() + 96);
    out.push_str(if display {
        "<math display=\"block\">"
    } else {
        "<math>"
    });
    out.push_str("<semantics><mrow>");
    out.push_str(&body);
    out.push_str("</mrow><annotation encoding=\"application/x-tex\">");
    escape_into(&mut out, src);
    out.push_str("</annotation></semantics></math>");
    out
}

fn esc(text: &str) -> String {
    let mut out = String::new();
    escape_into(&mut out, text);
    out
}

struct Parser<'a> {
    src: &'a str,
    pos: usize,
    depth: usize,
    display: bool,
}

impl Parser<'_> {
    fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn skip_space(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.pos += 1;
        }
    }

    /// A sequence of atoms up to `close` (or the end).
    fn row(&mut self, close: Option<char>) -> String {
        let mut out = String::new();
        loop {
            self.skip_space();
            match self.peek() {
                None => break,
                Some(c) if Some(c) == close => {
                    self.pos += 1;
                    break;
                }
                Some('}') => {
                    self.pos += 1;
                    out.push_str("<merror><mtext>}</mtext></merror>");
                }
                Some(_) => {
                    let (atom, big) = self.atom();
                    out.push_str(&self.scripts(atom, big));
                }
            }
        }
        out
    }

    /// Applies any `^` and `_` following an atom.
    fn scripts(&mut self, base: String, big: bool) -> String {
        let (mut sub, mut sup) = (None, None);
        loop {
            self.skip_space();
            match self.peek() {
                Some('_') if sub.is_none() => {
                    self.pos += 1;
                    sub = Some(self.argument());
                }
                Some('^') if sup.is_none() => {
                    self.pos += 1;
                    sup = Some(self.argument());
                }
                _ => break,
            }
        }
        let (under, over, both) = if big && self.display {
            ("munder", "mover", "munderover")
        } else {
            ("msub", "msup", "msubsup")
        };
        match (sub, sup) {
            (None, None) => base,
            (Some(b), None) => format!("<{under}>{base}{b}</{under}>"),
            (None, Some(p)) => format!("<{over}>{base}{p}</{over}>"),
            (Some(b), Some(p)) => format!("<{both}>{base}{b}{p}</{both}>"),
        }
    }

    /// One braced group or single atom, as a single MathML element.
    fn argument(&mut self) -> String {
        self.skip_space();
        if self.peek() == Some('{') {
            self.pos += 1;
            self.group()
        } else if self.peek().is_none() {
            "<merror><mtext>missing argument</mtext></merror>".into()
        } else {
            self.atom().0
        }
    }

    fn group(&mut self) -> String {
        if self.depth >= MAX_DEPTH {
            let rest = esc(&self.src[self.pos..]);
            self.pos = self.src.len();
            return format!("<merror><mtext>{rest}</mtext></merror>");
        }
        self.depth += 1;
        let inner = self.row(Some('}'));
        self.depth -= 1;
        format!("<mrow>{inner}</mrow>")
    }

    /// Braced raw text, for `\text{…}` and friends.
    fn raw_group(&mut self) -> String {
        self.skip_space();
        if self.peek() != Some('{') {
            return String::new();
        }
        self.pos += 1;
        let start = self.pos;
        let mut level = 1;
        while let Some(c) = self.bump() {
            match c {
                '{' => level += 1,
                '}' => {
                    level -= 1;
                    if level == 0 {
                        return self.src[start..self.pos - 1].to_string();
                    }
                }
                _ => {}
            }
        }
        self.src[start..].to_string()
    }

    /// Returns the atom and whether it is a big operator (limits go under and over in display math).
    fn atom(&mut self) -> (String, bool) {
        let Some(c) = self.bump() else {
            return (String::new(), false);
        };
        match c {
            '{' => (self.group(), false),
            '\\' => self.command(),
            '0'..='9' | '.' => {
                let start = self.pos - 1;
                while self.peek().is_some_and(|c| c.is_ascii_digit() || c == '.') {
                    self.pos += 1;
                }
                (format!("<mn>{}</mn>", &self.src[start..self.pos]), false)
            }
            c if c.is_alphabetic() => (format!("<mi>{c}</mi>"), false),
            '&' => (String::new(), false),
            '\'' => ("<mo>′</mo>".into(), false),
            // A bracket written plainly keeps its size; only \left and \right stretch one (MathML would
            // otherwise stretch a fence to its row, so `(x)_i` next to a fraction got one tall parenthesis).
            c if FENCES.contains(&c) => (
                format!("<mo stretchy=\"false\">{}</mo>", esc(&c.to_string())),
                false,
            ),
            c => (format!("<mo>{}</mo>", esc(&c.to_string())), false),
        }
    }

    fn command(&mut self) -> (String, bool) {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_alphabetic()) {
            self.pos += 1;
        }
        if self.pos == start {
            // A one-character command such as `\{`, `\,` or `\\`.
            let Some(c) = self.bump() else {
                return (String::new(), false);
            };
            return match c {
                ',' | ':' | ';' | ' ' => ("<mspace width=\"0.25em\"></mspace>".into(), false),
                '!' | '\\' => (String::new(), false),
                '{' | '}' | '|' => (
                    format!("<mo stretchy=\"false\">{}</mo>", esc(&c.to_string())),
                    false,
                ),
                '%' | '$' | '#' | '_' => (format!("<mo>{}</mo>", esc(&c.to_string())), false),
                c => (
                    format!("<merror><mtext>\\{}</mtext></merror>", esc(&c.to_string())),
                    false,
                ),
            };
        }
        let name = &self.src[start..self.pos];
        if let Some((_, g)) = GREEK.iter().find(|(n, _)| *n == name) {
            return (format!("<mi>{g}</mi>"), false);
        }
        if let Some((_, op)) = OPERATORS.iter().find(|(n, _)| *n == name) {
            let big = matches!(name, "sum" | "prod" | "int" | "lim");
            return (format!("<mo>{op}</mo>"), big);
        }
        if FUNCTIONS.contains(&name) {
            return (format!("<mi>{name}</mi><mo>\u{2061}</mo>"), false);
        }
        match name {
            "frac" | "dfrac" | "tfrac" => {
                let num = self.argument();
                let den = self.argument();
                (format!("<mfrac>{num}{den}</mfrac>"), false)
            }
            "sqrt" => {
                self.skip_space();
                if self.peek() == Some('[') {
                    self.pos += 1;
                    let index = self.row(Some(']'));
                    let radicand = self.argument();
                    (
                        format!("<mroot>{radicand}<mrow>{index}</mrow></mroot>"),
                        false,
                    )
                } else {
                    (format!("<msqrt>{}</msqrt>", self.argument()), false)
                }
            }
            "text" | "mathrm" | "operatorname" => {
                let text = self.raw_group();
                (format!("<mtext>{}</mtext>", esc(&text)), false)
            }
            "mathbf" | "boldsymbol" => (
                format!("<mi mathvariant=\"bold\">{}</mi>", esc(&self.raw_group())),
                false,
            ),
            "mathbb" => (
                format!(
                    "<mi mathvariant=\"double-struck\">{}</mi>",
                    esc(&self.raw_group())
                ),
                false,
            ),
            "hat" | "bar" | "tilde" | "vec" | "dot" => {
                let accent = match name {
                    "hat" => "^",
                    "bar" => "¯",
                    "tilde" => "~",
                    "vec" => "→",
                    _ => "˙",
                };
                (
                    format!(
                        "<mover accent=\"true\">{}<mo>{accent}</mo></mover>",
                        self.argument()
                    ),
                    false,
                )
            }
            "left" | "right" | "big" | "Big" | "bigg" | "Bigg" => {
                self.skip_space();
                if self.peek() == Some('.') {
                    self.pos += 1;
                    return (String::new(), false);
                }
                let (fence, big) = self.atom();
                if matches!(name, "left" | "right") {
                    (
                        fence.replace("stretchy=\"false\"", "stretchy=\"true\""),
                        big,
                    )
                } else {
                    (fence, big)
                }
            }
            "quad" => ("<mspace width=\"1em\"></mspace>".into(), false),
            "qquad" => ("<mspace width=\"2em\"></mspace>".into(), false),
            _ => (
                format!("<merror><mtext>\\{}</mtext></merror>", esc(name)),
                false,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::to_mathml;

    #[test]
    fn only_left_and_right_stretch_their_brackets() {
        let m = super::to_mathml(
            r"\mathrm{softmax}(x)_i = \frac{e^{x_i}}{\sum_j e^{x_j}}",
            true,
        );
        assert!(m.contains("<mo stretchy=\"false\">(</mo>"), "{m}");
        assert!(m.contains("<mo stretchy=\"false\">)</mo>"), "{m}");
        assert!(!m.contains("<mo>(</mo>"), "{m}");
        let m = super::to_mathml(r"\left( \frac{a}{b} \right)", true);
        assert_eq!(m.matches("stretchy=\"true\"").count(), 2, "{m}");
    }

    #[test]
    fn fractions_scripts_and_greek() {
        let m = to_mathml(r"\frac{a}{b} + x_i^2 = \alpha", false);
        assert!(
            m.contains("<mfrac><mrow><mi>a</mi></mrow><mrow><mi>b</mi></mrow></mfrac>"),
            "{m}"
        );
        assert!(
            m.contains("<msubsup><mi>x</mi><mi>i</mi><mn>2</mn></msubsup>"),
            "{m}"
        );
        assert!(m.contains("<mi>α</mi>"), "{m}");
    }

    #[test]
    fn sums_take_limits_in_display_mode() {
        let m = to_mathml(r"\sum_{i=0}^{n} \sqrt{x_i}", true);
        assert!(m.starts_with("<math display=\"block\">"), "{m}");
        assert!(m.contains("<munderover><mo>∑</mo>"), "{m}");
        assert!(
            m.contains("<msqrt><mrow><msub><mi>x</mi><mi>i</mi></msub></mrow></msqrt>"),
            "{m}"
        );
    }

    #[test]
    fn unknown_commands_and_markup_are_escaped() {
        let m = to_mathml(r"\evil{<script>} < 1", false);
        assert!(m.contains("<merror><mtext>\\evil</mtext></merror>"), "{m}");
        assert!(!m.contains("<script>"), "{m}");
        assert!(m.contains("<mo>&lt;</mo>"), "{m}");
    }

    #[test]
    fn deep_nesting_is_bounded() {
        let src = "{".repeat(10_000);
        let m = to_mathml(&src, false);
        assert!(m.contains("<merror>"));
    }
}
