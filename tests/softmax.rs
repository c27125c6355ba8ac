//! softmax / log_softmax (every axis, both row algorithms) and cross-entropy on OpenCL against the built-in
//! device (f64), forward and backward, with NaN/±inf inputs, ignore_index and label errors.
//!
//! Tolerances: 1e-6 absolute + 1e-5 relative on probabilities and gradients (exp and log within a few ulp),
//! cross-entropy loss 1e-5 relative.

mod common;
mod opsutil;

use common::{Lcg, assert_close, assert_tensors_close};
use netcl::Tensor;
use netcl::ops::{self, SoftmaxAlgo};
use opsutil::{cpu, opencl_device, pair, with_specials};

#[test]
fn softmax_forward_and_backward_match_reference() {
    let Some(dev) = opencl_device() else { return };
    let mut r = Lcg(21);
    let mut shapes: Vec<Vec<usize>> = vec![vec![1, 1], vec![5, 1000], vec![3, 4, 5]];
    for _ in 0..5 {
        let rank = r.range(1, 4);
        shapes.push((0..rank).map(|_| r.range(1, 33)).collect());
    }
    for (k, shape) in shapes.iter().enumerate() {
        let (xc, xd) = pair(&dev, shape, 300 + k as u64);
        let (gc, gd) = pair(&dev, shape, 400 + k as u64);
        for axis in 0..shape.len() as isize {
            for log in [false, true] {
                for algo in [
                    None,
                    Some(SoftmaxAlgo::Wg(64)),
                    Some(SoftmaxAlgo::Wg(256)),
                    Some(SoftmaxAlgo::Serial),
                ] {
                    let what = format!("{shape:?} axis {axis} log {log} {algo:?}");
                    let yd = ops::softmax_with(&xd, axis, log, algo).unwrap();
                    let yc = ops::softmax_with(&xc, axis, log, None).unwrap();
                    assert_tensors_close(&yd, &yc, 1e-6, 1e-5, &what);
                    let gxd = ops::softmax_backward_with(&yd, &gd, axis, log, algo).unwrap();
                    let gxc = ops::softmax_backward_with(&yc, &gc, axis, log, None).unwrap();
                    assert_tensors_close(&gxd, &gxc, 1e-5, 1e-4, &format!("backward {what}"));
                }
            }
        }
    }
}

#[test]
fn softmax_rows_sum_to_one_and_propagate_non_finite() {
    let Some(dev) = opencl_device() else { return };
    let (c, d) = with_specials(&dev, &[7, 9], 8);
    let got = ops::softmax(&d, -1).unwrap().to_vec::<f32>().unwrap();
    let want = ops::softmax(&c, -1).unwrap().to_vec::<f32>().unwrap();
    assert_close(&got, &want, 1e-6, 1e-5, "softmax with NaN/inf");
    let x = Tensor::randn(&dev, &[4, 50], 0.0, 3.0, 2).unwrap();
    let y = ops::softmax(&x, 1).unwrap();
    let s = ops::sum(&y, Some(&[1]), false)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert!(s.iter().all(|v| (v - 1.0).abs() < 1e-5), "{s:?}");
    assert!(ops::softmax(&x, 2).is_err_and(|e| e.to_string().contains("out of range")));
}

#[test]
fn cross_entropy_matches_reference_with_ignore_index() {
    let Some(dev) = opencl_device() else { return };
    for (n, c) in [(1usize, 3usize), (17, 10), (64, 301)] {
        let (xc, xd) = pair(&dev, &[n, c], (n * c) as u64);
        let labels: Vec<i32> = (0..n)
            .map(|i| {
                if i % 5 == 3 {
                    -100
                } else {
                    ((i * 7) % c) as i32
                }
            })
            .collect();
        let lc = Tensor::from_slice(&cpu(), &labels, &[n]).unwrap();
        let ld = lc.to_device(&dev).unwrap();
        let got = ops::cross_entropy(&xd, &ld, -100).unwrap();
        let want = ops::cross_entropy(&xc, &lc, -100).unwrap();
        assert_eq!(got.shape(), &[] as &[usize]);
        assert_tensors_close(&got, &want, 1e-6, 1e-5, "loss");
        let g = Tensor::from_slice(&dev, &[0.5f32], &[]).unwrap();
        let gcpu = Tensor::from_slice(&cpu(), &[0.5f32], &[]).unwrap();
        let gd = ops::cross_entropy_backward(&xd, &ld, &g, -100)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        let gc = ops::cross_entropy_backward(&xc, &lc, &gcpu, -100)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        assert_close(&gd, &gc, 1e-6, 1e-5, "cross-entropy gradient");
        // Ignored rows get no gradient.
        if n > 3 {
            assert!(gd[3 * c..4 * c].iter().all(|&v| v == 0.0));
        }
    }
}

