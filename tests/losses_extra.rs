//! Triplet, contrastive, InfoNCE and hinge losses: values against host formulas (netcl's definitions), gradients
//! against central finite differences in every input entry, the same on OpenCL as on the built-in device, and
//! the errors of bad arguments.
//!
//! Tolerances: values 1e-5 relative; finite differences with step 1e-3 within 5e-3 + 2e-2 relative (f32);
//! OpenCL within 1e-5.

mod common;

use netcl::autograd::{Var, no_grad};
use netcl::nn::{contrastive_loss, hinge_loss, info_nce_loss, triplet_loss};
use netcl::{Device, Tensor};

fn host(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().expect("read")
}

fn rows(v: &[f32], d: usize) -> Vec<&[f32]> {
    v.chunks(d).collect()
}

fn sq(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

/// Checks d loss / d input against central differences in every entry of `inputs[k]`.
fn fd_check(inputs: &[Var], f: &dyn Fn(&[Var]) -> Var, what: &str) {
    inputs.iter().for_each(|x| x.zero_grad());
    f(inputs).backward().expect("backward");
    for (k, x) in inputs.iter().enumerate() {
        let g = host(&x.grad().expect("gradient"));
        let base = host(x.value());
        for (i, &gi) in g.iter().enumerate().take(base.len()) {
            let fd = common::central_difference(x, &base, i, 1e-3, || {
                host(no_grad(|| f(inputs)).value())[0]
            });
            assert!(
                (fd - gi).abs() <= 5e-3 + 2e-2 * fd.abs().max(gi.abs()),
                "{what}: input {k}[{i}]: finite difference {fd}, gradient {gi}"
            );
        }
    }
}

fn params(dev: &Device, n: usize, d: usize, seeds: &[u64]) -> Vec<Var> {
    seeds
        .iter()
        .map(|&s| Var::param(Tensor::randn(dev, &[n, d], 0.0, 1.0, s).expect("x")))
        .collect()
}

#[test]
fn triplet_loss_values_and_gradients() {
    let dev = Device::builtin();
    let x = params(&dev, 5, 4, &[1, 2, 3]);
    for (margin, dist, red) in [(1.0, "squared", "mean"), (0.5, "euclidean", "sum")] {
        let l = triplet_loss(&x[0], &x[1], &x[2], margin, dist, red).expect("loss");
        let (a, p, n) = (host(x[0].value()), host(x[1].value()), host(x[2].value()));
        let per: Vec<f32> = rows(&a, 4)
            .iter()
            .zip(rows(&p, 4))
            .zip(rows(&n, 4))
            .map(|((a, p), n)| {
                let (dp, dn) = if dist == "squared" {
                    (sq(a, p), sq(a, n))
                } else {
                    ((sq(a, p) + 1e-8).sqrt(), (sq(a, n) + 1e-8).sqrt())
                };
                (dp - dn + margin).max(0.0)
            })
            .collect();
        let want: f32 = per.iter().sum::<f32>() / if red == "mean" { 5.0 } else { 1.0 };
        common::assert_close(&host(l.value()), &[want], 1e-5, 1e-5, "triplet value");
        fd_check(
            &x,
            &|v| triplet_loss(&v[0], &v[1], &v[2], margin, dist, red).expect("loss"),
            &format!("triplet {dist}"),
        );
    }
}

#[test]
fn contrastive_loss_values_and_gradients() {
    let dev = Device::builtin();
    let x = params(&dev, 6, 3, &[4, 5]);
    let labels = Tensor::from_slice(&dev, &[1i32, 0, 1, 0, 0, 1], &[6]).expect("labels");
    let l = contrastive_loss(&x[0], &x[1], &labels, 2.0, "mean").expect("loss");
    let (a, b) = (host(x[0].value()), host(x[1].value()));
    let want: f32 = rows(&a, 3)
        .iter()
        .zip(rows(&b, 3))
        .zip([1.0f32, 0.0, 1.0, 0.0, 0.0, 1.0])
        .map(|((a, b), y)| {
            let d2 = sq(a, b);
            let m = (2.0 - (d2 + 1e-8).sqrt()).max(0.0);
            y * d2 + (1.0 - y) * m * m
        })
        .sum::<f32>()
        / 6.0;
    common::assert_close(&host(l.value()), &[want], 1e-5, 1e-5, "contrastive value");
    fd_check(
        &x,
        &|v| contrastive_loss(&v[0], &v[1], &labels, 2.0, "mean").expect("loss"),
        "contrastive",
    );
    let bad = Tensor::from_slice(&dev, &[2i32, 0, 1, 0, 0, 1], &[6]).expect("bad");
    common::assert_refused(
        contrastive_loss(&x[0], &x[1], &bad, 1.0, "mean"),
        "label 2",
        "not 0",
    );
}

#[test]
fn info_nce_loss_values_and_gradients() {
    let dev = Device::builtin();
    let x = params(&dev, 4, 5, &[6, 7]);
    for (normalize, symmetric, red) in [(true, false, "mean"), (false, true, "sum")] {
        let t = 0.5f32;
        let l = info_nce_loss(&x[0], &x[1], t, normalize, red, symmetric).expect("loss");
        let norm = |v: Vec<f32>| -> Vec<f32> {
            if !normalize {
                return v;
            }
            v.chunks(5)
                .flat_map(|r| {
                    let n = r.iter().map(|x| x * x).sum::<f32>().sqrt() + 1e-8;
                    r.iter().map(move |x| x / n).collect::<Vec<_>>()
                })
                .collect()
        };
        let (q, k) = (norm(host(x[0].value())), norm(host(x[1].value())));
        let dir = |a: &[f32], b: &[f32]| -> Vec<f32> {
            (0..4)
                .map(|i| {
                    let s: Vec<f32> = (0..4)
                        .map(|j| (0..5).map(|d| a[i * 5 + d] * b[j * 5 + d]).sum::<f32>() / t)
                        .collect();
                    let m = s.iter().cloned().fold(f32::MIN, f32::max);
                    -s[i] + m + s.iter().map(|v| (v - m).exp()).sum::<f32>().ln()
                })
                .collect()
        };
        let mut per = dir(&q, &k);
        if symmetric {
            per = per
                .iter()
                .zip(dir(&k, &q))
                .map(|(a, b)| (a + b) / 2.0)
                .collect();
        }
        let want = per.iter().sum::<f32>() / if red == "mean" { 4.0 } else { 1.0 };
        common::assert_close(&host(l.value()), &[want], 1e-5, 1e-5, "info_nce value");
        fd_check(
            &x,
            &|v| info_nce_loss(&v[0], &v[1], t, normalize, red, symmetric).expect("loss"),
            &format!("info_nce normalize {normalize}"),
        );
    }
    common::assert_refused(
        info_nce_loss(&x[0], &x[1], 0.0, true, "mean", false),
        "τ = 0",
        "temperature",
    );
}

#[test]
fn hinge_loss_values_and_gradients_with_one_hot_or_index_targets() {
    let dev = Device::builtin();
    let x = params(&dev, 4, 3, &[8]);
    let idx = [2i32, 0, 1, 2];
    let labels = Tensor::from_slice(&dev, &idx, &[4]).expect("labels");
    let mut oh = vec![0.0f32; 12];
    for (i, &c) in idx.iter().enumerate() {
        oh[i * 3 + c as usize] = 1.0;
    }
    let onehot = Tensor::from_slice(&dev, &oh, &[4, 3]).expect("onehot");
    let l1 = hinge_loss(&x[0], &labels, 1.0).expect("indices");
    let l2 = hinge_loss(&x[0], &onehot, 1.0).expect("one-hot");
    let v = host(x[0].value());
    let want: f32 = (0..4)
        .map(|i| {
            let y = idx[i] as usize;
            (0..3)
                .filter(|&c| c != y)
                .map(|c| (1.0 - v[i * 3 + y] + v[i * 3 + c]).max(0.0))
                .sum::<f32>()
        })
        .sum::<f32>()
        / 4.0;
    common::assert_close(&host(l1.value()), &[want], 1e-5, 1e-5, "hinge (indices)");
    common::assert_close(&host(l2.value()), &[want], 1e-5, 1e-5, "hinge (one-hot)");
    fd_check(
        &x,
        &|v| hinge_loss(&v[0], &labels, 1.0).expect("loss"),
        "hinge",
    );
    common::assert_refused(
        hinge_loss(
            &x[0],
            &Tensor::from_slice(&dev, &[3i32, 0, 0, 0], &[4]).expect("t"),
            1.0,
        ),
        "label 3 of 3 classes",
        "outside",
    );
}

#[test]
fn the_losses_agree_on_opencl() {
    let Some(dev) = common::opencl_device() else {
        return;
    };
    let cpu = Device::builtin();
    let on = |d: &Device| -> Vec<f32> {
        let x = params(d, 6, 4, &[1, 2, 3]);
        let labels = Tensor::from_slice(d, &[1i32, 0, 1, 0, 1, 3], &[6]).expect("l");
        let pair = Tensor::from_slice(d, &[1i32, 0, 1, 0, 1, 0], &[6]).expect("p");
        let ls = [
            triplet_loss(&x[0], &x[1], &x[2], 1.0, "euclidean", "mean").expect("t"),
            contrastive_loss(&x[0], &x[1], &pair, 1.5, "sum").expect("c"),
            info_nce_loss(&x[0], &x[1], 0.1, true, "mean", true).expect("i"),
            hinge_loss(&x[0], &labels, 1.0).expect("h"),
        ];
        let mut out = Vec::new();
        for l in &ls {
            out.extend(host(l.value()));
            x.iter().for_each(|v| v.zero_grad());
            l.backward().expect("backward");
            out.extend(host(&x[0].grad().expect("g")));
        }
        out
    };
    common::assert_close(
        &on(&dev),
        &on(&cpu),
        1e-5,
        1e-5,
        "losses and gradients on OpenCL",
    );
}
