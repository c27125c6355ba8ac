//! What a playground run shows: tensor summaries and tensors drawn as images.

use serde::Serialize;

use crate::codec;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// How many leading values a tensor summary previews.
pub const PREVIEW: usize = 16;

/// One item of a run's output, in the order the script produced it.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Output {
    /// Printed text (one `print` call).
    Text {
        /// The text.
        text: String,
    },
    /// A tensor summary.
    Tensor(TensorSummary),
    /// A tensor drawn as an image.
    Image {
        /// A caption.
        title: String,
        /// Pixels across.
        width: usize,
        /// Pixels down.
        height: usize,
        /// A `data:image/png;base64,…` URL.
        png: String,
        /// The value drawn black (the smallest finite value; each plane of a grid is scaled to its own range).
        lo: f32,
        /// The value drawn white.
        hi: f32,
    },
    /// A file the run saved; its bytes are in the result's `files`, under the same name.
    File {
        /// The file's name.
        name: String,
        /// Its size in bytes.
        bytes: usize,
    },
}

/// Shape, dtype, statistics and the first values of a tensor.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TensorSummary {
    /// A caption.
    pub title: String,
    /// The shape.
    pub shape: Vec<usize>,
    /// The dtype name.
    pub dtype: String,
    /// Number of elements.
    pub numel: usize,
    /// The smallest finite value (None when there is none).
    pub min: Option<f32>,
    /// The largest finite value.
    pub max: Option<f32>,
    /// The mean of the finite values.
    pub mean: Option<f32>,
    /// Count of NaN and infinite values.
    pub non_finite: usize,
    /// The first values in row-major order (at most [`PREVIEW`]).
    pub preview: Vec<f32>,
}

/// Summarises `t` (reads it to the host).
pub fn summarize(t: &Tensor, title: &str) -> Result<TensorSummary> {
    let v = t.to_f32_vec()?;
    let finite: Vec<f32> = v.iter().copied().filter(|x| x.is_finite()).collect();
    let (min, max, mean) = if finite.is_empty() {
        (None, None, None)
    } else {
        let min = finite.iter().copied().fold(f32::INFINITY, f32::min);
        let max = finite.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mean = (finite.iter().map(|&x| x as f64).sum::<f64>() / finite.len() as f64) as f32;
        (Some(min), Some(max), Some(mean))
    };
    Ok(TensorSummary {
        title: title.to_owned(),
        shape: t.shape().to_vec(),
        dtype: t.dtype().name().to_owned(),
        numel: v.len(),
        min,
        max,
        mean,
        non_finite: v.len() - finite.len(),
        preview: v.iter().take(PREVIEW).copied().collect(),
    })
}

/// The largest image `show` draws, in pixels.
pub const MAX_IMAGE_PIXELS: usize = 1 << 20;

