//! The precision policy of matrix products: which arithmetic multiplies the operands of a GEMM.
//!
//! | precision | operands | products and sums | where |
//! |---|---|---|---|
//! | [`Precision::Fp32`] (default) | f32 as stored | f32 | every device; the exact kernels of old |
//! | [`Precision::Tf32`] | rounded to TF32 (10-bit mantissa, to nearest, ties away from zero) | f32 | tensor cores |
//! | [`Precision::Fp16`] | rounded to f16 (to nearest even), f16 tensors as stored | f32 | tensor cores |
//!
//! The process default comes from `NETCL_PRECISION` (`fp32`, `tf32` or `fp16`; unset means `fp32`; anything
//! else is an error that every product reports). A thread overrides it for a scope with [`with`] or
//! [`scoped`], so layers built on `matmul` follow the policy without a new argument; `ops::matmul_prec` and
//! `ops::bmm_prec` take it per call. On a device without usable tensor cores a TF32 or FP16 product runs the
//! FP32 kernels, and the decision log says so. `NETCL_TC_EMULATE=1` makes every OpenCL device offer the
//! tensor-core kernels with each mma instruction emulated in OpenCL C (to test them where there are none).

use std::cell::Cell;
use std::sync::OnceLock;

use crate::error::{Error, Result};

/// The arithmetic of a matrix product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Precision {
    /// f32 operands, products and sums: the default, exact as netcl's FP32 kernels always were.
    #[default]
    Fp32,
    /// Operands rounded to TF32 (8-bit exponent, 10-bit mantissa), products and sums in f32 (tensor cores).
    Tf32,
    /// Operands rounded to f16 (or read as f16 when stored so), products and sums in f32 (tensor cores).
    Fp16,
}

impl Precision {
    /// Every precision, in the order of their names.
    pub const ALL: [Precision; 3] = [Precision::Fp32, Precision::Tf32, Precision::Fp16];

