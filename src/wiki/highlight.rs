//! Server-side syntax highlighting for the languages the docs use: Rust, OpenCL C, the playground language
//! (Rhai), shell, JSON and TOML. A small lexer per family emits `<span class="tok-…">` around tokens, so colours
//! come from the stylesheet and switch with the theme.

use super::html::escape_into;

/// How one language looks to the lexer.
struct Syntax {
    line_comment: &'static [&'static str],
    block_comment: bool,
    keywords: &'static [&'static str],
    types: &'static [&'static str],
    literals: &'static [&'static str],
    /// `'x'` is a character literal and `'a` a lifetime (Rust).
    lifetimes: bool,
    /// `name!` is a macro call (Rust).
    macros: bool,
    /// `#…` at line start is a preprocessor line (C).
    preprocessor: bool,
    /// `$NAME` is a variable and the first word of a line a command (shell).
    shell: bool,
    /// `[table]` headers and `key =` (TOML); `"key":` (JSON).
    keys: bool,
    /// Single quotes delimit strings.
    single_quote_strings: bool,
    backtick_strings: bool,
}

const RUST: Syntax = Syntax {
    line_comment: &["//"],
    block_comment: true,
    keywords: &[
        "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum",
        "extern", "fn", "for", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut",
        "pub", "ref", "return", "self", "Self", "static", "struct", "super", "trait", "type",
        "unsafe", "use", "where", "while",
    ],
    types: &[
        "bool", "char", "f32", "f64", "i8", "i16", "i32", "i64", "i128", "isize", "str", "u8",
        "u16", "u32", "u64", "u128", "usize", "String", "Vec", "Option", "Result", "Box", "Arc",
    ],
    literals: &["true", "false", "None", "Some", "Ok", "Err"],
    lifetimes: true,
    macros: true,
    preprocessor: false,
    shell: false,
    keys: false,
    single_quote_strings: false,
    backtick_strings: false,
};

const OPENCL: Syntax = Syntax {
    line_comment: &["//"],
    block_comment: true,
    keywords: &[
        "break",
        "case",
        "const",
        "continue",
        "default",
        "do",
        "else",
        "for",
        "goto",
        "if",
        "inline",
        "return",
        "sizeof",
        "static",
        "struct",
        "switch",
        "typedef",
        "union",
        "volatile",
        "while",
        "restrict",
        "__kernel",
        "kernel",
        "__global",
        "global",
        "__local",
        "local",
        "__constant",
        "constant",
        "__private",
        "private",
        "__read_only",
        "__write_only",
        "__attribute__",
    ],
    types: &[
        "void",
        "bool",
        "char",
        "uchar",
        "short",
        "ushort",
        "int",
        "uint",
        "long",
        "ulong",
        "float",
        "double",
        "half",
        "size_t",
        "ptrdiff_t",
        "float2",
        "float3",
        "float4",
        "float8",
        "float16",
        "int2",
        "int4",
        "int8",
        "uint2",
        "uint4",
        "half2",
        "half4",
        "half8",
        "double2",
        "double4",
        "unsigned",
        "signed",
    ],
    literals: &[
        "true",
        "false",
        "NULL",
        "CLK_LOCAL_MEM_FENCE",
        "CLK_GLOBAL_MEM_FENCE",
    ],
    lifetimes: false,
    macros: false,
    preprocessor: true,
    shell: false,
    keys: false,
    single_quote_strings: true,
    backtick_strings: false,
};

const RHAI: Syntax = Syntax {
    line_comment: &["//"],
    block_comment: true,
    keywords: &[
        "let", "const", "fn", "if", "else", "while", "loop", "for", "in", "do", "until", "return",
        "break", "continue", "switch", "throw", "try", "catch", "import", "export", "as",
        "private", "this", "global",
    ],
    types: &[],
    literals: &["true", "false", "()"],
    lifetimes: false,
    macros: false,
    preprocessor: false,
    shell: false,
    keys: false,
    single_quote_strings: true,
    backtick_strings: true,
};

