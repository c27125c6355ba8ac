//! Depthwise convolution: every OpenCL algorithm against the built-in device, forward and backward.
//!
//! Tolerance: |got − want| ≤ 2e-4 + 1e-4·|want| (at most 49 products per output; grad_w sums up to a few
//! thousand products, so 2e-3 absolute there).

mod common;
mod opsutil;

use common::{Lcg, assert_tensors_close};
use netcl::ops::{self, DwAlgo};
use netcl::{Device, Error, Tensor};
use opsutil::{assert_conv_grads_close, cpu, opencl_device, pair};

fn check(
    dev: &Device,
    x: [usize; 4],
    k: usize,
    s: usize,
    p: usize,
    algo: Option<DwAlgo>,
    seed: u64,
) {
    if algo == Some(DwAlgo::Block16x4) && s != 1 {
        // float16 rows: stride 1 only; forcing it elsewhere is an error, forward and backward.
        let xd = Tensor::zeros(dev, &x).unwrap();
        let wd = Tensor::zeros(dev, &[x[1], 1, k, k]).unwrap();
        let e = ops::depthwise_conv2d_algo(&xd, &wd, None, s, p, algo).unwrap_err();
        assert!(e.to_string().contains("stride 1 and"), "{e}");
        let y = ops::depthwise_conv2d(&xd, &wd, None, s, p).unwrap();
        let go = Tensor::zeros(dev, y.shape()).unwrap();
        let e = ops::depthwise_conv2d_backward_algo(&xd, &wd, &go, false, true, s, p, algo)
            .unwrap_err();
        assert!(e.to_string().contains("stride 1 and"), "{e}");
        return;
    }
    let what = format!("x {x:?} k {k} s {s} p {p} {algo:?}");
    let (xc, xd) = pair(dev, &x, seed);
    let (wc, wd) = pair(dev, &[x[1], 1, k, k], seed + 1);
    let (bc, bd) = pair(dev, &[x[1]], seed + 2);
    let want = ops::depthwise_conv2d_algo(&xc, &wc, Some(&bc), s, p, None).unwrap();
    let got = ops::depthwise_conv2d_algo(&xd, &wd, Some(&bd), s, p, algo).unwrap();
    assert_eq!(got.shape(), want.shape());
    assert_tensors_close(&got, &want, 2e-4, 1e-4, &format!("forward {what}"));
    let (gc, gd) = pair(dev, want.shape(), seed + 3);
    let want = ops::depthwise_conv2d_backward_algo(&xc, &wc, &gc, true, true, s, p, None).unwrap();
    let got = ops::depthwise_conv2d_backward_algo(&xd, &wd, &gd, true, true, s, p, algo).unwrap();
    assert_conv_grads_close(&got, &want, 2e-4, 2e-3, 1e-4, &what);
}

const ALL: [DwAlgo; 10] = [
    DwAlgo::Local,
    DwAlgo::Rows,
    DwAlgo::Tile,
    DwAlgo::Naive,
    DwAlgo::Block1x4,
    DwAlgo::Block1x8,
    DwAlgo::Block4x2,
    DwAlgo::Block8x2,
    DwAlgo::Block8x4,
    DwAlgo::Block16x4,
];