    /// The name `NETCL_PRECISION` takes: `fp32`, `tf32` or `fp16`.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Tf32 => "tf32",
            Precision::Fp16 => "fp16",
        }
    }

    /// Parses a name (case and surrounding blanks ignored).
    pub fn parse(s: &str) -> Option<Precision> {
        let s = s.trim().to_ascii_lowercase();
        Precision::ALL.into_iter().find(|p| p.name() == s)
    }

    /// The unit roundoff of the operands' rounding: 0 for FP32 (operands used as they are), 2^-11 for TF32
    /// (10 stored mantissa bits, round to nearest) and FP16 (10 stored bits, normal range).
    pub fn operand_roundoff(self) -> f64 {
        match self {
            Precision::Fp32 => 0.0,
            Precision::Tf32 | Precision::Fp16 => (2f64).powi(-11),
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Precision {
    type Err = Error;
    fn from_str(s: &str) -> Result<Precision> {
        Precision::parse(s).ok_or_else(|| {
            Error::Invalid(format!("`{s}` is not a precision; use fp32, tf32 or fp16"))
        })
    }
}

/// Parses the value of `NETCL_PRECISION` (`None`: unset or blank, the FP32 default).
pub fn parse_env_value(v: Option<&str>) -> Result<Precision> {
    match v.map(str::trim).filter(|v| !v.is_empty()) {
        None => Ok(Precision::Fp32),
        Some(v) => Precision::parse(v).ok_or_else(|| {
            Error::Invalid(format!(
                "NETCL_PRECISION=`{v}` is not a precision; use fp32 (the default), tf32 or fp16"
            ))
        }),
    }
}

/// Parses the value of `NETCL_TC_EMULATE` (`None`: unset or blank, off).
pub fn parse_emulate_value(v: Option<&str>) -> Result<bool> {
    match v.map(|v| v.trim().to_ascii_lowercase()) {
        None => Ok(false),
        Some(v) => match v.as_str() {
            "" | "0" | "off" | "false" | "no" => Ok(false),
            "1" | "on" | "true" | "yes" => Ok(true),
            _ => Err(Error::Invalid(format!(
                "NETCL_TC_EMULATE=`{v}` is not a switch; use 1 (emulate tensor cores) or 0"
            ))),
        },
    }
}

/// The message of an error, without its kind's prefix (kept to be reported again).
fn message(e: Error) -> String {
    match e {
        Error::Invalid(m) => m,
        e => e.to_string(),
    }
}

/// The process default, read from `NETCL_PRECISION` on first use; an invalid value is an error on every use.
pub fn process_default() -> Result<Precision> {
    static DEFAULT: OnceLock<std::result::Result<Precision, String>> = OnceLock::new();
    DEFAULT
        .get_or_init(|| {
            parse_env_value(std::env::var("NETCL_PRECISION").ok().as_deref()).map_err(message)
        })
        .clone()
        .map_err(Error::Invalid)
}

/// Whether `NETCL_TC_EMULATE` asks for emulated tensor cores (read on first use; an invalid value is an error
/// on every use).
pub fn emulated() -> Result<bool> {
    static EMULATE: OnceLock<std::result::Result<bool, String>> = OnceLock::new();
    EMULATE
        .get_or_init(|| {
            parse_emulate_value(std::env::var("NETCL_TC_EMULATE").ok().as_deref()).map_err(message)
        })
        .clone()
        .map_err(Error::Invalid)
}

thread_local! {
    static SCOPED: Cell<Option<Precision>> = const { Cell::new(None) };
}

/// The precision in force on this thread: the innermost [`with`] / [`scoped`] override, else the process
/// default.
pub fn current() -> Result<Precision> {
    match SCOPED.with(Cell::get) {
        Some(p) => Ok(p),
        None => process_default(),
    }
}

/// Restores the previous precision of the thread when dropped (see [`scoped`]).
#[must_use = "the precision holds only while the guard lives"]
pub struct PrecisionGuard {
    previous: Option<Precision>,
}

impl Drop for PrecisionGuard {
    fn drop(&mut self) {
        SCOPED.with(|c| c.set(self.previous));
    }
}

/// Sets this thread's precision to `p` until the guard drops; scopes nest.
pub fn scoped(p: Precision) -> PrecisionGuard {
    let previous = SCOPED.with(|c| c.replace(Some(p)));
    PrecisionGuard { previous }
}

/// Runs `f` with this thread's precision set to `p` (restored afterwards, also on panic).
pub fn with<R>(p: Precision, f: impl FnOnce() -> R) -> R {
    let _guard = scoped(p);
    f()
}

/// Whether products at precision `p` run on tensor cores on `device` (always true for FP32, which needs
/// none: it says that `p` is honoured). For TF32 and FP16: true on an NVIDIA GPU whose OpenCL compiler built
/// the tensor-core kernel and computed a known product right with it (probed once per device and process),
/// or everywhere under `NETCL_TC_EMULATE=1`; false otherwise, where such products run the FP32 kernels.
pub fn tensor_cores(device: &crate::Device, p: Precision) -> bool {
    p == Precision::Fp32 || device.backend().gemm_tensor_cores(p)
}

/// What a product multiplies with: the precision, and whether its operands and output are stored as f16
/// (only with [`Precision::Fp16`], on tensor cores).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Math {
    pub precision: Precision,
    pub f16_io: bool,
}

impl Math {
    /// f32 storage, FP32 arithmetic.
    pub(crate) const FP32: Math = Math {
        precision: Precision::Fp32,
        f16_io: false,
    };

    /// f32 storage at precision `p`.
    pub(crate) fn f32_at(precision: Precision) -> Math {
        Math {
            precision,
            f16_io: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_bad_values_name_the_variable() {
        for p in Precision::ALL {
            assert_eq!(Precision::parse(p.name()), Some(p));
            assert_eq!(parse_env_value(Some(p.name())).unwrap(), p);
        }
        assert_eq!(parse_env_value(None).unwrap(), Precision::Fp32);
        assert_eq!(parse_env_value(Some("  ")).unwrap(), Precision::Fp32);
        assert_eq!(parse_env_value(Some(" TF32 ")).unwrap(), Precision::Tf32);
        let e = parse_env_value(Some("bf16")).unwrap_err().to_string();
        assert!(e.contains("NETCL_PRECISION") && e.contains("bf16"), "{e}");
        assert!(
            e.contains("fp32") && e.contains("tf32") && e.contains("fp16"),
            "{e}"
        );
        assert!(parse_emulate_value(Some("1")).unwrap());
        assert!(!parse_emulate_value(Some("0")).unwrap());
        assert!(!parse_emulate_value(None).unwrap());
        let e = parse_emulate_value(Some("maybe")).unwrap_err().to_string();
        assert!(e.contains("NETCL_TC_EMULATE"), "{e}");
    }

    #[test]
    fn scopes_nest_and_restore() {
        let outer = current().unwrap_or_default();
        with(Precision::Tf32, || {
            assert_eq!(current().unwrap(), Precision::Tf32);
            with(Precision::Fp16, || {
                assert_eq!(current().unwrap(), Precision::Fp16)
            });
            assert_eq!(current().unwrap(), Precision::Tf32);
        });
        assert_eq!(current().unwrap_or_default(), outer);
    }
}
