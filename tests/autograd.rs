//! Gradients of every differentiable op and layer: central finite differences on the built-in device, and the
//! same gradients on the OpenCL device. Also the engine's semantics: accumulation, no_grad, retain_grad,
//! frozen parameters, and readable errors.

mod common;

use common::{Lcg, cpu, opencl_device};
use netcl::autograd::{Var, no_grad, ops as ag};
use netcl::nn::{Module, Upsample};
use netcl::ops::{Conv2dOptions, ConvTranspose2dOptions, Pool2d, UnaryOp};
use netcl::{Device, Tensor};

type Build = dyn Fn(&[Var]) -> netcl::Result<Var>;

/// Values that stay clear of kinks (|x| ≥ 0.1) and ties, in ±1.5.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut r = Lcg(seed);
    (0..n)
        .map(|i| {
            let v = (r.range(0, 2000) as f32 / 1000.0 - 1.0) * 1.4;
            let v = if v.abs() < 0.1 {
                v.signum() * 0.1 + v
            } else {
                v
            };
            v + i as f32 * 1e-4
        })
        .collect()
}

fn projection(n: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 37 % 11) as f32 - 5.0) / 5.0).collect()
}

/// L = Σ out ⊙ proj on the host, in f64.
fn loss(dev: &Device, build: &Build, inputs: &[(Vec<f32>, Vec<usize>)]) -> f64 {
    let vars: Vec<Var> = inputs
        .iter()
        .map(|(v, s)| Var::constant(Tensor::from_slice(dev, v, s).expect("input")))
        .collect();
    let out = build(&vars)
        .expect("forward")
        .value()
        .to_vec::<f32>()
        .expect("read");
    let p = projection(out.len());
    out.iter().zip(&p).map(|(a, b)| *a as f64 * *b as f64).sum()
}

/// Analytic gradients of L with respect to each input that requires one.
fn analytic(
    dev: &Device,
    build: &Build,
    inputs: &[(Vec<f32>, Vec<usize>)],
    grad_of: &[bool],
) -> Vec<Option<Vec<f32>>> {
    let vars: Vec<Var> = inputs
        .iter()
        .zip(grad_of)
        .map(|((v, s), &g)| {
            let t = Tensor::from_slice(dev, v, s).expect("input");
            if g { Var::param(t) } else { Var::constant(t) }
        })
        .collect();
    let out = build(&vars).expect("forward");
    let p = Tensor::from_slice(dev, &projection(out.value().numel()), out.shape()).expect("proj");
    out.backward_with(p).expect("backward");
    vars.iter()
        .zip(grad_of)
        .map(|(v, &g)| g.then(|| v.grad().expect("grad").to_vec::<f32>().expect("read")))
        .collect()
}

fn check(
    name: &str,
    build: &Build,
    inputs: Vec<(Vec<f32>, Vec<usize>)>,
    grad_of: &[bool],
    tol: f32,
) {
    let dev = cpu();
    let got = analytic(&dev, build, &inputs, grad_of);
    let h = 1e-2f32;
    for (k, g) in got.iter().enumerate() {
        let Some(g) = g else { continue };
        for i in 0..inputs[k].0.len() {
            let mut plus = inputs.clone();
            plus[k].0[i] += h;
            let mut minus = inputs.clone();
            minus[k].0[i] -= h;
            let num =
                ((loss(&dev, build, &plus) - loss(&dev, build, &minus)) / (2.0 * h as f64)) as f32;
            let scale = num.abs().max(g[i].abs()).max(1.0);
            assert!(
                (num - g[i]).abs() <= tol * scale,
                "{name}: input {k}[{i}]: analytic {} vs numeric {num}",
                g[i]
            );
        }
    }
    // The same gradients on the OpenCL device.
    if let Some(cl) = opencl_device() {
        let on_cl = analytic(&cl, build, &inputs, grad_of);
        for (k, (a, b)) in got.iter().zip(&on_cl).enumerate() {
            if let (Some(a), Some(b)) = (a, b) {
                for (i, (x, y)) in a.iter().zip(b).enumerate() {
                    assert!(
                        (x - y).abs() <= 2e-3 * x.abs().max(1.0),
                        "{name}: input {k}[{i}] cpu {x} vs opencl {y}"
                    );
                }
            }
        }
    }
}

