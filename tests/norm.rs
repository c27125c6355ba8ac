//! Normalisation and dropout on OpenCL against the built-in device, forward and backward, plus analytic
//! checks (unit statistics, the running-statistics update with the biased variance, finite differences of
//! layer_norm on the built-in device) and reproducible dropout masks.
//!
//! Tolerances: 1e-4 absolute + 1e-4 relative (several reductions chained in f32 against f64 passes).

mod common;
mod opsutil;

use common::{assert_close, assert_matches_fd, assert_tensors_close};
use netcl::Tensor;
use netcl::ops;
use opsutil::{cpu, opencl_device, pair};

fn close(a: &Tensor, b: &Tensor, what: &str) {
    assert_eq!(a.shape(), b.shape(), "{what}");
    assert_tensors_close(a, b, 1e-4, 1e-4, what);
}

/// Batch-norm inputs on the built-in device (`*c`) and the OpenCL device (`*d`).
struct BnCase {
    xc: Tensor,
    xd: Tensor,
    gamc: Tensor,
    gamd: Tensor,
    betc: Tensor,
    betd: Tensor,
    rmc: Tensor,
    rmd: Tensor,
    rvc: Tensor,
    rvd: Tensor,
}

/// x of `shape` (seed `seeds[0]`) plus `off`, γ and β per channel (seeds `seeds[1]`, `seeds[2]`), running mean
/// 0.5 and running variance 2.
fn bn_case(dev: &netcl::Device, shape: &[usize], off: f32, seeds: [u64; 3]) -> BnCase {
    let (xc0, _) = pair(dev, shape, seeds[0]);
    let xc = ops::add_scalar(&xc0, off).unwrap();
    let xd = xc.to_device(dev).unwrap();
    let c = shape[1];
    let (gamc, gamd) = pair(dev, &[c], seeds[1]);
    let (betc, betd) = pair(dev, &[c], seeds[2]);
    let rmc = Tensor::full(&cpu(), &[c], 0.5).unwrap();
    let rvc = Tensor::full(&cpu(), &[c], 2.0).unwrap();
    let (rmd, rvd) = (rmc.to_device(dev).unwrap(), rvc.to_device(dev).unwrap());
    BnCase {
        xc,
        xd,
        gamc,
        gamd,
        betc,
        betd,
        rmc,
        rmd,
        rvc,
        rvd,
    }
}

impl BnCase {
    /// Training batch_norm2d on the built-in device, with γ and β where `g` and `b`.
    fn reference(&self, g: bool, b: bool) -> ops::norm::BatchNormOut {
        let (gamma, beta) = (g.then_some(&self.gamc), b.then_some(&self.betc));
        ops::batch_norm2d(&self.xc, gamma, beta, &self.rmc, &self.rvc, 0.1, 1e-5, true).unwrap()
    }

    /// [`BnCase::reference`] on the OpenCL device, its kernels chosen by the device.
    fn device(&self, g: bool, b: bool) -> ops::norm::BatchNormOut {
        let (gamma, beta) = (g.then_some(&self.gamd), b.then_some(&self.betd));
        ops::batch_norm2d(&self.xd, gamma, beta, &self.rmd, &self.rvd, 0.1, 1e-5, true).unwrap()
    }

    /// [`BnCase::reference`] on the OpenCL device with its kernels forced to `algo`.
    fn forced(&self, g: bool, b: bool, algo: ops::norm::BatchNormAlgo) -> ops::norm::BatchNormOut {
        let (gamma, beta) = (g.then_some(&self.gamd), b.then_some(&self.betd));
        bn_forced(&self.xd, gamma, beta, &self.rmd, &self.rvd, algo)
    }
}

/// The device's training batch_norm2d output `od` against the reference `oc`: y, the batch statistics and the
/// running mean.
fn close_bn(od: &ops::norm::BatchNormOut, oc: &ops::norm::BatchNormOut, what: &str) {
    close(&od.out.y, &oc.out.y, &format!("{what} y"));
    close(&od.out.mean, &oc.out.mean, &format!("{what} mean"));
    close(&od.out.rstd, &oc.out.rstd, &format!("{what} rstd"));
    close(&od.running_mean, &oc.running_mean, &format!("{what} rm"));
}

