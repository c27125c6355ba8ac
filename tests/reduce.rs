//! Reductions on OpenCL against the built-in device (f64 accumulation): every algorithm forced explicitly,
//! random shapes and axis sets, keepdims, empty axes, NaN/±inf, argmax/argmin, reduce_to_shape on both sides
//! of its 256 rule, the global L2 norm, and one large (10⁷) reduction.
//!
//! Tolerances: sums and means 1e-5 relative to Σ|x| over the reduced elements (f32 accumulation in a
//! different order), max/min/argmax exact, prod 1e-4 relative (values near 1 so products stay finite).

mod common;
mod opsutil;

use common::{Lcg, assert_close, assert_refused, assert_tensors_close};
use netcl::Tensor;
use netcl::ops::reduce::RtsAlgo;
use netcl::ops::{self, ReduceAlgo, ReduceOp};
use opsutil::{cpu, opencl_device, pair, with_specials};

fn check_reduce(
    op: ReduceOp,
    c: &Tensor,
    d: &Tensor,
    axes: Option<&[isize]>,
    keep: bool,
    algo: Option<ReduceAlgo>,
) {
    let got = ops::reduce_with(op, d, axes, keep, algo).unwrap();
    let want = ops::reduce(op, c, axes, keep).unwrap();
    assert_eq!(got.shape(), want.shape(), "{op:?} {:?} {axes:?}", c.shape());
    let abs = ops::reduce(ReduceOp::Sum, &ops::abs(c).unwrap(), axes, keep)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let (g, w) = (got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
    let what = format!(
        "{op:?} of {:?} over {axes:?} keep {keep} algo {algo:?}",
        c.shape()
    );
    match op {
        ReduceOp::Max | ReduceOp::Min => assert_close(&g, &w, 0.0, 0.0, &what),
        ReduceOp::Prod => assert_close(&g, &w, 1e-6, 1e-4, &what),
        _ => {
            for (k, ((gv, wv), a)) in g.iter().zip(&w).zip(&abs).enumerate() {
                let tol = 1e-5 * a.max(1.0) * if op == ReduceOp::SumSq { 4.0 } else { 1.0 };
                let ok = if wv.is_nan() {
                    gv.is_nan()
                } else if wv.is_infinite() {
                    gv == wv
                } else {
                    (gv - wv).abs() <= tol
                };
                assert!(ok, "{what}[{k}]: got {gv}, want {wv}");
            }
        }
    }
}

const ALGOS: [Option<ReduceAlgo>; 11] = [
    Some(ReduceAlgo::Stream(1)),
    Some(ReduceAlgo::Stream(3)),
    Some(ReduceAlgo::ColBlk(8, 1)),
    Some(ReduceAlgo::ColBlk(32, 4)),
    None,
    Some(ReduceAlgo::Wg(64, 1)),
    Some(ReduceAlgo::Wg(256, 3)),
    Some(ReduceAlgo::Chunk(1)),
    Some(ReduceAlgo::Chunk(5)),
    Some(ReduceAlgo::Col(4, 1)),
    Some(ReduceAlgo::Col(1, 3)),
];

#[test]
fn reductions_match_reference_with_every_algorithm() {
    let Some(dev) = opencl_device() else { return };
    let mut r = Lcg(5);
    for case in 0..10 {
        let rank = r.range(1, 4);
        let mut shape: Vec<usize> = (0..rank).map(|_| r.range(1, 40)).collect();
        // Every other case has a last axis of 32 so the column-block kernels run.
        if case % 2 == 1 && rank > 1 {
            shape[rank - 1] = 32;
        }
        let (c, d) = pair(&dev, &shape, 500 + case);
        let a = r.range(0, rank - 1) as isize;
        let axes_sets: Vec<Option<Vec<isize>>> = vec![
            None,
            Some(vec![a]),
            Some(vec![-1]),
            Some((0..rank as isize).step_by(2).collect()),
        ];
        for axes in &axes_sets {
            for algo in ALGOS {
                for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max] {
                    check_reduce(op, &c, &d, axes.as_deref(), case % 2 == 0, algo);
                }
            }
            for op in [ReduceOp::Min, ReduceOp::SumSq] {
                check_reduce(op, &c, &d, axes.as_deref(), false, None);
            }
        }
        // Products of values near 1.
        let pc = ops::add_scalar(&ops::mul_scalar(&c, 0.05).unwrap(), 1.0).unwrap();
        let pd = pc.to_device(&dev).unwrap();
        check_reduce(ReduceOp::Prod, &pc, &pd, Some(&[a]), false, None);
    }
}

