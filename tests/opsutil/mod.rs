//! Device handles for the op tests, selected once per test process under a lock.
//!
//! Selecting a device enumerates the OpenCL platforms; PoCL crashes when several threads enumerate at the
//! same moment, so the op tests select each device once, serially, and share the handles.
#![allow(dead_code)]

use std::sync::{Mutex, OnceLock};

use netcl::ops::Conv2dGrads;
use netcl::{Device, Tensor};

static LOCK: Mutex<()> = Mutex::new(());

/// The built-in reference device.
pub fn cpu() -> Device {
    static D: OnceLock<Device> = OnceLock::new();
    D.get_or_init(|| {
        let _g = LOCK.lock();
        Device::builtin()
    })
    .clone()
}

/// The OpenCL device under test (see `common::opencl_device`), or `None` (skipped loudly) without one.
pub fn opencl_device() -> Option<Device> {
    static D: OnceLock<Option<Device>> = OnceLock::new();
    let _ = cpu();
    D.get_or_init(|| {
        let _g = LOCK.lock();
        super::common::opencl_device()
    })
    .clone()
}

/// The same normal values on the built-in device and on `dev`.
pub fn pair(dev: &Device, shape: &[usize], seed: u64) -> (Tensor, Tensor) {
    let c = Tensor::randn(&cpu(), shape, 0.0, 1.0, seed).expect("randn on cpu");
    let d = c.to_device(dev).expect("to_device");
    (c, d)
}

/// Normal values (std 2) with NaN, ±inf and ±0 planted every 7th element from the start.
pub fn with_specials(dev: &Device, shape: &[usize], seed: u64) -> (Tensor, Tensor) {
    let n: usize = shape.iter().product();
    let mut v = Tensor::randn(&cpu(), shape, 0.0, 2.0, seed)
        .expect("randn")
        .to_vec::<f32>()
        .expect("read");
    for (i, s) in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0]
        .into_iter()
        .enumerate()
    {
        if i * 7 < n {
            v[i * 7] = s;
        }
    }
    let c = Tensor::from_slice(&cpu(), &v, shape).expect("from_slice");
    let d = c.to_device(dev).expect("to_device");
    (c, d)
}

/// A convolution's gradients on the device against the reference's: grad_x within `atol_x`, grad_w and grad_b
/// (sums over the batch and the output positions) within `atol_wb`, all with `rtol` relative.
pub fn assert_conv_grads_close(
    got: &Conv2dGrads,
    want: &Conv2dGrads,
    atol_x: f32,
    atol_wb: f32,
    rtol: f32,
    what: &str,
) {
    use super::common::assert_tensors_close as close;
    let (gx, wx) = (got.grad_x.as_ref(), want.grad_x.as_ref());
    close(
        gx.unwrap(),
        wx.unwrap(),
        atol_x,
        rtol,
        &format!("grad_x {what}"),
    );
    close(
        &got.grad_w,
        &want.grad_w,
        atol_wb,
        rtol,
        &format!("grad_w {what}"),
    );
    let (gb, wb) = (got.grad_b.as_ref(), want.grad_b.as_ref());
    close(
        gb.unwrap(),
        wb.unwrap(),
        atol_wb,
        rtol,
        &format!("grad_b {what}"),
    );
}
