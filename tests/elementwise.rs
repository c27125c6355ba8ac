//! Elementwise ops on OpenCL against the built-in device: binary broadcasting (every fast path), scalar ops,
//! comparisons, unary ops and activations forward and backward, fused expressions and where.
//!
//! Tolerances: add/sub/mul/max/min/comparisons/where are exact (IEEE single ops, no contraction across
//! separate ops); div, pow, transcendental activations 1e-5 relative + 1e-6 absolute (OpenCL built-ins are
//! within a few ulp, the reference is f64 rounded once).

mod common;
mod opsutil;

use common::{Lcg, assert_close, assert_matches_fd, assert_tensors_close};
use netcl::Tensor;
use netcl::ops::{self, BinaryOp, UnaryOp};
use opsutil::{cpu, opencl_device, pair, with_specials};

fn random_shape(r: &mut Lcg, rank: usize) -> Vec<usize> {
    (0..rank).map(|_| r.range(1, 9)).collect()
}

#[test]
fn binary_broadcast_matches_reference_on_every_path() {
    let Some(dev) = opencl_device() else { return };
    let mut r = Lcg(11);
    let mut cases: Vec<(Vec<usize>, Vec<usize>)> = vec![
        (vec![37, 64], vec![64]),    // row broadcast, vectorised, aligned float4
        (vec![7, 3, 1], vec![3, 8]), // vectorised with an outer stride of 3: unaligned float4
        (vec![6, 8], vec![6, 8]),    // same shape, no tail
        (vec![37, 63], vec![63]),    // row broadcast, scalar
        (vec![40, 1], vec![40, 12]), // column broadcast on the left operand
        (vec![3, 5, 7, 8], vec![5, 1, 1]), // per-channel over NCHW
        (vec![2, 1, 4, 1, 5, 1, 2], vec![4, 1, 5, 3, 2]), // deep: general kernel
        (vec![1001], vec![1001]),    // same shape with a tail
        (vec![0, 3], vec![3]),       // empty
        (vec![], vec![4, 4]),        // scalar tensor
    ];
    for _ in 0..12 {
        let rank = r.range(1, 5);
        let a = random_shape(&mut r, rank);
        let skip = r.range(0, rank - 1);
        let b: Vec<usize> = a
            .iter()
            .map(|&d| if r.range(0, 2) == 0 { 1 } else { d })
            .skip(skip)
            .collect();
        cases.push((a, b));
    }
    let ops = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Max,
        BinaryOp::Min,
        BinaryOp::Pow,
        BinaryOp::Lt,
        BinaryOp::Le,
        BinaryOp::Gt,
        BinaryOp::Ge,
        BinaryOp::Eq,
        BinaryOp::Ne,
    ];
    for (i, (sa, sb)) in cases.iter().enumerate() {
        let (ac, ad) = with_specials(&dev, sa, 100 + i as u64);
        let (bc, bd) = pair(&dev, sb, 200 + i as u64);
        for (k, op) in ops.iter().enumerate() {
            // Swap operands on odd ops so both sides get broadcast.
            let (x, y, xc, yc) = if k % 2 == 0 {
                (&ad, &bd, &ac, &bc)
            } else {
                (&bd, &ad, &bc, &ac)
            };
            let got = ops::binary(*op, x, y).unwrap();
            let want = ops::binary(*op, xc, yc).unwrap();
            assert_eq!(got.shape(), want.shape());
            let exact = !matches!(op, BinaryOp::Div | BinaryOp::Pow);
            let (atol, rtol) = if exact { (0.0, 0.0) } else { (1e-6, 1e-5) };
            assert_tensors_close(&got, &want, atol, rtol, &format!("{op:?} {sa:?} {sb:?}"));
        }
    }
}

#[test]
fn broadcast_errors_name_both_shapes() {
    let d = cpu();
    let a = Tensor::zeros(&d, &[2, 3]).unwrap();
    let b = Tensor::zeros(&d, &[4, 3]).unwrap();
    let e = ops::add(&a, &b).unwrap_err().to_string();
    assert!(e.contains("[2, 3]") && e.contains("[4, 3]"), "{e}");
}

