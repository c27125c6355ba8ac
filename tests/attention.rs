//! Scaled dot-product attention on OpenCL against the built-in device (f64 accumulation): forward with its
//! log-sum-exp, backward (dq, dk, dv), decode against a KV cache, every kernel layout the device fits, causal
//! and not, on odd shapes (S = 1, 7, 33, 100; D = 40, 64, 128, 256); the reference backward against finite
//! differences; autograd; and the errors of bad input.
//!
//! Tolerances: outputs and lse 2e-5 absolute + 1e-4 relative (f32 sums of up to 256 products against f64);
//! gradients 1e-4 + 1e-3 relative; finite differences (f32 forward, step 1e-2) 3e-3 + 2e-2 relative.

mod common;
mod opsutil;

use common::assert_close;
use netcl::autograd::{self, Var};
use netcl::ops::{self, AttentionOut, AttnAlgo, DecodeAlgo};
use netcl::{DType, Error, Tensor};
use opsutil::{cpu, opencl_device, pair};

fn v(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

/// Forward and backward of one shape and layout on `dev` against the built-in device.
fn check(dev: &netcl::Device, shape: [usize; 4], causal: bool, scale: Option<f32>, algo: Option<AttnAlgo>, seed: u64) {
    let (qc, qd) = pair(dev, &shape, seed);
    let (kc, kd) = pair(dev, &shape, seed + 1);
    let (vc, vd) = pair(dev, &shape, seed + 2);
    let (gc, gd) = pair(dev, &shape, seed + 3);
    let what = format!("{shape:?} causal {causal} scale {scale:?} {algo:?}");
    let fc = ops::flash_attention(&qc, &kc, &vc, causal, scale).unwrap();
    let fd = ops::flash_attention_with(&qd, &kd, &vd, causal, scale, algo).unwrap();
    assert_close(&v(&fd.out), &v(&fc.out), 2e-5, 1e-4, &format!("out {what}"));
    assert_close(&v(&fd.lse), &v(&fc.lse), 2e-5, 1e-4, &format!("lse {what}"));
    let bc = ops::flash_attention_backward(&qc, &kc, &vc, &fc, &gc, causal, scale).unwrap();
    let bd = ops::flash_attention_backward_with(&qd, &kd, &vd, &fd, &gd, causal, scale, algo).unwrap();
    assert_close(&v(&bd.dq), &v(&bc.dq), 1e-4, 1e-3, &format!("dq {what}"));
    assert_close(&v(&bd.dk), &v(&bc.dk), 1e-4, 1e-3, &format!("dk {what}"));
    assert_close(&v(&bd.dv), &v(&bc.dv), 1e-4, 1e-3, &format!("dv {what}"));
}

#[test]
fn every_layout_matches_the_reference_at_d64() {
    let Some(dev) = opencl_device() else { return };
    let layouts = [
        None,
        Some(AttnAlgo::Rows(1)),
        Some(AttnAlgo::Rows(2)),
        Some(AttnAlgo::Rows(4)),
        Some(AttnAlgo::Tile(16, 16, 4)),
        Some(AttnAlgo::Tile(16, 32, 8)),
        Some(AttnAlgo::Tile(32, 32, 8)),
        Some(AttnAlgo::Tile(8, 16, 16)),
    ];
    for (i, algo) in layouts.into_iter().enumerate() {
        for causal in [false, true] {
            check(&dev, [2, 1, 33, 64], causal, None, algo, 10 + i as u64);
        }
    }
    check(&dev, [1, 2, 7, 64], true, Some(0.3), Some(AttnAlgo::Tile(16, 16, 4)), 40);
    check(&dev, [1, 1, 1, 64], true, None, Some(AttnAlgo::Tile(32, 32, 8)), 41);
}

#[test]
fn odd_shapes_and_head_dims_match_the_reference() {
    let Some(dev) = opencl_device() else { return };
    let cases: &[([usize; 4], AttnAlgo)] = &[
        ([1, 1, 1, 40], AttnAlgo::Rows(2)),
        ([1, 2, 7, 40], AttnAlgo::Tile(16, 16, 4)),
        ([2, 1, 100, 64], AttnAlgo::Rows(4)),
        ([1, 1, 100, 64], AttnAlgo::Tile(32, 32, 8)),
        ([1, 2, 33, 128], AttnAlgo::Rows(2)),
        ([1, 1, 33, 128], AttnAlgo::Tile(16, 16, 16)),
        ([1, 1, 7, 256], AttnAlgo::Rows(1)),
        ([1, 1, 33, 256], AttnAlgo::Tile(8, 16, 16)),
    ];
    for (i, &(shape, algo)) in cases.iter().enumerate() {
        for causal in [false, true] {
            check(&dev, shape, causal, None, Some(algo), 100 + i as u64);
        }
    }
    check(&dev, [1, 1, 100, 256], true, None, None, 120);
}
