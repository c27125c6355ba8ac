//! One kernel's program: a family's source with every other kernel taken out.
//!
//! OpenCL compilers compile every kernel of a program when it is built: PoCL generates and compiles a
//! work-group function for each (30–300 ms apiece on a CPU), NVIDIA's compiler emits and assembles each one.
//! An op launches one or a few kernels of a family of up to 16, so a program is built per kernel, from the
//! family's text with the other kernels' definitions removed. The helpers, macros and `#if` structure stay; a
//! removed definition is replaced by as many line breaks as it spanned, so the compiler's line numbers (and
//! build logs) are those of the file.
//!
//! Kernels are found by reading the text as the compiler's front end would at the top level: comments,
//! strings and preprocessor lines (with their continuations) are skipped, braces counted. A kernel written by
//! a function-like macro (`ARG_KERNEL(argmax_col, GT)`) is its invocation line.

use std::borrow::Cow;
use std::ops::Range;

/// A kernel definition found at the top level of a source: its name and the bytes it spans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KernelSpan {
    pub(crate) name: String,
    pub(crate) span: Range<usize>,
}

/// `src` with the definitions of every kernel of `declared` other than `keep` replaced by line breaks. The
/// text is returned unchanged (borrowed) when `keep` is not found at the top level, so the build reports the
/// missing kernel as it would for the whole family.
pub(crate) fn keep_only<'a>(src: &'a str, declared: &[&str], keep: &str) -> Cow<'a, str> {
    let group = group_of(keep);
    let kept = |name: &str| name == keep || group.contains(&name);
    let spans = kernel_spans(src, declared);
    if !spans.iter().any(|s| s.name == keep) {
        return Cow::Borrowed(src);
    }
    let mut out = String::with_capacity(src.len());
    let mut at = 0;
    for s in spans.iter().filter(|s| !kept(&s.name)) {
        out.push_str(&src[at..s.span.start]);
        let lines = src[s.span.clone()].bytes().filter(|&b| b == b'\n').count();
        out.extend(std::iter::repeat_n('\n', lines));
        at = s.span.end;
    }
    out.push_str(&src[at..]);
    Cow::Owned(out)
}

/// Kernels that ops launch together, with the same defines: one program holds each group, so a first call
/// pays one build for them (on PoCL each build has a fixed cost of a few hundred milliseconds: the OpenCL C
/// header is parsed and the kernel library linked again).
const GROUPS: &[&[&str]] = &[
    &["gemm_pack_a", "gemm_pack_b", "gemm_packed"],
    &["wino_filter", "wino_input", "wino_output"],
];

/// The kernels built together with `kernel` (empty when it is built alone).
pub(crate) fn group_of(kernel: &str) -> &'static [&'static str] {
    GROUPS
        .iter()
        .find(|g| g.contains(&kernel))
        .copied()
        .unwrap_or(&[])
}

/// The kernel that names `kernel`'s program: the first of its group, or itself.
pub(crate) fn program_kernel(kernel: &str) -> &str {
    group_of(kernel).first().copied().unwrap_or(kernel)
}

/// Every kernel definition at the top level of `src`, in source order: `__kernel` functions (from the start
/// of the line holding `__kernel` to the closing brace), and invocation lines of function-like macros whose
/// first argument is one of the `declared` kernel names. Macros whose body opens or closes more braces than it
/// closes or opens (`YZ_BEGIN` opens a loop) count as those braces where they are used. Should the braces not
/// balance anyway, nothing is found, and nothing is taken out.
pub(crate) fn kernel_spans(src: &str, declared: &[&str]) -> Vec<KernelSpan> {
    let b = src.as_bytes();
    let macros = brace_macros(src);
    let mut spans = Vec::new();
    let mut i = 0;
    let mut depth = 0i64;
    let mut line_start = 0;
    // The definition being read: (start of its line, its name once seen).
    let mut open: Option<(usize, Option<String>)> = None;
    let mut at_line_start = true;
    while i < b.len() {
        let c = b[i];
        if at_line_start {
            let first = b[i..]
                .iter()
                .position(|&x| x != b' ' && x != b'\t')
                .map_or(b.len(), |p| i + p);
            if first < b.len() && b[first] == b'#' {
                i = end_of_directive(b, first);
                line_start = i;
                continue;
            }
            if depth == 0
                && open.is_none()
                && let Some((name, end)) = macro_kernel(src, first, declared)
            {
                spans.push(KernelSpan {
                    name,
                    span: line_start..end,
                });
                i = end;
                line_start = i;
                continue;
            }
            at_line_start = false;
        }
        match c {
            b'\n' => {
                i += 1;
                line_start = i;
                at_line_start = true;
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i = (i + 2).min(b.len());
            }
            b'"' | b'\'' => i = end_of_literal(b, i),
            b'{' => {
                depth += 1;
                i += 1;
            }
            b'}' => {
                depth -= 1;
                i += 1;
                if depth < 0 {
                    return Vec::new();
                }
                if depth == 0
                    && let Some((start, name)) = open.take()
                {
                    let mut end = i;
                    if b.get(end) == Some(&b'\n') {
                        end += 1;
                    }
                    if let Some(name) = name {
                        spans.push(KernelSpan {
                            name,
                            span: start..end,
                        });
                    }
                    i = end;
                    line_start = i;
                    at_line_start = true;
                }
            }
            c if is_ident_start(c) && (i == 0 || !is_ident(b[i - 1])) => {
                let (word, next) = identifier_after(b, i);
                let word = word.unwrap_or_default();
                if depth == 0 && word == "__kernel" && open.is_none() {
                    open = Some((line_start, None));
                } else if depth == 0 && word == "void" {
                    if let Some((_, name @ None)) = &mut open {
                        let (id, after) = identifier_after(b, next);
                        *name = id.map(str::to_owned);
                        i = after;
                        continue;
                    }
                } else if let Some(&(_, net)) = macros.iter().find(|(m, _)| *m == word) {
                    depth += net;
                    if depth < 0 {
                        return Vec::new();
                    }
                }
                i = next;
            }
            _ => i += 1,
        }
    }
    if depth != 0 || open.is_some() {
        return Vec::new();
    }
    spans
}