#[test]
fn scalar_ops_match_reference() {
    let Some(dev) = opencl_device() else { return };
    let (c, d) = with_specials(&dev, &[3, 333], 5);
    for op in [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Max,
        BinaryOp::Pow,
        BinaryOp::Gt,
    ] {
        for swap in [false, true] {
            let got = ops::binary_scalar(op, &d, 1.5, swap)
                .unwrap()
                .to_vec::<f32>()
                .unwrap();
            let want = ops::binary_scalar(op, &c, 1.5, swap)
                .unwrap()
                .to_vec::<f32>()
                .unwrap();
            assert_close(&got, &want, 1e-6, 1e-5, &format!("{op:?} swap {swap}"));
        }
    }
    let x = Tensor::from_slice(&dev, &[1.0f32, 2.0, 4.0], &[3]).unwrap();
    assert_eq!(
        ops::rsub_scalar(&x, 10.0).unwrap().to_vec::<f32>().unwrap(),
        vec![9.0, 8.0, 6.0]
    );
    assert_eq!(
        ops::rdiv_scalar(&x, 8.0).unwrap().to_vec::<f32>().unwrap(),
        vec![8.0, 4.0, 2.0]
    );
}

#[test]
fn unary_forward_and_backward_match_reference() {
    let Some(dev) = opencl_device() else { return };
    for (i, n) in [1usize, 7, 1000, 4099].into_iter().enumerate() {
        let (xc, xd) = with_specials(&dev, &[n], 30 + i as u64);
        // Positive inputs for the ops with a restricted domain.
        let pc = ops::add_scalar(&ops::abs(&xc).unwrap(), 0.1).unwrap();
        let pd = pc.to_device(&dev).unwrap();
        let (gc, gd) = pair(&dev, &[n], 40 + i as u64);
        for op in UnaryOp::all() {
            let positive = matches!(
                op,
                UnaryOp::Log | UnaryOp::Log1p | UnaryOp::Sqrt | UnaryOp::Rsqrt
            );
            let (c, d) = if positive { (&pc, &pd) } else { (&xc, &xd) };
            let got = ops::unary(op, d).unwrap().to_vec::<f32>().unwrap();
            let want = ops::unary(op, c).unwrap().to_vec::<f32>().unwrap();
            assert_close(&got, &want, 1e-6, 1e-5, &format!("{op:?} forward n={n}"));
            let got = ops::unary_backward(op, d, &gd)
                .unwrap()
                .to_vec::<f32>()
                .unwrap();
            let want = ops::unary_backward(op, c, &gc)
                .unwrap()
                .to_vec::<f32>()
                .unwrap();
            assert_close(&got, &want, 1e-5, 1e-4, &format!("{op:?} backward n={n}"));
        }
    }
}

#[test]
fn activation_values_are_the_documented_formulas() {
    let d = cpu();
    let x = Tensor::from_slice(&d, &[-3.0f32, -1.0, 0.0, 1.0, 3.0], &[5]).unwrap();
    assert_eq!(
        ops::hard_sigmoid(&x).unwrap().to_vec::<f32>().unwrap(),
        vec![0.0, 0.3, 0.5, 0.7, 1.0]
    );
    assert_eq!(
        ops::relu(&x).unwrap().to_vec::<f32>().unwrap(),
        vec![0.0, 0.0, 0.0, 1.0, 3.0]
    );
    let g = ops::gelu(&x, false).unwrap().to_vec::<f32>().unwrap();
    assert!((g[3] - 0.841_344_7).abs() < 1e-6, "{g:?}");
    let t = ops::gelu(&x, true).unwrap().to_vec::<f32>().unwrap();
    assert!((t[3] - 0.841_192).abs() < 1e-5, "{t:?}");
    let e = ops::clamp(&x, 2.0, 1.0).unwrap_err().to_string();
    assert!(e.contains("clamp"), "{e}");
}

#[test]
fn unary_backward_matches_finite_differences_on_cpu() {
    // Central differences in f32 with h = 1e-2 on smooth points: agreement to 2e-3 relative.
    let d = cpu();
    let xs: Vec<f32> = vec![-2.2, -0.7, 0.3, 1.1, 1.9];
    let x = Tensor::from_slice(&d, &xs, &[5]).unwrap();
    let ones = Tensor::ones(&d, &[5]).unwrap();
    for op in [
        UnaryOp::Sigmoid,
        UnaryOp::Tanh,
        UnaryOp::GeluTanh,
        UnaryOp::GeluErf,
        UnaryOp::Silu,
        UnaryOp::Elu(0.7),
        UnaryOp::Softplus,
        UnaryOp::HardSwish,
        UnaryOp::LeakyRelu(0.2),
    ] {
        let g = ops::unary_backward(op, &x, &ones)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        for (i, &v) in xs.iter().enumerate() {
            let h = 1e-2f64;
            let fd = (op.forward_ref((v as f64 + h) as f32) as f64
                - op.forward_ref((v as f64 - h) as f32) as f64)
                / (2.0 * h);
            assert_matches_fd(g[i], fd, 2e-3, &format!("{op:?} at {v}"));
        }
    }
}

