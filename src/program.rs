//! Building OpenCL C sources: the embedded kernel families and a build check for user-written kernels.
//!
//! The program cache itself belongs to the OpenCL backend; this module is its public face.

pub use crate::backend::opencl::program::{
    Defines, ProgramSpec, ProgramStats, binary_cache_dir, build_check, build_ms_total,
    builds_pending, built_programs, compile_ms_thread, compile_ms_total, kernel_families,
    kernel_names, kernel_prelude, kernel_source, prebuild, program_stats, serve_builds,
    serve_builds_from_here, warm_ahead,
};
