//! Optimisers: update rules against analytic values and the built-in device, state round trips, clipping, EMA.

mod common;

use common::{assert_close, cpu, opencl_device};
use netcl::autograd::Var;
use netcl::optim::{Ema, Optimizer, Rule, clip_grad_norm};
use netcl::{Device, Tensor};

fn param(dev: &Device, vals: &[f32]) -> Var {
    Var::param(Tensor::from_slice(dev, vals, &[vals.len()]).expect("param"))
}

fn set_grad(p: &Var, g: &[f32]) {
    p.zero_grad();
    p.backward_with(Tensor::from_slice(p.value().device(), g, p.shape()).expect("grad"))
        .expect("grad");
}

fn rules() -> Vec<Rule> {
    vec![
        Rule::Sgd {
            momentum: 0.0,
            nesterov: false,
            weight_decay: 0.0,
        },
        Rule::Sgd {
            momentum: 0.9,
            nesterov: false,
            weight_decay: 0.01,
        },
        Rule::Sgd {
            momentum: 0.9,
            nesterov: true,
            weight_decay: 0.0,
        },
        Rule::Adam {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
        },
        Rule::AdamW {
            beta1: 0.8,
            beta2: 0.99,
            eps: 1e-6,
            weight_decay: 0.1,
        },
        Rule::RmsProp {
            alpha: 0.9,
            eps: 1e-8,
            weight_decay: 0.0,
            momentum: 0.0,
        },
        Rule::RmsProp {
            alpha: 0.99,
            eps: 1e-6,
            weight_decay: 0.01,
            momentum: 0.5,
        },
    ]
}

fn run(dev: &Device, rule: Rule, steps: usize) -> Vec<f32> {
    let p = param(dev, &[0.5, -1.0, 2.0, 0.0, 3.0, -0.25, 1e-3]);
    let mut opt = Optimizer::new(vec![p.clone()], rule, 0.05).expect("optimizer");
    for s in 0..steps {
        let g: Vec<f32> = (0..7)
            .map(|i| ((i * 7 + s * 3) % 5) as f32 - 2.0 + 0.1 * i as f32)
            .collect();
        set_grad(&p, &g);
        opt.step().expect("step");
    }
    p.value().to_vec::<f32>().expect("read")
}

#[test]
fn every_rule_matches_the_reference_on_the_device() {
    let Some(dev) = opencl_device() else { return };
    for rule in rules() {
        let want = run(&cpu(), rule, 4);
        let got = run(&dev, rule, 4);
        // Same f32 operations in the same order; only FMA contraction may differ.
        assert_close(&got, &want, 1e-6, 1e-5, rule.name());
    }
}

/// One step of `opt` with gradient `g` on its parameter `p`, whose values must then be `want`.
fn check_step(mut opt: Optimizer, p: &Var, g: &[f32], want: &[f32], atol: f32, what: &str) {
    set_grad(p, g);
    opt.step().expect("step");
    let got = p.value().to_vec::<f32>().expect("read");
    assert_close(&got, want, atol, 0.0, what);
}

#[test]
fn first_steps_match_the_formulas() {
    let dev = cpu();
    let p = param(&dev, &[1.0, -2.0]);
    let sgd = Optimizer::sgd(vec![p.clone()], 0.1, 0.0, 0.0).expect("sgd");
    check_step(sgd, &p, &[0.5, -1.0], &[0.95, -1.9], 1e-7, "sgd");
    // Adam's first step moves each weight by lr·g/(|g| + ε) = ±lr.
    let p = param(&dev, &[1.0, -2.0]);
    let adam = Optimizer::adam(vec![p.clone()], 0.01, 0.0).expect("adam");
    check_step(adam, &p, &[3.0, -0.5], &[0.99, -1.99], 1e-6, "adam");
    // AdamW decays before the step: p ← p(1 − lr·wd) − lr·sign(g).
    let p = param(&dev, &[1.0]);
    let adamw = Optimizer::adamw(vec![p.clone()], 0.1, 0.5).expect("adamw");
    let want = [1.0 * (1.0 - 0.05) - 0.1];
    check_step(adamw, &p, &[2.0], &want, 1e-6, "adamw");
}

