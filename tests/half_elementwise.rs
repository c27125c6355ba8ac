//! f16 storage through the memory-bound elementwise families: casts, copies, binary ops (same shape, the 3-D
//! broadcast kernel and the general one), scalars, unary ops forward and backward, and fused expressions, each
//! on the OpenCL device against the built-in device.
//!
//! Tolerances. f16 has an 11-bit significand, so one rounding of a value costs at most 2^-11 ≈ 4.9e-4 of it.
//! Against the reference computed on the same f16 inputs, both sides compute in f32 and round the result once;
//! their f32 results differ by a few f32 ulps (the device's `exp` or `tanh` are not the host's), which can move
//! a rounding by one f16 ulp: relative 1e-3. Against the f32 computation on unrounded inputs a second rounding
//! (the inputs') adds its error, propagated by the op's slope: relative 4e-3 for the ops checked that way.

mod common;
mod half_support;

use common::{assert_tensors_close, cpu, opencl_device};
use half_support::{assert_rounded, halves};
use netcl::half::{f16_to_f32, f32_to_f16};
use netcl::ops::{self, BinaryOp, UnaryOp};
use netcl::{DType, Tensor};

#[test]
fn device_cast_rounds_like_the_host_conversion() {
    let Some(dev) = opencl_device() else { return };
    // Specials, the f16 range's edges, subnormals, ties and values past 65504.
    let mut v = vec![
        0.0f32,
        -0.0,
        1.0,
        -2.5,
        65504.0,
        65519.0,
        65520.0,
        -1e6,
        6.1035156e-5,
        6.0e-5,
        5.9604645e-8,
        2.9802322e-8,
        2.0e-8,
        1.0 + 1.0 / 2048.0,
        1.0 + 3.0 / 2048.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MAX,
        f32::MIN_POSITIVE,
    ];
    v.extend((0..1001).map(|i| (i as f32 - 500.0) * 0.37731));
    for d in [cpu(), dev] {
        let t = Tensor::from_slice(&d, &v, &[v.len()]).expect("upload");
        let h = t.cast(DType::F16).expect("cast");
        assert_eq!(h.dtype(), DType::F16);
        let got = h.to_f32_vec().expect("read");
        for (i, (&g, &x)) in got.iter().zip(&v).enumerate() {
            let want = f16_to_f32(f32_to_f16(x));
            assert!(
                g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                "{}: cast of {x} (#{i}) gave {g}, want {want}",
                d.name()
            );
        }
        // Back to f32 exactly, and to i32 truncated and saturated with NaN as 0.
        let back = h
            .cast(DType::F32)
            .expect("widen")
            .to_vec::<f32>()
            .expect("read");
        for (g, w) in back.iter().zip(&got) {
            assert!(g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()));
        }
        for (src, values, what) in [(&t, &v, "f32 → i32"), (&h, &got, "f16 → i32")] {
            let i = src
                .cast(DType::I32)
                .expect(what)
                .to_vec::<i32>()
                .expect("read");
            let want: Vec<i32> = values.iter().map(|&x| x as i32).collect();
            assert_eq!(i, want, "{}: {what}", d.name());
        }
    }
}

#[test]
fn copy_of_f16_is_bit_exact_at_odd_sizes() {
    let Some(dev) = opencl_device() else { return };
    for n in [1usize, 7, 8, 9, 1031, 4099] {
        let (h, _) = halves(&dev, &[n], n as u64);
        let c = ops::elementwise::copy(&h).expect("copy");
        assert_eq!(c.dtype(), DType::F16);
        assert!(!c.shares_storage(&h));
        let (a, b) = (h.to_f32_vec().expect("a"), c.to_f32_vec().expect("b"));
        assert_eq!(a.len(), b.len());
        assert!(
            a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
            "n = {n}"
        );
    }
}