/// Training batch_norm2d (momentum 0.1, ε 1e-5) with its kernels forced to `algo`.
fn bn_forced(
    x: &Tensor,
    gamma: Option<&Tensor>,
    beta: Option<&Tensor>,
    rm: &Tensor,
    rv: &Tensor,
    algo: ops::norm::BatchNormAlgo,
) -> ops::norm::BatchNormOut {
    ops::norm::batch_norm2d_with(x, gamma, beta, rm, rv, 0.1, 1e-5, true, Some(algo)).unwrap()
}

#[test]
fn batch_norm2d_training_eval_and_backward_match_reference() {
    let Some(dev) = opencl_device() else { return };
    let shape = [3, 5, 7, 6];
    let (xc, xd) = pair(&dev, &shape, 1);
    let (gc, gd) = pair(&dev, &shape, 2);
    let (gamc, gamd) = pair(&dev, &[5], 3);
    let (betc, betd) = pair(&dev, &[5], 4);
    let rmc = Tensor::zeros(&cpu(), &[5]).unwrap();
    let rvc = Tensor::ones(&cpu(), &[5]).unwrap();
    let (rmd, rvd) = (rmc.to_device(&dev).unwrap(), rvc.to_device(&dev).unwrap());
    for training in [true, false] {
        let od = ops::batch_norm2d(
            &xd,
            Some(&gamd),
            Some(&betd),
            &rmd,
            &rvd,
            0.1,
            1e-5,
            training,
        )
        .unwrap();
        let oc = ops::batch_norm2d(
            &xc,
            Some(&gamc),
            Some(&betc),
            &rmc,
            &rvc,
            0.1,
            1e-5,
            training,
        )
        .unwrap();
        close(&od.out.y, &oc.out.y, "bn y");
        close(&od.running_mean, &oc.running_mean, "bn running mean");
        close(&od.running_var, &oc.running_var, "bn running var");
        if training {
            let bd = ops::batch_norm2d_backward(&xd, &gd, &od.out, Some(&gamd), true).unwrap();
            let bc = ops::batch_norm2d_backward(&xc, &gc, &oc.out, Some(&gamc), true).unwrap();
            close(&bd.dx, &bc.dx, "bn dx");
            close(
                bd.dgamma.as_ref().unwrap(),
                bc.dgamma.as_ref().unwrap(),
                "bn dgamma",
            );
            close(
                bd.dbeta.as_ref().unwrap(),
                bc.dbeta.as_ref().unwrap(),
                "bn dbeta",
            );
            // Running var uses the biased batch variance: check channel 0 directly.
            let x = xc.to_vec::<f32>().unwrap();
            let ch0: Vec<f64> = (0..3)
                .flat_map(|n| (0..42).map(move |k| (n, k)))
                .map(|(n, k)| x[n * 5 * 42 + k] as f64)
                .collect();
            let m = ch0.iter().sum::<f64>() / ch0.len() as f64;
            let var = ch0.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / ch0.len() as f64;
            let rv = oc.running_var.to_vec::<f32>().unwrap()[0] as f64;
            assert!(
                (rv - (0.9 + 0.1 * var)).abs() < 1e-5,
                "{rv} vs {}",
                0.9 + 0.1 * var
            );
        }
    }
    let e = ops::batch_norm2d(
        &xd,
        None,
        None,
        &rmd,
        &Tensor::ones(&dev, &[4]).unwrap(),
        0.1,
        1e-5,
        true,
    )
    .unwrap_err();
    assert!(e.to_string().contains("running_var"), "{e}");
}

type NormFwd = fn(&Tensor, Option<&Tensor>, Option<&Tensor>) -> netcl::Result<ops::norm::NormOut>;
type NormBwd = fn(
    &Tensor,
    &Tensor,
    &ops::norm::NormOut,
    Option<&Tensor>,
) -> netcl::Result<ops::norm::NormGrads>;

