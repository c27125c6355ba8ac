//! The one-launch row kernels of layer_norm and rms_norm: every row algorithm forced on the OpenCL device
//! against the built-in device's reference (the composed path), on odd row lengths and counts, f32 and f16
//! storage, with and without γ/β, several ε; rows far from zero (mean 1e4, standard deviation 0.5) against a
//! float64 host computation, which the textbook E[x²] − E[x]² in f32 would miss by orders of magnitude; and the
//! choice's decision when nothing is forced.
//!
//! Tolerances: f32 storage 1e-4 absolute + 1e-4 relative; f16 storage 2e-3 + 2e-3 (half an f16 ulp of
//! outputs up to 4 is 2e-3; the reference reads the same halves).

mod common;
mod opsutil;

use common::{assert_close, assert_tensors_close};
use netcl::ops::norm::RowNormAlgo;
use netcl::{DType, Device, Tensor, ops};
use opsutil::{cpu, opencl_device};

const DS: [usize; 7] = [1, 3, 40, 64, 100, 1023, 4096];
const ROWS: [usize; 3] = [1, 7, 33];

/// The algorithms forced for rows of `d` stored as `dt`: every kind, the register form where a work-group of 16
/// (fewer items than a warp's 32 lanes), 32 (one warp), 64, 256 or 1024 (two to 32 warps, whose folds exchange
/// values between warps) covers the row with at most 32 values per item, and for f16 rows of a multiple of 8
/// the raw-halves form with at most 64.
fn algos(d: usize, dt: DType) -> Vec<RowNormAlgo> {
    let mut v = vec![
        RowNormAlgo::Composed,
        RowNormAlgo::Item,
        RowNormAlgo::Wg(64),
        RowNormAlgo::Wg(256),
    ];
    for l in [16usize, 32, 64, 256, 1024] {
        let k = d.div_ceil(l);
        if k <= 32 {
            v.push(RowNormAlgo::Reg(l, k));
        }
        if dt == DType::F16 && d.is_multiple_of(8) && k <= 64 {
            v.push(RowNormAlgo::Reg8(l, k));
        }
    }
    v
}

fn tol(dt: DType) -> f32 {
    if dt == DType::F16 { 2e-3 } else { 1e-4 }
}

/// Seeded normal values of `shape` on the built-in device, rounded to `dt` and back (so both devices read the
/// same values), and the same stored as `dt` on `dev`.
fn input(dev: &Device, shape: &[usize], seed: u64, dt: DType) -> (Tensor, Tensor) {
    let c = Tensor::randn(&cpu(), shape, 0.5, 1.5, seed).unwrap();
    let c = c.cast(dt).unwrap().cast(DType::F32).unwrap();
    let d = c.to_device(dev).unwrap().cast(dt).unwrap();
    (c, d)
}

fn close(got: &Tensor, want: &Tensor, t: f32, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    assert_tensors_close(&got.cast(DType::F32).unwrap(), want, t, t, what);
}

fn check_layer_norm(dev: &Device, dt: DType) {
    let mut cases = 0;
    for (i, &d) in DS.iter().enumerate() {
        for (j, &rows) in ROWS.iter().enumerate() {
            let seed = (i * 10 + j) as u64;
            let (xc, xd) = input(dev, &[rows, d], seed, dt);
            let (gc, gd) = input(dev, &[d], seed + 100, DType::F32);
            let (bc, bd) = input(dev, &[d], seed + 200, DType::F32);
            // γ and β both, neither, and one of each, with ε from tiny to large.
            let variants = [
                (true, true, 1e-5f32),
                (false, false, 0.5),
                (true, false, 1e-3),
                (false, true, 1e-5),
            ];
            let (gm, bt, eps) = variants[(i + j) % 4];
            let want = ops::layer_norm(&xc, 1, gm.then_some(&gc), bt.then_some(&bc), eps).unwrap();
            for a in algos(d, dt) {
                let what =
                    format!("layer_norm {a:?} rows {rows} d {d} {dt:?} γ {gm} β {bt} ε {eps}");
                let got = ops::norm::layer_norm_with(
                    &xd,
                    1,
                    gm.then_some(&gd),
                    bt.then_some(&bd),
                    eps,
                    Some(a),
                )
                .unwrap();
                assert_eq!(got.y.dtype(), dt, "{what}: output dtype");
                close(&got.y, &want.y, tol(dt), &format!("{what} y"));
                close(&got.mean, &want.mean, 1e-4, &format!("{what} mean"));
                close(&got.rstd, &want.rstd, 1e-3, &format!("{what} rstd"));
                cases += 1;
            }
        }
    }
    assert!(cases > 100, "{cases} cases");
}