#[test]
fn frozen_parameters_and_missing_gradients_are_skipped() {
    let dev = cpu();
    let a = param(&dev, &[1.0]);
    let b = param(&dev, &[2.0]);
    let c = param(&dev, &[3.0]);
    let mut opt =
        Optimizer::sgd(vec![a.clone(), b.clone(), c.clone()], 1.0, 0.0, 0.0).expect("sgd");
    set_grad(&a, &[1.0]);
    set_grad(&b, &[1.0]);
    b.set_frozen(true);
    opt.step().expect("step");
    assert_eq!(a.value().to_vec::<f32>().expect("a"), vec![0.0]);
    assert_eq!(b.value().to_vec::<f32>().expect("b"), vec![2.0], "frozen");
    assert_eq!(
        c.value().to_vec::<f32>().expect("c"),
        vec![3.0],
        "no gradient"
    );
    opt.zero_grad();
    assert!(a.grad().is_none());
}

#[test]
fn state_round_trips_and_training_resumes_exactly() {
    let dev = cpu();
    let g = [0.3f32, -0.7, 1.1];
    let p1 = param(&dev, &[1.0, 2.0, 3.0]);
    let mut o1 = Optimizer::adamw(vec![p1.clone()], 0.01, 0.01).expect("o1");
    for _ in 0..3 {
        set_grad(&p1, &g);
        o1.step().expect("step");
    }
    let state = o1.state_dict().expect("state");
    assert_eq!(state.t, 3);
    let json = serde_json::to_string(&state).expect("serialise");
    let back: netcl::optim::OptimState = serde_json::from_str(&json).expect("parse");
    let p2 = Var::param(p1.value().deep_clone().expect("clone"));
    let mut o2 = Optimizer::adamw(vec![p2.clone()], 0.5, 0.0).expect("o2");
    o2.load_state_dict(&back).expect("load");
    assert_eq!(o2.lr(), 0.01);
    set_grad(&p1, &g);
    o1.step().expect("step");
    set_grad(&p2, &g);
    o2.step().expect("step");
    assert_eq!(
        p1.value().to_vec::<f32>().expect("p1"),
        p2.value().to_vec::<f32>().expect("p2")
    );
    // A mismatched state changes nothing.
    let mut sgd = Optimizer::sgd(vec![p2.clone()], 0.1, 0.0, 0.0).expect("sgd");
    assert!(sgd.load_state_dict(&back).is_err());
    let other = param(&dev, &[1.0, 2.0]);
    let mut wrong = Optimizer::adamw(vec![other], 0.1, 0.0).expect("wrong");
    assert!(wrong.load_state_dict(&back).is_err());
    assert_eq!((wrong.lr(), wrong.steps()), (0.1, 0));
}

#[test]
fn bad_hyper_parameters_are_rejected() {
    let p = param(&cpu(), &[1.0]);
    assert!(Optimizer::sgd(vec![p.clone()], -0.1, 0.0, 0.0).is_err());
    assert!(Optimizer::sgd(vec![p.clone()], f32::NAN, 0.0, 0.0).is_err());
    assert!(Optimizer::sgd(vec![p.clone()], 0.1, 1.5, 0.0).is_err());
    // β1 at 1, then ε at 0.
    for (beta1, eps) in [(1.0, 1e-8), (0.9, 0.0)] {
        let rule = Rule::Adam {
            beta1,
            beta2: 0.9,
            eps,
            weight_decay: 0.0,
        };
        assert!(Optimizer::new(vec![p.clone()], rule, 0.1).is_err());
    }
    let mut o = Optimizer::sgd(vec![p], 0.1, 0.0, 0.0).expect("sgd");
    assert!(o.set_lr(f32::INFINITY).is_err());
    assert_eq!(o.lr(), 0.1);
}

