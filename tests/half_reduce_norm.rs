//! f16 storage through reductions, softmax / log_softmax (forward and backward), the norms, cross-entropy, and
//! the compute-bound ops that widen f16 on the device (GEMM, convolution, attention), on the OpenCL device
//! against the built-in device fed the same f16 values.
//!
//! Tolerances. Reductions read halves and accumulate in f32 into an f32 result: the only difference from the
//! reference is summation order, relative 1e-5 of the sum of magnitudes. Softmax and the norms round their
//! output once to f16 (2^-11 relative) after f32 maths whose results differ by a few f32 ulps between the two
//! devices: relative 1e-3, with an absolute floor of 1e-4 for outputs near zero (a normalised value near 0 is
//! a difference of two close numbers). Backward passes chain several roundings (the gradient of an f16 input
//! is rounded once, but reads an f16 forward output): relative 4e-3.

mod common;
mod half_support;

use common::{assert_close, cpu, opencl_device};
use half_support::{assert_read_close, assert_rounded, halves};
use netcl::ops::{self, Conv2dOptions, SoftmaxAlgo};
use netcl::{DType, Tensor};

fn read(t: &Tensor) -> Vec<f32> {
    t.to_f32_vec().expect("read")
}

#[test]
fn reductions_of_f16_accumulate_in_f32() {
    let Some(dev) = opencl_device() else { return };
    // Rows (I = 1) and columns (I > 1), odd extents, several passes, a column count of a multiple of 8 (the
    // blocked and streaming column kernels).
    let cases: &[(&[usize], &[isize])] = &[
        (&[37, 1031], &[1]),
        (&[1031, 37], &[0]),
        (&[5, 7, 9], &[0, 2]),
        (&[3, 300, 64], &[1]),
        (&[4099], &[0]),
    ];
    for (k, (shape, axes)) in cases.iter().enumerate() {
        let (x, xw) = halves(&dev, shape, 50 + k as u64);
        for op in [
            ops::ReduceOp::Sum,
            ops::ReduceOp::Mean,
            ops::ReduceOp::Max,
            ops::ReduceOp::Min,
        ] {
            let got = ops::reduce(op, &x, Some(axes), false).expect("device");
            assert_eq!(got.dtype(), DType::F32, "reductions return f32");
            let want = ops::reduce(op, &xw, Some(axes), false).expect("reference");
            let mag: f32 = shape[axes[0] as usize] as f32 * 1.5;
            assert_read_close(
                &got,
                &want,
                1e-5 * mag,
                1e-5,
                &format!("{} {shape:?}", op.name()),
            );
        }
        let got = ops::argmax(&x, axes[0], false).expect("argmax");
        let want = ops::argmax(&xw, axes[0], false).expect("reference");
        assert_eq!(
            got.to_vec::<i32>().expect("a"),
            want.to_vec::<i32>().expect("b")
        );
    }
    // A sum past f16's range stays finite in f32; NaN propagates.
    let big = Tensor::full(&dev, &[3000], 60000.0)
        .and_then(|t| t.cast(DType::F16))
        .expect("big");
    let s = ops::sum_all(&big)
        .expect("sum")
        .to_vec::<f32>()
        .expect("read")[0];
    assert!((s - 1.8e8).abs() < 1e3, "{s}");
    let v = [1.0f32, f32::NAN, 2.0];
    let n = Tensor::from_slice(&dev, &v, &[3])
        .and_then(|t| t.cast(DType::F16))
        .expect("nan");
    assert!(ops::sum_all(&n).expect("sum").to_vec::<f32>().expect("r")[0].is_nan());
    let l2 = ops::global_l2_norm(&[&big])
        .expect("l2")
        .to_vec::<f32>()
        .expect("r")[0];
    assert!((l2 - 60000.0 * 3000f32.sqrt()).abs() < 10.0, "{l2}");
}