fn inp(shape: &[usize], seed: u64) -> (Vec<f32>, Vec<usize>) {
    (values(shape.iter().product(), seed), shape.to_vec())
}

#[test]
fn elementwise_and_reductions() {
    check(
        "add broadcast",
        &|v| ag::add(&v[0], &v[1]),
        vec![inp(&[2, 3], 1), inp(&[3], 2)],
        &[true, true],
        2e-3,
    );
    check(
        "sub broadcast",
        &|v| ag::sub(&v[0], &v[1]),
        vec![inp(&[2, 1, 3], 3), inp(&[4, 1], 4)],
        &[true, true],
        2e-3,
    );
    check(
        "mul broadcast",
        &|v| ag::mul(&v[0], &v[1]),
        vec![inp(&[3, 4], 5), inp(&[3, 1], 6)],
        &[true, true],
        2e-3,
    );
    let pos = |s: &[usize], seed| {
        let (v, s) = inp(s, seed);
        (v.into_iter().map(|x| x.abs() + 0.5).collect::<Vec<_>>(), s)
    };
    check(
        "div",
        &|v| ag::div(&v[0], &v[1]),
        vec![inp(&[2, 3], 7), pos(&[2, 3], 8)],
        &[true, true],
        5e-3,
    );
    check(
        "sum axes",
        &|v| ag::sum(&v[0], Some(&[1]), false),
        vec![inp(&[2, 3, 2], 9)],
        &[true],
        2e-3,
    );
    check(
        "mean_all",
        &|v| ag::mean_all(&v[0]),
        vec![inp(&[5, 3], 10)],
        &[true],
        2e-3,
    );
    check(
        "scalars",
        &|v| ag::mul_scalar(&ag::add_scalar(&v[0], 0.5)?, -3.0),
        vec![inp(&[4], 11)],
        &[true],
        2e-3,
    );
    for (i, op) in [
        UnaryOp::Relu,
        UnaryOp::LeakyRelu(0.1),
        UnaryOp::Sigmoid,
        UnaryOp::Tanh,
        UnaryOp::GeluTanh,
        UnaryOp::GeluErf,
        UnaryOp::Silu,
        UnaryOp::Elu(1.0),
        UnaryOp::Softplus,
        UnaryOp::HardSwish,
        UnaryOp::Exp,
        UnaryOp::Abs,
    ]
    .into_iter()
    .enumerate()
    {
        check(
            op.name(),
            &move |v| ag::unary(op, &v[0]),
            vec![inp(&[7], 20 + i as u64)],
            &[true],
            5e-3,
        );
    }
}

#[test]
fn linear_algebra_and_convolutions() {
    check(
        "matmul",
        &|v| ag::matmul(&v[0], &v[1]),
        vec![inp(&[3, 4], 30), inp(&[4, 5], 31)],
        &[true, true],
        3e-3,
    );
    check(
        "linear",
        &|v| ag::linear(&v[0], &v[1], Some(&v[2])),
        vec![inp(&[2, 2, 3], 32), inp(&[6, 3], 33), inp(&[3], 34)],
        &[true, true, true],
        3e-3,
    );
    let opts = Conv2dOptions {
        stride: [2, 1],
        padding: [1, 1],
        ..Conv2dOptions::default()
    };
    check(
        "conv2d",
        &move |v| ag::conv2d(&v[0], &v[1], Some(&v[2]), &opts),
        vec![
            inp(&[1, 2, 5, 4], 35),
            inp(&[3, 2, 3, 3], 36),
            inp(&[3], 37),
        ],
        &[true, true, true],
        5e-3,
    );
    let grouped = Conv2dOptions {
        groups: 2,
        dilation: [2, 2],
        padding: [2, 2],
        ..Conv2dOptions::default()
    };
    check(
        "conv2d grouped dilated",
        &move |v| ag::conv2d(&v[0], &v[1], None, &grouped),
        vec![inp(&[2, 4, 4, 4], 38), inp(&[2, 2, 3, 3], 39)],
        &[true, true],
        5e-3,
    );
    check(
        "depthwise",
        &|v| ag::depthwise_conv2d(&v[0], &v[1], Some(&v[2]), 2, 1),
        vec![
            inp(&[1, 3, 5, 5], 40),
            inp(&[3, 1, 3, 3], 41),
            inp(&[3], 42),
        ],
        &[true, true, true],
        5e-3,
    );
    let t = ConvTranspose2dOptions {
        conv: Conv2dOptions {
            stride: [2, 2],
            padding: [1, 1],
            ..Conv2dOptions::default()
        },
        output_padding: [1, 1],
    };
    check(
        "conv_transpose2d",
        &move |v| ag::conv_transpose2d(&v[0], &v[1], Some(&v[2]), &t),
        vec![
            inp(&[1, 2, 3, 3], 43),
            inp(&[2, 3, 3, 3], 44),
            inp(&[3], 45),
        ],
        &[true, true, true],
        5e-3,
    );
}