/// One normalisation forward and backward on both devices, from seeded inputs of `shape` and affine
/// parameters of `param` (seeds `seed` to `seed + 3`): y, dx and dgamma (and dbeta with `with_beta`) agree.
fn check_norm(
    dev: &netcl::Device,
    what: &str,
    (shape, param, seed): (&[usize], &[usize], u64),
    (fwd, bwd): (NormFwd, NormBwd),
    with_beta: bool,
) {
    let (xc, xd) = pair(dev, shape, seed);
    let (gc, gd) = pair(dev, shape, seed + 1);
    let (wc, wd) = pair(dev, param, seed + 2);
    let (bc, bd) = pair(dev, param, seed + 3);
    let od = fwd(&xd, Some(&wd), Some(&bd)).unwrap();
    let oc = fwd(&xc, Some(&wc), Some(&bc)).unwrap();
    close(&od.y, &oc.y, &format!("{what} y"));
    let gd_ = bwd(&xd, &gd, &od, Some(&wd)).unwrap();
    let gc_ = bwd(&xc, &gc, &oc, Some(&wc)).unwrap();
    close(&gd_.dx, &gc_.dx, &format!("{what} dx"));
    let grads = [
        ("dgamma", &gd_.dgamma, &gc_.dgamma),
        ("dbeta", &gd_.dbeta, &gc_.dbeta),
    ];
    for (name, d, c) in &grads[..1 + usize::from(with_beta)] {
        let (d, c) = (d.as_ref().unwrap(), c.as_ref().unwrap());
        close(d, c, &format!("{what} {name}"));
    }
}

#[test]
fn layer_group_and_rms_norm_match_reference() {
    let Some(dev) = opencl_device() else { return };
    let ln: (NormFwd, NormBwd) = (
        |x, w, b| ops::layer_norm(x, 1, w, b, 1e-5),
        |x, g, o, w| ops::layer_norm_backward(x, g, o, 1, w, true),
    );
    check_norm(&dev, "ln", (&[4, 3, 10], &[10], 5), ln, true);
    // Without affine parameters each row has mean 0 and variance 1.
    let (xc, _) = pair(&dev, &[4, 3, 10], 5);
    let plain = ops::layer_norm(&xc, 2, None, None, 0.0).unwrap().y;
    let m = ops::mean(&plain, Some(&[1, 2]), false)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert!(m.iter().all(|v| v.abs() < 1e-5), "{m:?}");

    // The same inputs; rms_norm has no beta.
    let rms: (NormFwd, NormBwd) = (
        |x, w, _| ops::rms_norm(x, w, 1e-6),
        |x, g, o, w| ops::rms_norm_backward(x, g, o, w),
    );
    check_norm(&dev, "rms", (&[4, 3, 10], &[10], 5), rms, false);

    let gn: (NormFwd, NormBwd) = (
        |x, w, b| ops::group_norm(x, 3, w, b, 1e-5),
        |x, g, o, w| ops::group_norm_backward(x, g, o, 3, w, true),
    );
    check_norm(&dev, "gn", (&[2, 6, 3, 5], &[6], 9), gn, false);
    let (_, xd) = pair(&dev, &[2, 6, 3, 5], 9);
    assert!(ops::group_norm(&xd, 4, None, None, 1e-5).is_err());
}