fn check_rms_norm(dev: &Device, dt: DType) {
    for (i, &d) in DS.iter().enumerate() {
        for (j, &rows) in ROWS.iter().enumerate() {
            let seed = (i * 10 + j + 50) as u64;
            let (xc, xd) = input(dev, &[rows, d], seed, dt);
            let (gc, gd) = input(dev, &[d], seed + 100, DType::F32);
            let gm = (i + j) % 2 == 0;
            // ε = 0 only where no row can be all zeros.
            let eps = [1e-6f32, 0.25, 0.0][(i + j) % 3];
            let want = ops::rms_norm(&xc, gm.then_some(&gc), eps).unwrap();
            for a in algos(d, dt) {
                let what = format!("rms_norm {a:?} rows {rows} d {d} {dt:?} γ {gm} ε {eps}");
                let got = ops::norm::rms_norm_with(&xd, gm.then_some(&gd), eps, Some(a)).unwrap();
                assert_eq!(got.y.dtype(), dt, "{what}: output dtype");
                close(&got.y, &want.y, tol(dt), &format!("{what} y"));
                close(&got.mean, &want.mean, 0.0, &format!("{what} mean"));
                close(&got.rstd, &want.rstd, 1e-3, &format!("{what} rstd"));
            }
        }
    }
}

#[test]
fn layer_norm_every_algorithm_f32() {
    let Some(dev) = opencl_device() else { return };
    check_layer_norm(&dev, DType::F32);
}

#[test]
fn layer_norm_every_algorithm_f16() {
    let Some(dev) = opencl_device() else { return };
    check_layer_norm(&dev, DType::F16);
}

#[test]
fn rms_norm_every_algorithm_f32() {
    let Some(dev) = opencl_device() else { return };
    check_rms_norm(&dev, DType::F32);
}

#[test]
fn rms_norm_every_algorithm_f16() {
    let Some(dev) = opencl_device() else { return };
    check_rms_norm(&dev, DType::F16);
}

/// layer_norm over the last two dimensions (rows of 4·25) and a 3-D input: the statistics keep the reduced
/// axes as size 1, like the composed path's.
#[test]
fn layer_norm_over_two_dimensions() {
    let Some(dev) = opencl_device() else { return };
    let (xc, xd) = input(&dev, &[3, 5, 4, 25], 7, DType::F32);
    let (gc, gd) = input(&dev, &[4, 25], 8, DType::F32);
    let (bc, bd) = input(&dev, &[4, 25], 9, DType::F32);
    let want = ops::layer_norm(&xc, 2, Some(&gc), Some(&bc), 1e-5).unwrap();
    for a in algos(100, DType::F32) {
        let got = ops::norm::layer_norm_with(&xd, 2, Some(&gd), Some(&bd), 1e-5, Some(a)).unwrap();
        close(&got.y, &want.y, 1e-4, &format!("{a:?} y"));
        close(&got.mean, &want.mean, 1e-4, &format!("{a:?} mean"));
        close(&got.rstd, &want.rstd, 1e-3, &format!("{a:?} rstd"));
        assert_eq!(got.mean.shape(), &[3, 5, 1, 1]);
    }
}

