//! The attention tests' shared check: one shape and layout on an OpenCL device against the built-in device.
#![allow(dead_code)]

use netcl::ops::{self, AttnAlgo};
use netcl::{Device, Tensor};

use super::common::assert_close;
use super::opsutil::pair;

/// The f32 values of `t`.
pub fn v(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

/// Forward (output and lse) and backward (dq, dk, dv) of `shape` with `algo` on `dev` against the reference
/// (with the tuner's layout where `algo` does not fit the device).
/// Tolerances: outputs and lse 2e-5 absolute + 1e-4 relative (f32 sums of up to 256 products against f64);
/// gradients 1e-4 + 1e-3 relative.
pub fn check(
    dev: &Device,
    shape: [usize; 4],
    causal: bool,
    scale: Option<f32>,
    algo: Option<AttnAlgo>,
    seed: u64,
) {
    let (qc, qd) = pair(dev, &shape, seed);
    let (kc, kd) = pair(dev, &shape, seed + 1);
    let (vc, vd) = pair(dev, &shape, seed + 2);
    let (gc, gd) = pair(dev, &shape, seed + 3);
    let what = format!("{shape:?} causal {causal} scale {scale:?} {algo:?}");
    let fc = ops::flash_attention(&qc, &kc, &vc, causal, scale).unwrap();
    // A layout too large for this device's local memory or work-group is refused with an error that says so;
    // the shape is then checked with the layout the tuner picks for the device.
    let (fd, algo) = match ops::flash_attention_with(&qd, &kd, &vd, causal, scale, algo) {
        Ok(f) => (f, algo),
        Err(netcl::Error::Invalid(m)) if algo.is_some() && m.contains("does not fit") => (
            ops::flash_attention_with(&qd, &kd, &vd, causal, scale, None).unwrap(),
            None,
        ),
        Err(e) => panic!("{what}: {e}"),
    };
    assert_close(&v(&fd.out), &v(&fc.out), 2e-5, 1e-4, &format!("out {what}"));
    assert_close(&v(&fd.lse), &v(&fc.lse), 2e-5, 1e-4, &format!("lse {what}"));
    let bc = ops::flash_attention_backward(&qc, &kc, &vc, &fc, &gc, causal, scale).unwrap();
    let bd = match ops::flash_attention_backward_with(&qd, &kd, &vd, &fd, &gd, causal, scale, algo)
    {
        Ok(b) => b,
        // The backward pass keeps more tiles than the forward one: a layout may fit one and not the other.
        Err(netcl::Error::Invalid(m)) if algo.is_some() && m.contains("does not fit") => {
            ops::flash_attention_backward_with(&qd, &kd, &vd, &fd, &gd, causal, scale, None)
                .unwrap()
        }
        Err(e) => panic!("{what}: {e}"),
    };
    assert_close(&v(&bd.dq), &v(&bc.dq), 1e-4, 1e-3, &format!("dq {what}"));
    assert_close(&v(&bd.dk), &v(&bc.dk), 1e-4, 1e-3, &format!("dk {what}"));
    assert_close(&v(&bd.dv), &v(&bc.dv), 1e-4, 1e-3, &format!("dv {what}"));
}
