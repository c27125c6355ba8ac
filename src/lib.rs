//! netcl: a deep-learning engine on OpenCL, and a documentation wiki whose examples run on the server's device.
//!
//! The crate is layered, and each layer uses only the layers below it:
//!
//! 1. core: `error`, `half`, `rng`, `codec`, `fsio`;
//! 2. runtime: `memory` (opaque storage, a pool that takes an allocator), the backend contract (every
//!    `*Kernels` trait and its plan types), `device` (the handle, its info and a per-thread timing scope), `tensor`;
//! 3. tune: `autotune`;
//! 4. backends: `backend::opencl` and `backend::cpu`, one file per op family each (`program` is the OpenCL
//!    program cache's public face);
//! 5. device selection (`Device::select`, `list_devices`), the only code naming a concrete backend;
//! 6. `ops`: front-ends that validate, plan and call the contract;
//! 7. `autograd`; 8. `nn`, `optim`, `train`, `io`, `data`, `bench`; 9. `script` (feature `script`);
//!    10. `wiki` (feature `wiki`) and the `netcl` binary.
//!
//! `tests/layering.rs` fails when a file refers to a higher layer, so this list stays true.
//!
//! ```
//! use netcl::{Device, Tensor, ops};
//! let dev = Device::builtin();
//! let a = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
//! let b = Tensor::from_slice(&dev, &[10.0f32, 20.0, 30.0], &[3])?;
//! let c = ops::add(&a, &b)?; // broadcasts b over the rows of a
//! assert_eq!(c.to_vec::<f32>()?, vec![11.0, 22.0, 33.0, 14.0, 25.0, 36.0]);
//! assert_eq!(ops::sum_all(&c)?.to_vec::<f32>()?, vec![141.0]);
//! # Ok::<(), netcl::Error>(())
//! ```

// 1. core
pub mod codec;
pub mod error;
pub mod fsio;
pub mod half;
pub mod rng;
// 2. runtime
pub(crate) mod contract;
pub mod device;
pub mod memory;
pub mod tensor;
// 3. tune
pub mod autotune;
// 4. backends
pub(crate) mod backend;
// 5. device selection
mod select;
// The program facade: building OpenCL C sources (layer 4, public for user-written kernels)
pub mod program;
// 6. ops
pub mod ops;
// 7. autograd, then the layers that use it
pub mod autograd;
pub mod bench;
pub mod data;
pub mod io;
pub mod nn;
pub mod optim;
/// The precision policy of matrix products (FP32 by default; TF32 and FP16 on tensor cores where usable).
pub mod precision {
    pub use crate::contract::precision::{
        Precision, PrecisionGuard, current, emulated, parse_emulate_value, parse_env_value,
        process_default, scoped, tensor_cores, with,
    };
}
pub use contract::precision::Precision;
/// Mixed precision, as netcl names it: the dtype policy and its [`autocast`] scope (from [`ops::policy`]) and
/// loss scaling with [`GradScaler`] (from [`optim`]).
pub mod amp {
    pub use crate::ops::policy::{AutocastGuard, OpClass, Policy, autocast, current, promote};
    pub use crate::optim::GradScaler;
}
#[cfg(feature = "script")]
pub mod script;
pub mod train;
#[cfg(feature = "wiki")]
pub mod wiki;

pub use device::{Device, DeviceInfo, DeviceType};
pub use error::{Error, Result};
pub use select::{list_devices, opencl_available, resolve_selector};
pub use tensor::{DType, Tensor};

/// The wiki's Rust code blocks, compiled and run as doctests so the documentation cannot go stale.
#[cfg(doctest)]
mod docs_pages {
    #[doc = include_str!("../web-wiki/content/concepts/device.md")]
    mod device {}
    #[doc = include_str!("../web-wiki/content/concepts/autotune.md")]
    mod autotune {}
    #[doc = include_str!("../web-wiki/content/concepts/tensor.md")]
    mod tensor {}
    #[doc = include_str!("../web-wiki/content/concepts/buffer-pool.md")]
    mod buffer_pool {}
    #[doc = include_str!("../web-wiki/content/concepts/kernel-cache.md")]
    mod kernel_cache {}
    #[doc = include_str!("../web-wiki/content/concepts/gemm.md")]
    mod gemm {}
    #[doc = include_str!("../web-wiki/content/concepts/convolution.md")]
    mod convolution {}
    #[doc = include_str!("../web-wiki/content/concepts/reductions-and-broadcasting.md")]
    mod reductions_and_broadcasting {}
    #[doc = include_str!("../web-wiki/content/concepts/autograd.md")]
    mod autograd {}
    #[doc = include_str!("../web-wiki/content/concepts/modules.md")]
    mod modules {}
    #[doc = include_str!("../web-wiki/content/concepts/models.md")]
    mod models {}
    #[doc = include_str!("../web-wiki/content/concepts/optimizers.md")]
    mod optimizers {}
    #[doc = include_str!("../web-wiki/content/concepts/mixed-precision.md")]
    mod mixed_precision {}
    #[doc = include_str!("../web-wiki/content/concepts/precision.md")]
    mod precision {}
    #[doc = include_str!("../web-wiki/content/concepts/training.md")]
    mod training {}
    #[doc = include_str!("../web-wiki/content/concepts/model-files.md")]
    mod model_files {}
    #[doc = include_str!("../web-wiki/content/api/fsio.md")]
    mod api_fsio {}
    #[cfg(feature = "script")]
    #[doc = include_str!("../web-wiki/content/api/script.md")]
    mod api_script {}
    #[doc = include_str!("../web-wiki/content/tutorials/first-kernel-run.md")]
    mod tutorial_first_kernel_run {}
    #[doc = include_str!("../web-wiki/content/tutorials/convolutions-compared.md")]
    mod tutorial_convolutions_compared {}
    #[doc = include_str!("../web-wiki/content/tutorials/reductions-gradients.md")]
    mod tutorial_reductions_gradients {}
    #[doc = include_str!("../web-wiki/content/tutorials/autograd-by-hand.md")]
    mod tutorial_autograd_by_hand {}
    #[doc = include_str!("../web-wiki/content/tutorials/training-digits.md")]
    mod tutorial_training_digits {}
    #[doc = include_str!("../web-wiki/content/tutorials/tuning-your-gpu.md")]
    mod tutorial_tuning_your_gpu {}
    #[doc = include_str!("../web-wiki/content/tutorials/mobilenet-block.md")]
    mod tutorial_mobilenet_block {}
}
