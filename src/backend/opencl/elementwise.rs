//! Elementwise binary ops on OpenCL, and the 3-D launch geometry other kernel families share.

use crate::backend::opencl::ClDevice;
use crate::backend::opencl::program::Defines;

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

fn prev_pow2(n: usize) -> usize {
    if n == 0 {
        1
    } else {
        1 << (usize::BITS - 1 - n.leading_zeros())
    }
}
