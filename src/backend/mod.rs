//! The backends: each implements the contract of [`crate::contract`] for one kind of device.
//!
//! `opencl` enqueues kernels from `kernels/` on any OpenCL 1.2+ device; `cpu` runs plain Rust on host memory
//! and is the reference every kernel is tested against.

pub(crate) mod cpu;
pub(crate) mod opencl;
