//! netcl: a deep-learning engine on OpenCL, and a documentation wiki whose examples run on the server's device.
//!
//! The dependency direction is one way: device → tensor/memory → program → autotune → ops → autograd →
//! nn/optim/train/io → script → wiki. Nothing below imports from above.

pub mod error;

pub use error::{Error, Result};
pub mod wiki;