const SHELL: Syntax = Syntax {
    line_comment: &["#"],
    block_comment: false,
    keywords: &[
        "if", "then", "else", "elif", "fi", "for", "while", "do", "done", "case", "esac", "in",
        "function", "export", "local", "return",
    ],
    types: &[],
    literals: &[],
    lifetimes: false,
    macros: false,
    preprocessor: false,
    shell: true,
    keys: false,
    single_quote_strings: true,
    backtick_strings: false,
};

const JSON: Syntax = Syntax {
    line_comment: &[],
    block_comment: false,
    keywords: &[],
    types: &[],
    literals: &["true", "false", "null"],
    lifetimes: false,
    macros: false,
    preprocessor: false,
    shell: false,
    keys: true,
    single_quote_strings: false,
    backtick_strings: false,
};

const TOML: Syntax = Syntax {
    line_comment: &["#"],
    block_comment: false,
    keywords: &[],
    types: &[],
    literals: &["true", "false"],
    lifetimes: false,
    macros: false,
    preprocessor: false,
    shell: false,
    keys: true,
    single_quote_strings: true,
    backtick_strings: false,
};

/// The canonical name and display label of a fence language, or `None` when it is not highlighted.
pub fn language(tag: &str) -> Option<(&'static str, &'static str)> {
    Some(match tag.to_ascii_lowercase().as_str() {
        "rust" | "rs" => ("rust", "Rust"),
        "opencl" | "cl" | "c" | "opencl-c" => ("opencl", "OpenCL C"),
        "rhai" | "netcl" => ("rhai", "netcl script"),
        "sh" | "bash" | "shell" | "console" => ("sh", "Shell"),
        "json" => ("json", "JSON"),
        "toml" => ("toml", "TOML"),
        _ => return None,
    })
}

/// Highlights `code` written in the canonical language `lang`; unknown languages come back escaped only.
pub fn highlight(lang: &str, code: &str) -> String {
    let syntax = match lang {
        "rust" => &RUST,
        "opencl" => &OPENCL,
        "rhai" => &RHAI,
        "sh" => &SHELL,
        "json" => &JSON,
        "toml" => &TOML,
        _ => {
            let mut out = String::with_capacity(code.len());
            escape_into(&mut out, code);
            return out;
        }
    };
    Lexer {
        syntax,
        src: code,
        pos: 0,
        out: String::with_capacity(code.len() * 2),
        line_start: true,
    }
    .run()
}

struct Lexer<'a> {
    syntax: &'static Syntax,
    src: &'a str,
    pos: usize,
    out: String,
    /// Only whitespace since the last newline (for preprocessor lines, TOML headers, shell commands).
    line_start: bool,
}