#[test]
fn binary_ops_on_f16_match_the_reference_for_every_kernel_path() {
    let Some(dev) = opencl_device() else { return };
    // Same shape (odd sizes), the 3-D kernel (row, column and channel broadcasts; inner sizes 4k and not) and the
    // general kernel (rank 5 with alternating broadcasts).
    let cases: &[(&[usize], &[usize])] = &[
        (&[1031], &[1031]),
        (&[3, 5, 7], &[3, 5, 7]),
        (&[37, 12], &[12]),
        (&[37, 13], &[37, 1]),
        (&[2, 6, 5, 8], &[6, 1, 1]),
        (&[2, 1, 3, 1, 5], &[1, 4, 1, 6, 1]),
    ];
    for (k, (sa, sb)) in cases.iter().enumerate() {
        let (a, aw) = halves(&dev, sa, 10 + k as u64);
        let (b, bw) = halves(&dev, sb, 20 + k as u64);
        for op in [
            BinaryOp::Add,
            BinaryOp::Mul,
            BinaryOp::Div,
            BinaryOp::Max,
            BinaryOp::Gt,
        ] {
            let got = ops::binary(op, &a, &b).expect("device");
            assert_eq!(got.dtype(), DType::F16, "f16 with f16 stays f16");
            let want = ops::binary(op, &aw, &bw).expect("reference");
            assert_eq!(got.shape(), want.shape());
            let what = format!("{} {sa:?} {sb:?}", op.name());
            assert_rounded(&got, &want, 1e-6, 1e-3, &what);
        }
    }
}

#[test]
fn mixed_f16_and_f32_inputs_promote_to_f32() {
    let Some(dev) = opencl_device() else { return };
    let (a, aw) = halves(&dev, &[5, 9], 3);
    let bw = Tensor::randn(&cpu(), &[9], 0.0, 1.0, 4).expect("b");
    let b = bw.to_device(&dev).expect("b on device");
    for (x, y, xw, yw) in [(&a, &b, &aw, &bw), (&b, &a, &bw, &aw)] {
        let got = ops::sub(x, y).expect("mixed");
        assert_eq!(
            got.dtype(),
            DType::F32,
            "an f32 operand makes the result f32"
        );
        let want = ops::sub(xw, yw).expect("reference");
        assert_tensors_close(
            &got,
            &want,
            1e-6,
            1e-6,
            "mixed sub (the f16 input widened exactly, no output rounding)",
        );
    }
}

#[test]
fn specials_pass_through_f16_kernels() {
    let Some(dev) = opencl_device() else { return };
    let v = [
        f32::NAN,
        f32::INFINITY,
        -f32::INFINITY,
        60000.0,
        1e-7,
        -3.0,
        0.0,
    ];
    let x = Tensor::from_slice(&dev, &v, &[v.len()])
        .and_then(|t| t.cast(DType::F16))
        .expect("f16");
    // 60000 + 60000 overflows f16 (largest finite 65504) to inf; 1e-7 is an f16 subnormal and survives.
    let s = ops::add(&x, &x).expect("add").to_f32_vec().expect("read");
    assert!(s[0].is_nan());
    assert_eq!(&s[1..4], &[f32::INFINITY, -f32::INFINITY, f32::INFINITY]);
    let sub = f16_to_f32(f32_to_f16(1e-7));
    assert!(sub > 0.0 && sub < 6.1e-5, "1e-7 is subnormal in f16");
    assert_eq!(s[4], f16_to_f32(f32_to_f16(2.0 * sub)));
    let r = ops::relu(&x).expect("relu").to_f32_vec().expect("read");
    assert!(r[0].is_nan());
    assert_eq!(&r[1..], &[f32::INFINITY, 0.0, 60000.0, sub, 0.0, 0.0]);
    let m = ops::mul_scalar(&x, 2.0)
        .expect("scalar")
        .to_f32_vec()
        .expect("read");
    assert_eq!(m[3], f32::INFINITY, "120000 is past f16's 65504");
}

#[test]
fn scalar_ops_on_f16() {
    let Some(dev) = opencl_device() else { return };
    for n in [1usize, 6, 1029] {
        let (a, aw) = halves(&dev, &[n], 40 + n as u64);
        for (op, s, swap) in [
            (BinaryOp::Sub, 0.75f32, true),
            (BinaryOp::Mul, -1.5, false),
            (BinaryOp::Pow, 2.0, false),
        ] {
            let got = ops::binary_scalar(op, &a, s, swap).expect("device");
            assert_eq!(got.dtype(), DType::F16);
            let want = ops::binary_scalar(op, &aw, s, swap).expect("reference");
            let what = format!("{} {s} swap {swap} n {n}", op.name());
            assert_rounded(&got, &want, 1e-6, 1e-3, &what);
        }
    }
}