#[test]
fn layer_norm_backward_matches_finite_differences() {
    // f32 central differences (h = 1e-2) of L = Σ g·y on the built-in device: 2e-2 relative.
    let d = cpu();
    let x0 = Tensor::randn(&d, &[2, 6], 0.0, 1.0, 31).unwrap();
    let g = Tensor::randn(&d, &[2, 6], 0.0, 1.0, 32).unwrap();
    let w = Tensor::randn(&d, &[6], 1.0, 0.2, 33).unwrap();
    let loss = |x: &Tensor| -> f64 {
        let y = ops::layer_norm(x, 1, Some(&w), None, 1e-5)
            .unwrap()
            .y
            .to_vec::<f32>()
            .unwrap();
        y.iter()
            .zip(g.to_vec::<f32>().unwrap())
            .map(|(a, b)| *a as f64 * b as f64)
            .sum()
    };
    let out = ops::layer_norm(&x0, 1, Some(&w), None, 1e-5).unwrap();
    let dx = ops::layer_norm_backward(&x0, &g, &out, 1, Some(&w), false)
        .unwrap()
        .dx
        .to_vec::<f32>()
        .unwrap();
    let xv = x0.to_vec::<f32>().unwrap();
    for i in 0..xv.len() {
        let h = 1e-2f32;
        let mut p = xv.clone();
        p[i] += h;
        let mut m = xv.clone();
        m[i] -= h;
        let fd = (loss(&Tensor::from_slice(&d, &p, &[2, 6]).unwrap())
            - loss(&Tensor::from_slice(&d, &m, &[2, 6]).unwrap()))
            / (2.0 * h as f64);
        assert_matches_fd(dx[i], fd, 2e-2, &format!("dx[{i}]"));
    }
}

#[test]
fn dropout_masks_are_identical_across_devices_and_reproducible() {
    let Some(dev) = opencl_device() else { return };
    let (xc, xd) = pair(&dev, &[1000, 37], 40);
    let a = ops::dropout(&xd, 0.3, 1234)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let b = ops::dropout(&xc, 0.3, 1234)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_close(&a, &b, 0.0, 1e-6, "dropout on both devices");
    assert_eq!(
        a,
        ops::dropout(&xd, 0.3, 1234)
            .unwrap()
            .to_vec::<f32>()
            .unwrap()
    );
    assert_ne!(
        a,
        ops::dropout(&xd, 0.3, 1235)
            .unwrap()
            .to_vec::<f32>()
            .unwrap()
    );
    let kept = a.iter().filter(|v| **v != 0.0).count() as f64 / a.len() as f64;
    assert!((kept - 0.7).abs() < 0.02, "kept fraction {kept}");
    let g = ops::dropout_backward(&xd, 0.3, 1234)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(g, a);
    for p in [-0.1f32, 1.0, f32::NAN] {
        let e = ops::dropout(&xd, p, 1).unwrap_err().to_string();
        assert!(e.contains("p ="), "{e}");
    }
    assert_eq!(
        ops::dropout(&xd, 0.0, 9).unwrap().to_vec::<f32>().unwrap(),
        xd.to_vec::<f32>().unwrap()
    );
}

