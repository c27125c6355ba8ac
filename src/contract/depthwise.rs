//! The depthwise convolution contract: the algorithms, the validated geometry and the family's primitives.

use serde::Serialize;

use crate::Device;
use crate::error::Result;
use crate::tensor::Tensor;

/// A depthwise convolution algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DwAlgo {
    /// Local-memory tiles (K ≤ 7, stride 1 or 2).
    Local,
    /// One output row per work-item.
    Rows,
    /// One output per work-item on a 3-D range with 8×8 groups.
    Tile,
    /// One output per work-item.
    Naive,
    /// Register blocks of 1 column × 4 rows per work-item, read straight from global memory (K ≤ 7, stride
    /// 1 or 2); adjacent work-items take adjacent columns (GPUs).
    #[serde(rename = "block1x4")]
    Block1x4,
    /// Register blocks of 1 column × 8 rows (fewer input rows read per output; GPUs).
    #[serde(rename = "block1x8")]
    Block1x8,
    /// Register blocks of 4 columns × 2 rows (`float4` rows; K ≤ 7, stride 1 or 2).
    #[serde(rename = "block4x2")]
    Block4x2,
    /// Register blocks of 8 columns × 2 rows (`float8` rows, one work-item per row block walking its
    /// columns; K ≤ 7, stride 1 or 2; CPU OpenCL).
    #[serde(rename = "block8x2")]
    Block8x2,
    /// Register blocks of 8 columns × 4 rows (as `block8x2`, with more input rows shared per load).
    #[serde(rename = "block8x4")]
    Block8x4,
    /// Register blocks of 16 columns × 4 rows (`float16` rows, one work-item per row block walking its
    /// columns; K ≤ 7, stride 1 only; CPU OpenCL with 512-bit vectors).
    #[serde(rename = "block16x4")]
    Block16x4,
}

impl DwAlgo {
    /// (columns, rows) of a register-block algorithm's output block.
    pub(crate) fn block(self) -> Option<(usize, usize)> {
        match self {
            DwAlgo::Block1x4 => Some((1, 4)),
            DwAlgo::Block1x8 => Some((1, 8)),
            DwAlgo::Block4x2 => Some((4, 2)),
            DwAlgo::Block8x2 => Some((8, 2)),
            DwAlgo::Block8x4 => Some((8, 4)),
            DwAlgo::Block16x4 => Some((16, 4)),
            _ => None,
        }
    }

    /// Whether one work-item walks the column blocks of its rows (the CPU register blocks).
    pub(crate) fn walks_rows(self) -> bool {
        self.block().is_some_and(|(vw, _)| vw >= 8)
    }
}

/// Validated geometry: (N, C, H, W, OH, OW, stride, pad) and the kernel size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DwGeom {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub oh: usize,
    pub ow: usize,
    pub s: usize,
    pub p: usize,
    pub k: usize,
}

impl DwGeom {
    /// The stride-1 geometry whose forward pass computes grad_x (grad_out in, padding K−1−p).
    pub(crate) fn grad_x_geom(&self) -> Option<DwGeom> {
        (self.s == 1 && self.p < self.k).then(|| DwGeom {
            h: self.oh,
            w: self.ow,
            oh: self.h,
            ow: self.w,
            p: self.k - 1 - self.p,
            ..*self
        })
    }
}

operands! {
    /// The operands of one forward depthwise convolution: `out = depthwise(x, w) + bias` of geometry `g`.
    DwFwd {
        x: &'a Tensor,
        w: &'a Tensor,
        bias: Option<&'a Tensor>,
        out: &'a Tensor,
        g: &'a DwGeom,
    }
}

operands! {
    /// The operands of one backward depthwise convolution: grad_w into `gw` and, when `gx` is given, grad_x,
    /// of geometry `g`, given `go` (the gradient of the output).
    DwBwd {
        x: &'a Tensor,
        w: &'a Tensor,
        go: &'a Tensor,
        gx: Option<&'a Tensor>,
        gw: &'a Tensor,
        g: &'a DwGeom,
    }
}

/// Device primitives of depthwise convolution.
pub(crate) trait DepthwiseKernels {
    /// `op.out = depthwise(op.x, op.w) + op.bias`, with a forced or measured algorithm.
    fn dw_fwd(&self, device: &Device, op: &DwFwd<'_>, algo: Option<DwAlgo>) -> Result<()>;
    /// grad_w and, when asked for, grad_x.
    fn dw_bwd(&self, device: &Device, op: &DwBwd<'_>, algo: Option<DwAlgo>) -> Result<()>;
}