#[test]
fn clipping_scales_to_the_max_norm() {
    let mut devs = vec![cpu()];
    devs.extend(opencl_device());
    for dev in devs {
        let a = param(&dev, &[0.0, 0.0]);
        let b = param(&dev, &[0.0]);
        set_grad(&a, &[3.0, 0.0]);
        set_grad(&b, &[4.0]);
        let norm = clip_grad_norm(&[a.clone(), b.clone()], 1.0).expect("clip");
        assert!((norm - 5.0).abs() < 1e-5);
        assert_close(
            &a.grad().expect("g").to_vec::<f32>().expect("read"),
            &[0.6, 0.0],
            1e-5,
            0.0,
            "clipped a",
        );
        assert_close(
            &b.grad().expect("g").to_vec::<f32>().expect("read"),
            &[0.8],
            1e-5,
            0.0,
            "clipped b",
        );
        let norm = clip_grad_norm(&[a.clone(), b], 10.0).expect("no clip");
        assert!((norm - 1.0).abs() < 1e-4);
        assert!(clip_grad_norm(&[a], 0.0).is_err());
    }
}

#[test]
fn ema_warms_up_then_tracks() {
    let mut devs = vec![cpu()];
    devs.extend(opencl_device());
    for dev in devs {
        let p = param(&dev, &[0.0]);
        let mut ema = Ema::new(std::slice::from_ref(&p), 0.99).expect("ema");
        p.value().to_vec::<f32>().expect("read");
        let q = Var::param(Tensor::from_slice(&dev, &[10.0f32], &[1]).expect("q"));
        // First update: d = min(0.99, 1/10) = 0.1 → 0.1·0 + 0.9·10 = 9.
        ema.update(&[q]).expect("update");
        assert_close(
            &ema.averaged()[0].to_vec::<f32>().expect("read"),
            &[9.0],
            1e-5,
            0.0,
            "ema",
        );
        assert!(Ema::new(&[p], 1.5).is_err());
    }
}

/// Twenty parameters of assorted sizes (one listed twice, one frozen, one without a gradient, one empty): the
/// device updates several per launch, and after three steps of every rule each parameter holds what the
/// built-in device's one-at-a-time updates give.
#[test]
fn many_parameters_step_together_as_each_would_alone() {
    let Some(dev) = opencl_device() else { return };
    let sizes = [
        1usize, 3, 17, 1000, 7, 64, 2, 5, 0, 129, 1, 1, 33, 4096, 9, 6, 250, 11, 8, 31,
    ];
    let run = |dev: &Device, rule: Rule| -> Vec<Vec<f32>> {
        let params: Vec<Var> = sizes
            .iter()
            .enumerate()
            .map(|(k, &n)| {
                let v: Vec<f32> = (0..n)
                    .map(|i| ((i * 13 + k * 7) % 11) as f32 * 0.1 - 0.5)
                    .collect();
                Var::param(Tensor::from_slice(dev, &v, &[n]).expect("param"))
            })
            .collect();
        let mut list = params.clone();
        list.insert(5, params[2].clone());
        let mut opt = Optimizer::new(list, rule, 0.05).expect("optimizer");
        for s in 0..3 {
            for (k, (p, &n)) in params.iter().zip(&sizes).enumerate() {
                if k == 7 || (k == 4 && s > 0) {
                    continue;
                }
                let g: Vec<f32> = (0..n)
                    .map(|i| ((i * 5 + k * 3 + s) % 9) as f32 * 0.25 - 1.0)
                    .collect();
                set_grad(p, &g);
            }
            // Frozen with a gradient in hand: the step must leave it alone.
            params[4].set_frozen(true);
            opt.step().expect("step");
        }
        params
            .iter()
            .map(|p| p.value().to_vec::<f32>().expect("read"))
            .collect()
    };
    for rule in rules() {
        let want = run(&cpu(), rule);
        let got = run(&dev, rule);
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_close(g, w, 1e-6, 1e-5, &format!("{} parameter {k}", rule.name()));
        }
        // The frozen parameter kept its values.
        let n = sizes[4];
        let v0: Vec<f32> = (0..n)
            .map(|i| ((i * 13 + 4 * 7) % 11) as f32 * 0.1 - 0.5)
            .collect();
        assert_eq!(got[4], v0, "{} frozen", rule.name());
    }
}
