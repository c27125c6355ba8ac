//! The convolution contract: the algorithms, the validated geometry and the primitives of the family.

use serde::Serialize;

use crate::Device;
use crate::contract::precision::Precision;
use crate::error::Result;
use crate::tensor::Tensor;

/// A convolution algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ConvAlgo {
    /// One output (or input gradient, or weight gradient) element per work-item; every shape.
    Direct,
    /// im2col (col2im in backward) plus the autotuned GEMM; every shape.
    Im2col,
    /// Winograd F(2×2, 3×3) with a batched GEMM: 3×3, stride 1, dilation 1, groups 1, padding ≤ 2.
    Winograd,
    /// 1×1, stride 1, padding 0, dilation 1, groups 1: one batched GEMM on the NCHW buffers.
    Pointwise,
}

impl ConvAlgo {
    /// The algorithm's name (`direct`, `im2col`, `winograd`, `pointwise`).
    pub fn name(self) -> &'static str {
        match self {
            ConvAlgo::Direct => "direct",
            ConvAlgo::Im2col => "im2col",
            ConvAlgo::Winograd => "winograd",
            ConvAlgo::Pointwise => "pointwise",
        }
    }
}

/// The full geometry of one convolution, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConvGeom {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub f: usize,
    pub oh: usize,
    pub ow: usize,
    pub groups: usize,
    pub kh: usize,
    pub kw: usize,
    pub sh: usize,
    pub sw: usize,
    pub ph: usize,
    pub pw: usize,
    pub dh: usize,
    pub dw: usize,
    /// The arithmetic of the im2col and pointwise GEMMs: the thread's precision policy when the convolution
    /// was asked for. The direct kernels and Winograd's GEMMs always compute in FP32 (Winograd's transforms
    /// widen the sums a rounded operand would spoil, see the Precision page).
    pub prec: Precision,
}

impl ConvGeom {
    /// Input shape.
    pub(crate) fn x_shape(&self) -> [usize; 4] {
        [self.n, self.c, self.h, self.w]
    }
    /// Output shape.
    pub(crate) fn y_shape(&self) -> [usize; 4] {
        [self.n, self.f, self.oh, self.ow]
    }
    /// Weight shape.
    pub(crate) fn w_shape(&self) -> [usize; 4] {
        [self.f, self.c / self.groups, self.kh, self.kw]
    }
    /// Output positions per sample.
    pub(crate) fn p(&self) -> usize {
        self.oh * self.ow
    }
    /// Which algorithms can compute this convolution.
    pub(crate) fn eligible(&self, algo: ConvAlgo) -> bool {
        // Both fast paths need unit strides and one group.
        let unit = (self.sh, self.sw, self.groups) == (1, 1, 1);
        match algo {
            ConvAlgo::Direct | ConvAlgo::Im2col => true,
            ConvAlgo::Winograd => {
                unit && (self.kh, self.kw, self.dh, self.dw) == (3, 3, 1, 1)
                    && self.ph <= 2
                    && self.pw <= 2
            }
            ConvAlgo::Pointwise => unit && (self.kh, self.kw, self.ph, self.pw) == (1, 1, 0, 0),
        }
    }
    /// The geometry of the stride-1 convolution that computes grad_x of this one (Winograd backward):
    /// grad_out convolved with the flipped, channel-swapped weights and padding K−1−p.
    pub(crate) fn grad_x_as_conv(&self) -> ConvGeom {
        ConvGeom {
            n: self.n,
            c: self.f,
            h: self.oh,
            w: self.ow,
            f: self.c,
            oh: self.h,
            ow: self.w,
            groups: 1,
            kh: self.kh,
            kw: self.kw,
            sh: 1,
            sw: 1,
            ph: self.kh - 1 - self.ph,
            pw: self.kw - 1 - self.pw,
            dh: 1,
            dw: 1,
            prec: self.prec,
        }
    }
}

/// Which gradients a backward pass writes.
pub(crate) struct ConvGrads<'a> {
    pub gx: Option<&'a Tensor>,
    pub gw: Option<&'a Tensor>,
    pub gb: Option<&'a Tensor>,
}

operands! {
    /// The operands of one forward convolution: `out = conv(x, w) + bias` of geometry `g`, ReLU applied when
    /// `relu`.
    ConvFwd {
        x: &'a Tensor,
        w: &'a Tensor,
        bias: Option<&'a Tensor>,
        out: &'a Tensor,
        g: &'a ConvGeom,
        relu: bool,
    }
}

operands! {
    /// The operands of one backward convolution: the gradients `gr` asks for of `conv(x, w) + b` of geometry
    /// `g`, given `go` (the gradient of the output).
    ConvBwd {
        x: &'a Tensor,
        w: &'a Tensor,
        go: &'a Tensor,
        gr: &'a ConvGrads<'a>,
        g: &'a ConvGeom,
    }
}

/// Device primitives of the convolution family.
pub(crate) trait ConvKernels {
    /// `op.out = conv(op.x, op.w) + op.bias`, optional ReLU, with a forced or measured algorithm.
    fn conv2d_fwd(&self, device: &Device, op: &ConvFwd<'_>, algo: Option<ConvAlgo>) -> Result<()>;
    /// The gradients `op.gr` asks for.
    fn conv2d_bwd(&self, device: &Device, op: &ConvBwd<'_>, algo: Option<ConvAlgo>) -> Result<()>;
}