impl Lexer<'_> {
    fn rest(&self) -> &str {
        &self.src[self.pos..]
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn emit(&mut self, class: Option<&str>, end: usize) {
        let text = &self.src[self.pos..end];
        match class {
            Some(class) => {
                self.out.push_str("<span class=\"tok-");
                self.out.push_str(class);
                self.out.push_str("\">");
                escape_into(&mut self.out, text);
                self.out.push_str("</span>");
            }
            None => escape_into(&mut self.out, text),
        }
        self.pos = end;
    }

    fn line_end(&self) -> usize {
        self.rest()
            .find('\n')
            .map_or(self.src.len(), |i| self.pos + i)
    }

    fn run(mut self) -> String {
        while let Some(c) = self.peek() {
            let was_line_start = self.line_start;
            self.line_start = c == '\n' || (was_line_start && c.is_whitespace());
            self.token(c, was_line_start);
        }
        self.out
    }

    fn token(&mut self, c: char, at_line_start: bool) {
        let s = self.syntax;
        let rest = self.rest();
        if s.line_comment.iter().any(|p| rest.starts_with(p))
            && !(s.shell && !at_line_start && !self.src[..self.pos].ends_with(char::is_whitespace))
        {
            let end = self.line_end();
            return self.emit(Some("com"), end);
        }
        if s.block_comment && rest.starts_with("/*") {
            let end = rest[2..]
                .find("*/")
                .map_or(self.src.len(), |i| self.pos + i + 4);
            return self.emit(Some("com"), end);
        }
        if s.preprocessor && at_line_start && c == '#' {
            let end = self.line_end();
            return self.emit(Some("meta"), end);
        }
        if s.macros && c == '#' && (rest.starts_with("#[") || rest.starts_with("#![")) {
            let end = rest.find(']').map_or(self.src.len(), |i| self.pos + i + 1);
            return self.emit(Some("meta"), end);
        }
        if s.keys && at_line_start && c == '[' && !s.line_comment.is_empty() {
            let end = self.line_end();
            return self.emit(Some("ty"), end);
        }
        if s.shell && at_line_start && c == '$' && rest.starts_with("$ ") {
            self.emit(Some("prompt"), self.pos + 1);
            // The command after a prompt starts the line as far as highlighting goes.
            self.line_start = true;
            return;
        }
        if s.shell && c == '$' {
            let len = rest[1..]
                .find(|ch: char| {
                    !(ch.is_ascii_alphanumeric() || ch == '_' || ch == '{' || ch == '}')
                })
                .unwrap_or(rest.len() - 1);
            return self.emit(Some("var"), self.pos + 1 + len);
        }
        let is_quote =
            c == '"' || (c == '\'' && s.single_quote_strings) || (c == '`' && s.backtick_strings);
        if is_quote {
            let end = self.string_end(c);
            let is_key = s.keys
                && self.src[end..]
                    .trim_start_matches([' ', '\t'])
                    .starts_with(':');
            return self.emit(Some(if is_key { "key" } else { "str" }), end);
        }
        if c == '\'' && s.lifetimes {
            return self.quote_or_lifetime();
        }
        if c.is_ascii_digit() {
            let len = rest
                .find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_' || ch == '.'))
                .unwrap_or(rest.len());
            return self.emit(Some("num"), self.pos + len);
        }
        if c.is_alphabetic() || c == '_' {
            return self.word(at_line_start);
        }
        self.emit(None, self.pos + c.len_utf8());
    }

    fn string_end(&self, quote: char) -> usize {
        let mut escaped = false;
        for (i, ch) in self.rest().char_indices().skip(1) {
            if escaped {
                escaped = false;
            } else if ch == '\\' && (quote != '\'' || !self.syntax.shell) {
                // Shell single quotes take backslashes literally; everywhere else they escape.
                escaped = true;
            } else if ch == quote {
                return self.pos + i + 1;
            } else if ch == '\n' && quote != '`' && quote != '"' {
                return self.pos + i;
            }
        }
        self.src.len()
    }

    fn quote_or_lifetime(&mut self) {
        let rest = self.rest();
        let mut chars = rest.char_indices().skip(1);
        match (chars.next(), chars.next()) {
            (Some((_, '\\')), _) => {
                let end = rest[2..]
                    .find('\'')
                    .map_or(self.src.len(), |i| self.pos + i + 3);
                self.emit(Some("str"), end)
            }
            (Some((_, _)), Some((i, '\''))) => self.emit(Some("str"), self.pos + i + 1),
            _ => {
                let len = rest[1..]
                    .find(|ch: char| !(ch.is_alphanumeric() || ch == '_'))
                    .unwrap_or(rest.len() - 1);
                self.emit(Some("life"), self.pos + 1 + len)
            }
        }
    }

    fn word(&mut self, at_line_start: bool) {
        let s = self.syntax;
        let rest = self.rest();
        let len = rest
            .find(|ch: char| !(ch.is_alphanumeric() || ch == '_' || (s.shell && ch == '-')))
            .unwrap_or(rest.len());
        let word = &rest[..len];
        let after = &rest[len..];
        let class = if s.keywords.contains(&word) {
            Some("kw")
        } else if s.types.contains(&word) {
            Some("ty")
        } else if s.literals.contains(&word) {
            Some("lit")
        } else if s.macros && after.starts_with('!') && !after.starts_with("!=") {
            Some("mac")
        } else if s.keys && at_line_start && after.trim_start_matches([' ', '\t']).starts_with('=')
        {
            Some("key")
        } else if s.shell && after.starts_with('=') {
            // An environment assignment before a command.
            Some("var")
        } else if (s.shell && at_line_start) || (!s.shell && after.starts_with('(')) {
            // A shell command name, or a call.
            Some("fn")
        } else if s.macros && word.starts_with(char::is_uppercase) {
            Some("ty")
        } else {
            None
        };
        let end = self.pos + len + usize::from(class == Some("mac"));
        self.emit(class, end)
    }
}