#[test]
fn empty_axes_and_non_finite_values() {
    let Some(dev) = opencl_device() else { return };
    let (c, d) = with_specials(&dev, &[9, 30], 9);
    for op in [
        ReduceOp::Sum,
        ReduceOp::Mean,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Prod,
    ] {
        for axes in [Some(&[0isize][..]), Some(&[1][..]), None] {
            for algo in ALGOS {
                check_reduce(op, &c, &d, axes, false, algo);
            }
        }
    }
    // An empty reduced axis: sum 0, mean NaN, prod 1, max an error.
    let e = Tensor::zeros(&dev, &[3, 0, 2]).unwrap();
    assert_eq!(
        ops::sum(&e, Some(&[1]), false)
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![0.0; 6]
    );
    assert!(
        ops::mean(&e, Some(&[1]), false)
            .unwrap()
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .all(|v| v.is_nan())
    );
    assert_eq!(ops::prod(&e, Some(&[1]), true).unwrap().shape(), &[3, 1, 2]);
    assert!(ops::max(&e, Some(&[1]), false).is_err());
    assert_eq!(ops::sum(&e, Some(&[0]), false).unwrap().shape(), &[0, 2]);
    assert_eq!(
        ops::sum_all(&e).unwrap().to_vec::<f32>().unwrap(),
        vec![0.0]
    );
    // No axes: the identity.
    let (c2, d2) = pair(&dev, &[4, 5], 3);
    check_reduce(ReduceOp::Sum, &c2, &d2, Some(&[]), false, None);
    let r = ops::sum(&d2, Some(&[2]), false);
    assert_refused(r, "sum over axis 2 of rank 2", "axis 2 is out of range");
}

#[test]
fn argmax_and_argmin_match_reference() {
    let Some(dev) = opencl_device() else { return };
    let mut v: Vec<f32> = (0..60).map(|i| ((i * 37) % 11) as f32).collect();
    v[13] = f32::NAN;
    let c = Tensor::from_slice(&cpu(), &v, &[3, 4, 5]).unwrap();
    let d = c.to_device(&dev).unwrap();
    for axis in [0isize, 1, 2, -1] {
        for keep in [false, true] {
            for max in [true, false] {
                let f = if max { ops::argmax } else { ops::argmin };
                let got = f(&d, axis, keep).unwrap();
                let want = f(&c, axis, keep).unwrap();
                assert_eq!(got.shape(), want.shape());
                assert_eq!(
                    got.to_vec::<i32>().unwrap(),
                    want.to_vec::<i32>().unwrap(),
                    "axis {axis} max {max}"
                );
            }
        }
    }
    let t = Tensor::from_slice(&dev, &[1.0f32, 5.0, 5.0, 2.0], &[4]).unwrap();
    assert_eq!(
        ops::argmax(&t, 0, false).unwrap().to_vec::<i32>().unwrap(),
        vec![1]
    );
}

/// `reduce_to_shape` of the device's `d` to `t` (with `algo` forced) against the built-in device's of `c`,
/// within `atol_per_root`·√n absolute (n folded elements in all) and 1e-5 relative.
fn check_to_shape(c: &Tensor, d: &Tensor, t: &[usize], algo: Option<RtsAlgo>, atol_per_root: f32) {
    let got = ops::reduce::reduce_to_shape_with(d, t, algo).unwrap();
    let want = ops::reduce_to_shape(c, t).unwrap();
    assert_eq!(got.shape(), t);
    let (g, n) = (c.shape(), c.numel());
    let what = match algo {
        None => format!("{g:?} -> {t:?}"),
        Some(_) => format!("{g:?} -> {t:?} {algo:?}"),
    };
    assert_tensors_close(&got, &want, atol_per_root * (n as f32).sqrt(), 1e-5, &what);
}

#[test]
fn reduce_to_shape_matches_reference_on_both_kernels() {
    let Some(dev) = opencl_device() else { return };
    let cases: &[(&[usize], &[usize])] = &[
        (&[4, 6, 5, 5], &[6, 1, 1]), // bias gradient, 100 per output: per-element kernel
        (&[8, 3, 17, 19], &[3, 1, 1]), // 2584 per output: work-group kernel
        (&[3, 4], &[4]),
        (&[3, 4], &[]),
        (&[300, 2], &[1, 2]),
        (&[2, 3, 4], &[2, 1, 4]),
        (&[5, 1, 7], &[1, 1, 1, 7]),
    ];
    for (k, (g, t)) in cases.iter().enumerate() {
        let (c, d) = pair(&dev, g, 70 + k as u64);
        check_to_shape(&c, &d, t, None, 1e-5);
    }
    // The documented example: x(3,4)·b(4) with loss sum(x·b) gives grad_b = [3,3,3,3].
    let ones = Tensor::ones(&dev, &[3, 4]).unwrap();
    assert_eq!(
        ops::reduce_to_shape(&ones, &[4])
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![3.0; 4]
    );
    assert!(ops::reduce_to_shape(&ones, &[2, 4]).is_err());
}

