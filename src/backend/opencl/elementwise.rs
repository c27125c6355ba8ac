//! Elementwise binary ops on OpenCL, and the 3-D launch geometry other kernel families share.

use crate::backend::opencl::abi::{KernelArgs, cast as cast_abi, elementwise as abi};
use crate::backend::opencl::program::{ClKernel, Defines, QuickKey, quick_key};
use crate::backend::opencl::{ClDevice, Event};
use crate::contract::elementwise::{BinaryKernels, BinaryOp, BinaryOperands, ScalarOperands};
use crate::contract::vocab::instantiate;
use crate::error::Result;
use crate::tensor::{DType, Tensor};

/// A work-group shape for a 3-D range `g` (x fastest): up to 256 items, within the device's per-dimension
/// limits; `launch` rounds the global size up to it and the kernels bound-check.
pub(crate) fn local_3d(dev: &ClDevice, g: [usize; 3]) -> [usize; 3] {
    let max = dev.info.max_work_group_size.clamp(1, 256);
    let lim = |d: usize| {
        dev.info
            .max_work_item_sizes
            .get(d)
            .copied()
            .unwrap_or(1)
            .max(1)
    };
    let lx = g[0]
        .max(1)
        .next_power_of_two()
        .min(max)
        .min(prev_pow2(lim(0)));
    let ly = g[1]
        .max(1)
        .next_power_of_two()
        .min(max / lx)
        .min(prev_pow2(lim(1)))
        .max(1);
    let lz = g[2]
        .max(1)
        .next_power_of_two()
        .min(max / (lx * ly))
        .min(prev_pow2(lim(2)))
        .max(1);
    [lx, ly, lz]
}

/// The 3-D range `g` with its work-group shape, the y and z extents capped at 65535 groups (the most some
/// drivers allow per grid dimension); the 3-D kernels stride over y and z, so any range fits.
/// The flag is true when a cap applies: the kernel must then be built with `GRID_LOOP=1`.
pub(crate) fn grid_3d(dev: &ClDevice, g: [usize; 3]) -> ([usize; 3], [usize; 3], bool) {
    let l = local_3d(dev, g);
    let cap = |d: usize| g[d].min(65535 * l[d]);
    let capped = cap(1) < g[1] || cap(2) < g[2];
    ([g[0], cap(1), cap(2)], l, capped)
}

/// `defines` with `GRID_LOOP=1` when `capped`.
pub(crate) fn grid_defines(defines: &Defines, capped: bool) -> Defines {
    if capped {
        defines.clone().set("GRID_LOOP", 1)
    } else {
        defines.clone()
    }
}

impl ClDevice {
    /// `want` work-items per group, or the device's largest work-group where that is smaller.
    pub(crate) fn group(&self, want: usize) -> usize {
        want.min(self.info.max_work_group_size.max(1))
    }

    /// Launches kernel `name` of the arguments' family, built with `defines`, over `items` work-items, in
    /// work-groups of [`ClDevice::group`]`(g)` where `group` is `Some(g)` and of the driver's choice otherwise.
    pub(crate) fn run_1d<'a, A: KernelArgs<'a>>(
        &self,
        name: &str,
        defines: &Defines,
        args: &A,
        items: usize,
        group: Option<usize>,
    ) -> Result<Event> {
        let k = self.kernel(A::FAMILY, defines, name)?;
        self.launch_1d(&k, args, items, group)
    }

    /// Launches `k` over `items` work-items in groups of [`ClDevice::group`]`(g)`, or of the driver's choice.
    pub(crate) fn launch_1d<'a, A: KernelArgs<'a>>(
        &self,
        k: &ClKernel,
        args: &A,
        items: usize,
        group: Option<usize>,
    ) -> Result<Event> {
        match group {
            Some(g) => self.run(k, args, &[items], Some(&[self.group(g)])),
            None => self.run(k, args, &[items], None),
        }
    }