/// A Rust block split by rustdoc's (and mdBook's) convention: a line that is `#` alone or starts with `# `
/// (after its indentation) is compiled but not shown; `##` at the start of a line shows (and compiles) as `#`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RustBlock {
    /// What the page shows.
    pub shown: String,
    /// What rustdoc compiles: every line, hidden ones without their `# ` marker.
    pub compiled: String,
    /// Whether any line is hidden.
    pub has_hidden: bool,
}

/// Splits a Rust block into the code shown and the code compiled (see [`RustBlock`]).
pub fn rust_block(code: &str) -> RustBlock {
    let mut shown = Vec::new();
    let mut compiled = Vec::new();
    let mut has_hidden = false;
    for line in code.lines() {
        let trimmed = line.trim();
        let indent = &line[..line.len() - line.trim_start().len()];
        if trimmed.starts_with("##") {
            let line = line.replacen("##", "#", 1);
            shown.push(line.clone());
            compiled.push(line);
        } else if let Some(rest) = trimmed.strip_prefix("# ") {
            compiled.push(format!("{indent}{rest}"));
            has_hidden = true;
        } else if trimmed == "#" {
            compiled.push(String::new());
            has_hidden = true;
        } else {
            shown.push(line.to_string());
            compiled.push(line.to_string());
        }
    }
    let join = |lines: Vec<String>| {
        let mut text = lines.join("\n");
        if code.ends_with('\n') {
            text.push('\n');
        }
        text
    };
    RustBlock {
        shown: join(shown),
        compiled: join(compiled),
        has_hidden,
    }
}