#[test]
fn every_algorithm_on_random_shapes() {
    let Some(dev) = opencl_device() else {
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
    let Some(dev) = opencl_device() else {
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

/// The device with zero input (1, 2, 20, 20) and a 9×9 depthwise filter, beyond the K ≤ 7 algorithms.
fn large_filter() -> Option<(Device, Tensor, Tensor)> {
    let dev = opencl_device()?;
    let x = Tensor::zeros(&dev, &[1, 2, 20, 20]).unwrap();
    let w = Tensor::zeros(&dev, &[2, 1, 9, 9]).unwrap();
    Some((dev, x, w))
}

#[test]
fn block_algorithms_reject_large_filters() {
    let Some((dev, x, w)) = large_filter() else {
        return;
    };
    // Every block algorithm: the last six of ALL.
    for algo in ALL[4..].iter().copied() {
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
    let Some((_, x, w)) = large_filter() else {
        return;
    };
    let e = ops::depthwise_conv2d_algo(&x, &w, None, 1, 0, Some(DwAlgo::Local)).unwrap_err();
    assert!(e.to_string().contains("K ≤ 7"), "{e}");
    // Every other algorithm handles it.
    assert!(ops::depthwise_conv2d_algo(&x, &w, None, 3, 0, Some(DwAlgo::Rows)).is_ok());
}

#[test]
fn bad_input_gives_clear_errors() {
    let d = cpu();
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

/// Runs the ignored test `name` of this binary in one child process per entry of `forces`, each with
/// `NETCL_AUTOTUNE_FORCE` set to it, all at once (kernel builds dominate on GPU drivers); asserts that each
/// passed and returns their outputs.
fn run_forced_children(name: &str, forces: &[String]) -> Vec<String> {
    let children: Vec<_> = forces
        .iter()
        .map(|force| {
            common::child_command(name)
                .env("NETCL_AUTOTUNE_FORCE", force)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children
        .into_iter()
        .zip(forces)
        .map(|(child, force)| {
            let out = child.wait_with_output().unwrap();
            common::child_test_output(name, force, &out)
        })
        .collect()
}

/// The grad_x kernels of a stride-2 convolution (`dwconv_bwd_x_s2`) and the grad_w units
/// (`dwconv_bwd_w_unit`) of the GPU register-block algorithms, each forced in a child process, against the
/// built-in device; a label that is not a candidate is refused.
#[test]
fn backward_kernel_variants() {
    if opencl_device().is_none() {
        return;
    }
    let gathers = ["pixel", "2x2", "4x2"];
    let units = ["col2", "col4", "col8"];
    let mut forces: Vec<String> = units
        .iter()
        .enumerate()
        .map(|(i, unit)| {
            format!(
                "dwconv_bwd_x_s2={};dwconv_bwd_w_unit={unit}",
                gathers[i % gathers.len()]
            )
        })
        .collect();
    forces.push("dwconv_bwd_x_s2=3x3".into());
    let texts = run_forced_children("backward_variant_child", &forces);
    for (i, unit) in units.iter().enumerate() {
        let gather = gathers[i % gathers.len()];
        assert!(
            texts[i].contains(&format!("forced {gather} {unit}")),
            "{gather} {unit}: {}",
            texts[i]
        );
    }
    assert!(
        texts[units.len()].contains("forced 3x3 rejected"),
        "{}",
        texts[units.len()]
    );
}

#[test]
#[ignore = "run by backward_kernel_variants with NETCL_AUTOTUNE_FORCE set"]
fn backward_variant_child() {
    let dev = opencl_device().expect("an OpenCL device");
    let label = common::forced_label;
    let gather = label("dwconv_bwd_x_s2").unwrap();
    if gather == "3x3" {
        let x = Tensor::zeros(&dev, &[1, 2, 9, 9]).unwrap();
        let w = Tensor::zeros(&dev, &[2, 1, 3, 3]).unwrap();
        let go = Tensor::zeros(&dev, &[1, 2, 5, 5]).unwrap();
        let e = ops::depthwise_conv2d_backward_algo(
            &x,
            &w,
            &go,
            false,
            true,
            2,
            1,
            Some(DwAlgo::Block1x4),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("NETCL_AUTOTUNE_FORCE") && e.contains("\"2x2\""),
            "{e}"
        );
        println!("forced 3x3 rejected");
        return;
    }
    let unit = label("dwconv_bwd_w_unit").unwrap();
    let seq = netcl::autotune::last_seq();
    // Stride 2: every kernel size, padding 0..3 (both parities), odd sizes that are no multiple of a block,
    // sizes smaller than one block, batch 1 and 2.
    let mut rng = Lcg(31);
    let mut seed = 8000;
    for k in 1..=7usize {
        for p in 0..=3.min(k) {
            let x = [
                1 + rng.range(0, 1),
                [1, 3, 5, 7][rng.range(0, 3)],
                (k.saturating_sub(2 * p)).max(1) + rng.range(0, 12),
                (k.saturating_sub(2 * p)).max(1) + rng.range(0, 20),
            ];
            check(&dev, x, k, 2, p, Some(DwAlgo::Block1x4), seed);
            seed += 10;
        }
    }
    // (x, k, stride, padding, seed); stride 1 takes the grad_w units too.
    let cases = [
        ([1, 3, 1, 1], 3, 2, 1, 8800),
        ([1, 5, 13, 3], 3, 2, 1, 8820),
        ([2, 7, 17, 23], 5, 2, 2, 8840),
        ([2, 3, 11, 29], 3, 1, 1, 8860),
        ([1, 5, 9, 7], 7, 1, 3, 8880),
    ];
    for (i, algo) in [DwAlgo::Block1x8, DwAlgo::Block4x2].into_iter().enumerate() {
        for (x, k, s, p, seed) in cases {
            check(&dev, x, k, s, p, Some(algo), seed + 10 * i as u64);
        }
    }
    // More channels than grad_w has bands in all (one band per channel), so each work-item walks several
    // units, across rows and samples.
    for (s, seed) in [(1, 8900), (2, 8910)] {
        check(
            &dev,
            [3, 2049, 33, 33],
            3,
            s,
            1,
            Some(DwAlgo::Block1x4),
            seed,
        );
    }
    let used = netcl::autotune::decisions_since(seq);
    for kernel in ["dwconv_bwd_x_s2", "dwconv_bwd_w_unit"] {
        let want = if kernel == "dwconv_bwd_x_s2" {
            &gather
        } else {
            &unit
        };
        let ds: Vec<_> = used.iter().filter(|d| d.kernel == kernel).collect();
        assert!(!ds.is_empty(), "no {kernel} decision: {used:?}");
        for d in ds {
            assert_eq!(d.source, netcl::autotune::Source::Forced, "{d:?}");
            assert_eq!(&d.winner_label, want, "{d:?}");
        }
    }
    println!("forced {gather} {unit}");
}
