//! Pooling on OpenCL against the built-in device, forward and backward, for several kernels, strides and
//! paddings (odd sizes, overlapping and gapped windows), with NaN/±inf inputs, plus analytic values.
//!
//! Tolerances: max pooling and its backward exact (a gather of single values; sums of routed gradients in
//! a fixed order); average pooling 1e-6 absolute + 1e-5 relative.

mod common;
mod opsutil;

use common::assert_tensors_close;
use netcl::Tensor;
use netcl::ops::{self, Pool2d};
use opsutil::{cpu, opencl_device, pair, with_specials};

#[test]
fn pooling_matches_reference_forward_and_backward() {
    let Some(dev) = opencl_device() else { return };
    let geos = [
        ([2, 3, 8, 8], Pool2d::square(2, 2, 0)),
        ([1, 2, 7, 9], Pool2d::square(3, 2, 1)),
        (
            [2, 1, 11, 6],
            Pool2d {
                kernel: (3, 2),
                stride: (1, 3),
                padding: (1, 1),
            },
        ),
        ([1, 4, 5, 5], Pool2d::square(5, 1, 2)),
        ([3, 2, 9, 7], Pool2d::square(2, 3, 0)),
    ];
    for (k, (shape, p)) in geos.into_iter().enumerate() {
        let (xc, xd) = with_specials(&dev, &shape, 50 + k as u64);
        let md = ops::max_pool2d(&xd, p).unwrap();
        let mc = ops::max_pool2d(&xc, p).unwrap();
        let what = format!("{shape:?} {p:?}");
        assert_tensors_close(&md.y, &mc.y, 0.0, 0.0, &format!("max {what}"));
        assert_eq!(
            md.indices.to_vec::<i32>().unwrap(),
            mc.indices.to_vec::<i32>().unwrap(),
            "indices {what}"
        );
        let (gc, gd) = pair(&dev, md.y.shape(), 60 + k as u64);
        let bd = ops::max_pool2d_backward(&gd, &md, &shape, p).unwrap();
        let bc = ops::max_pool2d_backward(&gc, &mc, &shape, p).unwrap();
        assert_tensors_close(&bd, &bc, 1e-6, 1e-6, &format!("max bwd {what}"));
        let (xc, xd) = pair(&dev, &shape, 70 + k as u64);
        for incl in [true, false] {
            let ad = ops::avg_pool2d(&xd, p, incl).unwrap();
            let ac = ops::avg_pool2d(&xc, p, incl).unwrap();
            assert_tensors_close(&ad, &ac, 1e-6, 1e-5, &format!("avg {what}"));
            let bd = ops::avg_pool2d_backward(&gd, &shape, p, incl).unwrap();
            let bc = ops::avg_pool2d_backward(&gc, &shape, p, incl).unwrap();
            assert_tensors_close(&bd, &bc, 1e-6, 1e-5, &format!("avg bwd {what}"));
        }
        let gd_ = ops::global_avg_pool2d(&xd).unwrap();
        let gc_ = ops::global_avg_pool2d(&xc).unwrap();
        assert_tensors_close(&gd_, &gc_, 1e-6, 1e-5, "gap");
        let bd = ops::global_avg_pool2d_backward(&gd_, &shape).unwrap();
        let bc = ops::global_avg_pool2d_backward(&gc_, &shape).unwrap();
        assert_tensors_close(&bd, &bc, 1e-6, 1e-5, "gap bwd");
    }
}

#[test]
fn pooling_values_and_errors() {
    let d = cpu();
    let x = Tensor::from_slice(
        &d,
        &(0..16).map(|v| v as f32).collect::<Vec<_>>(),
        &[1, 1, 4, 4],
    )
    .unwrap();
    let m = ops::max_pool2d(&x, Pool2d::square(2, 2, 0)).unwrap();
    assert_eq!(m.y.to_vec::<f32>().unwrap(), vec![5.0, 7.0, 13.0, 15.0]);
    assert_eq!(m.indices.to_vec::<i32>().unwrap(), vec![5, 7, 13, 15]);
    let a = ops::avg_pool2d(&x, Pool2d::square(2, 2, 0), true).unwrap();
    assert_eq!(a.to_vec::<f32>().unwrap(), vec![2.5, 4.5, 10.5, 12.5]);
    assert!(ops::max_pool2d(&x, Pool2d::square(2, 2, 2)).is_err());
    assert!(ops::max_pool2d(&x, Pool2d::square(5, 1, 0)).is_err());
    assert!(ops::max_pool2d(&x.reshape(&[4, 4]).unwrap(), Pool2d::square(2, 2, 0)).is_err());
}