#[test]
fn fused_expressions_match_reference_and_broadcast() {
    let Some(dev) = opencl_device() else { return };
    let (ac, ad) = with_specials(&dev, &[6, 1, 17], 60);
    let (bc, bd) = pair(&dev, &[5, 17], 61);
    let (cc, cd) = pair(&dev, &[6, 5, 17], 62);
    for e in [
        "max(x0 * x1 + x2, 0)",
        "where(x0 > x1, exp(x2), -x0 / 3)",
        "sigmoid(x0) * tanh(x1) - erf(x2)",
        "clamp(x0, -1, 1) + pow(abs(x1), 1.5)",
    ] {
        let got = ops::fused(e, &[&ad, &bd, &cd]).unwrap();
        let want = ops::fused(e, &[&ac, &bc, &cc]).unwrap();
        assert_eq!(got.shape(), &[6, 5, 17]);
        assert_tensors_close(&got, &want, 1e-6, 1e-5, e);
    }
    // An innermost run of 16: four elements per work-item, with one input along every dimension's rows, one
    // repeated over the outermost and one repeated along the innermost.
    let (uc, ud) = with_specials(&dev, &[6, 1, 16], 65);
    let (vc, vd) = pair(&dev, &[5, 16], 66);
    let (wc, wd) = pair(&dev, &[6, 5, 1], 67);
    for e in ["max(x0 * x1 + x2, 0)", "where(x0 > x1, exp(x2), -x0 / 3)"] {
        let got = ops::fused(e, &[&ud, &vd, &wd]).unwrap();
        let want = ops::fused(e, &[&uc, &vc, &wc]).unwrap();
        assert_eq!(got.shape(), &[6, 5, 16]);
        assert_tensors_close(&got, &want, 1e-6, 1e-5, &format!("{e}, quads"));
    }
    // Five alternating broadcast dimensions: the general (dividing) kernel.
    let (pc, pd) = pair(&dev, &[2, 1, 3, 1, 5], 63);
    let (qc, qd) = pair(&dev, &[4, 1, 6, 1], 64);
    let got = ops::fused("x0 * x1 - x0", &[&pd, &qd]).unwrap();
    let want = ops::fused("x0 * x1 - x0", &[&pc, &qc]).unwrap();
    assert_eq!(got.shape(), &[2, 4, 3, 6, 5]);
    assert_tensors_close(
        &got,
        &want,
        1e-7,
        1e-6,
        "rank-5 broadcast (FMA contraction allowed)",
    );
    let got = ops::fused("x0 * 2 + 1", &[&cd])
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let want = ops::fused("x0 * 2 + 1", &[&cc])
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_close(&got, &want, 0.0, 1e-6, "same-shape path");
    let w = ops::where_(&ops::gt(&cd, &bd).unwrap(), &cd, &bd)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let m = ops::maximum(&cc, &bc).unwrap().to_vec::<f32>().unwrap();
    assert_close(&w, &m, 0.0, 0.0, "where(a > b, a, b) == maximum");
    assert!(ops::fused("x0 + x2", &[&cd, &bd]).is_err());
    assert!(ops::fused("x0 + x1", &[&cd, &Tensor::zeros(&dev, &[4]).unwrap()]).is_err());
}

#[test]
fn prelu_forward_and_backward_match_reference() {
    let Some(dev) = opencl_device() else { return };
    let (xc, xd) = with_specials(&dev, &[3, 4, 5, 6], 80);
    let (ac, ad) = pair(&dev, &[4], 81);
    let (gc, gd) = pair(&dev, &[3, 4, 5, 6], 82);
    let got = ops::prelu(&xd, &ad).unwrap().to_vec::<f32>().unwrap();
    let want = ops::prelu(&xc, &ac).unwrap().to_vec::<f32>().unwrap();
    assert_close(&got, &want, 0.0, 0.0, "prelu");
    let (gxd, gad) = ops::prelu_backward(&xd, &ad, &gd).unwrap();
    let (gxc, gac) = ops::prelu_backward(&xc, &ac, &gc).unwrap();
    assert_tensors_close(&gxd, &gxc, 0.0, 0.0, "prelu dx");
    assert_eq!(gad.shape(), &[4]);
    assert_tensors_close(&gad, &gac, 1e-4, 1e-5, "prelu dalpha");
    assert!(ops::prelu(&xd, &Tensor::zeros(&dev, &[3]).unwrap()).is_err());
}