#[test]
fn pooling_normalisation_and_losses() {
    check(
        "max_pool2d",
        &|v| ag::max_pool2d(&v[0], Pool2d::square(2, 2, 0)),
        vec![inp(&[1, 2, 4, 5], 50)],
        &[true],
        3e-3,
    );
    check(
        "avg_pool2d padded",
        &|v| ag::avg_pool2d(&v[0], Pool2d::square(3, 2, 1), true),
        vec![inp(&[1, 2, 5, 5], 51)],
        &[true],
        3e-3,
    );
    check(
        "global_avg_pool2d",
        &|v| ag::global_avg_pool2d(&v[0]),
        vec![inp(&[2, 3, 2, 3], 52)],
        &[true],
        3e-3,
    );
    let rm = || Tensor::zeros(&cpu(), &[3]).expect("rm");
    let rv = || Tensor::ones(&cpu(), &[3]).expect("rv");
    check(
        "batch_norm2d",
        &move |v| {
            let dev = v[0].value().device().clone();
            let (y, _, _) = ag::batch_norm2d_train(
                &v[0],
                &v[1],
                &v[2],
                &rm().to_device(&dev)?,
                &rv().to_device(&dev)?,
                0.1,
                1e-5,
            )?;
            Ok(y)
        },
        vec![inp(&[2, 3, 2, 2], 53), inp(&[3], 54), inp(&[3], 55)],
        &[true, true, true],
        1e-2,
    );
    check(
        "layer_norm",
        &|v| ag::layer_norm(&v[0], 1, &v[1], &v[2], 1e-5),
        vec![inp(&[3, 5], 56), inp(&[5], 57), inp(&[5], 58)],
        &[true, true, true],
        1e-2,
    );
    check(
        "group_norm",
        &|v| ag::group_norm(&v[0], 2, &v[1], &v[2], 1e-5),
        vec![inp(&[2, 4, 2, 2], 59), inp(&[4], 60), inp(&[4], 61)],
        &[true, true, true],
        1e-2,
    );
    check(
        "softmax",
        &|v| ag::softmax(&v[0], -1),
        vec![inp(&[3, 4], 62)],
        &[true],
        3e-3,
    );
    check(
        "log_softmax axis 0",
        &|v| ag::log_softmax(&v[0], 0),
        vec![inp(&[3, 4], 63)],
        &[true],
        3e-3,
    );
    let labels = || Tensor::from_slice(&cpu(), &[2i32, 0, 3], &[3]).expect("labels");
    check(
        "cross_entropy",
        &move |v| ag::cross_entropy(&v[0], &labels().to_device(v[0].value().device())?, -100),
        vec![inp(&[3, 4], 64)],
        &[true],
        3e-3,
    );
    check(
        "nll_loss",
        &move |v| {
            ag::nll_loss(
                &ag::log_softmax(&v[0], 1)?,
                &labels().to_device(v[0].value().device())?,
            )
        },
        vec![inp(&[3, 4], 65)],
        &[true],
        3e-3,
    );
    check(
        "mse",
        &|v| ag::mse_loss(&v[0], &v[1]),
        vec![inp(&[6], 66), inp(&[6], 67)],
        &[true, true],
        3e-3,
    );
    check(
        "l1",
        &|v| ag::l1_loss(&v[0], &v[1]),
        vec![inp(&[6], 68), inp(&[6], 69)],
        &[true, true],
        3e-3,
    );
    check(
        "smooth_l1",
        &|v| ag::smooth_l1_loss(&v[0], &v[1], 0.5),
        vec![inp(&[6], 70), inp(&[6], 71)],
        &[true, true],
        5e-3,
    );
    let prob = |s: &[usize], seed| {
        let (v, s) = inp(s, seed);
        (
            v.into_iter()
                .map(|x| 0.5 + 0.3 * x / 1.6)
                .collect::<Vec<_>>(),
            s,
        )
    };
    check(
        "bce",
        &|v| ag::bce_loss(&v[0], &v[1]),
        vec![prob(&[5], 72), prob(&[5], 73)],
        &[true, true],
        5e-3,
    );
    check(
        "bce_with_logits",
        &|v| ag::bce_with_logits_loss(&v[0], &v[1]),
        vec![inp(&[5], 74), prob(&[5], 75)],
        &[true, true],
        5e-3,
    );
    check(
        "dropout",
        &|v| ag::dropout(&v[0], 0.3, 9),
        vec![inp(&[20], 76)],
        &[true],
        3e-3,
    );
    check(
        "upsample bilinear",
        &|v| {
            Upsample::new(
                2,
                netcl::ops::Upsample::Bilinear {
                    align_corners: false,
                },
            )?
            .forward(&v[0])
        },
        vec![inp(&[1, 1, 3, 3], 77)],
        &[true],
        3e-3,
    );
}

