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
    Ok(Output::Image {
        title: title.to_owned(),
        width,
        height,
        png: format!("data:image/png;base64,{}", codec::base64(&png)),
    })
}
