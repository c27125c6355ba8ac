//! The softmax family's contract: the row algorithm and the device primitives for softmax and cross-entropy.

use serde::Serialize;

use crate::contract::reduce::Ori;
use crate::device::Device;
use crate::error::Result;
use crate::tensor::Tensor;

/// A softmax row algorithm; its autotune cache form is `["reg", local, k]`, `["reg8", local, k]`, `["wg", local]`
/// or `"serial"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SoftmaxAlgo {
    /// One work-group of `local` items per row, each holding `k` float4 of the row in registers (forward
    /// only; needs R a multiple of 4 and R ≤ 4·k·local; the backward runs it as `Wg(local)`).
    Reg(usize, usize),
    /// As `Reg`, for f16 rows only: each item holds `k` loads of eight halves (16 bytes) of the row (forward
    /// only; needs an f16 input, R a multiple of 8 and R ≤ 8·k·local; the backward runs it as `Wg(local)`).
    Reg8(usize, usize),
    /// One work-group of `local` items per row.
    Wg(usize),
    /// One work-item per row.
    Serial,
}

impl Serialize for SoftmaxAlgo {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match *self {
            SoftmaxAlgo::Reg(l, k) => ("reg", l, k).serialize(s),
            SoftmaxAlgo::Reg8(l, k) => ("reg8", l, k).serialize(s),
            SoftmaxAlgo::Wg(l) => ("wg", l).serialize(s),
            SoftmaxAlgo::Serial => "serial".serialize(s),
        }
    }
}

operands! {
    /// One softmax over R of the view `v` (`log`: log-softmax), with `algo` a forced row algorithm: forward,
    /// `src` is x and `dst` is y; backward, `src` is the forward output y and `dst` the input's gradient.
    SoftmaxRows {
        log: bool,
        v: Ori,
        src: &'a Tensor,
        dst: &'a Tensor,
        algo: Option<SoftmaxAlgo>,
    }
}

operands! {
    /// Cross-entropy of `logits` [N, C] against i32 `labels` [N], rows labelled `ignore` left out; `stats` is
    /// `[mean loss, count, first bad row or -1]`.
    CrossEntropy {
        logits: &'a Tensor,
        labels: &'a Tensor,
        ignore: i32,
        stats: &'a Tensor,
    }
}

/// Device primitives for softmax and cross-entropy.
pub(crate) trait SoftmaxKernels {
    /// `y = (log_)softmax(x)` over R of the view.
    fn softmax(&self, device: &Device, s: SoftmaxRows<'_>) -> Result<()>;
    /// The input gradient from the forward output `y` and the output gradient `g`.
    fn softmax_backward(&self, device: &Device, s: SoftmaxRows<'_>, g: &Tensor) -> Result<()>;
    /// Writes `stats = [mean loss, count, first bad row or -1]`.
    fn cross_entropy(&self, ce: CrossEntropy<'_>) -> Result<()>;
    /// The logits' gradient `gx` given `stats` from the forward and the scalar output gradient `g`.
    fn cross_entropy_backward(&self, ce: CrossEntropy<'_>, g: &Tensor, gx: &Tensor) -> Result<()>;
}