/// Rows of mean 1e4 and standard deviation 0.5 against float64 on the host: each row's rstd (≈ 2) within
/// 1e-3 relative and y within 5e-3 (the f32 mean itself is only good to half an ulp of 1e4, 5e-4, times rstd).
#[test]
fn layer_norm_rows_far_from_zero_keep_their_variance() {
    let Some(dev) = opencl_device() else { return };
    for &d in &[40usize, 1023, 4096] {
        let rows = 7;
        let x = Tensor::randn(&cpu(), &[rows, d], 1e4, 0.5, d as u64).unwrap();
        let xv = x.to_vec::<f32>().unwrap();
        let mut want_y = vec![0f32; rows * d];
        let mut want_r = vec![0f32; rows];
        for r in 0..rows {
            let row = &xv[r * d..(r + 1) * d];
            let m = row.iter().map(|&v| v as f64).sum::<f64>() / d as f64;
            let var = row.iter().map(|&v| (v as f64 - m).powi(2)).sum::<f64>() / d as f64;
            let rstd = 1.0 / (var + 1e-5).sqrt();
            want_r[r] = rstd as f32;
            for (o, &v) in want_y[r * d..(r + 1) * d].iter_mut().zip(row) {
                *o = ((v as f64 - m) * rstd) as f32;
            }
        }
        let xd = x.to_device(&dev).unwrap();
        for a in algos(d, DType::F32)
            .into_iter()
            .filter(|a| *a != RowNormAlgo::Composed)
        {
            let got = ops::norm::layer_norm_with(&xd, 1, None, None, 1e-5, Some(a)).unwrap();
            let what = format!("{a:?} d {d}");
            assert_close(
                &got.rstd.to_vec::<f32>().unwrap(),
                &want_r,
                0.0,
                1e-3,
                &format!("{what} rstd"),
            );
            assert_close(
                &got.y.to_vec::<f32>().unwrap(),
                &want_y,
                5e-3,
                0.0,
                &format!("{what} y"),
            );
        }
    }
}

/// A register form that cannot hold the row, or a work-group size that is not a power of two, is refused with
/// the limits named.
#[test]
fn misfit_algorithms_are_refused() {
    let Some(dev) = opencl_device() else { return };
    let (_, xd) = input(&dev, &[2, 100], 1, DType::F32);
    for a in [
        RowNormAlgo::Reg(64, 1),
        RowNormAlgo::Wg(48),
        RowNormAlgo::Reg(64, 40),
    ] {
        let e = ops::norm::rms_norm_with(&xd, None, 1e-5, Some(a))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("does not fit rows of 100") && e.contains("k·local"),
            "{a:?}: {e}"
        );
    }
    // The raw-halves form takes f16 rows of a multiple of 8 only, and at most 64 values per item.
    let (_, hd) = input(&dev, &[2, 100], 1, DType::F16);
    let (_, h8) = input(&dev, &[2, 96], 1, DType::F16);
    let (_, f8) = input(&dev, &[2, 96], 1, DType::F32);
    for (x, a) in [
        (&hd, RowNormAlgo::Reg8(16, 8)),
        (&f8, RowNormAlgo::Reg8(16, 8)),
        (&h8, RowNormAlgo::Reg8(1, 96)),
        (&h8, RowNormAlgo::Reg8(16, 4)),
    ] {
        let e = ops::norm::rms_norm_with(x, None, 1e-5, Some(a))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("does not fit rows of") && e.contains("reg8"),
            "{a:?}: {e}"
        );
    }
}

/// Without a forced algorithm the device chooses (measured, cached or its first choice, never forced), the
/// decision names the row family and its candidates include the composed path, and the result matches the
/// reference.
#[test]
fn tuned_choice_matches_reference() {
    let Some(dev) = opencl_device() else { return };
    // A row count no other test of this file uses, so the decision below is this call's.
    let (xc, xd) = input(&dev, &[130, 1023], 3, DType::F32);
    let (gc, gd) = input(&dev, &[1023], 4, DType::F32);
    let got = ops::rms_norm(&xd, Some(&gd), 1e-6).unwrap();
    let want = ops::rms_norm(&xc, Some(&gc), 1e-6).unwrap();
    close(&got.y, &want.y, 1e-4, "tuned rms_norm y");
    close(&got.rstd, &want.rstd, 1e-3, "tuned rms_norm rstd");
    let mine: Vec<_> = netcl::autotune::decisions_since(0)
        .into_iter()
        .filter(|d| d.kernel == "rms_norm_rows" && d.key.contains("256"))
        .collect();
    assert!(!mine.is_empty(), "no rms_norm_rows decision for 130 rows");
    for d in &mine {
        assert_ne!(d.source, netcl::autotune::Source::Forced, "{d:?}");
        if !d.candidates.is_empty() {
            assert!(
                d.candidates.iter().any(|c| c.label.contains("composed")),
                "composed path missing: {:?}",
                d.candidates
            );
        }
    }
}

