//! Mixed precision: the dtype policy and its scope, GradScaler's device-side checks (a step with a non-finite
//! gradient is skipped and the scale backs off; growth after `growth_interval` good steps; no device→host read
//! in a step), autograd through f16 activations, and a small training run under the policy whose loss falls
//! like the f32 run's.

mod common;

use common::{devices, opencl_device};
use netcl::amp::{self, GradScaler};
use netcl::autograd::{Var, ops as ag};
use netcl::device::timing::host_reads;
use netcl::optim::Optimizer;
use netcl::{DType, Device, Tensor, ops};

#[test]
fn the_policy_stores_memory_bound_outputs_in_f16_and_keeps_reductions_f32() {
    for dev in devices() {
        let x = Tensor::randn(&dev, &[4, 6], 0.0, 1.0, 1).expect("x");
        assert_eq!(
            ops::relu(&x).expect("relu").dtype(),
            DType::F32,
            "no policy: f32 stays f32"
        );
        {
            let _mixed = amp::autocast(true);
            assert!(amp::current().is_some());
            assert_eq!(ops::relu(&x).expect("relu").dtype(), DType::F16);
            assert_eq!(ops::add(&x, &x).expect("add").dtype(), DType::F16);
            assert_eq!(ops::softmax(&x, -1).expect("softmax").dtype(), DType::F16);
            let w = Tensor::randn(&dev, &[6, 3], 0.0, 1.0, 2).expect("w");
            assert_eq!(ops::matmul(&x, &w).expect("matmul").dtype(), DType::F16);
            assert_eq!(
                ops::sum_all(&x).expect("sum").dtype(),
                DType::F32,
                "reductions keep f32"
            );
            let ln = ops::layer_norm(&x, 1, None, None, 1e-5).expect("layer_norm");
            assert_eq!((ln.y.dtype(), ln.rstd.dtype()), (DType::F16, DType::F32));
            {
                let _off = amp::autocast(false);
                assert_eq!(
                    ops::relu(&x).expect("relu").dtype(),
                    DType::F32,
                    "scopes nest"
                );
            }
            assert_eq!(
                ops::relu(&x).expect("relu").dtype(),
                DType::F16,
                "the outer scope is back"
            );
        }
        assert!(
            amp::current().is_none(),
            "dropping the guard ends the policy"
        );
    }
}

#[test]
fn autograd_through_f16_activations_gives_gradients_in_their_tensors_dtypes() {
    for dev in devices() {
        let xv = Tensor::randn(&dev, &[5, 7], 0.0, 1.0, 3).expect("x");
        let x = Var::param(xv.cast(DType::F16).expect("f16"));
        let w = Var::param(Tensor::randn(&dev, &[7, 3], 0.0, 0.5, 4).expect("w"));
        let a = ag::tanh(&x).expect("tanh");
        assert_eq!(a.value().dtype(), DType::F16, "f16 in, f16 activation");
        let h = ag::matmul(&a, &w).expect("matmul");
        assert_eq!(
            h.value().dtype(),
            DType::F32,
            "f16 with f32 promotes to f32"
        );
        let loss = ag::mean_all(&ag::mul(&h, &h).expect("sq")).expect("loss");
        loss.backward().expect("backward");
        let (gx, gw) = (x.grad().expect("gx"), w.grad().expect("gw"));
        assert_eq!((gx.dtype(), gw.dtype()), (DType::F16, DType::F32));
        // The same in f32, on the same (f16-representable) input values.
        let x32 = Var::param(x.value().cast(DType::F32).expect("widen"));
        let w32 = Var::param(w.value().deep_clone().expect("w"));
        let a32 = ag::tanh(&x32).expect("tanh");
        let h32 = ag::matmul(&a32, &w32).expect("mm");
        ag::mean_all(&ag::mul(&h32, &h32).expect("sq"))
            .expect("loss")
            .backward()
            .expect("bwd");
        let want = w32.grad().expect("gw32").to_vec::<f32>().expect("read");
        let got = gw.to_vec::<f32>().expect("read");
        // tanh(x) is rounded to f16 once (2^-11) and dL/dw sums 5 rows of products with it.
        common::assert_close(&got, &want, 2e-3, 4e-3, "dL/dw through an f16 activation");
        let gx32 = x32.grad().expect("gx32").to_vec::<f32>().expect("read");
        common::assert_close(
            &gx.to_f32_vec().expect("gx"),
            &gx32,
            2e-3,
            4e-3,
            "dL/dx in f16",
        );
    }
}