    /// As [`ClDevice::run_1d`] for a kernel found by the compact `key` (see [`ClDevice::kernel_by`]): the
    /// defines are written only the first time.
    pub(crate) fn run_1d_by<'a, A: KernelArgs<'a>>(
        &self,
        key: QuickKey,
        defines: impl FnOnce() -> Defines,
        args: &A,
        items: usize,
        group: Option<usize>,
    ) -> Result<Event> {
        let k = self.kernel_by(key, defines)?;
        self.launch_1d(&k, args, items, group)
    }

    /// Launches kernel `name` of the arguments' family over the 3-D `range` (see [`grid_3d`]), built with
    /// `defines` plus `GRID_LOOP=1` where the range is capped.
    pub(crate) fn run_grid<'a, A: KernelArgs<'a>>(
        &self,
        name: &str,
        defines: &Defines,
        args: &A,
        range: [usize; 3],
    ) -> Result<Event> {
        let (range, local, capped) = grid_3d(self, range);
        let k = self.kernel(A::FAMILY, &grid_defines(defines, capped), name)?;
        self.run(&k, args, &range, Some(&local))
    }
}

/// `defines` with `name=1` for each named buffer that holds f16 (the `LDX`/`STX` switches of
/// kernels/prelude.cl); an all-f32 call keeps its defines, and so its program, unchanged.
pub(crate) fn half_defines(mut defines: Defines, bufs: &[(&str, &Tensor)]) -> Defines {
    for (name, t) in bufs {
        if t.dtype() == DType::F16 {
            defines = defines.set(name, 1);
        }
    }
    defines
}

/// One bit per tensor that holds f16, in order: the dtype part of a compact kernel key or a tuning key, so an
/// f16 call never finds an f32 kernel or winner.
pub(crate) fn half_bits(ts: &[&Tensor]) -> usize {
    ts.iter()
        .enumerate()
        .map(|(i, t)| usize::from(t.dtype() == DType::F16) << i)
        .sum()
}

fn prev_pow2(n: usize) -> usize {
    if n == 0 {
        1
    } else {
        1 << (usize::BITS - 1 - n.leading_zeros())
    }
}

/// The OpenCL C expression of `op` on scalars `x` and `y`, from the vocabulary's template.
fn cl_expr(op: BinaryOp) -> String {
    instantiate(op.def().cl, &["x", "y"], "")
}

fn int8(v: &[usize]) -> [i32; 8] {
    // Innermost dimension first, as the kernel walks from .s0 outwards.
    let mut out = [1i32; 8];
    for (i, x) in v.iter().rev().enumerate() {
        out[i] = *x as i32;
    }
    out
}

impl BinaryKernels for ClDevice {
    fn copy_dense(&self, x: &Tensor, out: &Tensor) -> Result<()> {
        let n = x.numel();
        let args = abi::CopyF32 {
            n: n as i32,
            x: x.storage(),
            y: out.storage(),
        };
        // f16 moves eight elements per 16-byte access, f32 four.
        let (name, per) = match x.dtype() {
            DType::F16 => (abi::COPY_F16, 8),
            _ => (abi::COPY_F32, 4),
        };
        let items = (n / per).max(n % per).max(1);
        self.run_1d(name, &Defines::new(), &args, items, Some(256))?;
        Ok(())
    }

    fn cast(&self, x: &Tensor, out: &Tensor) -> Result<()> {
        let code = |d: DType| match d {
            DType::F32 => 0,
            DType::I32 => 1,
            DType::F16 => 2,
        };
        let n = x.numel();
        let args = cast_abi::Cast {
            n: n as i32,
            x: x.storage(),
            y: out.storage(),
        };
        let (from, to) = (code(x.dtype()), code(out.dtype()));
        let key = quick_key(cast_abi::FAMILY, cast_abi::CAST, &[from, to]);
        let defines = || Defines::new().set("FROM", from).set("TO", to);
        self.run_1d_by(key, defines, &args, n.min(1 << 22), Some(256))?;
        Ok(())
    }

