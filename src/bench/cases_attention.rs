//! Benchmark cases of the transformer tier: attention forward and forward+backward at B = 8, H = 12,
//! S = 1024, D = 64 (causal and not), one decode step against a 4,096-entry KV cache, RMS norm over 768
//! features and the embedding gradient (an index-add of 8,192 rows into a 50,257-row table). `--small` runs
//! B = 1, H = 4, S = 256, a 1,024-entry cache and smaller tables, which the built-in device checks quickly.
//!
//! Work: attention counts 4·B·H·S²·D flops forward (q·kᵀ and p·v, halved when causal) and 2.5 times that for
//! the backward, FlashAttention's convention; decode, RMS norm and the embedding gradient count the bytes
//! they must move.

use super::{Case, Work};
use crate::ops;
use crate::tensor::Tensor;

type Runner = super::Runner;
type Dev = crate::Device;
type R<T> = crate::Result<T>;

fn bhsd(small: bool) -> [usize; 4] {
    if small {
        [1, 4, 256, 64]
    } else {
        [8, 12, 1024, 64]
    }
}

fn fwd_flops(small: bool, causal: bool) -> f64 {
    let [b, h, s, d] = bhsd(small);
    let f = 4.0 * (b * h * s * s * d) as f64;
    if causal { f / 2.0 } else { f }
}

fn qkv(dev: &Dev, small: bool) -> R<[Tensor; 3]> {
    let shape = bhsd(small);
    Ok([
        Tensor::randn(dev, &shape, 0.0, 1.0, 71)?,
        Tensor::randn(dev, &shape, 0.0, 1.0, 72)?,
        Tensor::randn(dev, &shape, 0.0, 1.0, 73)?,
    ])
}

fn attn_fwd(dev: &Dev, small: bool, causal: bool) -> R<Runner> {
    let [q, k, v] = qkv(dev, small)?;
    Ok(Box::new(move || {
        let f = ops::flash_attention(&q, &k, &v, causal, None)?;
        Ok(vec![f.out, f.lse])
    }))
}

fn attn_fwd_bwd(dev: &Dev, small: bool, causal: bool) -> R<Runner> {
    let [q, k, v] = qkv(dev, small)?;
    let g = Tensor::randn(dev, &bhsd(small), 0.0, 1.0, 74)?;
    Ok(Box::new(move || {
        let f = ops::flash_attention(&q, &k, &v, causal, None)?;
        let gr = ops::flash_attention_backward(&q, &k, &v, &f, &g, causal, None)?;
        Ok(vec![f.out, gr.dq, gr.dk, gr.dv])
    }))
}

fn decode_shape(small: bool) -> [usize; 4] {
    if small {
        [1, 4, 1024, 64]
    } else {
        [8, 12, 4096, 64]
    }
}

fn decode(dev: &Dev, small: bool) -> R<Runner> {
    let [b, h, c, d] = decode_shape(small);
    let q = Tensor::randn(dev, &[b, h, 1, d], 0.0, 1.0, 75)?;
    let k = Tensor::randn(dev, &[b, h, c, d], 0.0, 1.0, 76)?;
    let v = Tensor::randn(dev, &[b, h, c, d], 0.0, 1.0, 77)?;
    Ok(Box::new(move || {
        Ok(vec![ops::attention_decode(&q, &k, &v, c, None)?])
    }))
}

fn rms_rows(small: bool) -> usize {
    if small { 1024 } else { 8192 }
}

fn rms(dev: &Dev, small: bool) -> R<Runner> {
    let x = Tensor::randn(dev, &[rms_rows(small), 768], 0.0, 1.0, 78)?;
    let g = Tensor::randn(dev, &[768], 1.0, 0.1, 79)?;
    Ok(Box::new(move || {
        Ok(vec![ops::rms_norm(&x, Some(&g), 1e-6)?.y])
    }))
}

/// (indices, vocabulary, embedding width).
fn emb_shape(small: bool) -> (usize, usize, usize) {
    if small {
        (1024, 1000, 256)
    } else {
        (8192, 50257, 768)
    }
}

fn emb_bwd(dev: &Dev, small: bool) -> R<Runner> {
    let (n, vocab, e) = emb_shape(small);
    // A skewed draw, as token ids are: many repeats of a few rows.
    let ids: Vec<i32> = (0..n as u64)
        .map(|i| {
            let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
            ((h * h) % vocab as u64 / (1 + h % 7)) as i32
        })
        .collect();
    let idx = Tensor::from_slice(dev, &ids, &[n])?;
    let g = Tensor::randn(dev, &[n, e], 0.0, 1.0, 80)?;
    Ok(Box::new(move || {
        Ok(vec![ops::embedding_backward(&idx, &g, vocab)?])
    }))
}

/// The attention, decode, RMS norm and embedding-gradient cases.
pub(super) fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "attention_fwd",
            work: |s| Work::Flops(fwd_flops(s, false)),
            setup: |dev, s| attn_fwd(dev, s, false),
        },
        Case {
            name: "attention_fwd_causal",
            work: |s| Work::Flops(fwd_flops(s, true)),
            setup: |dev, s| attn_fwd(dev, s, true),
        },
        Case {
            name: "attention_fwd_bwd",
            work: |s| Work::Flops(3.5 * fwd_flops(s, false)),
            setup: |dev, s| attn_fwd_bwd(dev, s, false),
        },
        Case {
            name: "attention_fwd_bwd_causal",
            work: |s| Work::Flops(3.5 * fwd_flops(s, true)),
            setup: |dev, s| attn_fwd_bwd(dev, s, true),
        },
        Case {
            name: "attention_decode",
            work: |s| {
                let [b, h, c, d] = decode_shape(s);
                Work::Bytes((2 * b * h * c * d * 4) as f64)
            },
            setup: decode,
        },
        Case {
            name: "rms_norm",
            work: |s| Work::Bytes((2 * rms_rows(s) * 768 * 4) as f64),
            setup: rms,
        },
        Case {
            name: "embedding_bwd",
            // Read the gradient, zero the table, add every row into it.
            work: |s| {
                let (n, vocab, e) = emb_shape(s);
                Work::Bytes(((2 * n * e + vocab * e) * 4) as f64)
            },
            setup: emb_bwd,
        },
    ]
}