/// p (4 values), loss = Σ p·x with x holding `bad` at index 0: the gradient is x.
fn step_with(dev: &Device, scaler: &mut GradScaler, opt: &mut Optimizer, p: &Var, bad: f32) {
    let x = Tensor::from_slice(dev, &[bad, 1.0, 2.0, 3.0], &[4]).expect("x");
    let loss = ag::sum_all(&ag::mul(p, &Var::constant(x)).expect("mul")).expect("loss");
    opt.zero_grad();
    scaler
        .scale(&loss)
        .expect("scale")
        .backward()
        .expect("backward");
    scaler.step(opt).expect("step");
    scaler.update().expect("update");
}

#[test]
fn grad_scaler_skips_a_step_with_an_inf_gradient_backs_off_and_grows_on_the_device() {
    for dev in devices() {
        let p = Var::param(Tensor::from_slice(&dev, &[1.0f32, 1.0, 1.0, 1.0], &[4]).expect("p"));
        let mut opt = Optimizer::sgd(vec![p.clone()], 0.1, 0.9, 0.0).expect("sgd");
        let mut scaler = GradScaler::new(&dev, 1024.0, 2.0, 0.5, 3).expect("scaler");
        assert_eq!(scaler.get_scale().expect("scale"), 1024.0);
        // An infinite gradient: the step changes nothing (parameter and momentum), the scale halves.
        step_with(&dev, &mut scaler, &mut opt, &p, f32::INFINITY);
        assert!(scaler.found_inf().expect("flag"));
        assert_eq!(
            p.value().to_vec::<f32>().expect("p"),
            vec![1.0; 4],
            "skipped on the device"
        );
        assert_eq!(scaler.get_scale().expect("scale"), 512.0);
        // NaN too.
        step_with(&dev, &mut scaler, &mut opt, &p, f32::NAN);
        assert_eq!(p.value().to_vec::<f32>().expect("p"), vec![1.0; 4]);
        assert_eq!(scaler.get_scale().expect("scale"), 256.0);
        // A good step: the unscaled gradient x = [0.5, 1, 2, 3] is applied (first momentum step: v = g).
        step_with(&dev, &mut scaler, &mut opt, &p, 0.5);
        assert!(!scaler.found_inf().expect("flag"));
        let got = p.value().to_vec::<f32>().expect("p");
        common::assert_close(&got, &[0.95, 0.9, 0.8, 0.7], 1e-6, 1e-6, "one SGD step");
        assert_eq!(
            scaler.get_scale().expect("scale"),
            256.0,
            "one good step: no growth yet"
        );
        step_with(&dev, &mut scaler, &mut opt, &p, 0.5);
        assert_eq!(scaler.get_scale().expect("scale"), 256.0);
        step_with(&dev, &mut scaler, &mut opt, &p, 0.5);
        assert_eq!(
            scaler.get_scale().expect("scale"),
            512.0,
            "growth after 3 good steps"
        );
        // An overflow after growth backs off and restarts the count.
        step_with(&dev, &mut scaler, &mut opt, &p, f32::NEG_INFINITY);
        assert_eq!(scaler.get_scale().expect("scale"), 256.0);
    }
}