#[test]
fn fused_expressions_with_six_inputs() {
    // 1e-6 relative: products and sums may contract into FMA on the device.
    let Some(dev) = opencl_device() else { return };
    let e = "x0 * x1 + x2 * x3 - x4 / (abs(x5) + 1)";
    let shapes: [&[usize]; 6] = [&[3, 7], &[3, 7], &[3, 7], &[3, 7], &[3, 7], &[3, 7]];
    let bshapes: [&[usize]; 6] = [
        &[2, 3, 7],
        &[7],
        &[3, 1],
        &[1, 1, 7],
        &[2, 1, 1],
        &[2, 3, 7],
    ];
    for set in [shapes, bshapes] {
        let (cs, ds): (Vec<_>, Vec<_>) = set
            .iter()
            .enumerate()
            .map(|(k, s)| pair(&dev, s, 90 + k as u64))
            .unzip();
        let got = ops::fused(e, &ds.iter().collect::<Vec<_>>()).unwrap();
        let want = ops::fused(e, &cs.iter().collect::<Vec<_>>()).unwrap();
        assert_eq!(got.shape(), want.shape());
        assert_tensors_close(&got, &want, 1e-6, 1e-6, e);
    }
}

#[test]
fn broadcast_to_repeats_and_rejects() {
    let Some(dev) = opencl_device() else { return };
    let (c, d) = pair(&dev, &[3, 1], 95);
    let got = ops::broadcast_to(&d, &[2, 3, 4]).unwrap();
    let want = ops::broadcast_to(&c, &[2, 3, 4]).unwrap();
    assert_eq!(got.shape(), &[2, 3, 4]);
    assert_tensors_close(&got, &want, 0.0, 0.0, "broadcast_to");
    let v = c.to_vec::<f32>().unwrap();
    assert_eq!(&want.to_vec::<f32>().unwrap()[4..8], &[v[1]; 4]);
    assert!(ops::broadcast_to(&d, &[3, 2, 4]).is_err());
    assert!(ops::broadcast_to(&d, &[4]).is_err());
}

#[test]
fn gelu_tanh_keeps_its_relative_accuracy_in_the_negative_tail() {
    // 0.5x(1 + tanh(u)) cancels as tanh(u) nears −1 (f32 gives 0 or noise from x ≈ −5 down); x·σ(2u), the same
    // function, does not. Reference: x·σ(2u) and its slope in f64. Down to x = −10 the values are normal f32
    // (about −1e-37 there). The function's condition number in the tail is about 6|u| (u ∝ x³ sits in an
    // exponent), up to ~260 here, so f32 arithmetic on the input may move the result by ~1e-5 of itself;
    // the cancelling form is off by 100 %.
    let xs: Vec<f32> = vec![-10.0, -9.0, -6.5, -4.0, -2.0, 0.5, 3.0];
    let exact = |x: f64| {
        let (k, c) = (0.797_884_560_802_865_4_f64, 0.044715_f64);
        let s = 1.0 / (1.0 + (-2.0 * k * (x + c * x * x * x)).exp());
        let d = s + 2.0 * x * s * (1.0 - s) * k * (1.0 + 3.0 * c * x * x);
        (x * s, d)
    };
    let mut devs = vec![cpu()];
    devs.extend(opencl_device());
    for dev in devs {
        let x = Tensor::from_slice(&dev, &xs, &[xs.len()]).unwrap();
        let y = ops::gelu(&x, true).unwrap().to_vec::<f32>().unwrap();
        let ones = Tensor::ones(&dev, &[xs.len()]).unwrap();
        let g = ops::unary_backward(UnaryOp::GeluTanh, &x, &ones)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        for (i, &v) in xs.iter().enumerate() {
            let (wy, wg) = exact(v as f64);
            for (what, got, want) in [("gelu", y[i], wy), ("slope", g[i], wg)] {
                let rel = (got as f64 - want).abs() / want.abs().max(f64::MIN_POSITIVE);
                assert!(
                    rel < 1e-4,
                    "{} {what}({v}) = {got:e}, exact {want:e} (relative error {rel:e})",
                    dev.name()
                );
            }
        }
    }
}