#[test]
fn cross_entropy_equals_log_softmax_pick_and_rejects_bad_labels() {
    let Some(dev) = opencl_device() else { return };
    let x = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0, 0.0, 0.0, 0.0], &[2, 3]).unwrap();
    let l = Tensor::from_slice(&dev, &[2i32, 0], &[2]).unwrap();
    let loss = ops::cross_entropy(&x, &l, -100)
        .unwrap()
        .to_vec::<f32>()
        .unwrap()[0];
    let want = ((1f64.exp() + 2f64.exp() + 3f64.exp()).ln() - 3.0 + 3f64.ln()) / 2.0;
    assert!((loss as f64 - want).abs() < 1e-6, "{loss} vs {want}");
    let bad = Tensor::from_slice(&dev, &[3i32, 0], &[2]).unwrap();
    let e = ops::cross_entropy(&x, &bad, -100).unwrap_err().to_string();
    assert!(e.contains("label 3") && e.contains("row 0"), "{e}");
    let neg = Tensor::from_slice(&cpu(), &[0i32, -1], &[2]).unwrap();
    let xc = x.to_device(&cpu()).unwrap();
    assert!(ops::cross_entropy(&xc, &neg, -100).is_err_and(|e| e.to_string().contains("label -1")));
    let f = Tensor::zeros(&dev, &[2]).unwrap();
    assert!(ops::cross_entropy(&x, &f, -100).is_err());
}

/// Rows held in registers (`SoftmaxAlgo::Reg`), forward softmax and log_softmax, against the built-in device:
/// rows filling every work-item, rows that leave padding, several float4 per item, and non-finite values.
#[test]
fn softmax_rows_in_registers_match_reference() {
    let Some(dev) = opencl_device() else { return };
    let cases: &[(&[usize], SoftmaxAlgo)] = &[
        (&[7, 1024], SoftmaxAlgo::Reg(256, 1)),
        (&[3, 4100], SoftmaxAlgo::Reg(128, 9)),
        (&[5, 8], SoftmaxAlgo::Reg(128, 1)),
        (&[2, 3, 64], SoftmaxAlgo::Reg(64, 1)),
        (&[4, 2048], SoftmaxAlgo::Reg(64, 8)),
        // Fewer items than the reductions' 32 lanes.
        (&[3, 256], SoftmaxAlgo::Reg(16, 4)),
    ];
    for (k, &(shape, algo)) in cases.iter().enumerate() {
        for specials in [false, true] {
            let (xc, xd) = if specials {
                with_specials(&dev, shape, 80 + k as u64)
            } else {
                pair(&dev, shape, 80 + k as u64)
            };
            for log in [false, true] {
                let what = format!("{shape:?} {algo:?} log {log} specials {specials}");
                let yd = ops::softmax_with(&xd, -1, log, Some(algo)).unwrap();
                let yc = ops::softmax_with(&xc, -1, log, None).unwrap();
                assert_tensors_close(&yd, &yc, 1e-6, 1e-5, &what);
                // The backward accepts the forward's algorithm (it runs the work-group kernel).
                let gxd = ops::softmax_backward_with(&yd, &xd, -1, log, Some(algo)).unwrap();
                let gxc = ops::softmax_backward_with(&yc, &xc, -1, log, None).unwrap();
                assert_tensors_close(&gxd, &gxc, 1e-5, 1e-4, &format!("backward {what}"));
            }
        }
    }
    // Rows that are not a multiple of 4, or longer than the registers hold, are refused with a reason.
    let x = Tensor::ones(&dev, &[2, 10]).unwrap();
    let e = ops::softmax_with(&x, -1, false, Some(SoftmaxAlgo::Reg(128, 1))).unwrap_err();
    assert!(e.to_string().contains("multiple of 4"), "{e}");
    let x = Tensor::ones(&dev, &[2, 1024]).unwrap();
    assert!(ops::softmax_with(&x, -1, false, Some(SoftmaxAlgo::Reg(64, 2))).is_err());
}

/// A recorded cross-entropy checks its labels once: the forward reads its statistics back (so a bad label is an
/// error at once) and the backward reuses them, reading nothing more. The gradient equals the plain op's.
#[test]
fn a_recorded_cross_entropy_reads_the_device_once() {
    use netcl::autograd::{Var, ops as ag};
    use netcl::device::timing::host_reads;
    let Some(dev) = opencl_device() else { return };
    let (_, logits) = pair(&dev, &[6, 11], 77);
    let labels = Tensor::from_slice(&dev, &[0i32, 10, 3, -100, 5, 7], &[6]).unwrap();
    let x = Var::param(logits.clone());
    let before = host_reads();
    let loss = ag::cross_entropy(&x, &labels, -100).unwrap();
    loss.backward().unwrap();
    assert_eq!(
        host_reads() - before,
        1,
        "one read for the whole forward and backward"
    );
    let one = Tensor::from_slice(&dev, &[1.0f32], &[]).unwrap();
    let want = ops::cross_entropy_backward(&logits, &labels, &one, -100).unwrap();
    assert_tensors_close(&x.grad().unwrap(), &want, 0.0, 0.0, "recorded gradient");
    // A bad label is still refused by the recorded op, naming the row.
    let bad = Tensor::from_slice(&dev, &[0i32, 11, 3, 1, 5, 7], &[6]).unwrap();
    let err = ag::cross_entropy(&x, &bad, -100).unwrap_err().to_string();
    assert!(err.contains("label 11 of row 1"), "{err}");
}