fn check_rms_norm_backward(dev: &Device, dt: DType) {
    for (i, &d) in DS.iter().enumerate() {
        for (j, &rows) in ROWS.iter().enumerate() {
            let seed = (i * 10 + j + 300) as u64;
            let (xc, xd) = input(dev, &[rows, d], seed, dt);
            let (gc, gd) = input(dev, &[rows, d], seed + 1, dt);
            let (wc, wd) = input(dev, &[d], seed + 2, DType::F32);
            let gm = (i + j) % 2 == 1;
            let oc = ops::rms_norm(&xc, gm.then_some(&wc), 1e-5).unwrap();
            let od = ops::rms_norm(&xd, gm.then_some(&wd), 1e-5).unwrap();
            let want = ops::rms_norm_backward(&xc, &gc, &oc, gm.then_some(&wc)).unwrap();
            let mut forced: Vec<RowNormAlgo> = algos(d, dt)
                .into_iter()
                .filter(|a| !matches!(a, RowNormAlgo::Reg(..) | RowNormAlgo::Reg8(..)))
                .collect();
            // The register forms have no backward kernel: they run as the work-group kernel of their size.
            forced.push(RowNormAlgo::Reg(64, 1));
            forced.push(RowNormAlgo::Reg8(64, 8));
            for a in forced {
                let what = format!("rms_norm_backward {a:?} rows {rows} d {d} {dt:?} γ {gm}");
                let got =
                    ops::norm::rms_norm_backward_with(&xd, &gd, &od, gm.then_some(&wd), Some(a))
                        .unwrap();
                assert_eq!(got.dx.dtype(), dt, "{what}: dx dtype");
                close(&got.dx, &want.dx, tol(dt), &format!("{what} dx"));
                assert_eq!(got.dgamma.is_some(), gm, "{what}: dγ presence");
                if let (Some(a), Some(b)) = (&got.dgamma, &want.dgamma) {
                    close(a, b, 1e-3, &format!("{what} dγ"));
                }
                assert!(got.dbeta.is_none(), "{what}: no dβ");
            }
        }
    }
}

#[test]
fn rms_norm_backward_every_algorithm_f32() {
    let Some(dev) = opencl_device() else { return };
    check_rms_norm_backward(&dev, DType::F32);
}

#[test]
fn rms_norm_backward_every_algorithm_f16() {
    let Some(dev) = opencl_device() else { return };
    check_rms_norm_backward(&dev, DType::F16);
}

/// The row kernel's input gradient against central differences of Σ w·y on the OpenCL device (float64 sums on
/// the host), for a row far from the textbook case: D = 100 with γ.
#[test]
fn rms_norm_backward_matches_finite_differences() {
    let Some(dev) = opencl_device() else { return };
    let (xc, _) = input(&dev, &[3, 100], 41, DType::F32);
    let (wc, _) = input(&dev, &[3, 100], 42, DType::F32);
    let (gc, _) = input(&dev, &[100], 43, DType::F32);
    let xv = xc.to_vec::<f32>().unwrap();
    let wv = wc.to_vec::<f32>().unwrap();
    let gd = gc.to_device(&dev).unwrap();
    let wd = wc.to_device(&dev).unwrap();
    let loss = |v: &[f32]| -> f64 {
        let x = Tensor::from_slice(&dev, v, &[3, 100]).unwrap();
        let y = ops::rms_norm(&x, Some(&gd), 1e-5)
            .unwrap()
            .y
            .to_vec::<f32>()
            .unwrap();
        y.iter().zip(&wv).map(|(a, b)| *a as f64 * *b as f64).sum()
    };
    let xd = xc.to_device(&dev).unwrap();
    let out = ops::rms_norm(&xd, Some(&gd), 1e-5).unwrap();
    for a in [RowNormAlgo::Item, RowNormAlgo::Wg(64)] {
        let got = ops::norm::rms_norm_backward_with(&xd, &wd, &out, Some(&gd), Some(a)).unwrap();
        let dx = got.dx.to_vec::<f32>().unwrap();
        for k in [0usize, 57, 199, 299] {
            let h = 1e-2f32;
            let mut p = xv.clone();
            p[k] += h;
            let mut m = xv.clone();
            m[k] -= h;
            let fd = (loss(&p) - loss(&m)) / (2.0 * h as f64);
            assert!(
                (dx[k] as f64 - fd).abs() <= 2e-2 * (1.0 + fd.abs()),
                "{a:?} dx[{k}] = {} against {fd}",
                dx[k]
            );
        }
    }
}

