//! GEMM: every OpenCL candidate against the built-in device on odd shapes, transposes and batches.
//!
//! Tolerance: |got − want| ≤ 1e-4 + 1e-4·|want| for inputs of unit variance and k ≤ 300 (f32 sums of up to
//! 300 products against an f64 reference; observed errors are ~1e-6 relative).

mod common;
mod opsutil;

use common::{Lcg, assert_close, assert_tensors_close};
use opsutil::{cpu, opencl_device, pair};

use netcl::{Error, Tensor, ops};

#[test]
fn matmul_matches_reference_on_odd_shapes_and_transposes() {
    let Some(dev) = opencl_device() else { return };
    let mut rng = Lcg(7);
    for case in 0..10 {
        let (m, n, k) = (rng.range(1, 70), rng.range(1, 90), rng.range(1, 300));
        let (ta, tb) = (case % 2 == 1, case % 4 >= 2);
        let sa = if ta { [k, m] } else { [m, k] };
        let sb = if tb { [n, k] } else { [k, n] };
        let (ac, ad) = pair(&dev, &sa, 100 + case);
        let (bc, bd) = pair(&dev, &sb, 200 + case);
        let want = ops::matmul_t(&ac, &bc, ta, tb)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        let got = ops::matmul_t(&ad, &bd, ta, tb)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        assert_close(
            &got,
            &want,
            1e-4,
            1e-4,
            &format!("matmul {m}x{n}x{k} ta={ta} tb={tb}"),
        );
    }
}

#[test]
fn bmm_with_shared_operands_and_transposes() {
    let Some(dev) = opencl_device() else { return };
    for (i, &(ba, bb, m, n, k, ta, tb)) in [
        (3, 3, 5, 17, 9, false, false),
        (1, 4, 33, 7, 20, true, false),
        (2, 1, 9, 40, 65, false, true),
        (5, 5, 1, 1, 1, true, true),
    ]
    .iter()
    .enumerate()
    {
        let sa = if ta { [ba, k, m] } else { [ba, m, k] };
        let sb = if tb { [bb, n, k] } else { [bb, k, n] };
        let (ac, ad) = pair(&dev, &sa, 300 + i as u64);
        let (bc, bd) = pair(&dev, &sb, 400 + i as u64);
        let want = ops::bmm(&ac, &bc, ta, tb).unwrap();
        let got = ops::bmm(&ad, &bd, ta, tb).unwrap();
        assert_eq!(got.shape(), want.shape());
        assert_tensors_close(&got, &want, 1e-4, 1e-4, &format!("bmm case {i}"));
    }
}

#[test]
fn long_k_products_match() {
    // k far larger than m and n: the split-K candidates are eligible and measured.
    let Some(dev) = opencl_device() else { return };
    let (ac, ad) = pair(&dev, &[6, 4100], 1);
    let (bc, bd) = pair(&dev, &[4100, 10], 2);
    let want = ops::matmul(&ac, &bc).unwrap().to_vec::<f32>().unwrap();
    let got = ops::matmul(&ad, &bd).unwrap().to_vec::<f32>().unwrap();
    // k = 4100: allow 1e-3 absolute on sums of magnitude ~64.
    assert_close(&got, &want, 1e-3, 1e-4, "matmul 6x10x4100");
}

