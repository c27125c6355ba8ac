//! Nearest and bilinear upsampling of N×C×H×W to a given size, with the gather-based backward.

use crate::backend::cpu::CpuDevice;
use crate::backend::opencl::Arg;
use crate::backend::opencl::ClDevice;
use crate::backend::opencl::program::Defines;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

use crate::backend::opencl::elementwise::{grid_3d, grid_defines};

/// Interpolation modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upsample {
    /// `src = ⌊o·in/out⌋`.
    Nearest,
    /// Bilinear; `align_corners` maps corner to corner, else half-pixel centres (clamped at 0).
    Bilinear {
        /// Corner-aligned coordinates.
        align_corners: bool,
    },
}

/// Device primitives for resizing.
pub(crate) trait ResizeKernels {
    /// Forward (`back` false: x → y) or backward (`back` true: gradient of y → gradient of x).
    fn upsample(
        &self,
        mode: Upsample,
        x_shape: &[usize],
        y_shape: &[usize],
        src: &Tensor,
        dst: &Tensor,
        back: bool,
    ) -> Result<()>;
}

fn check(shape: &[usize], size: (usize, usize), op: &str) -> Result<Vec<usize>> {
    match *shape {
        [n, c, h, w] if h > 0 && w > 0 && size.0 > 0 && size.1 > 0 => {
            Ok(vec![n, c, size.0, size.1])
        }
        _ => Err(Error::Shape(format!(
            "{op}: needs a non-empty N×C×H×W input and output size, got {shape:?} → {size:?}"
        ))),
    }
}

/// Resizes the last two dimensions to `size` = (height, width).
pub fn upsample(x: &Tensor, size: (usize, usize), mode: Upsample) -> Result<Tensor> {
    x.expect_dtype(DType::F32, "upsample")?;
    let shape = check(x.shape(), size, "upsample")?;
    let y = Tensor::empty(x.device(), &shape, DType::F32)?;
    if y.numel() > i32::MAX as usize || x.numel() > i32::MAX as usize {
        return Err(Error::Limit(format!(
            "upsample: {} elements exceed the 2^31-1 per-op limit",
            y.numel()
        )));
    }
    if y.numel() > 0 {
        x.device()
            .backend()
            .upsample(mode, x.shape(), &shape, x, &y, false)?;
    }
    Ok(y)
}

/// The input gradient of [`upsample`].
pub fn upsample_backward(grad: &Tensor, input_shape: &[usize], mode: Upsample) -> Result<Tensor> {
    grad.expect_dtype(DType::F32, "upsample_backward")?;
    let size = match *grad.shape() {
        [_, _, h, w] => (h, w),
        _ => {
            return Err(Error::Shape(format!(
                "upsample_backward: gradient {:?} is not N×C×H×W",
                grad.shape()
            )));
        }
    };
    let shape = check(input_shape, size, "upsample_backward")?;
    if shape != grad.shape() {
        return Err(Error::Shape(format!(
            "upsample_backward: gradient {:?} does not match {shape:?}",
            grad.shape()
        )));
    }
    let gx = Tensor::empty(grad.device(), input_shape, DType::F32)?;
    if grad.numel() > i32::MAX as usize {
        return Err(Error::Limit(format!(
            "upsample_backward: {} elements exceed the 2^31-1 per-op limit",
            grad.numel()
        )));
    }
    if gx.numel() > 0 {
        grad.device()
            .backend()
            .upsample(mode, input_shape, grad.shape(), grad, &gx, true)?;
    }
    Ok(gx)
}

impl ResizeKernels for ClDevice {
    fn upsample(
        &self,
        mode: Upsample,
        xs: &[usize],
        ys: &[usize],
        src: &Tensor,
        dst: &Tensor,
        back: bool,
    ) -> Result<()> {
        let (bil, align) = match mode {
            Upsample::Nearest => (0, 0),
            Upsample::Bilinear { align_corners } => (1, u8::from(align_corners)),
        };
        let d = Defines::new().set("BILINEAR", bil).set("ALIGN", align);
        let k = self.kernel(
            "resize",
            &d,
            if back { "upsample_bwd" } else { "upsample_fwd" },
        )?;
        let mut args: Vec<Arg> = [xs[0] * xs[1], xs[2], xs[3], ys[2], ys[3]]
            .iter()
            .map(|&v| Arg::I32(v as i32))
            .collect();
        args.push(Arg::Mem(src.storage()));
        args.push(Arg::Mem(dst.storage()));
        let range = if back {
            [xs[3], xs[2], xs[0] * xs[1]]
        } else {
            [ys[3], ys[2], ys[0] * ys[1]]
        };
        let (range, local, capped) = grid_3d(self, range);
        let k = if capped {
            self.kernel("resize", &grid_defines(&d, true), &k.name)?
        } else {
            k
        };
        self.launch(&k, &args, &range, Some(&local))?;
        Ok(())
    }
}

/// Reference taps of output `o` along one axis: (input index, weight) pairs.
fn taps(mode: Upsample, o: usize, inp: usize, out: usize) -> [(usize, f64); 2] {
    match mode {
        Upsample::Nearest => [((o * inp) / out, 1.0), (0, 0.0)],
        Upsample::Bilinear { align_corners } => {
            let s = if align_corners {
                if out > 1 {
                    o as f64 * (inp - 1) as f64 / (out - 1) as f64
                } else {
                    0.0
                }
            } else {
                ((o as f64 + 0.5) * inp as f64 / out as f64 - 0.5).max(0.0)
            };
            let i0 = (s.floor() as usize).min(inp - 1);
            let i1 = (i0 + 1).min(inp - 1);
            let f = s - i0 as f64;
            [(i0, 1.0 - f), (i1, f)]
        }
    }
}

impl ResizeKernels for CpuDevice {
    fn upsample(
        &self,
        mode: Upsample,
        xs: &[usize],
        ys: &[usize],
        src: &Tensor,
        dst: &Tensor,
        back: bool,
    ) -> Result<()> {
        let (planes, h, w, oh, ow) = (xs[0] * xs[1], xs[2], xs[3], ys[2], ys[3]);
        let s = src.to_vec::<f32>()?;
        let mut d = vec![0f64; dst.numel()];
        for p in 0..planes {
            for a in 0..oh {
                for b in 0..ow {
                    let yi = (p * oh + a) * ow + b;
                    for (hh, wa) in taps(mode, a, h, oh) {
                        for (ww, wb) in taps(mode, b, w, ow) {
                            let xi = (p * h + hh) * w + ww;
                            if back {
                                d[xi] += wa * wb * s[yi] as f64;
                            } else {
                                d[yi] += wa * wb * s[xi] as f64;
                            }
                        }
                    }
                }
            }
        }
        let d: Vec<f32> = d.into_iter().map(|v| v as f32).collect();
        dst.device()
            .backend()
            .write(dst.storage(), 0, bytemuck::cast_slice(&d))
    }
}