/// Row lengths and counts of the layer_norm backward checks.
const BACK_DS: [usize; 6] = [1, 3, 40, 100, 257, 1024];
const BACK_ROWS: [usize; 3] = [1, 5, 33];

/// The algorithms forced on layer_norm's backward: the composed path, one item per row, work-groups of several
/// sizes (1 and 16 leave most items of a row idle or looping; 256 is wider than most rows here), and a register
/// form, which has no backward kernel and runs as the work-group kernel of its size.
fn back_algos() -> [RowNormAlgo; 7] {
    [
        RowNormAlgo::Composed,
        RowNormAlgo::Item,
        RowNormAlgo::Wg(1),
        RowNormAlgo::Wg(16),
        RowNormAlgo::Wg(64),
        RowNormAlgo::Wg(256),
        RowNormAlgo::Reg(64, 2),
    ]
}

fn check_layer_norm_backward(dev: &Device, dt: DType) {
    let mut cases = 0;
    for (i, &d) in BACK_DS.iter().enumerate() {
        for (j, &rows) in BACK_ROWS.iter().enumerate() {
            let seed = (i * 10 + j + 500) as u64;
            let (xc, xd) = input(dev, &[rows, d], seed, dt);
            let (gc, gd) = input(dev, &[rows, d], seed + 1, dt);
            let (wc, wd) = input(dev, &[d], seed + 2, DType::F32);
            let (bc, bd) = input(dev, &[d], seed + 3, DType::F32);
            // γ with β, neither, and each alone.
            let (gm, bt) =
                [(true, true), (false, false), (true, false), (false, true)][(i + j) % 4];
            let (w, wdv) = (gm.then_some(&wc), gm.then_some(&wd));
            let oc = ops::layer_norm(&xc, 1, w, bt.then_some(&bc), 1e-5).unwrap();
            let od = ops::layer_norm(&xd, 1, wdv, bt.then_some(&bd), 1e-5).unwrap();
            let want = ops::layer_norm_backward(&xc, &gc, &oc, 1, w, bt).unwrap();
            let composed = ops::norm::layer_norm_backward_with(
                &xd,
                &gd,
                &od,
                1,
                wdv,
                bt,
                Some(RowNormAlgo::Composed),
            )
            .unwrap();
            // dx = r·(ĝ − mean ĝ − x̂·c) is a difference of terms of size r·|ĝ|, so its rounding error grows
            // with r = 1/σ: a row of one element has σ = 0 and r = 1/√ε ≈ 316, where dx is exactly 0 in exact
            // arithmetic and a few float ulps of r·ĝ on a device that fuses a multiply-add differently.
            let r_max = oc
                .rstd
                .to_vec::<f32>()
                .unwrap()
                .into_iter()
                .fold(1.0f32, f32::max);
            let dx_tol = tol(dt) * r_max;
            for a in back_algos() {
                let what =
                    format!("layer_norm_backward {a:?} rows {rows} d {d} {dt:?} γ {gm} β {bt}");
                let got = ops::norm::layer_norm_backward_with(&xd, &gd, &od, 1, wdv, bt, Some(a))
                    .unwrap();
                assert_eq!(got.dx.dtype(), dt, "{what}: dx dtype");
                close(&got.dx, &want.dx, dx_tol, &format!("{what} dx against cpu"));
                close(
                    &got.dx,
                    &composed.dx.cast(DType::F32).unwrap(),
                    dx_tol,
                    &format!("{what} dx against composed"),
                );
                assert_eq!(got.dgamma.is_some(), gm, "{what}: dγ presence");
                assert_eq!(got.dbeta.is_some(), bt, "{what}: dβ presence");
                for (name, g, c) in [
                    ("dγ", &got.dgamma, &want.dgamma),
                    ("dβ", &got.dbeta, &want.dbeta),
                ] {
                    if let (Some(g), Some(c)) = (g, c) {
                        assert_eq!(g.shape(), &[d], "{what}: {name} shape");
                        close(g, c, 1e-3, &format!("{what} {name}"));
                    }
                }
                cases += 1;
            }
        }
    }
    assert!(cases >= 100, "{cases} cases");
}