#[test]
fn reference_matmul_is_exact_on_small_integers() {
    let d = cpu();
    let a = Tensor::from_slice(&d, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    let b = Tensor::from_slice(&d, &[1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2]).unwrap();
    assert_eq!(
        ops::matmul(&a, &b).unwrap().to_vec::<f32>().unwrap(),
        vec![4.0, 5.0, 10.0, 11.0]
    );
    assert_eq!(
        ops::matmul_t(&a, &a, false, true)
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![14.0, 32.0, 32.0, 77.0]
    );
}

#[test]
fn bad_shapes_are_clear_errors() {
    let d = cpu();
    let a = Tensor::zeros(&d, &[2, 3]).unwrap();
    let b = Tensor::zeros(&d, &[4, 2]).unwrap();
    let e = ops::matmul(&a, &b).unwrap_err();
    assert!(matches!(e, Error::Shape(_)), "{e}");
    assert!(e.to_string().contains("inner sizes"), "{e}");
    let v = Tensor::zeros(&d, &[3]).unwrap();
    assert!(matches!(ops::matmul(&a, &v).unwrap_err(), Error::Shape(_)));
    let x = Tensor::zeros(&d, &[2, 2, 3]).unwrap();
    let y = Tensor::zeros(&d, &[3, 3, 2]).unwrap();
    assert!(
        ops::bmm(&x, &y, false, false)
            .unwrap_err()
            .to_string()
            .contains("batch")
    );
}

/// Runs the product with every candidate label and compares each result with `want` (absolute tolerance `atol`,
/// relative 1e-4).
fn every_label_matches(
    labels: &[String],
    want: &[f32],
    atol: f32,
    what: &str,
    run: impl Fn(&str) -> netcl::Result<Tensor>,
) {
    for l in labels {
        let got = run(l).unwrap().to_vec::<f32>().unwrap();
        assert_close(&got, want, atol, 1e-4, &format!("{what} candidate {l}"));
    }
}

#[test]
fn every_batched_candidate_matches_with_a_shared_operand() {
    let Some(dev) = opencl_device() else { return };
    // A shared by every batch (the pointwise convolution's weights): the tiled kernels may fold the batches into
    // the columns. Columns per batch a multiple of 4 but not of a tile (folded, inside and edge tiles, tiles that
    // span two batches), not a multiple of 4 (the folded candidates must fall back), and a transposed A.
    for (i, &(batch, m, n, k, ta)) in [
        (3, 40, 196, 24, false),
        (5, 70, 28, 36, false),
        (2, 64, 132, 20, true),
        (3, 36, 30, 16, false),
        // A long K: the K-sliced work-groups, folded and not, with an edge tile in every dimension.
        (2, 68, 196, 200, false),
    ]
    .iter()
    .enumerate()
    {
        let sa = if ta { [1, k, m] } else { [1, m, k] };
        let (ac, ad) = pair(&dev, &sa, 700 + i as u64);
        let (bc, bd) = pair(&dev, &[batch, k, n], 800 + i as u64);
        let want = ops::bmm(&ac, &bc, ta, false)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        let mut labels = ops::bmm_candidates(&ad, &bd, ta, false).unwrap();
        assert!(
            labels.iter().any(|l| l.contains("tiled_flat")),
            "{labels:?}"
        );
        // The quick first-call kernel runs any product on request.
        labels.push("[\"simple\"]".into());
        every_label_matches(
            &labels,
            &want,
            1e-4,
            &format!("{batch}x{m}x{n}x{k} ta={ta}"),
            |l| ops::bmm_with(&ad, &bd, ta, false, l),
        );
    }
    // Without a shared A, no folded candidate is offered.
    let (_, ad) = pair(&dev, &[2, 8, 8], 900);
    let (_, bd) = pair(&dev, &[2, 8, 8], 901);
    let labels = ops::bmm_candidates(&ad, &bd, false, false).unwrap();
    assert!(!labels.iter().any(|l| l.contains("flat")), "{labels:?}");
}

#[test]
fn every_candidate_matches_on_edge_shapes() {
    let Some(dev) = opencl_device() else { return };
    // Sizes not multiple of any tile, plus a long-k shape that makes split-K candidates eligible.
    for (i, &(m, n, k, ta, tb)) in [
        (37, 45, 29, false, false),
        (19, 70, 33, true, true),
        (3, 5, 1100, false, true),
        (66, 130, 17, true, false),
        // K <= 64 without transposes: the small-K candidates, with more rows than one local-memory chunk.
        (130, 300, 64, false, false),
        // Multiples of 4 that are not multiples of a tile: the float4 paths of the double-buffered kernel,
        // inside tiles and guarded edge tiles alike, in every transpose combination and with split-K.
        (132, 136, 40, false, false),
        (36, 260, 48, true, false),
        (68, 44, 1104, false, true),
        (40, 72, 20, true, true),
    ]
    .iter()
    .enumerate()
    {
        let sa = if ta { [k, m] } else { [m, k] };
        let sb = if tb { [n, k] } else { [k, n] };
        let (ac, ad) = pair(&dev, &sa, 500 + i as u64);
        let (bc, bd) = pair(&dev, &sb, 600 + i as u64);
        let want = ops::matmul_t(&ac, &bc, ta, tb)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        let labels = ops::matmul_candidates(&ad, &bd, ta, tb).unwrap();
        assert!(labels.len() >= 3, "{labels:?}");
        assert!(labels.iter().any(|l| l.contains("tiled")), "{labels:?}");
        if k <= 64 && !ta && !tb {
            assert!(labels.iter().any(|l| l.contains("smallk")), "{labels:?}");
        }
        if k >= 128 {
            assert!(labels.iter().any(|l| l.contains("sliced")), "{labels:?}");
        }
        // Register blocks of more than 32 outputs (16×8, 8×16, 8×8) only where local memory is on chip.
        let big = ["256,128,8,16,8", "128,256,16,8,16", "128,128,16,8,8"];
        let offered = labels.iter().any(|l| big.iter().any(|b| l.contains(b)));
        if !dev.info().local_mem_dedicated {
            assert!(!offered, "{labels:?}");
        } else if (m, n) == (132, 136) {
            assert!(offered, "{labels:?}");
        }
        // k up to 1100: 1e-3 absolute. The quick first-call kernel is checked with the candidates.
        let labels: Vec<String> = labels.into_iter().chain(["[\"simple\"]".into()]).collect();
        every_label_matches(
            &labels,
            &want,
            1e-3,
            &format!("{m}x{n}x{k} ta={ta} tb={tb}"),
            |l| ops::matmul_with(&ad, &bd, ta, tb, l),
        );
    }
    assert!(
        ops::matmul_with(
            &Tensor::zeros(&dev, &[2, 2]).unwrap(),
            &Tensor::zeros(&dev, &[2, 2]).unwrap(),
            false,
            false,
            "nope"
        )
        .is_err()
    );
}
