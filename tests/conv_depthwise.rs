//! Depthwise convolution: every OpenCL algorithm against the built-in device, forward and backward.
//!
//! Tolerance: |got − want| ≤ 2e-4 + 1e-4·|want| (at most 49 products per output; grad_w sums up to a few
//! thousand products, so 2e-3 absolute there).

mod common;

use common::{Lcg, assert_close};
use netcl::ops::{self, DwAlgo};
use netcl::{Device, Error, Tensor};

/// Devices selected once per process (concurrent platform enumeration can crash PoCL 3.1).
fn devices() -> &'static (Option<Device>, Device) {
    static DEVS: std::sync::OnceLock<(Option<Device>, Device)> = std::sync::OnceLock::new();
    DEVS.get_or_init(|| (common::opencl_device(), common::cpu()))
}

fn pair(dev: &Device, shape: &[usize], seed: u64) -> (Tensor, Tensor) {
    let c = Tensor::randn(&devices().1, shape, 0.0, 1.0, seed).unwrap();
    let d = c.to_device(dev).unwrap();
    (c, d)
}

fn v(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

fn check(
    dev: &Device,
    x: [usize; 4],
    k: usize,
    s: usize,
    p: usize,
    algo: Option<DwAlgo>,
    seed: u64,
) {
    let what = format!("x {x:?} k {k} s {s} p {p} {algo:?}");
    let (xc, xd) = pair(dev, &x, seed);
    let (wc, wd) = pair(dev, &[x[1], 1, k, k], seed + 1);
    let (bc, bd) = pair(dev, &[x[1]], seed + 2);
    let want = ops::depthwise_conv2d_algo(&xc, &wc, Some(&bc), s, p, None).unwrap();
    let got = ops::depthwise_conv2d_algo(&xd, &wd, Some(&bd), s, p, algo).unwrap();
    assert_eq!(got.shape(), want.shape());
    assert_close(&v(&got), &v(&want), 2e-4, 1e-4, &format!("forward {what}"));
    let (gc, gd) = pair(dev, want.shape(), seed + 3);
    let want = ops::depthwise_conv2d_backward_algo(&xc, &wc, &gc, true, true, s, p, None).unwrap();
    let got = ops::depthwise_conv2d_backward_algo(&xd, &wd, &gd, true, true, s, p, algo).unwrap();
    assert_close(
        &v(got.grad_x.as_ref().unwrap()),
        &v(want.grad_x.as_ref().unwrap()),
        2e-4,
        1e-4,
        &format!("grad_x {what}"),
    );
    assert_close(
        &v(&got.grad_w),
        &v(&want.grad_w),
        2e-3,
        1e-4,
        &format!("grad_w {what}"),
    );
    assert_close(
        &v(got.grad_b.as_ref().unwrap()),
        &v(want.grad_b.as_ref().unwrap()),
        2e-3,
        1e-4,
        &format!("grad_b {what}"),
    );
}

const ALL: [DwAlgo; 9] = [
    DwAlgo::Local,
    DwAlgo::Rows,
    DwAlgo::Tile,
    DwAlgo::Naive,
    DwAlgo::Block1x4,
    DwAlgo::Block1x8,
    DwAlgo::Block4x2,
    DwAlgo::Block8x2,
    DwAlgo::Block8x4,
];

#[test]
fn every_algorithm_on_random_shapes() {
    let Some(dev) = devices().0.clone() else {
        return;
    };
    let mut rng = Lcg(21);
    for case in 0..6u64 {
        let k = [1, 3, 5, 7, 3, 2][case as usize];
        let s = 1 + (case as usize % 2);
        let p = rng.range(0, k / 2 + 1);
        let x = [
            rng.range(1, 2),
            rng.range(1, 5),
            k + rng.range(0, 40),
            k + rng.range(0, 37),
        ];
        for algo in ALL {
            check(&dev, x, k, s, p, Some(algo), 50 * case);
        }
    }
    // Measured choice.
    check(&dev, [2, 8, 20, 19], 3, 2, 1, None, 999);
}

/// Every kernel size 1..7, stride 1 and 2 and padding 0..3 (capped by the kernel size) at batch 1 and 2,
/// odd channel counts and widths that are not multiples of any block (narrower than a block too), so the
/// interior and border paths of the register blocks, their partial last blocks, the gather grad_x
/// (stride 2, or padding ≥ K at stride 1) and the grad_w bands all run.
#[test]
fn every_algorithm_on_odd_shapes() {
    let Some(dev) = devices().0.clone() else {
        return;
    };
    let mut rng = Lcg(7);
    let mut seed = 5000;
    for k in 1..=7 {
        for s in 1..=2 {
            let p = rng.range(0, 3.min(k));
            let wide = rng.range(0, 1) == 1;
            let x = [
                1 + rng.range(0, 1),
                [1, 3, 5, 7][rng.range(0, 3)],
                k + rng.range(0, 13),
                if wide {
                    k + rng.range(30, 61)
                } else {
                    k + rng.range(0, 9)
                },
            ];
            for algo in ALL {
                check(&dev, x, k, s, p, Some(algo), seed);
            }
            seed += 10;
        }
    }
    // Padding of K or more at stride 1: no flipped-filter convolution, grad_x by gathering. Rows of
    // 45 and 47 columns: interior blocks, shuffled border blocks and a partial last block in one row.
    for algo in ALL {
        check(&dev, [1, 3, 7, 45], 3, 1, 1, Some(algo), 6900);
        check(&dev, [1, 3, 9, 47], 3, 2, 1, Some(algo), 6910);
        check(&dev, [1, 2, 9, 47], 5, 2, 2, Some(algo), 6920);
        check(&dev, [1, 3, 9, 11], 2, 1, 2, Some(algo), 7000);
        check(&dev, [2, 5, 6, 40], 1, 1, 3, Some(algo), 7010);
    }
}

#[test]
fn block_algorithms_reject_large_filters() {
    let Some(dev) = devices().0.clone() else {
        return;
    };
    let x = Tensor::zeros(&dev, &[1, 2, 20, 20]).unwrap();
    let w = Tensor::zeros(&dev, &[2, 1, 9, 9]).unwrap();
    for algo in [
        DwAlgo::Block1x4,
        DwAlgo::Block1x8,
        DwAlgo::Block4x2,
        DwAlgo::Block8x2,
        DwAlgo::Block8x4,
    ] {
        let e = ops::depthwise_conv2d_algo(&x, &w, None, 1, 0, Some(algo)).unwrap_err();
        assert!(
            matches!(e, Error::Invalid(_)) && e.to_string().contains("K ≤ 7"),
            "{e}"
        );
        let go = Tensor::zeros(&dev, &[1, 2, 12, 12]).unwrap();
        let e = ops::depthwise_conv2d_backward_algo(&x, &w, &go, false, true, 1, 0, Some(algo))
            .unwrap_err();
        assert!(e.to_string().contains("K ≤ 7"), "{e}");
    }
    let w = Tensor::zeros(&dev, &[2, 1, 3, 3]).unwrap();
    let e = ops::depthwise_conv2d_algo(&x, &w, None, 3, 0, Some(DwAlgo::Block8x2)).unwrap_err();
    assert!(e.to_string().contains("stride 1 or 2"), "{e}");
}

#[test]
fn local_rejects_large_filters_and_strides() {
    let Some(dev) = devices().0.clone() else {
        return;
    };
    let x = Tensor::zeros(&dev, &[1, 2, 20, 20]).unwrap();
    let w = Tensor::zeros(&dev, &[2, 1, 9, 9]).unwrap();
    let e = ops::depthwise_conv2d_algo(&x, &w, None, 1, 0, Some(DwAlgo::Local)).unwrap_err();
    assert!(e.to_string().contains("K ≤ 7"), "{e}");
    // Every other algorithm handles it.
    assert!(ops::depthwise_conv2d_algo(&x, &w, None, 3, 0, Some(DwAlgo::Rows)).is_ok());
}

#[test]
fn bad_input_gives_clear_errors() {
    let d = devices().1.clone();
    let x = Tensor::zeros(&d, &[1, 4, 5, 5]).unwrap();
    let w = Tensor::zeros(&d, &[3, 1, 3, 3]).unwrap();
    let e = ops::depthwise_conv2d(&x, &w, None, 1, 1).unwrap_err();
    assert!(
        matches!(e, Error::Shape(_)) && e.to_string().contains("mismatched channels"),
        "{e}"
    );
    let w = Tensor::zeros(&d, &[4, 1, 3, 3]).unwrap();
    assert!(matches!(
        ops::depthwise_conv2d(&x, &w, None, 0, 1).unwrap_err(),
        Error::Invalid(_)
    ));
    let w = Tensor::zeros(&d, &[4, 1, 9, 9]).unwrap();
    assert!(
        ops::depthwise_conv2d(&x, &w, None, 1, 1)
            .unwrap_err()
            .to_string()
            .contains("larger than the padded input")
    );
}