#[test]
fn global_l2_norm_matches_reference() {
    let Some(dev) = opencl_device() else { return };
    let shapes: [&[usize]; 4] = [&[10, 10], &[3], &[0, 4], &[1000, 7]];
    let (cs, ds): (Vec<Tensor>, Vec<Tensor>) = shapes
        .iter()
        .enumerate()
        .map(|(k, s)| pair(&dev, s, 90 + k as u64))
        .unzip();
    let got = ops::global_l2_norm(&ds.iter().collect::<Vec<_>>())
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let want = ops::global_l2_norm(&cs.iter().collect::<Vec<_>>())
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_close(&got, &want, 0.0, 1e-5, "global L2 norm");
    let direct: f64 = cs
        .iter()
        .flat_map(|t| t.to_vec::<f32>().unwrap())
        .map(|v| (v as f64) * (v as f64))
        .sum::<f64>()
        .sqrt();
    assert!((want[0] as f64 - direct).abs() < 1e-4 * direct);
}

#[test]
fn large_reduction_of_ten_million_elements() {
    let Some(dev) = opencl_device() else { return };
    let n = 10_000_000usize;
    let v: Vec<f32> = (0..n)
        .map(|i| ((i % 1000) as f32) * 1e-3 - 0.4995)
        .collect();
    let c = Tensor::from_slice(&cpu(), &v, &[n / 1000, 1000]).unwrap();
    let d = c.to_device(&dev).unwrap();
    let abs_sum: f32 = v.iter().map(|x| x.abs()).sum();
    let want = ops::sum_all(&c).unwrap().to_vec::<f32>().unwrap()[0];
    let got = ops::sum_all(&d).unwrap().to_vec::<f32>().unwrap()[0];
    assert!((got - want).abs() <= 1e-5 * abs_sum, "sum {got} vs {want}");
    let got = ops::sum(&d, Some(&[0]), false)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let want = ops::sum(&c, Some(&[0]), false)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_close(&got, &want, 1e-2, 1e-5, "column sums of 10^4 x 1000");
}

/// `reduce_to_shape` with every algorithm forced: one or several work-groups per output (float4 loads where
/// the innermost reduced axis allows, scalar otherwise, the short-inner path), the flattened slices (float4 or
/// scalar, two or three reduced axes), and one work-item per output.
#[test]
fn reduce_to_shape_with_every_algorithm() {
    let Some(dev) = opencl_device() else { return };
    let cases: &[(&[usize], &[usize])] = &[
        (&[6, 8, 17, 16], &[8, 1, 1]), // inner 272, multiple of 4: float4 loads
        (&[5, 3, 300], &[3, 1]),       // two reduced axes merged around a kept one
        (&[5, 3, 259], &[3, 1]),       // inner 259: scalar loads
        (&[100, 7, 3], &[1, 7, 1]),    // inner 3 < 256 with 300 per output: chunks of positions
        (&[9, 4, 16, 16], &[1, 4, 1, 1]), // a bias gradient
        (&[1, 5, 31, 33], &[1, 5, 1, 1]), // batch 1, odd plane: scalar loads
        (&[8, 3, 8, 6, 8], &[3, 1, 6, 1]), // three reduced axes, rows of 8: float4 loads, full decomposition
        (&[8, 3, 8, 6, 7], &[3, 1, 6, 1]), // three reduced axes, rows of 7: scalar loads
    ];
    for (k, (g, t)) in cases.iter().enumerate() {
        let (c, d) = with_specials(&dev, g, 90 + k as u64);
        let (c2, d2) = pair(&dev, g, 95 + k as u64);
        for algo in [
            None,
            Some(RtsAlgo::Wg(1)),
            Some(RtsAlgo::Wg(3)),
            Some(RtsAlgo::Wg(64)),
            Some(RtsAlgo::Item),
            Some(RtsAlgo::Flat(1)),
            Some(RtsAlgo::Flat(3)),
            Some(RtsAlgo::Flat(64)),
        ] {
            for (c, d) in [(&c, &d), (&c2, &d2)] {
                check_to_shape(c, d, t, algo, 4e-5);
            }
        }
    }
    let ones = Tensor::ones(&dev, &[3, 4]).unwrap();
    assert!(ops::reduce::reduce_to_shape_with(&ones, &[4], Some(RtsAlgo::Wg(0))).is_err());
    assert!(ops::reduce::reduce_to_shape_with(&ones, &[4], Some(RtsAlgo::Flat(0))).is_err());
}

/// Row reductions whose chunks are rounded to multiples of 4 (aligned float4 loads), with a tail, and the
/// few-groups-per-row candidate.
#[test]
fn row_reductions_with_aligned_chunks() {
    let Some(dev) = opencl_device() else { return };
    for (k, shape) in [[3usize, 4100], [1, 100_004], [2, 12]].iter().enumerate() {
        let (c, d) = with_specials(&dev, shape, 110 + k as u64);
        let (c2, d2) = pair(&dev, shape, 120 + k as u64);
        for algo in [
            ReduceAlgo::Wg(256, 7),
            ReduceAlgo::Wg(64, 1),
            ReduceAlgo::Wg(128, 13),
        ] {
            for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::SumSq] {
                check_reduce(op, &c, &d, Some(&[1]), false, Some(algo));
                check_reduce(op, &c2, &d2, Some(&[1]), false, Some(algo));
                check_reduce(op, &c2, &d2, None, false, Some(algo));
            }
        }
    }
}