/// Draws `t` as a PNG: `[H, W]` grayscale, `[3, H, W]` RGB, any other `[…, C, H, W]` as a grid of its
/// `H×W` planes (feature maps), each scaled to its own min..max.
pub fn image(t: &Tensor, title: &str) -> Result<Output> {
    let shape = t.shape();
    if shape.len() < 2 {
        return Err(Error::Shape(format!(
            "show needs at least 2 dimensions (H, W), got {shape:?}"
        )));
    }
    let (h, w) = (shape[shape.len() - 2], shape[shape.len() - 1]);
    let planes = t.numel() / (h * w).max(1);
    if h == 0 || w == 0 || planes == 0 {
        return Err(Error::Shape(format!(
            "show: nothing to draw in shape {shape:?}"
        )));
    }
    let v = t.to_f32_vec()?;
    let scale = |plane: &[f32]| -> Vec<u8> {
        let lo = plane
            .iter()
            .copied()
            .filter(|x| x.is_finite())
            .fold(f32::INFINITY, f32::min);
        let hi = plane
            .iter()
            .copied()
            .filter(|x| x.is_finite())
            .fold(f32::NEG_INFINITY, f32::max);
        let span = if hi > lo { hi - lo } else { 1.0 };
        plane
            .iter()
            .map(|&x| {
                if x.is_finite() {
                    (((x - lo) / span) * 255.0).round() as u8
                } else {
                    0
                }
            })
            .collect()
    };
    let (width, height, channels, pixels) = if shape.len() == 3 && shape[0] == 3 {
        let r = scale(&v);
        let mut px = Vec::with_capacity(h * w * 3);
        for i in 0..h * w {
            px.extend_from_slice(&[r[i], r[h * w + i], r[2 * h * w + i]]);
        }
        (w, h, 3, px)
    } else {
        let cols = (planes as f64).sqrt().ceil() as usize;
        let rows = planes.div_ceil(cols);
        let (gw, gh) = (cols * (w + 1) - 1, rows * (h + 1) - 1);
        if gw * gh > MAX_IMAGE_PIXELS {
            return Err(Error::Limit(format!(
                "show: a {gw}×{gh} image exceeds {MAX_IMAGE_PIXELS} pixels"
            )));
        }
        let mut px = vec![40u8; gw * gh];
        for p in 0..planes {
            let plane = scale(&v[p * h * w..(p + 1) * h * w]);
            let (ox, oy) = ((p % cols) * (w + 1), (p / cols) * (h + 1));
            for y in 0..h {
                px[(oy + y) * gw + ox..(oy + y) * gw + ox + w]
                    .copy_from_slice(&plane[y * w..(y + 1) * w]);
            }
        }
        (gw, gh, 1, px)
    };
    if width * height > MAX_IMAGE_PIXELS {
        return Err(Error::Limit(format!(
            "show: a {width}×{height} image exceeds {MAX_IMAGE_PIXELS} pixels"
        )));
    }
    let png = codec::png(width, height, channels, &pixels);
    let finite = v.iter().copied().filter(|x| x.is_finite());
    let lo = finite.clone().fold(f32::INFINITY, f32::min);
    let hi = finite.fold(f32::NEG_INFINITY, f32::max);
    Ok(Output::Image {
        title: title.to_owned(),
        width,
        height,
        png: format!("data:image/png;base64,{}", codec::base64(&png)),
        lo: if lo.is_finite() { lo } else { 0.0 },
        hi: if hi.is_finite() { hi } else { 0.0 },
    })
}

/// A number as a reader wants to see it: integers without noise, six significant digits otherwise, and
/// scientific notation for very large or very small magnitudes (`0.1 + 0.2` shows as `0.3`).
pub fn fmt_number(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let a = v.abs();
    if v == v.trunc() && a < 1e15 {
        return format!("{v:.1}");
    }
    if !(1e-4..1e9).contains(&a) {
        return format!("{v:.4e}");
    }
    let digits = (5 - a.log10().floor() as i32).clamp(0, 12) as usize;
    let s = format!("{v:.digits$}");
    let s = s.trim_end_matches('0');
    if s.ends_with('.') {
        format!("{s}0")
    } else {
        s.to_owned()
    }
}

/// An `f32` read from the device as the `f64` a script sees: its shortest decimal form, so `0.1f32` is `0.1`
/// and not `0.10000000149011612`.
pub fn f32_to_script(v: f32) -> f64 {
    if v.is_finite() {
        format!("{v}").parse().unwrap_or(v as f64)
    } else {
        v as f64
    }
}

impl TensorSummary {
    /// The summary as one line of text: `title [shape] dtype min=… max=… mean=… [first values]`.
    pub fn line(&self) -> String {
        let stat = |v: Option<f32>| v.map_or_else(|| "–".to_owned(), |v| fmt_number(v as f64));
        let preview: Vec<String> = self.preview.iter().map(|&v| fmt_number(v as f64)).collect();
        let more = if self.numel > self.preview.len() {
            ", …"
        } else {
            ""
        };
        let title = if self.title.is_empty() {
            String::new()
        } else {
            format!("{} ", self.title)
        };
        let non_finite = if self.non_finite > 0 {
            format!(" non-finite={}", self.non_finite)
        } else {
            String::new()
        };
        format!(
            "{title}{:?} {} min={} max={} mean={}{non_finite} [{}{more}]",
            self.shape,
            self.dtype,
            stat(self.min),
            stat(self.max),
            stat(self.mean),
            preview.join(", ")
        )
    }
}

