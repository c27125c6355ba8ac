//! Scaled dot-product attention on OpenCL against the built-in device (f64 accumulation): forward with its
//! log-sum-exp and backward (dq, dk, dv) in every kernel layout at D = 64, causal and not; decode against a
//! KV cache in every layout; the reference backward against finite differences; autograd; and the errors of
//! bad input. (Other head dimensions: tests/attention_shapes.rs.)
//!
//! Tolerances: see `attention_support::check`; decode as the forward; finite differences (f32 forward, step
//! 1e-2, central) 2e-3 absolute + 2e-2 relative.

mod attention_support;
mod common;
mod opsutil;

use attention_support::{check, v};
use common::assert_close;
use netcl::autograd::{self, Var};
use netcl::ops::{self, AttnAlgo, DecodeAlgo};
use netcl::{DType, Error, Tensor};
use opsutil::{cpu, opencl_device, pair};

#[test]
fn every_layout_matches_the_reference_at_d64() {
    let Some(dev) = opencl_device() else { return };
    let layouts = [
        None,
        Some(AttnAlgo::Rows(1)),
        Some(AttnAlgo::Rows(4)),
        Some(AttnAlgo::Tile(16, 16, 4)),
        Some(AttnAlgo::Tile(32, 32, 8)),
        Some(AttnAlgo::Lanes(16, 8)),
        Some(AttnAlgo::Lanes(8, 8)),
        Some(AttnAlgo::Lanes(16, 4)),
        Some(AttnAlgo::Lanes(4, 3)),
    ];
    for (i, algo) in layouts.into_iter().enumerate() {
        for causal in [false, true] {
            check(&dev, [2, 1, 33, 64], causal, None, algo, 10 + i as u64);
            check(
                &dev,
                [1, 2, 100, 64],
                causal,
                Some(0.2),
                algo,
                20 + i as u64,
            );
        }
        check(&dev, [1, 1, 1, 64], true, None, algo, 30 + i as u64);
        check(&dev, [1, 1, 7, 64], false, None, algo, 40 + i as u64);
    }
}

#[test]
fn decode_matches_the_reference_and_the_last_causal_row() {
    let Some(dev) = opencl_device() else { return };
    let (b, h, cap, d) = (2, 3, 100, 64);
    let (kc, kd) = pair(&dev, &[b, h, cap, d], 7);
    let (vc, vd) = pair(&dev, &[b, h, cap, d], 8);
    let (qc, qd) = pair(&dev, &[b, h, 1, d], 9);
    for len in [1usize, 7, 33, 100] {
        let want = v(&ops::attention_decode(&qc, &kc, &vc, len, None).unwrap());
        for algo in [
            None,
            Some(DecodeAlgo::Item(1)),
            Some(DecodeAlgo::Item(4)),
            Some(DecodeAlgo::Wg(64, 1)),
            Some(DecodeAlgo::Wg(64, 4)),
            Some(DecodeAlgo::Lanes(16, 1)),
            Some(DecodeAlgo::Lanes(16, 4)),
            Some(DecodeAlgo::Lanes(8, 16)),
            Some(DecodeAlgo::Lanes(4, 1)),
        ] {
            let chunks = match algo {
                Some(DecodeAlgo::Item(c) | DecodeAlgo::Wg(_, c) | DecodeAlgo::Lanes(_, c)) => c,
                None => 1,
            };
            if chunks > len {
                continue;
            }
            let got = ops::attention_decode_with(&qd, &kd, &vd, len, None, algo).unwrap();
            assert_eq!(got.shape(), &[b, h, 1, d]);
            assert_close(
                &v(&got),
                &want,
                2e-5,
                1e-4,
                &format!("decode len {len} {algo:?}"),
            );
        }
    }
    // Decoding the last position against the first S cached keys is the last row of causal attention.
    let s = 33;
    let kk = ops::narrow(&kd, 2, 0, s).unwrap();
    let vv = ops::narrow(&vd, 2, 0, s).unwrap();
    let (_, qs) = pair(&dev, &[b, h, s, d], 10);
    let full = ops::flash_attention(&qs, &kk, &vv, true, None).unwrap();
    let last = ops::narrow(&full.out, 2, s - 1, 1).unwrap();
    let q_last = ops::narrow(&qs, 2, s - 1, 1).unwrap();
    let dec = ops::attention_decode(&q_last, &kd, &vd, s, None).unwrap();
    assert_close(&v(&dec), &v(&last), 2e-5, 1e-4, "decode vs causal last row");
}

/// Σ w·attention(q, k, v) on the built-in device, in f64.
fn weighted(q: &Tensor, k: &Tensor, vv: &Tensor, w: &[f32], causal: bool) -> f64 {
    let o = v(&ops::flash_attention(q, k, vv, causal, None).unwrap().out);
    o.iter().zip(w).map(|(a, b)| *a as f64 * *b as f64).sum()
}