#[test]
fn layer_norm_backward_every_algorithm_f32() {
    let Some(dev) = opencl_device() else { return };
    check_layer_norm_backward(&dev, DType::F32);
}

#[test]
fn layer_norm_backward_every_algorithm_f16() {
    let Some(dev) = opencl_device() else { return };
    check_layer_norm_backward(&dev, DType::F16);
}

/// layer_norm over the last two dimensions (rows of 4·25) with f16 gradient and f32 input: the saved statistics
/// keep the reduced axes, γ's and β's gradients keep γ's shape.
#[test]
fn layer_norm_backward_over_two_dimensions() {
    let Some(dev) = opencl_device() else { return };
    let (xc, xd) = input(&dev, &[3, 5, 4, 25], 71, DType::F32);
    let (gc, gd) = input(&dev, &[3, 5, 4, 25], 72, DType::F16);
    let (wc, wd) = input(&dev, &[4, 25], 73, DType::F32);
    let (bc, bd) = input(&dev, &[4, 25], 74, DType::F32);
    let oc = ops::layer_norm(&xc, 2, Some(&wc), Some(&bc), 1e-5).unwrap();
    let od = ops::layer_norm(&xd, 2, Some(&wd), Some(&bd), 1e-5).unwrap();
    let want = ops::layer_norm_backward(&xc, &gc, &oc, 2, Some(&wc), true).unwrap();
    for a in back_algos() {
        let got = ops::norm::layer_norm_backward_with(&xd, &gd, &od, 2, Some(&wd), true, Some(a))
            .unwrap();
        close(&got.dx, &want.dx, 1e-4, &format!("{a:?} dx"));
        let (dg, db) = (got.dgamma.unwrap(), got.dbeta.unwrap());
        assert_eq!(dg.shape(), &[4, 25], "{a:?} dγ shape");
        assert_eq!(db.shape(), &[4, 25], "{a:?} dβ shape");
        close(
            &dg,
            want.dgamma.as_ref().unwrap(),
            1e-3,
            &format!("{a:?} dγ"),
        );
        close(
            &db,
            want.dbeta.as_ref().unwrap(),
            1e-3,
            &format!("{a:?} dβ"),
        );
    }
}

/// Σ w·y of layer_norm on the device, summed in float64 on the host.
fn ln_loss(
    dev: &Device,
    xv: &[f32],
    shape: &[usize],
    gamma: Option<&Tensor>,
    beta: Option<&Tensor>,
    w: &[f32],
) -> f64 {
    let x = Tensor::from_slice(dev, xv, shape).unwrap();
    let y = ops::layer_norm(&x, 1, gamma, beta, 1e-5)
        .unwrap()
        .y
        .to_vec::<f32>()
        .unwrap();
    y.iter().zip(w).map(|(a, b)| *a as f64 * *b as f64).sum()
}