/// Function-like and object-like macros of `src` whose bodies do not balance their braces, with the net
/// number of braces each opens.
fn brace_macros(src: &str) -> Vec<(&str, i64)> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let line_end = end_of_directive(b, i);
        let line = &src[i..line_end];
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix('#') {
            let rest = rest.trim_start();
            if let Some(def) = rest.strip_prefix("define") {
                let def = def.trim_start();
                let name_len = def.bytes().take_while(|&c| is_ident(c)).count();
                let net = def.matches('{').count() as i64 - def.matches('}').count() as i64;
                if name_len > 0 && net != 0 {
                    out.push((&def[..name_len], net));
                }
            }
        }
        i = line_end.max(i + 1);
    }
    out
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_'
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The end of the preprocessor directive starting at `at` (past its line break, following `\` continuations).
fn end_of_directive(b: &[u8], mut at: usize) -> usize {
    while at < b.len() {
        if b[at] == b'\n' {
            if at > 0 && b[at - 1] == b'\\' || at > 1 && b[at - 1] == b'\r' && b[at - 2] == b'\\' {
                at += 1;
                continue;
            }
            return at + 1;
        }
        at += 1;
    }
    at
}

/// The end of the string or character literal opening at `at`.
fn end_of_literal(b: &[u8], at: usize) -> usize {
    let quote = b[at];
    let mut i = at + 1;
    while i < b.len() && b[i] != quote && b[i] != b'\n' {
        i += if b[i] == b'\\' { 2 } else { 1 };
    }
    (i + 1).min(b.len())
}

/// The identifier after white space from `at`, and the position after it.
fn identifier_after(b: &[u8], mut at: usize) -> (Option<&str>, usize) {
    while at < b.len() && b[at].is_ascii_whitespace() {
        at += 1;
    }
    let start = at;
    while at < b.len() && (b[at].is_ascii_alphanumeric() || b[at] == b'_') {
        at += 1;
    }
    let id = (at > start)
        .then(|| std::str::from_utf8(&b[start..at]).ok())
        .flatten();
    (id, at)
}

/// A line `MACRO(name, …)` at `at` whose first argument is a declared kernel: its name and the end of the line.
fn macro_kernel(src: &str, at: usize, declared: &[&str]) -> Option<(String, usize)> {
    let b = src.as_bytes();
    if !b
        .get(at)
        .is_some_and(|&c| c.is_ascii_alphabetic() || c == b'_')
    {
        return None;
    }
    let (mac, next) = identifier_after(b, at);
    mac?;
    if b.get(next) != Some(&b'(') {
        return None;
    }
    let (arg, after) = identifier_after(b, next + 1);
    let arg = arg?;
    if !declared.contains(&arg) || !matches!(b.get(after), Some(b',') | Some(b')')) {
        return None;
    }
    let end = b[after..]
        .iter()
        .position(|&c| c == b'\n')
        .map_or(b.len(), |p| after + p + 1);
    Some((arg.to_owned(), end))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::opencl::program::{kernel_families, kernel_names, kernel_source};

    const SRC: &str = "#define ADD(a, b) ((a) + (b))\n\
        #define MK(name, OP) __kernel void name(__global float* x) \\\n { x[0] = OP; }\n\
        float helper(float v) { return v * 2.0f; /* } */ }\n\
        // __kernel void commented(void) {}\n\
        __kernel __attribute__((reqd_work_group_size(64, 1, 1)))\n\
        void first(__global float* x)\n{\n  if (x[0] > 0) { x[0] = helper(x[0]); }\n  const char* s = \"}\";\n}\n\
        #define LOOP(n) for (int i = 0; i < (n); ++i) {\n\
        #if FLAG\n\
        __kernel void second(__global float* x) {\n#if INNER\n  x[0] = 1;\n#endif\n  LOOP(4)\n    x[i] += 1;\n  }\n}\n\
        #endif\n\
        MK(third, 3.0f)\n\
        __kernel void fourth(__global float* x) { x[0] = ADD(1, 2); }\n";

    #[test]
    fn kernels_launched_together_share_one_program() {
        let src = kernel_source("gemm").expect("gemm");
        let declared = kernel_names("gemm").expect("names");
        for g in GROUPS {
            for k in *g {
                assert_eq!(program_kernel(k), g[0]);
            }
        }
        let kept = keep_only(src, declared, "gemm_pack_b");
        let left: Vec<String> = kernel_spans(&kept, declared)
            .into_iter()
            .map(|s| s.name)
            .collect();
        assert_eq!(left, ["gemm_pack_a", "gemm_pack_b", "gemm_packed"]);
        assert_eq!(program_kernel("gemm_reg"), "gemm_reg");
        for g in GROUPS {
            let family = kernel_families()
                .find(|f| kernel_names(f).is_some_and(|n| n.contains(&g[0])))
                .expect("a family declares the group");
            let names = kernel_names(family).expect("names");
            assert!(g.iter().all(|k| names.contains(k)), "{g:?} in {family}");
        }
    }

    #[test]
    fn finds_functions_macro_kernels_and_nothing_in_comments_or_directives() {
        let names = ["first", "second", "third", "fourth"];
        let spans = kernel_spans(SRC, &names);
        let found: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(found, names);
        assert!(SRC[spans[0].span.clone()].starts_with("__kernel __attribute__"));
        assert!(SRC[spans[0].span.clone()].ends_with("\"}\";\n}\n"));
        assert_eq!(&SRC[spans[2].span.clone()], "MK(third, 3.0f)\n");
    }

    #[test]
    fn keeping_one_kernel_keeps_helpers_directives_and_line_numbers() {
        let names = ["first", "second", "third", "fourth"];
        let kept = keep_only(SRC, &names, "second");
        assert_eq!(kept.lines().count(), SRC.lines().count());
        assert!(kept.contains("void second("));
        assert!(kept.contains("float helper("));
        assert!(kept.contains("#define MK"));
        assert!(!kept.contains("void first("));
        assert!(!kept.contains("MK(third"));
        assert!(!kept.contains("void fourth("));
        assert_eq!(kept.matches("#if").count(), SRC.matches("#if").count());
        assert_eq!(keep_only(SRC, &names, "absent"), SRC);
    }

    /// Every declared kernel of every family is found exactly once, the spans do not overlap, each begins a
    /// line, and what a kernel's program keeps holds that kernel and no other.
    #[test]
    fn every_family_splits_into_its_declared_kernels() {
        for family in kernel_families() {
            let src = kernel_source(family).expect("family source");
            let declared = kernel_names(family).expect("family names");
            let spans = kernel_spans(src, declared);
            let mut found: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
            found.sort_unstable();
            found.dedup();
            let mut want: Vec<&str> = declared.to_vec();
            want.sort_unstable();
            want.dedup();
            assert_eq!(found, want, "kernels found in family `{family}`");
            for w in spans.windows(2) {
                assert!(
                    w[0].span.end <= w[1].span.start,
                    "{family}: overlapping spans"
                );
            }
            for s in &spans {
                assert!(s.span.start == 0 || src.as_bytes()[s.span.start - 1] == b'\n');
                let text = &src[s.span.clone()];
                assert!(
                    text.trim_end().ends_with('}') || text.trim_end().ends_with(')'),
                    "{family}::{}: its span ends inside the definition",
                    s.name
                );
                assert_eq!(
                    text.matches("#if").count(),
                    text.matches("#endif").count(),
                    "{family}::{}: unbalanced #if in its span",
                    s.name
                );
            }
            for k in declared {
                let group = group_of(k);
                let kept = keep_only(src, declared, k);
                assert_eq!(kept.lines().count(), src.lines().count(), "{family}::{k}");
                let left: Vec<String> = kernel_spans(&kept, declared)
                    .into_iter()
                    .map(|s| s.name)
                    .collect();
                assert!(
                    left.iter().all(|n| n == k || group.contains(&n.as_str()))
                        && left.iter().any(|n| n == k),
                    "{family}::{k} keeps {left:?}"
                );
            }
        }
    }
}