/// Every training batch_norm2d kernel combination, forced, against the built-in device: planes of a multiple
/// of 4 (float4 paths) and not, chunks that split planes, batch 1, a large mean (the shifted sums), optional
/// γ/β, channels with NaN and ±inf, the apply that folds the statistics itself giving the statistics and
/// running statistics of the finishing kernel, and the invalid cases.
#[test]
fn batch_norm2d_training_kernels_match_reference() {
    use ops::norm::{BatchNormAlgo, BnApply, BnStats};
    let Some(dev) = opencl_device() else { return };
    let algos = [
        BatchNormAlgo {
            stats: BnStats::Wg(64, 1),
            apply: BnApply::Flat,
        },
        BatchNormAlgo {
            stats: BnStats::Wg(256, 7),
            apply: BnApply::Flat,
        },
        BatchNormAlgo {
            stats: BnStats::Wg(128, 3),
            apply: BnApply::Plane,
        },
        BatchNormAlgo {
            stats: BnStats::Item(1),
            apply: BnApply::Plane,
        },
        BatchNormAlgo {
            stats: BnStats::Item(5),
            apply: BnApply::Flat,
        },
        BatchNormAlgo {
            stats: BnStats::Wide(64, 1),
            apply: BnApply::Flat,
        },
        BatchNormAlgo {
            stats: BnStats::Wide(512, 2),
            apply: BnApply::Back,
        },
        BatchNormAlgo {
            stats: BnStats::Wide(128, 3),
            apply: BnApply::Flat,
        },
        BatchNormAlgo {
            stats: BnStats::Wg(64, 2),
            apply: BnApply::Back,
        },
        BatchNormAlgo {
            stats: BnStats::Wide(128, 5),
            apply: BnApply::Plane,
        },
        BatchNormAlgo {
            stats: BnStats::Wide(64, 1),
            apply: BnApply::Back,
        },
        BatchNormAlgo {
            stats: BnStats::Wide(256, 7),
            apply: BnApply::Back,
        },
        BatchNormAlgo {
            stats: BnStats::Wg(128, 3),
            apply: BnApply::Back,
        },
        BatchNormAlgo {
            stats: BnStats::Item(4),
            apply: BnApply::Back,
        },
        // One launch, with one chunk per channel, several, and more chunks than a channel has float4s.
        BatchNormAlgo {
            stats: BnStats::Wide(256, 1),
            apply: BnApply::Pipe,
        },
        BatchNormAlgo {
            stats: BnStats::Wide(64, 3),
            apply: BnApply::Pipe,
        },
        BatchNormAlgo {
            stats: BnStats::Wide(128, 40),
            apply: BnApply::Pipe,
        },
        // One launch reading x once: many chunks per channel, an odd hold, and one chunk per channel. It ends
        // on every device (a group that waits too long sums its channel itself), so it runs everywhere.
        BatchNormAlgo {
            stats: BnStats::Held(64, 1),
            apply: BnApply::Hold,
        },
        BatchNormAlgo {
            stats: BnStats::Held(32, 3),
            apply: BnApply::Hold,
        },
        BatchNormAlgo {
            stats: BnStats::Held(256, 16),
            apply: BnApply::Hold,
        },
    ];
    let algos = &algos;
    let shapes: [[usize; 4]; 7] = [
        [3, 5, 7, 6],
        [4, 3, 8, 8],
        [5, 4, 1, 3],
        [2, 2, 33, 17],
        [1, 3, 5, 8],
        [1, 2, 9, 9],
        [3, 2, 32, 44],
    ];
    for (k, shape) in shapes.iter().enumerate() {
        // Shifted by 100 in every other shape: the variance must survive a large mean.
        let off = if k % 2 == 1 { 100.0 } else { 0.0 };
        let k = k as u64;
        let case = bn_case(&dev, shape, off, [40 + k, 50 + k, 60 + k]);
        for &algo in algos {
            for (g, b) in [(true, true), (false, true), (true, false), (false, false)] {
                let what = format!("bn {shape:?} +{off} {algo:?} gamma {g} beta {b}");
                let od = case.forced(g, b, algo);
                let oc = case.reference(g, b);
                close_bn(&od, &oc, &what);
                // The running variance carries the batch variance, whose error grows with the mean² · ε.
                assert_tensors_close(
                    &od.running_var,
                    &oc.running_var,
                    1e-3,
                    1e-4,
                    &format!("{what} rv"),
                );
            }
        }
    }
    // The apply that folds the partials itself stores the statistics bn_finish stores for the same pass.
    {
        let (xc, _) = pair(&dev, &[3, 5, 12, 12], 80);
        let xd = ops::add_scalar(&xc, 50.0).unwrap().to_device(&dev).unwrap();
        let (_, gam) = pair(&dev, &[5], 81);
        let rm = Tensor::full(&dev, &[5], 0.25).unwrap();
        let rv = Tensor::full(&dev, &[5], 3.0).unwrap();
        let run = |apply| {
            let stats = if apply == BnApply::Hold {
                BnStats::Held(64, 2)
            } else {
                BnStats::Wide(64, 3)
            };
            let algo = BatchNormAlgo { stats, apply };
            let o = ops::norm::batch_norm2d_with(
                &xd,
                Some(&gam),
                None,
                &rm,
                &rv,
                0.1,
                1e-5,
                true,
                Some(algo),
            )
            .unwrap();
            [o.out.mean, o.out.rstd, o.running_mean, o.running_var]
                .map(|t| t.to_vec::<f32>().unwrap())
        };
        let want = run(BnApply::Flat);
        for apply in [BnApply::Plane, BnApply::Back, BnApply::Pipe, BnApply::Hold] {
            for (k, (g, w)) in run(apply).iter().zip(&want).enumerate() {
                assert_close(g, w, 0.0, 1e-6, &format!("{apply:?} statistic {k}"));
            }
        }
    }
    // A NaN in channel 1, +inf inside channel 2 and -inf as the first element of channel 3 (the shift then
    // falls back to 0) make those channels' outputs NaN and leave channel 0 as it was.
    let shape = [2, 4, 4, 4];
    let (xc, _) = pair(&dev, &shape, 70);
    let mut v = xc.to_vec::<f32>().unwrap();
    v[16 + 5] = f32::NAN;
    v[64 + 32 + 7] = f32::INFINITY;
    v[48] = f32::NEG_INFINITY;
    let xc = Tensor::from_slice(&cpu(), &v, &shape).unwrap();
    let xd = xc.to_device(&dev).unwrap();
    let rm = Tensor::zeros(&dev, &[4]).unwrap();
    let rv = Tensor::ones(&dev, &[4]).unwrap();
    let (rmc, rvc) = (rm.to_device(&cpu()).unwrap(), rv.to_device(&cpu()).unwrap());
    for &algo in algos {
        let od =
            ops::norm::batch_norm2d_with(&xd, None, None, &rm, &rv, 0.1, 1e-5, true, Some(algo))
                .unwrap();
        let oc = ops::batch_norm2d(&xc, None, None, &rmc, &rvc, 0.1, 1e-5, true).unwrap();
        let y = od.out.y.to_vec::<f32>().unwrap();
        assert!(y[16..64].iter().all(|v| v.is_nan()), "{algo:?}");
        assert!(y[..16].iter().all(|v| v.is_finite()), "{algo:?}");
        close(&od.out.y, &oc.out.y, &format!("bn NaN {algo:?}"));
        close(&od.out.mean, &oc.out.mean, &format!("bn NaN mean {algo:?}"));
        close(
            &od.running_mean,
            &oc.running_mean,
            &format!("bn NaN rm {algo:?}"),
        );
        close(
            &od.running_var,
            &oc.running_var,
            &format!("bn NaN rv {algo:?}"),
        );
    }
    // Invalid algorithms and an empty batch are errors.
    for bad in [
        BatchNormAlgo {
            stats: BnStats::Wg(100, 1),
            apply: BnApply::Flat,
        },
        BatchNormAlgo {
            stats: BnStats::Item(0),
            apply: BnApply::Plane,
        },
        BatchNormAlgo {
            stats: BnStats::Wide(96, 4),
            apply: BnApply::Back,
        },
        BatchNormAlgo {
            stats: BnStats::Wg(64, 4),
            apply: BnApply::Pipe,
        },
        BatchNormAlgo {
            stats: BnStats::Held(64, 4),
            apply: BnApply::Back,
        },
        BatchNormAlgo {
            stats: BnStats::Wide(64, 4),
            apply: BnApply::Hold,
        },
        BatchNormAlgo {
            stats: BnStats::Held(64, 0),
            apply: BnApply::Hold,
        },
        BatchNormAlgo {
            stats: BnStats::Held(64, 33),
            apply: BnApply::Hold,
        },
        BatchNormAlgo {
            stats: BnStats::Held(48, 4),
            apply: BnApply::Hold,
        },
    ] {
        let e = ops::norm::batch_norm2d_with(&xd, None, None, &rm, &rv, 0.1, 1e-5, true, Some(bad))
            .unwrap_err();
        assert!(e.to_string().contains("not valid"), "{e}");
    }
    let empty = Tensor::zeros(&dev, &[0, 4, 4, 4]).unwrap();
    let e = ops::batch_norm2d(&empty, None, None, &rm, &rv, 0.1, 1e-5, true).unwrap_err();
    assert!(e.to_string().contains("at least one element"), "{e}");
}