impl Output {
    /// The output item as plain text, as `netcl run` prints it and a page's recorded output shows it.
    pub fn text(&self) -> String {
        match self {
            Output::Text { text } => text.clone(),
            Output::Tensor(s) => s.line(),
            Output::Image {
                title,
                width,
                height,
                ..
            } => {
                if title.is_empty() {
                    format!("[image {width}×{height}]")
                } else {
                    format!("[image {title} {width}×{height}]")
                }
            }
            Output::File { name, bytes } => format!("[file {name}, {bytes} bytes]"),
        }
    }
}

/// What a run printed, as text: every output item, then the final value (`→ value`), then the error. This is
/// the form of a page's recorded output (the `output` block after a runnable one).
pub fn transcript(r: &super::RunResult) -> String {
    let mut lines: Vec<String> = r.outputs.iter().map(Output::text).collect();
    if let Some(v) = &r.value {
        lines.push(format!("→ {v}"));
    }
    if let Some(e) = &r.error {
        let at = e
            .line
            .map(|l| format!(" at line {l}, column {}", e.column.unwrap_or(0)))
            .unwrap_or_default();
        lines.push(format!("{} error{at}: {}", e.kind, e.message));
    }
    let mut s = lines.join("\n");
    s.push('\n');
    s
}

/// The named fields of an autotune shape key, for the kernels whose key layout is known: a reader sees
/// `N=8 C=32 H=32 W=32 …` instead of `(8, 32, 32, 32, …)`. Sizes marked as buckets were rounded up to a power
/// of two, so one decision serves a class of shapes. `None` for a kernel whose layout is not listed.
pub fn shape_fields(kernel: &str) -> Option<&'static [&'static str]> {
    const CONV: &[&str] = &[
        "N~",
        "C",
        "H~",
        "W~",
        "F",
        "KH",
        "KW",
        "stride H",
        "stride W",
        "pad H",
        "pad W",
        "dilation H",
        "dilation W",
        "groups",
        "pass",
    ];
    Some(match kernel {
        "conv2d_fwd_algo" | "conv2d_bwd_algo" | "conv2d_backward" => CONV,
        "conv2d_pointwise_fwd_select" | "conv2d_pointwise_bwd_select" => {
            &["N~", "C", "H·W~", "F", "bias", "flag"]
        }
        "conv2d_gemm" => &["F/groups", "C·KH·KW", "pixels~", "N~", "flag", "flag"],
        "conv2d_pointwise_gemm" => &["F", "C", "pixels~", "N~", "flag"],
        "conv2d_pointwise_grad_w" => &["C", "F", "N~", "pixels~"],
        "conv2d_grad_bias" => &["N~", "F", "pixels~"],
        "wino_batched_gemm" | "wino_grad_w_gemm" => &["F", "C", "N~", "tiles~", "m"],
        "matmul" => &["M~", "N~", "K~", "batch~", "trans A", "trans B"],
        "reduce" => &["outer~", "reduced~", "inner~", "inner align"],
        "reduce_to_shape" => &["elements~", "reduced~"],
        "softmax" | "log_softmax" => &["rows~", "length~", "length % 4 = 0"],
        "batch_norm2d" => &["N~", "C~", "H·W~", "H·W % 4 = 0"],
        "layer_norm_rows"
        | "rms_norm_rows"
        | "layer_norm_rows_backward"
        | "rms_norm_rows_backward" => &["rows~", "D~", "D % 8 = 0", "f16 buffers"],
        k if k.starts_with("dwconv") || k.starts_with("depthwise") => {
            &["N~", "C", "H~", "W~", "K", "stride", "pad", "pass"]
        }
        _ => return None,
    })
}