#[test]
fn gradients_accumulate_and_the_engine_rules_hold() {
    let dev = cpu();
    let x = Var::param(Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0], &[3]).expect("x"));
    // y = x·x + x: the same node reaches the sum twice; dy/dx = 2x + 1.
    let y = ag::sum_all(&ag::add(&ag::mul(&x, &x).expect("mul"), &x).expect("add")).expect("sum");
    y.backward().expect("backward");
    assert_eq!(
        x.grad().expect("grad").to_vec::<f32>().expect("read"),
        vec![3.0, 5.0, 7.0]
    );
    // A second backward accumulates until zero_grad.
    let y = ag::sum_all(&x).expect("sum");
    y.backward().expect("backward");
    assert_eq!(
        x.grad().expect("grad").to_vec::<f32>().expect("read"),
        vec![4.0, 6.0, 8.0]
    );
    x.zero_grad();
    assert!(x.grad().is_none());
    // retain_grad keeps an intermediate gradient; others are not kept.
    let h = ag::mul_scalar(&x, 2.0).expect("h");
    h.retain_grad();
    let h2 = ag::mul_scalar(&h, 3.0).expect("h2");
    ag::sum_all(&h2).expect("sum").backward().expect("backward");
    assert_eq!(
        h.grad().expect("retained").to_vec::<f32>().expect("read"),
        vec![3.0; 3]
    );
    assert!(h2.grad().is_none());
    // no_grad records nothing, and a backward through it is a readable error.
    let z = no_grad(|| ag::sum_all(&ag::mul(&x, &x).expect("mul")).expect("sum"));
    assert!(z.is_leaf() && !z.requires_grad());
    let e = z.backward().expect_err("nothing to differentiate");
    assert!(e.to_string().contains("does not depend"), "{e}");
    // A non-scalar loss needs backward_with.
    let e = ag::mul_scalar(&x, 1.0)
        .expect("v")
        .backward()
        .expect_err("not scalar");
    assert!(e.to_string().contains("one-element"), "{e}");
    // Frozen parameters receive nothing.
    let w = Var::param(Tensor::from_slice(&dev, &[2.0f32], &[1]).expect("w"));
    w.set_frozen(true);
    x.zero_grad();
    ag::sum_all(&ag::mul(&x, &w).expect("mul"))
        .expect("sum")
        .backward()
        .expect("backward");
    assert!(w.grad().is_none());
    assert_eq!(
        x.grad().expect("grad").to_vec::<f32>().expect("read"),
        vec![2.0; 3]
    );
}