    fn binary(&self, operands: BinaryOperands<'_>) -> Result<()> {
        let (op, a, b, out, plan) = operands.parts();
        // Kernels are found by a compact key: a hot loop neither writes the op's expression nor the defines.
        let halves = half_bits(&[a, b, out]);
        let defines = || {
            half_defines(
                Defines::new().set("OP(x,y)", cl_expr(op)),
                &[("A_HALF", a), ("B_HALF", b), ("OUT_HALF", out)],
            )
        };
        let n = out.numel();
        let (a, b, out) = (a.storage(), b.storage(), out.storage());
        if plan.same {
            let args = abi::BinarySame {
                n: n as i32,
                a,
                b,
                out,
            };
            let key = quick_key(abi::FAMILY, abi::BINARY_SAME, &[op as usize, halves]);
            self.run_1d_by(key, defines, &args, n.div_ceil(4), Some(256))?;
        } else if plan.shape.len() <= 3 {
            // Pad to three dimensions on the outside; the innermost stride of each input is 0 or 1.
            let r = plan.shape.len();
            let pad = |v: &[usize], fill: usize| -> [usize; 3] {
                let mut o = [fill; 3];
                o[3 - r..].copy_from_slice(v);
                o
            };
            let (d, sa, sb) = (pad(&plan.shape, 1), pad(&plan.sa, 0), pad(&plan.sb, 0));
            let vec = if d[2] % 4 == 0 { 4 } else { 1 };
            let align = vec == 4 && [sa[0], sa[1], sb[0], sb[1]].iter().all(|s| s % 4 == 0);
            let (range, local, capped) = grid_3d(self, [d[2] / vec, d[1], d[0]]);
            let parts = [
                op as usize,
                vec,
                sa[2].min(1),
                sb[2].min(1),
                usize::from(align),
                usize::from(capped),
                halves,
            ];
            let k = self.kernel_by(quick_key(abi::FAMILY, abi::BINARY_3D, &parts), || {
                let d = defines()
                    .set("VEC", vec)
                    .set("A_INNER", sa[2].min(1))
                    .set("B_INNER", sb[2].min(1))
                    .set("ALIGN4", u8::from(align));
                grid_defines(&d, capped)
            })?;
            let [d0, d1, d2, sa0, sa1, sb0, sb1] =
                [d[0], d[1], d[2], sa[0], sa[1], sb[0], sb[1]].map(|v| v as i32);
            let args = abi::Binary3d {
                d0,
                d1,
                d2,
                sa0,
                sa1,
                sb0,
                sb1,
                a,
                b,
                out,
            };
            self.run(&k, &args, &range, Some(&local))?;
        } else {
            let args = abi::BinaryBcast {
                n: n as i32,
                rank: plan.shape.len() as i32,
                shape: int8(&plan.shape),
                sa: int8(&plan.sa),
                sb: int8(&plan.sb),
                a,
                b,
                out,
            };
            let key = quick_key(abi::FAMILY, abi::BINARY_BCAST, &[op as usize, halves]);
            self.run_1d_by(key, defines, &args, n, Some(256))?;
        }
        Ok(())
    }

    fn binary_scalar(&self, operands: ScalarOperands<'_>) -> Result<()> {
        let (op, a, s, swap, out) = operands.parts();
        let n = out.numel();
        let halves = half_bits(&[a, out]);
        let halves_of = [("A_HALF", a), ("OUT_HALF", out)];
        let (a, out) = (a.storage(), out.storage());
        let args = abi::BinaryScalar {
            n: n as i32,
            s,
            a,
            out,
        };
        let key = quick_key(
            abi::FAMILY,
            abi::BINARY_SCALAR,
            &[op as usize, usize::from(swap), halves],
        );
        let defines = || {
            let d = Defines::new()
                .set("OP(x,y)", cl_expr(op))
                .set("SWAP", u8::from(swap));
            half_defines(d, &halves_of)
        };
        self.run_1d_by(key, defines, &args, n.div_ceil(4), Some(256))?;
        Ok(())
    }
}