/// A shape key such as `(8, 32, 1024, 64, 0, 0)` with its fields named where the kernel's layout is known:
/// `N=8 C=32 H·W≤1024 F=64 bias=0 flag=0` (`≤` marks a power-of-two bucket).
pub fn explain_shape(kernel: &str, shape_key: &str) -> String {
    let values: Vec<&str> = shape_key
        .trim_matches(|c| c == '(' || c == ')' || c == '[' || c == ']')
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    match shape_fields(kernel) {
        Some(names) if names.len() >= values.len() => values
            .iter()
            .zip(names)
            .map(|(v, n)| match n.strip_suffix('~') {
                Some(n) => format!("{n}≤{v}"),
                None => format!("{n}={v}"),
            })
            .collect::<Vec<_>>()
            .join(" "),
        _ => values.join(" × "),
    }
}

/// One autotune decision as a reader reads it: a one-line summary, the shape key with named fields, and the
/// winner's margin over the runner-up where candidates were timed.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DecisionView {
    /// `conv2d_fwd_algo · N≤8 C=32 … → im2col, 4.2× faster than winograd, measured now`.
    pub line: String,
    /// The shape key with its fields named ([`explain_shape`]).
    pub fields: String,
    /// Where the answer came from, as a word for a badge (`measured`, `cache`, `forced`, …).
    pub source: String,
    /// The fastest other candidate, when candidates were timed.
    pub runner_up: Option<String>,
    /// The runner-up's time over the winner's.
    pub speedup: Option<f64>,
}

/// Explains `d` ([`DecisionView`]).
pub fn explain(d: &crate::autotune::Decision) -> DecisionView {
    let source = format!("{:?}", d.source).to_lowercase();
    let fields = explain_shape(&d.kernel, &d.shape_key);
    let winner_ms = d
        .candidates
        .iter()
        .find(|c| c.label == d.winner_label)
        .and_then(|c| c.ms);
    let runner = d
        .candidates
        .iter()
        .filter(|c| c.label != d.winner_label)
        .filter_map(|c| c.ms.map(|ms| (c.label.clone(), ms)))
        .min_by(|a, b| a.1.total_cmp(&b.1));
    let (runner_up, speedup) = match (runner, winner_ms) {
        (Some((label, ms)), Some(w)) if w > 0.0 => (Some(label), Some(ms / w)),
        _ => (None, None),
    };
    let how = match source.as_str() {
        "measured" => "measured now".to_owned(),
        "cache" => "from the cache".to_owned(),
        "forced" => "forced".to_owned(),
        "only" => "the only eligible candidate".to_owned(),
        "default" => "the default (every candidate failed)".to_owned(),
        "database" => "from the tuning database".to_owned(),
        "heuristic" => "first choice, not measured yet".to_owned(),
        "interim" => "the quick kernel, while the chosen one is built".to_owned(),
        other => other.to_owned(),
    };
    let margin = match (&runner_up, speedup) {
        (Some(r), Some(s)) => format!(", {s:.1}× faster than {r}"),
        _ => String::new(),
    };
    DecisionView {
        line: format!(
            "{} · {fields} → {}{margin}, {how}",
            d.kernel, d.winner_label
        ),
        fields,
        source,
        runner_up,
        speedup,
    }
}

#[cfg(test)]
mod tests {
    use super::explain_shape;

    #[test]
    fn shape_keys_are_named_where_the_layout_is_known() {
        assert_eq!(
            explain_shape("rms_norm_rows", "(1024, 1024, 1, 0)"),
            "rows≤1024 D≤1024 D % 8 = 0=1 f16 buffers=0"
        );
        assert_eq!(
            explain_shape("softmax", "(4096, 1024, 1)"),
            "rows≤4096 length≤1024 length % 4 = 0=1"
        );
        // An unknown layout keeps its values, joined.
        assert_eq!(explain_shape("no_such_kernel", "(2, 3)"), "2 × 3");
    }
}
