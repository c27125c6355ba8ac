//! The one error type of the engine.
//!
//! Every fallible call in netcl returns [`Result`]. Variants name the problem (a shape, a dtype, a limit, an
//! OpenCL call and its error code) so the message can be shown to a user as is.

use std::path::PathBuf;

/// Everything that can go wrong in netcl, with enough context to act on it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An OpenCL API call failed.
    #[error("OpenCL call {call} failed with {name} ({code}){}", context.as_deref().map(|c| format!(" {c}")).unwrap_or_default())]
    OpenCl {
        /// The API function, e.g. `clEnqueueNDRangeKernel`.
        call: &'static str,
        /// The raw OpenCL error code.
        code: i32,
        /// The symbolic name of the code, e.g. `CL_OUT_OF_RESOURCES`.
        name: &'static str,
        /// What the call was doing, when known: for a launch, the kernel and its global and local sizes
        /// (`for kernel `gemm_tile`, global [64, 64], local Some([16, 16])`).
        context: Option<String>,
    },
    /// An OpenCL program failed to build; `log` is the compiler's build log.
    #[error("building kernel source `{source_name}` with options `{options}` failed:\n{log}")]
    Build {
        /// The kernel family (file name under `kernels/` without `.cl`).
        source_name: String,
        /// The build options, including `-D` defines.
        options: String,
        /// The build log as the OpenCL compiler printed it.
        log: String,
    },
    /// No device matches a selector, or no device exists.
    #[error("device: {0}")]
    Device(String),
    /// Shapes do not fit the operation.
    #[error("shape: {0}")]
    Shape(String),
    /// A tensor's shape is not the one the operation needs (a gradient that differs from its input, a bias
    /// of the wrong length, a state buffer of another parameter's shape).
    #[error("{op}: expected shape {expected:?}, got {got:?}")]
    ShapeMismatch {
        /// The operation that checked, e.g. `relu backward`.
        op: String,
        /// The shape the operation needs.
        expected: Vec<usize>,
        /// The shape it was given.
        got: Vec<usize>,
    },
    /// A dtype is not supported by the operation or the device.
    #[error("dtype: {0}")]
    DType(String),
    /// A tensor's dtype is not the one the operation needs.
    #[error("{op} needs a tensor of dtype {expected}, got {got}")]
    DTypeMismatch {
        /// The operation that checked, e.g. `matmul` or `to_vec`.
        op: String,
        /// The name of the dtype the operation needs (`f32`, `i32`, `f16`).
        expected: &'static str,
        /// The name of the dtype it was given.
        got: &'static str,
    },
    /// An argument is out of its valid range.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A size limit was exceeded (allocation, elements, output size).
    #[error("limit: {0}")]
    Limit(String),
    /// Tensors of one operation live on different devices, or memory reached a backend it does not belong to.
    #[error("{op}: one tensor is on {left} and another on {right}; move one with to_device")]
    DeviceMismatch {
        /// The operation that checked.
        op: String,
        /// Where the first tensor lives (a device name, or the kind of memory).
        left: String,
        /// Where the other tensor lives.
        right: String,
    },
    /// The operation is not available on this device or in this configuration.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A file could not be read or written.
    #[error("I/O on {}: {source}", path.display())]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A file's content could not be parsed.
    #[error("format of {}: {message}", path.display())]
    Format {
        /// The file involved.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
}

impl Error {
    /// An OpenCL failure of `call` with the raw error `code`.
    pub fn cl(call: &'static str, code: i32) -> Self {
        Error::OpenCl {
            call,
            code,
            name: cl3::error_codes::error_text(code),
            context: None,
        }
    }

    /// `expected` and `got` differ: the structured error for an operand of the wrong shape.
    pub fn shape_mismatch(op: impl Into<String>, expected: &[usize], got: &[usize]) -> Self {
        Error::ShapeMismatch {
            op: op.into(),
            expected: expected.to_vec(),
            got: got.to_vec(),
        }
    }

    /// The raw OpenCL error code, for an OpenCL failure.
    pub fn cl_code(&self) -> Option<i32> {
        match self {
            Error::OpenCl { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// An I/O failure on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// A short machine-readable name for the variant, used in structured API errors.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::OpenCl { .. } => "opencl",
            Error::Build { .. } => "build",
            Error::Device(_) => "device",
            // Mismatches keep the kind readers already see for the family: a wrong shape is a shape error.
            Error::Shape(_) | Error::ShapeMismatch { .. } => "shape",
            Error::DType(_) | Error::DTypeMismatch { .. } => "dtype",
            Error::Invalid(_) => "invalid",
            Error::Limit(_) => "limit",
            Error::DeviceMismatch { .. } => "device_mismatch",
            Error::Unsupported(_) => "unsupported",
            Error::Io { .. } => "io",
            Error::Format { .. } => "format",
        }
    }
}

/// Shorthand for `std::result::Result<T, netcl::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Adds the OpenCL call name to a raw `cl3` error code.
pub(crate) trait ClContext<T> {
    fn cl(self, call: &'static str) -> Result<T>;
}

impl<T> ClContext<T> for std::result::Result<T, i32> {
    fn cl(self, call: &'static str) -> Result<T> {
        self.map_err(|code| Error::cl(call, code))
    }
}

impl<T> ClContext<T> for std::result::Result<T, opencl3::error_codes::ClError> {
    fn cl(self, call: &'static str) -> Result<T> {
        self.map_err(|e| Error::cl(call, e.0))
    }
}