/// The one-launch kernels with `NETCL_BN_POLLS=0`, in a child process: every group that would wait for other
/// groups' partials sums its channel itself instead, the path a device that does not run work-groups side by
/// side takes. The results must not change.
#[test]
fn one_launch_batch_norm_without_waiting_matches_reference() {
    if opencl_device().is_none() {
        return;
    }
    let name = "one_launch_batch_norm_child";
    let out = common::child_command(name)
        .env("NETCL_BN_POLLS", "0")
        .output()
        .unwrap();
    common::child_test_output(name, "NETCL_BN_POLLS=0", &out);
}

#[test]
#[ignore = "run by one_launch_batch_norm_without_waiting_matches_reference with NETCL_BN_POLLS=0"]
fn one_launch_batch_norm_child() {
    use ops::norm::{BatchNormAlgo, BnApply, BnStats};
    let Some(dev) = opencl_device() else { return };
    let algos = [
        (BnStats::Wide(64, 3), BnApply::Pipe),
        (BnStats::Wide(128, 1), BnApply::Pipe),
        (BnStats::Held(64, 1), BnApply::Hold),
        (BnStats::Held(32, 3), BnApply::Hold),
    ];
    for (k, shape) in [[3, 5, 7, 6], [2, 3, 33, 17], [4, 2, 16, 16]]
        .iter()
        .enumerate()
    {
        let k = k as u64;
        let case = bn_case(&dev, shape, 10.0, [90 + k, 95 + k, 99 + k]);
        let oc = case.reference(true, true);
        for (stats, apply) in algos {
            let algo = BatchNormAlgo { stats, apply };
            let od = case.forced(true, true, algo);
            let what = format!("{shape:?} {algo:?} without waiting");
            close_bn(&od, &oc, &what);
        }
    }
}