#[test]
fn unary_ops_on_f16_forward_and_backward() {
    let Some(dev) = opencl_device() else { return };
    let (x, xw) = halves(&dev, &[1027], 7);
    let (g, gw) = halves(&dev, &[1027], 8);
    let xp = ops::abs(&x)
        .and_then(|t| ops::add_scalar(&t, 0.01))
        .expect("positive");
    let xpw = ops::abs(&xw)
        .and_then(|t| ops::add_scalar(&t, 0.01))
        .expect("positive");
    for op in UnaryOp::all() {
        // log, sqrt and rsqrt on positive inputs, so the comparison is of numbers.
        let positive = matches!(op, UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Rsqrt);
        let (xd, xc) = if positive { (&xp, &xpw) } else { (&x, &xw) };
        let xc = if positive {
            // The reference reads what the device read: the f16 value of |x| + 0.01.
            &xc.cast(DType::F16)
                .and_then(|t| t.cast(DType::F32))
                .expect("round")
        } else {
            xc
        };
        let got = ops::unary(op, xd).expect("forward");
        assert_eq!(got.dtype(), DType::F16);
        let want = ops::unary(op, xc).expect("reference");
        let atol = 1e-6;
        assert_rounded(&got, &want, atol, 1e-3, op.name());
        let got = ops::unary_backward(op, xd, &g).expect("backward");
        assert_eq!(got.dtype(), DType::F16, "the gradient has x's dtype");
        let want = ops::unary_backward(op, xc, &gw).expect("reference backward");
        let what = format!("{} backward", op.name());
        assert_rounded(&got, &want, atol, 1e-3, &what);
    }
}

#[test]
fn fused_expressions_read_and_write_f16() {
    let Some(dev) = opencl_device() else { return };
    let (a, aw) = halves(&dev, &[9, 13], 1);
    let (b, bw) = halves(&dev, &[13], 2);
    let (c, cw) = halves(&dev, &[2, 3, 9, 13], 3);
    let cf = cw.to_device(&dev).expect("c as f32");
    let expr = "max(x0 * 0.5 + x1, 0) - tanh(x2)";
    let got = ops::fused(expr, &[&a, &b, &c]).expect("f16 fused (general broadcast)");
    assert_eq!(got.dtype(), DType::F16);
    let want = ops::fused(expr, &[&aw, &bw, &cw]).expect("reference");
    assert_rounded(&got, &want, 1e-6, 1e-3, expr);
    // One f32 input: the result is f32; the f16 inputs are still read as halves.
    let got = ops::fused(expr, &[&a, &b, &cf]).expect("mixed fused");
    assert_eq!(got.dtype(), DType::F32);
    assert_tensors_close(&got, &want, 1e-5, 1e-5, "mixed fused");
    let got = ops::fused("x0 * x1 + 1", &[&a, &a]).expect("same-shape path");
    let want = ops::fused("x0 * x1 + 1", &[&aw, &aw]).expect("reference");
    assert_rounded(&got, &want, 1e-6, 1e-3, "same");
    let got = ops::fused("x0 - x1", &[&a, &b]).expect("3-D path");
    let want = ops::fused("x0 - x1", &[&aw, &bw]).expect("reference");
    assert_rounded(&got, &want, 1e-6, 1e-3, "3-D");
    // Rows of 16 and a whole number of quads: four halves per work-item on both paths, f16 and f32 mixed.
    let (p, pw) = halves(&dev, &[9, 16], 4);
    let (q, qw) = halves(&dev, &[16], 5);
    let rw = halves(&dev, &[9, 1], 6).1;
    let rf = rw.to_device(&dev).expect("r as f32 on the device");
    let got = ops::fused("max(x0 * x1 + x2, 0)", &[&p, &q, &rf]).expect("3-D quads");
    let want = ops::fused("max(x0 * x1 + x2, 0)", &[&pw, &qw, &rw]).expect("reference");
    assert_tensors_close(&got, &want, 1e-5, 1e-5, "3-D quads");
    let got = ops::fused("x0 * x1 + 1", &[&p, &p]).expect("same-shape quads");
    let want = ops::fused("x0 * x1 + 1", &[&pw, &pw]).expect("reference");
    assert_rounded(&got, &want, 1e-6, 1e-3, "same quads");
    let pf = pw.to_device(&dev).expect("p as f32 on the device");
    let got = ops::fused("x0 * x1 + 1", &[&p, &pf]).expect("same-shape quads, f16 and f32");
    assert_eq!(got.dtype(), DType::F32);
    assert_tensors_close(&got, &want, 1e-6, 1e-6, "same quads, mixed");
}