#[test]
fn reference_backward_matches_finite_differences() {
    let c = cpu();
    for (shape, causal) in [
        ([1, 2, 7, 40], true),
        ([1, 1, 5, 64], false),
        ([1, 1, 3, 256], true),
    ] {
        let q = Tensor::randn(&c, &shape, 0.0, 1.0, 50).unwrap();
        let k = Tensor::randn(&c, &shape, 0.0, 1.0, 51).unwrap();
        let vv = Tensor::randn(&c, &shape, 0.0, 1.0, 52).unwrap();
        let g = Tensor::randn(&c, &shape, 0.0, 1.0, 53).unwrap();
        let w = v(&g);
        let fwd = ops::flash_attention(&q, &k, &vv, causal, None).unwrap();
        let gr = ops::flash_attention_backward(&q, &k, &vv, &fwd, &g, causal, None).unwrap();
        for (which, grad) in [(0, &gr.dq), (1, &gr.dk), (2, &gr.dv)] {
            let an = v(grad);
            let n = an.len();
            for idx in [0, n / 3, n / 2 + 1, n - 1] {
                let bump = |delta: f32| {
                    let mut ts = [v(&q), v(&k), v(&vv)];
                    ts[which][idx] += delta;
                    let t: Vec<Tensor> = ts
                        .iter()
                        .map(|x| Tensor::from_slice(&c, x, &shape).unwrap())
                        .collect();
                    weighted(&t[0], &t[1], &t[2], &w, causal)
                };
                let h = 1e-2f32;
                let fd = ((bump(h) - bump(-h)) / (2.0 * h as f64)) as f32;
                assert_close(
                    &[an[idx]],
                    &[fd],
                    2e-3,
                    2e-2,
                    &format!("{shape:?} input {which} [{idx}]"),
                );
            }
        }
    }
}

#[test]
fn autograd_flash_attention_gives_the_backward_op() {
    let Some(dev) = opencl_device() else { return };
    let shape = [1, 2, 33, 64];
    let (_, q) = pair(&dev, &shape, 60);
    let (_, k) = pair(&dev, &shape, 61);
    let (_, vv) = pair(&dev, &shape, 62);
    let (qv, kv, vvv) = (
        Var::param(q.clone()),
        Var::param(k.clone()),
        Var::param(vv.clone()),
    );
    let y = autograd::attention::flash_attention(&qv, &kv, &vvv, true, None).unwrap();
    let loss = autograd::ops::sum_all(&y).unwrap();
    loss.backward().unwrap();
    let fwd = ops::flash_attention(&q, &k, &vv, true, None).unwrap();
    let ones = Tensor::full(&dev, &shape, 1.0).unwrap();
    let gr = ops::flash_attention_backward(&q, &k, &vv, &fwd, &ones, true, None).unwrap();
    for (var, want, n) in [
        (&qv, &gr.dq, "dq"),
        (&kv, &gr.dk, "dk"),
        (&vvv, &gr.dv, "dv"),
    ] {
        let got = var.grad().expect("a gradient");
        assert_close(&v(&got), &v(want), 1e-6, 1e-5, n);
    }
    // Σ softmax = 1 per row, so the gradient of Σ o with respect to v is the column sums of the probabilities.
    let dv = v(&vvv.grad().unwrap());
    let total: f32 = dv.iter().sum();
    assert!((total - 2.0 * 33.0 * 64.0).abs() < 0.1, "Σ dv = {total}");
}

#[test]
fn bad_input_is_a_clear_error() {
    let Some(dev) = opencl_device() else { return };
    let t = |shape: &[usize]| Tensor::zeros(&dev, shape).unwrap();
    let q = t(&[1, 2, 8, 64]);
    let msg = |r: netcl::Result<ops::AttentionOut>| r.unwrap_err().to_string();
    let e = msg(ops::flash_attention(
        &q,
        &t(&[1, 2, 9, 64]),
        &q,
        false,
        None,
    ));
    assert!(
        e.contains("[1, 2, 9, 64]") && e.contains("[1, 2, 8, 64]"),
        "{e}"
    );
    let e = msg(ops::flash_attention(
        &t(&[2, 8, 64]),
        &t(&[2, 8, 64]),
        &t(&[2, 8, 64]),
        false,
        None,
    ));
    assert!(e.contains("[B, H, S, D]"), "{e}");
    let big = t(&[1, 1, 4, 300]);
    let e = msg(ops::flash_attention(&big, &big, &big, false, None));
    assert!(e.contains("300") && e.contains("256"), "{e}");
    let qi = Tensor::zeros_dtype(&dev, &[1, 2, 8, 64], DType::I32).unwrap();
    let e = ops::flash_attention(&qi, &q, &q, false, None).unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { .. }), "{e}");
    let e = msg(ops::flash_attention(&q, &q, &q, false, Some(f32::NAN)));
    assert!(e.contains("scale"), "{e}");
    let e = msg(ops::flash_attention_with(
        &q,
        &q,
        &q,
        false,
        None,
        Some(AttnAlgo::Tile(16, 16, 3)),
    ));
    assert!(e.contains("does not fit"), "{e}");
    let cache = t(&[1, 2, 16, 64]);
    let q1 = t(&[1, 2, 1, 64]);
    let e = ops::attention_decode(&q1, &cache, &cache, 17, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("17") && e.contains("16"), "{e}");
    let e = ops::attention_decode(&q1, &cache, &cache, 0, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("len 0"), "{e}");
    let e = ops::attention_decode(&q, &cache, &cache, 4, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("[B, H, 1, D]"), "{e}");
    let e = ops::attention_decode(&q1, &t(&[1, 2, 16, 32]), &cache, 4, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("k_cache"), "{e}");
    let fwd = ops::flash_attention(&q, &q, &q, true, None).unwrap();
    let e = ops::flash_attention_backward(&q, &q, &q, &fwd, &t(&[1, 2, 8, 32]), true, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("gradient"), "{e}");
}