/// Training batch_norm2d's backward on the OpenCL device, every kernel forced (and the composed path), against
/// the built-in device: odd planes (H·W not a multiple of 4, and 1), float4 planes, more chunks than a channel
/// has units, a mean far from zero, with and without γ and β. Each channel's dx sums to zero (a property of the
/// normalisation: a shift of a whole channel leaves its output unchanged).
#[test]
fn batch_norm2d_backward_kernels_match_reference() {
    use ops::norm::BnBackAlgo;
    let Some(dev) = opencl_device() else { return };
    let algos = [
        BnBackAlgo::Composed,
        BnBackAlgo::Wg(64, 1),
        BnBackAlgo::Wg(256, 3),
        BnBackAlgo::Wg(64, 40),
        BnBackAlgo::Item(1),
        BnBackAlgo::Item(4),
        BnBackAlgo::Item(300),
    ];
    let cases: [(&[usize], f32); 5] = [
        (&[3, 5, 7, 6], 0.0),
        (&[2, 3, 4, 4], 0.0),
        (&[1, 7, 5, 3], 100.0),
        (&[5, 2, 1, 1], 0.0),
        (&[4, 9, 8, 12], -3.0),
    ];
    for (i, &(shape, off)) in cases.iter().enumerate() {
        let k = bn_case(&dev, shape, off, [40 + i as u64, 50, 60]);
        let (gc, gd) = pair(&dev, shape, 70 + i as u64);
        for (g, b) in [(true, true), (false, false), (true, false)] {
            let oc = k.reference(g, b);
            let od = k.device(g, b);
            let bc =
                ops::batch_norm2d_backward(&k.xc, &gc, &oc.out, g.then_some(&k.gamc), b).unwrap();
            for algo in algos {
                let what = format!("{shape:?} γ {g} β {b} {algo:?}");
                let bd = ops::norm::batch_norm2d_backward_with(
                    &k.xd,
                    &gd,
                    &od.out,
                    g.then_some(&k.gamd),
                    b,
                    Some(algo),
                )
                .unwrap();
                assert_eq!(bd.dgamma.is_some(), g, "{what} dgamma present");
                assert_eq!(bd.dbeta.is_some(), b, "{what} dbeta present");
                close(&bd.dx, &bc.dx, &format!("{what} dx"));
                if let (Some(d), Some(c)) = (&bd.dgamma, &bc.dgamma) {
                    close(d, c, &format!("{what} dgamma"));
                }
                if let (Some(d), Some(c)) = (&bd.dbeta, &bc.dbeta) {
                    close(d, c, &format!("{what} dbeta"));
                }
                let dx = bd.dx.to_vec::<f32>().unwrap();
                let (n, c, p) = (shape[0], shape[1], shape[2] * shape[3]);
                for ch in 0..c {
                    let s: f64 = (0..n)
                        .flat_map(|j| (0..p).map(move |q| (j * c + ch) * p + q))
                        .map(|at| dx[at] as f64)
                        .sum();
                    let scale: f64 = (0..n)
                        .flat_map(|j| (0..p).map(move |q| (j * c + ch) * p + q))
                        .map(|at| (dx[at] as f64).abs())
                        .sum();
                    assert!(
                        s.abs() <= 1e-4 * (1.0 + scale),
                        "{what}: channel {ch}'s dx sums to {s}"
                    );
                }
            }
        }
    }
    // With an activation after the layer, its gradient at the layer's output is folded into every kernel: the
    // result is the activation's backward followed by the plain backward, on the built-in device.
    use ops::norm::ActGrad;
    for (i, &(shape, off)) in cases.iter().enumerate() {
        let k = bn_case(&dev, shape, off, [80 + i as u64, 50, 60]);
        let (gc, gd) = pair(&dev, shape, 90 + i as u64);
        let oc = k.reference(true, true);
        let od = k.device(true, true);
        for (act, op) in [
            (ActGrad::Relu, ops::UnaryOp::Relu),
            (ActGrad::Clamp(0.0, 6.0), ops::UnaryOp::Clamp(0.0, 6.0)),
            (ActGrad::Clamp(-0.5, 0.5), ops::UnaryOp::Clamp(-0.5, 0.5)),
        ] {
            let masked = ops::unary_backward(op, &oc.out.y, &gc).unwrap();
            let bc =
                ops::batch_norm2d_backward(&k.xc, &masked, &oc.out, Some(&k.gamc), true).unwrap();
            // The mask matters here: some outputs fall outside the activation's open range.
            assert_ne!(
                masked.to_vec::<f32>().unwrap(),
                gc.to_vec::<f32>().unwrap(),
                "{shape:?} {act:?}: no gradient was masked"
            );
            for algo in algos {
                let what = format!("{shape:?} {act:?} {algo:?}");
                let bd = ops::norm::batch_norm2d_backward_act(
                    &k.xd,
                    &gd,
                    &od.out,
                    Some(&k.gamd),
                    true,
                    act,
                    Some(algo),
                )
                .unwrap();
                close(&bd.dx, &bc.dx, &format!("{what} dx"));
                close(
                    bd.dgamma.as_ref().unwrap(),
                    bc.dgamma.as_ref().unwrap(),
                    &format!("{what} dgamma"),
                );
                close(
                    bd.dbeta.as_ref().unwrap(),
                    bc.dbeta.as_ref().unwrap(),
                    &format!("{what} dbeta"),
                );
            }
        }
    }
    // A forced work-group size the device cannot run is refused by name.
    let k = bn_case(&dev, &[2, 3, 4, 4], 0.0, [1, 2, 3]);
    let od = ops::batch_norm2d(&k.xd, None, None, &k.rmd, &k.rvd, 0.1, 1e-5, true).unwrap();
    let e = ops::norm::batch_norm2d_backward_act(
        &k.xd,
        &k.xd,
        &od.out,
        None,
        false,
        ActGrad::Clamp(1.0, -1.0),
        None,
    )
    .unwrap_err();
    assert!(e.to_string().contains("not ordered"), "{e}");
    let e = ops::norm::batch_norm2d_backward_with(
        &k.xd,
        &k.xd,
        &od.out,
        None,
        false,
        Some(BnBackAlgo::Wg(100, 1)),
    )
    .unwrap_err();
    assert!(e.to_string().contains("power-of-two"), "{e}");
    // Statistics of another shape are refused.
    let e = ops::batch_norm2d_backward(
        &k.xd,
        &k.xd,
        &ops::norm::NormOut {
            y: od.out.y.clone(),
            mean: Tensor::zeros(&dev, &[1, 4, 1, 1]).unwrap(),
            rstd: od.out.rstd.clone(),
        },
        None,
        false,
    )
    .unwrap_err();
    assert!(e.to_string().contains("mean"), "{e}");
}
