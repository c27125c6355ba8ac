//! The backend contract: what every backend implements, and the plan types the op front-ends hand it.
//!
//! One sub-trait per op family (`UnaryKernels`, `GemmKernels`, …), each with the plan types its calls take
//! (a broadcast plan, a convolution geometry, a GEMM shape, …). [`Backend`] gathers them with memory
//! movement. The op front-ends in `ops/` validate, plan and call these traits; `backend/cpu` and
//! `backend/opencl` implement them. Adding a backend means implementing this module's traits, nothing else.

/// A `Copy` struct of one kernel call's borrowed operands, and its `parts()`: every field, in order, as a
/// tuple (so a backend binds them in one line).
macro_rules! operands {
    ($(#[$m:meta])* $name:ident { $($f:ident: $t:ty),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy)]
        pub(crate) struct $name<'a> {
            $(pub $f: $t),+
        }

        impl<'a> $name<'a> {
            /// The operands, in field order.
            #[inline]
            #[allow(dead_code, clippy::too_many_arguments)]
            pub(crate) fn new($($f: $t),+) -> Self {
                Self { $($f),+ }
            }

            /// Every field, in order.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub(crate) fn parts(&self) -> ($($t),+) {
                ($(self.$f),+)
            }
        }
    };
}

pub(crate) mod attention;
pub(crate) mod conv;
pub(crate) mod depthwise;
pub(crate) mod gemm;
pub mod precision;

use std::any::Any;

use crate::error::Result;
use crate::memory::{Allocator, Storage};

pub(crate) mod fused;
pub(crate) use fused::FusedKernels;
pub(crate) mod elementwise;
pub(crate) use elementwise::BinaryKernels;
pub(crate) mod update;
pub(crate) use update::UpdateKernels;
pub(crate) mod resize;
pub(crate) use resize::ResizeKernels;
pub(crate) mod dropout;
pub(crate) use dropout::DropoutKernels;
pub(crate) mod unary;
pub(crate) mod vocab;
pub(crate) use unary::UnaryKernels;

pub(crate) mod norm;
pub(crate) mod pool;
pub(crate) mod reduce;
pub(crate) mod shape;
pub(crate) mod softmax;
pub(crate) mod transformer;

pub(crate) use attention::AttentionKernels;
pub(crate) use norm::NormKernels;
pub(crate) use pool::PoolKernels;
pub(crate) use reduce::ReduceKernels;
pub(crate) use shape::ShapeKernels;
pub(crate) use softmax::SoftmaxKernels;
pub(crate) use transformer::TransformerKernels;

pub(crate) use conv::ConvKernels;
pub(crate) use depthwise::DepthwiseKernels;
pub(crate) use gemm::GemmKernels;

/// Everything a backend provides: memory movement and every op family's primitives.
pub(crate) trait Backend:
    Send
    + Sync
    + Allocator
    + BinaryKernels
    + NormKernels
    + ReduceKernels
    + UnaryKernels
    + FusedKernels
    + SoftmaxKernels
    + DropoutKernels
    + PoolKernels
    + ShapeKernels
    + ResizeKernels
    + UpdateKernels
    + GemmKernels
    + ConvKernels
    + DepthwiseKernels
    + AttentionKernels
    + TransformerKernels
{
    /// Copies `data` into `dst` at byte `offset`; returns when the host memory may be reused.
    fn write(&self, dst: &Storage, offset: usize, data: &[u8]) -> Result<()>;
    /// Copies `out.len()` bytes from `src` at byte `offset` into `out`, after all queued work.
    fn read(&self, src: &Storage, offset: usize, out: &mut [u8]) -> Result<()>;
    /// Fills `bytes` bytes of `dst` with a repeated 4-byte pattern.
    fn fill(&self, dst: &Storage, pattern: [u8; 4], bytes: usize) -> Result<()>;
    /// Copies `bytes` bytes from `src` to `dst` on the device.
    fn copy(&self, src: &Storage, dst: &Storage, bytes: usize) -> Result<()>;
    /// Waits for all queued work.
    fn finish(&self) -> Result<()>;
    /// The backend as `Any`, for code of that backend handed a [`crate::Device`] (its own downcast).
    fn as_any(&self) -> &dyn Any;
}