#[test]
fn a_scaled_step_reads_nothing_back_to_the_host() {
    // The built-in device's memory is the host's: only an OpenCL device has reads to count.
    if let Some(dev) = opencl_device() {
        let p = Var::param(Tensor::randn(&dev, &[64, 8], 0.0, 0.1, 5).expect("p"));
        let x = Var::constant(Tensor::randn(&dev, &[16, 64], 0.0, 1.0, 6).expect("x"));
        let t = Var::constant(Tensor::randn(&dev, &[16, 8], 0.0, 1.0, 7).expect("t"));
        let mut opt = Optimizer::adam(vec![p.clone()], 1e-3, 0.0).expect("adam");
        let mut scaler = GradScaler::with_defaults(&dev).expect("scaler");
        let _mixed = amp::autocast(true);
        let mut step = || {
            opt.zero_grad();
            let y = ag::matmul(&x, &p).expect("forward");
            let loss = ag::mse_loss(&y, &t).expect("loss");
            scaled_step(&mut scaler, &loss, &mut opt);
        };
        step(); // builds the kernels (a first call may read build or tuning data)
        let before = host_reads();
        for _ in 0..3 {
            step();
        }
        assert_eq!(
            host_reads() - before,
            0,
            "{}: a training step read the device",
            dev.name()
        );
        // The counter does count: asking for the scale is one read.
        let before = host_reads();
        assert!(scaler.get_scale().expect("scale") > 0.0);
        assert_eq!(host_reads() - before, 1);
    }
}

/// One mixed-precision step: the scaled loss's backward, the optimiser's step through the scaler, and the
/// scale's update.
fn scaled_step(scaler: &mut GradScaler, loss: &Var, opt: &mut Optimizer) {
    scaler
        .scale(loss)
        .expect("scale")
        .backward()
        .expect("backward");
    scaler.step(opt).expect("step");
    scaler.update().expect("update");
}

/// A linear regression (64 inputs → 8 outputs, 256 samples) trained with Adam for `steps` steps; the loss of
/// the first and the last step.
fn train(dev: &Device, mixed: bool, steps: usize) -> (f32, f32) {
    let x = Tensor::randn(dev, &[256, 64], 0.0, 1.0, 11).expect("x");
    let w_true = Tensor::randn(dev, &[64, 8], 0.0, 0.3, 12).expect("w");
    let t = Var::constant(ops::matmul(&x, &w_true).expect("targets"));
    let x = Var::constant(x);
    let w = Var::param(Tensor::zeros(dev, &[64, 8]).expect("w0"));
    let mut opt = Optimizer::adam(vec![w.clone()], 0.05, 0.0).expect("adam");
    let mut scaler = GradScaler::with_defaults(dev).expect("scaler");
    let mut losses = Vec::new();
    for _ in 0..steps {
        let _policy = amp::autocast(mixed);
        opt.zero_grad();
        let loss = ag::mse_loss(&ag::matmul(&x, &w).expect("forward"), &t).expect("loss");
        losses.push(loss.value().clone());
        if mixed {
            scaled_step(&mut scaler, &loss, &mut opt);
        } else {
            loss.backward().expect("backward");
            opt.step().expect("step");
        }
    }
    let read = |t: &Tensor| t.to_f32_vec().expect("loss")[0];
    (read(&losses[0]), read(&losses[steps - 1]))
}

#[test]
fn training_under_the_mixed_policy_falls_like_f32() {
    for dev in devices() {
        let (f0, f1) = train(&dev, false, 60);
        let (m0, m1) = train(&dev, true, 60);
        assert!((f0 - m0).abs() <= 1e-2 * f0, "same start: {f0} vs {m0}");
        assert!(
            f1 < 0.05 * f0,
            "{}: f32 loss fell from {f0} to {f1}",
            dev.name()
        );
        assert!(
            m1 < 0.05 * m0,
            "{}: mixed loss fell from {m0} to {m1}",
            dev.name()
        );
        // f16 activations carry 2^-11 relative error, so the mixed run ends near, not at, the f32 loss.
        assert!(
            m1 < 2.0 * f1 + 1e-2 * f0,
            "{}: mixed {m1} vs f32 {f1}",
            dev.name()
        );
    }
}