#[test]
fn softmax_of_f16_forward_and_backward() {
    let Some(dev) = opencl_device() else { return };
    for (k, (shape, axis)) in [
        (&[7usize, 33][..], -1isize),
        (&[5, 64], -1),
        (&[3, 200], -1),
        (&[4, 9, 6], 1),
    ]
    .iter()
    .enumerate()
    {
        let (x, xw) = halves(&dev, shape, 70 + k as u64);
        let (g, gw) = halves(&dev, shape, 80 + k as u64);
        for log in [false, true] {
            let y = ops::softmax_with(&x, *axis, log, None).expect("forward");
            assert_eq!(y.dtype(), DType::F16);
            let yw = ops::softmax_with(&xw, *axis, log, None).expect("reference");
            assert_rounded(&y, &yw, 1e-4, 1e-3, &format!("softmax log={log} {shape:?}"));
            // The register kernel (rows of a multiple of 4), with fewer items than a warp's 32 lanes, one
            // warp, and several (whose folds exchange values between warps).
            let r = shape[shape.len() - 1];
            if *axis == -1 && r % 4 == 0 {
                for l in [16usize, 32, 64, 1024] {
                    let algo = SoftmaxAlgo::Reg(l, (r / 4).div_ceil(l));
                    let y = ops::softmax_with(&x, -1, log, Some(algo)).expect("forced forward");
                    assert_eq!(y.dtype(), DType::F16);
                    assert_rounded(&y, &yw, 1e-4, 1e-3, &format!("softmax {algo:?} log={log}"));
                }
            }
            // Eight halves a load (rows of a multiple of 8): exactly the loads a row needs, and more (the
            // padded loads must not count).
            if *axis == -1 && r % 8 == 0 {
                for (l, extra) in [(16usize, 0usize), (64, 0), (16, 1)] {
                    let algo = SoftmaxAlgo::Reg8(l, (r / 8).div_ceil(l) + extra);
                    let y = ops::softmax_with(&x, -1, log, Some(algo)).expect("forced forward");
                    assert_eq!(y.dtype(), DType::F16);
                    assert_rounded(&y, &yw, 1e-4, 1e-3, &format!("softmax {algo:?} log={log}"));
                }
                // An f32 row is not read eight halves at a time: the error says why and nothing runs.
                let xf = x.cast(DType::F32).expect("f32");
                let e = ops::softmax_with(&xf, -1, log, Some(SoftmaxAlgo::Reg8(16, 4)))
                    .expect_err("reg8 of an f32 row");
                assert!(e.to_string().contains("reg8"), "{e}");
            }
            // Backward from the f16 output (the reference reads the same f16 output, widened).
            let yr = y
                .to_device(&cpu())
                .and_then(|t| t.cast(DType::F32))
                .expect("y");
            let gx = ops::softmax_backward_with(&y, &g, *axis, log, None).expect("backward");
            assert_eq!(gx.dtype(), DType::F16);
            let want =
                ops::softmax_backward_with(&yr, &gw, *axis, log, None).expect("ref backward");
            assert_rounded(&gx, &want, 1e-3, 4e-3, &format!("softmax bwd log={log}"));
        }
    }
}

#[test]
fn norms_of_f16_keep_f32_statistics() {
    let Some(dev) = opencl_device() else { return };
    let (x, xw) = halves(&dev, &[6, 37], 90);
    let gamma = Tensor::randn(&cpu(), &[37], 1.0, 0.1, 91).expect("gamma");
    let beta = Tensor::randn(&cpu(), &[37], 0.0, 0.1, 92).expect("beta");
    let (gd, bd) = (
        gamma.to_device(&dev).expect("g"),
        beta.to_device(&dev).expect("b"),
    );
    let got = ops::layer_norm(&x, 1, Some(&gd), Some(&bd), 1e-5).expect("layer_norm");
    assert_eq!(
        (got.y.dtype(), got.mean.dtype(), got.rstd.dtype()),
        (DType::F16, DType::F32, DType::F32)
    );
    let want = ops::layer_norm(&xw, 1, Some(&gamma), Some(&beta), 1e-5).expect("reference");
    assert_rounded(&got.y, &want.y, 1e-3, 1e-3, "layer_norm y");
    assert_read_close(&got.rstd, &want.rstd, 1e-5, 1e-4, "layer_norm rstd");
    let (g, gw) = halves(&dev, &[6, 37], 93);
    let gr = ops::layer_norm_backward(&x, &g, &got, 1, Some(&gd), true).expect("backward");
    assert_eq!(gr.dx.dtype(), DType::F16, "dx in x's dtype");
    assert_eq!(
        gr.dgamma.as_ref().map(Tensor::dtype),
        Some(DType::F32),
        "dγ in γ's dtype"
    );
    let wr =
        ops::layer_norm_backward(&xw, &gw, &want, 1, Some(&gamma), true).expect("ref backward");
    assert_rounded(&gr.dx, &wr.dx, 2e-3, 4e-3, "layer_norm dx");
    let dg = gr.dgamma.as_ref().map(read).unwrap_or_default();
    let wg = wr.dgamma.as_ref().map(read).unwrap_or_default();
    assert_close(&dg, &wg, 1e-2, 4e-3, "layer_norm dgamma");

    let got = ops::rms_norm(&x, Some(&gd), 1e-6).expect("rms_norm");
    assert_eq!(got.y.dtype(), DType::F16);
    let want = ops::rms_norm(&xw, Some(&gamma), 1e-6).expect("reference");
    assert_rounded(&got.y, &want.y, 1e-3, 1e-3, "rms_norm y");
    // Squares past f16's range: the mean of squares is f32, so rms_norm of large f16 values stays finite.
    let big = Tensor::full(&dev, &[2, 8], 1000.0)
        .and_then(|t| t.cast(DType::F16))
        .expect("big");
    let y = ops::rms_norm(&big, None, 1e-6).expect("rms_norm big");
    assert_close(&read(&y.y), &[1.0; 16], 1e-3, 1e-3, "rms_norm of 1000s");

    let (x4, x4w) = halves(&dev, &[2, 3, 5, 7], 94);
    let (rm, rv) = (
        Tensor::zeros(&dev, &[3]).expect("rm"),
        Tensor::ones(&dev, &[3]).expect("rv"),
    );
    let (rmc, rvc) = (
        Tensor::zeros(&cpu(), &[3]).expect("rm"),
        Tensor::ones(&cpu(), &[3]).expect("rv"),
    );
    let got = ops::batch_norm2d(&x4, None, None, &rm, &rv, 0.1, 1e-5, true).expect("bn");
    assert_eq!(got.out.y.dtype(), DType::F16);
    assert_eq!(got.running_mean.dtype(), DType::F32);
    let want = ops::batch_norm2d(&x4w, None, None, &rmc, &rvc, 0.1, 1e-5, true).expect("ref bn");
    assert_rounded(&got.out.y, &want.out.y, 1e-3, 1e-3, "batch_norm y");
    assert_read_close(
        &got.running_var,
        &want.running_var,
        1e-5,
        1e-4,
        "running var",
    );
}