/// Every forced algorithm's input gradient (and γ's and β's) against central differences of Σ w·y on the
/// OpenCL device, with γ and β (D = 100) and without (D = 257).
#[test]
fn layer_norm_backward_matches_finite_differences() {
    let Some(dev) = opencl_device() else { return };
    for (d, affine) in [(100usize, true), (257, false)] {
        let shape = [3, d];
        let (xc, xd) = input(&dev, &shape, 81, DType::F32);
        let (wc, wd) = input(&dev, &shape, 82, DType::F32);
        let (gc, gd) = input(&dev, &[d], 83, DType::F32);
        let (bc, bd) = input(&dev, &[d], 84, DType::F32);
        let (gamma, beta) = (affine.then_some(&gd), affine.then_some(&bd));
        let xv = xc.to_vec::<f32>().unwrap();
        let wv = wc.to_vec::<f32>().unwrap();
        let out = ops::layer_norm(&xd, 1, gamma, beta, 1e-5).unwrap();
        let h = 1e-2f32;
        let fd_x: Vec<(usize, f64)> = [0usize, 57, d + 3, 3 * d - 1]
            .into_iter()
            .map(|k| {
                let (mut p, mut m) = (xv.clone(), xv.clone());
                p[k] += h;
                m[k] -= h;
                let fd = (ln_loss(&dev, &p, &shape, gamma, beta, &wv)
                    - ln_loss(&dev, &m, &shape, gamma, beta, &wv))
                    / (2.0 * h as f64);
                (k, fd)
            })
            .collect();
        // γ's and β's gradients by differences in one parameter.
        let param_fd = |which: usize, k: usize| -> f64 {
            let base = [gc.to_vec::<f32>().unwrap(), bc.to_vec::<f32>().unwrap()];
            let at = |s: f32| {
                let mut v = base.clone();
                v[which][k] += s;
                let g = Tensor::from_slice(&dev, &v[0], &[d]).unwrap();
                let b = Tensor::from_slice(&dev, &v[1], &[d]).unwrap();
                ln_loss(&dev, &xv, &shape, Some(&g), Some(&b), &wv)
            };
            (at(h) - at(-h)) / (2.0 * h as f64)
        };
        for a in back_algos() {
            let got =
                ops::norm::layer_norm_backward_with(&xd, &wd, &out, 1, gamma, affine, Some(a))
                    .unwrap();
            let dx = got.dx.to_vec::<f32>().unwrap();
            for &(k, fd) in &fd_x {
                assert!(
                    (dx[k] as f64 - fd).abs() <= 2e-2 * (1.0 + fd.abs()),
                    "{a:?} d {d}: dx[{k}] = {} against {fd}",
                    dx[k]
                );
            }
            if affine {
                let dg = got.dgamma.unwrap().to_vec::<f32>().unwrap();
                let db = got.dbeta.unwrap().to_vec::<f32>().unwrap();
                for k in [0usize, 41, d - 1] {
                    for (which, v) in [(0, dg[k]), (1, db[k])] {
                        let fd = param_fd(which, k);
                        assert!(
                            (v as f64 - fd).abs() <= 2e-2 * (1.0 + fd.abs()),
                            "{a:?} d {d}: {}[{k}] = {v} against {fd}",
                            ["dγ", "dβ"][which]
                        );
                    }
                }
            }
        }
    }
}

/// A forced work-group size that is not a power of two (or beyond the device) is refused with the limits named;
/// saved statistics of the wrong shape and integer inputs are refused before anything runs; a forced algorithm
/// that fits is recorded as forced under the backward's own key.
#[test]
fn layer_norm_backward_refuses_misfits_and_records_forced() {
    let Some(dev) = opencl_device() else { return };
    let (_, xd) = input(&dev, &[2, 100], 1, DType::F32);
    let (_, gd) = input(&dev, &[2, 100], 2, DType::F32);
    let out = ops::layer_norm(&xd, 1, None, None, 1e-5).unwrap();
    for a in [
        RowNormAlgo::Wg(48),
        RowNormAlgo::Reg(96, 2),
        RowNormAlgo::Wg(1 << 20),
    ] {
        let e = ops::norm::layer_norm_backward_with(&xd, &gd, &out, 1, None, false, Some(a))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("layer_norm_backward")
                && e.contains("does not fit rows of 100")
                && e.contains("power-of-two"),
            "{a:?}: {e}"
        );
    }
    let flat = netcl::ops::NormOut {
        y: out.y.clone(),
        mean: out.mean.reshape(&[2]).unwrap(),
        rstd: out.rstd.clone(),
    };
    let e = ops::layer_norm_backward(&xd, &gd, &flat, 1, None, false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("saved mean"), "{e}");
    let gi = gd.cast(DType::I32).unwrap();
    assert!(ops::layer_norm_backward(&xd, &gi, &out, 1, None, false).is_err());
    let since = netcl::autotune::decisions_since(0)
        .last()
        .map_or(0, |d| d.seq);
    ops::norm::layer_norm_backward_with(&xd, &gd, &out, 1, None, false, Some(RowNormAlgo::Item))
        .unwrap();
    let forced: Vec<_> = netcl::autotune::decisions_since(since)
        .into_iter()
        .filter(|d| d.kernel == "layer_norm_rows_backward" && d.shape_key == "(2, 128, 0, 0)")
        .collect();
    assert!(
        forced
            .iter()
            .any(|d| d.source == netcl::autotune::Source::Forced && d.winner_label.contains("item")),
        "{forced:?}"
    );
}