/// The program a reader copies from a Rust block: the compiled lines, wrapped in `fn main` as rustdoc wraps a
/// doctest that has none (crate attributes and `extern crate` stay outside it; a block ending in `(())` is
/// the body of a function returning a `Result`, whose error `main` unwraps).
pub fn rust_program(compiled: &str) -> String {
    if compiled.contains("fn main(") || compiled.contains("fn main (") {
        return compiled.to_string();
    }
    let mut head = String::new();
    let mut body = String::new();
    let mut in_head = true;
    for line in compiled.lines() {
        let t = line.trim_start();
        if in_head && (t.starts_with("#![") || t.starts_with("extern crate") || t.is_empty()) {
            if !t.is_empty() {
                head.push_str(line);
                head.push('\n');
            }
            continue;
        }
        in_head = false;
        body.push_str(line);
        body.push('\n');
    }
    let body = body.trim_end();
    if body.ends_with("(())") {
        format!(
            "{head}fn main() {{\n    fn _inner() -> Result<(), impl core::fmt::Debug> {{\n{body}\n    }}\n    _inner().unwrap()\n}}\n"
        )
    } else {
        format!("{head}fn main() {{\n{body}\n}}\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_tokens_are_classified_and_escaped() {
        let html = highlight("rust", "fn main() { let x: Vec<u8> = vec![1]; // <hi>\n}");
        assert!(html.contains("<span class=\"tok-kw\">fn</span>"), "{html}");
        assert!(
            html.contains("<span class=\"tok-fn\">main</span>"),
            "{html}"
        );
        assert!(
            html.contains(
                "<span class=\"tok-ty\">Vec</span>&lt;<span class=\"tok-ty\">u8</span>&gt;"
            ),
            "{html}"
        );
        assert!(
            html.contains("<span class=\"tok-mac\">vec!</span>"),
            "{html}"
        );
        assert!(
            html.contains("<span class=\"tok-com\">// &lt;hi&gt;</span>"),
            "{html}"
        );
    }

    #[test]
    fn lifetimes_and_chars_differ() {
        let html = highlight("rust", "fn f<'a>(c: char) -> bool { c == 'x' }");
        assert!(
            html.contains("<span class=\"tok-life\">&#39;a</span>"),
            "{html}"
        );
        assert!(
            html.contains("<span class=\"tok-str\">&#39;x&#39;</span>"),
            "{html}"
        );
    }

    #[test]
    fn opencl_json_toml_shell() {
        let cl = highlight(
            "opencl",
            "#define TILE 16\n__kernel void k(__global float* x) {}",
        );
        assert!(
            cl.contains("<span class=\"tok-meta\">#define TILE 16</span>"),
            "{cl}"
        );
        assert!(
            cl.contains("<span class=\"tok-kw\">__kernel</span>"),
            "{cl}"
        );
        let json = highlight("json", "{\"a\": [1, true, \"b\"]}");
        assert!(
            json.contains("<span class=\"tok-key\">&quot;a&quot;</span>"),
            "{json}"
        );
        assert!(
            json.contains("<span class=\"tok-str\">&quot;b&quot;</span>"),
            "{json}"
        );
        let toml = highlight("toml", "[[section]]\ntitle = \"x\" # c\n");
        assert!(
            toml.contains("<span class=\"tok-ty\">[[section]]</span>"),
            "{toml}"
        );
        assert!(
            toml.contains("<span class=\"tok-key\">title</span>"),
            "{toml}"
        );
        assert!(
            toml.contains("<span class=\"tok-com\"># c</span>"),
            "{toml}"
        );
        let sh = highlight("sh", "$ NETCL_DEVICE=cpu netcl devices --json # list\n");
        assert!(sh.contains("<span class=\"tok-com\"># list</span>"), "{sh}");
        assert!(sh.contains("<span class=\"tok-prompt\">$</span>"), "{sh}");
        assert!(
            sh.contains("<span class=\"tok-var\">NETCL_DEVICE</span>"),
            "{sh}"
        );
        let cmd = highlight("sh", "$ cargo build --release\n");
        assert!(cmd.contains("<span class=\"tok-fn\">cargo</span>"), "{cmd}");
    }

    #[test]
    fn unknown_language_is_only_escaped() {
        assert_eq!(highlight("brainfuck", "<&>"), "&lt;&amp;&gt;");
    }
    #[test]
    fn hidden_rust_lines_follow_rustdoc() {
        let b = rust_block(
            "use netcl::Tensor;\n# let dev = netcl::Device::builtin();\n#\n    # let x = 1;\n##[derive(Debug)]\n#[derive(Clone)]\nstruct A;\n",
        );
        assert_eq!(
            b.shown,
            "use netcl::Tensor;\n#[derive(Debug)]\n#[derive(Clone)]\nstruct A;\n"
        );
        assert_eq!(
            b.compiled,
            "use netcl::Tensor;\nlet dev = netcl::Device::builtin();\n\n    let x = 1;\n#[derive(Debug)]\n#[derive(Clone)]\nstruct A;\n"
        );
        assert!(b.has_hidden);
        let plain = rust_block("#[test]\nfn t() {}");
        assert_eq!(plain.shown, plain.compiled);
        assert!(!plain.has_hidden);
    }

    #[test]
    fn copied_rust_is_a_program() {
        let p = rust_program("#![allow(unused)]\nlet x = 1;\nassert_eq!(x, 1);\n");
        assert_eq!(
            p,
            "#![allow(unused)]\nfn main() {\nlet x = 1;\nassert_eq!(x, 1);\n}\n"
        );
        let r = rust_program("let y = f()?;\nOk::<(), netcl::Error>(())\n");
        assert!(
            r.starts_with(
                "fn main() {\n    fn _inner() -> Result<(), impl core::fmt::Debug> {\nlet y"
            ),
            "{r}"
        );
        assert!(r.ends_with("_inner().unwrap()\n}\n"), "{r}");
        let whole = "fn main() {\n    println!(\"hi\");\n}\n";
        assert_eq!(rust_program(whole), whole);
    }
}