#[test]
fn cross_entropy_of_f16_logits_is_f32() {
    let Some(dev) = opencl_device() else { return };
    let (x, xw) = halves(&dev, &[9, 11], 95);
    let labels: Vec<i32> = (0..9).map(|i| (i * 4) % 11).collect();
    let ld = Tensor::from_slice(&dev, &labels, &[9]).expect("labels");
    let lc = Tensor::from_slice(&cpu(), &labels, &[9]).expect("labels");
    let got = ops::cross_entropy(&x, &ld, -100).expect("ce");
    assert_eq!(got.dtype(), DType::F32);
    let want = ops::cross_entropy(&xw, &lc, -100).expect("ref ce");
    assert_read_close(&got, &want, 1e-5, 1e-5, "cross_entropy");
    let one = Tensor::ones(&dev, &[]).expect("one");
    let gx = ops::cross_entropy_backward(&x, &ld, &one, -100).expect("ce bwd");
    assert_eq!(gx.dtype(), DType::F16);
    let wx = ops::cross_entropy_backward(&xw, &lc, &Tensor::ones(&cpu(), &[]).expect("1"), -100)
        .expect("ref");
    assert_rounded(&gx, &wx, 1e-5, 1e-3, "cross_entropy backward");
}

#[test]
fn compute_bound_ops_widen_f16_on_the_device() {
    let Some(dev) = opencl_device() else { return };
    // GEMM and convolution read f32: f16 inputs are widened on the device and the output stored as f16.
    let (a, aw) = halves(&dev, &[13, 17], 100);
    let (b, bw) = halves(&dev, &[17, 9], 101);
    let got = ops::matmul(&a, &b).expect("matmul f16");
    assert_eq!(got.dtype(), DType::F16);
    let want = ops::matmul(&aw, &bw).expect("reference");
    assert_rounded(&got, &want, 1e-2, 2e-3, "matmul");
    let (x, xw) = halves(&dev, &[1, 3, 7, 9], 102);
    let (w, ww) = halves(&dev, &[4, 3, 3, 3], 103);
    let opts = Conv2dOptions::new().padding(1);
    let got = ops::conv2d(&x, &w, None, &opts).expect("conv f16");
    assert_eq!(got.dtype(), DType::F16);
    let want = ops::conv2d(&xw, &ww, None, &opts).expect("reference");
    assert_rounded(&got, &want, 1e-2, 2e-3, "conv2d");
    let (q, qw) = halves(&dev, &[1, 2, 11, 8], 104);
    let got = ops::flash_attention(&q, &q, &q, true, None).expect("attention f16");
    assert_eq!((got.out.dtype(), got.lse.dtype()), (DType::F16, DType::F32));
    let want = ops::flash_attention(&qw, &qw, &qw, true, None).expect("reference");
    assert_rounded(&got.out, &want.out, 1e-3, 2e-3, "attention");
}
