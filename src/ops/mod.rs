//! The op set. Each family validates its inputs, computes the output shape, chooses an algorithm, and calls
//! its primitive trait, which every device kind implements (OpenCL kernels, or plain Rust on the built-in
//! device). Op code never matches on the device kind.

pub mod conv;
pub mod depthwise;
pub mod elementwise;
pub mod gemm;
pub mod reduce;

pub use elementwise::{BinaryOp, add, binary, broadcast_shape, div, maximum, minimum, mul, sub};
pub use conv::{
    Conv2dGrads, Conv2dOptions, ConvAlgo, ConvTranspose2dOptions, conv_transpose2d, conv_transpose2d_backward, conv2d,
    conv2d_backward,
};
pub use depthwise::{
    DwAlgo, depthwise_conv2d, depthwise_conv2d_algo, depthwise_conv2d_backward, depthwise_conv2d_backward_algo,
};
pub use gemm::{bmm, matmul, matmul_candidates, matmul_t, matmul_with};
pub use reduce::sum_all;

/// Every primitive family; a device kind implements them all.
pub(crate) trait Kernels:
    elementwise::BinaryKernels
    + reduce::ReduceKernels
    + gemm::GemmKernels
    + conv::ConvKernels
    + depthwise::DepthwiseKernels
{
}
impl<
    T: elementwise::BinaryKernels
        + reduce::ReduceKernels
        + gemm::GemmKernels
        + conv::ConvKernels
        + depthwise::DepthwiseKernels,
> Kernels for T
{
}

/// Host f32 views of built-in device tensors, for the reference implementations.
pub(crate) mod host {
    use crate::device::cpu_access;
    use crate::{Result, Tensor};

    /// Runs `f` over the f32 elements of `inputs` and the output `out` (which must not alias an input).
    pub(crate) fn map_f32<R>(inputs: &[&Tensor], out: &Tensor, f: impl FnOnce(&[&[f32]], &mut [f32]) -> R) -> Result<R> {
        let guards: Vec<_> = inputs.iter().map(|t| cpu_access::read(t)).collect::<Result<_>>()?;
        let slices: Vec<&[f32]> =
            guards.iter().zip(inputs).map(|(g, t)| &bytemuck::cast_slice::<u32, f32>(&g[..])[..t.numel()]).collect();
        let mut w = cpu_access::write(out)?;
        let n = out.numel();
        let o = &mut bytemuck::cast_slice_mut::<u32, f32>(&mut w[..])[..n];
        Ok(f(&slices, o))
    }
}