/// Without a forced algorithm the device chooses among the composed path and the row kernels under the key
/// `layer_norm_rows_backward`, and the result matches the reference.
#[test]
fn layer_norm_backward_tuned_choice_matches_reference() {
    let Some(dev) = opencl_device() else { return };
    // A row count no other test of this file uses, so the decision below is this call's.
    let (xc, xd) = input(&dev, &[130, 1023], 13, DType::F32);
    let (gc, gd) = input(&dev, &[130, 1023], 14, DType::F32);
    let (wc, wd) = input(&dev, &[1023], 15, DType::F32);
    let oc = ops::layer_norm(&xc, 1, Some(&wc), None, 1e-5).unwrap();
    let od = ops::layer_norm(&xd, 1, Some(&wd), None, 1e-5).unwrap();
    let want = ops::layer_norm_backward(&xc, &gc, &oc, 1, Some(&wc), true).unwrap();
    let got = ops::layer_norm_backward(&xd, &gd, &od, 1, Some(&wd), true).unwrap();
    close(&got.dx, &want.dx, 1e-4, "tuned dx");
    close(
        got.dgamma.as_ref().unwrap(),
        want.dgamma.as_ref().unwrap(),
        1e-3,
        "tuned dγ",
    );
    close(
        got.dbeta.as_ref().unwrap(),
        want.dbeta.as_ref().unwrap(),
        1e-3,
        "tuned dβ",
    );
    let mine: Vec<_> = netcl::autotune::decisions_since(0)
        .into_iter()
        .filter(|d| d.kernel == "layer_norm_rows_backward" && d.shape_key == "(256, 1024, 0, 0)")
        .collect();
    assert!(
        !mine.is_empty(),
        "no layer_norm_rows_backward decision for 130 rows"
    );
    for d in &mine {
        assert_ne!(d.source, netcl::autotune::Source::Forced, "{d:?}");
        if !d.candidates.is_empty() {
            assert!(
                d.candidates.iter().any(|c| c.label.contains("composed")),
                "composed path missing: {:?}",
                d.candidates
            );
        }
    }
}

/// Autograd's layer_norm (the `LayerNorm` layer's forward) takes its input gradient from the row family: its
/// backward leaves a `layer_norm_rows_backward` decision, and its gradients match the reference.
#[test]
fn autograd_layer_norm_goes_through_the_row_backward() {
    use netcl::autograd::{Var, ops as ag};
    let Some(dev) = opencl_device() else { return };
    let (xc, xd) = input(&dev, &[77, 48], 21, DType::F32);
    let (wc, wd) = input(&dev, &[77, 48], 22, DType::F32);
    let (gc, gd) = input(&dev, &[48], 23, DType::F32);
    let (bc, bd) = input(&dev, &[48], 24, DType::F32);
    let since = netcl::autotune::decisions_since(0)
        .last()
        .map_or(0, |d| d.seq);
    let (x, gamma, beta) = (Var::param(xd), Var::param(gd), Var::param(bd));
    let y = ag::layer_norm(&x, 1, &gamma, &beta, 1e-5).unwrap();
    let loss = ag::sum_all(&ag::mul(&y, &Var::constant(wd)).unwrap()).unwrap();
    loss.backward().unwrap();
    let oc = ops::layer_norm(&xc, 1, Some(&gc), Some(&bc), 1e-5).unwrap();
    let want = ops::layer_norm_backward(&xc, &wc, &oc, 1, Some(&gc), true).unwrap();
    close(&x.grad().unwrap(), &want.dx, 1e-4, "autograd dx");
    close(
        &gamma.grad().unwrap(),
        want.dgamma.as_ref().unwrap(),
        1e-3,
        "autograd dγ",
    );
    close(
        &beta.grad().unwrap(),
        want.dbeta.as_ref().unwrap(),
        1e-3,
        "autograd dβ",
    );
    assert!(
        netcl::autotune::decisions_since(since)
            .iter()
            .any(|d| d.kernel == "layer_norm_rows_backward" && d.shape_key == "(128, 64, 1, 0)"),
        "no layer_norm_rows_backward decision for autograd's layer_norm"
    );
}
