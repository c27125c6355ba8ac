//! The GEMM contract: one strided, batched product descriptor ([`Gemm`]) and the primitives that run it.

use crate::Device;
use crate::contract::precision::{Math, Precision};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// How the epilogue adds a bias vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BiasMode {
    /// No bias.
    None,
    /// `bias[m]` on row `m` (a conv bias per output channel).
    Row,
}

/// One strided batched product `C[b] = op(A[b]) · op(B[b])` (+ bias, ReLU), in elements.
///
/// `op(A)` is `m × k`: element `(i, p)` is `A[off_a + b·s_a + i·lda + p]`, or `A[… + p·lda + i]` when
/// `trans_a`. Likewise `op(B)` is `k × n`. `C[b]` starts at `off_c + b·s_c` with row stride `ldc`.
#[derive(Debug, Clone)]
pub(crate) struct Gemm {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub batch: usize,
    pub trans_a: bool,
    pub trans_b: bool,
    pub off_a: usize,
    pub lda: usize,
    pub s_a: usize,
    pub off_b: usize,
    pub ldb: usize,
    pub s_b: usize,
    pub off_c: usize,
    pub ldc: usize,
    pub s_c: usize,
    pub bias: BiasMode,
    pub relu: bool,
    /// What the autotuner measures this product under.
    pub tune: GemmTune,
    /// The arithmetic (FP32, or TF32 / FP16 on tensor cores) and whether A, B and C are stored as f16.
    pub math: Math,
}

/// The autotune kernel name and shape key of a product; every candidate list depends only on what the key holds.
#[derive(Debug, Clone)]
pub(crate) enum GemmTune {
    /// `matmul`, keyed by the bucketed sizes, the batch and the transposes (the backend forms the key).
    Matmul,
    /// A kernel name and shape key of the caller's own (`conv2d_pointwise_gemm`, …).
    Named(&'static str, String),
}

impl Gemm {
    /// A dense batched product of contiguous row-major operands with the `matmul` tuning key.
    pub(crate) fn dense(
        m: usize,
        n: usize,
        k: usize,
        batch: usize,
        trans_a: bool,
        trans_b: bool,
        shared_a: bool,
    ) -> Gemm {
        Gemm {
            m,
            n,
            k,
            batch,
            trans_a,
            trans_b,
            off_a: 0,
            lda: if trans_a { m } else { k },
            s_a: if shared_a { 0 } else { m * k },
            off_b: 0,
            ldb: if trans_b { k } else { n },
            s_b: k * n,
            off_c: 0,
            ldc: n,
            s_c: m * n,
            bias: BiasMode::None,
            relu: false,
            tune: GemmTune::Matmul,
            math: Math::FP32,
        }
    }

    /// The last element index (+1) each operand touches, to check buffer sizes.
    fn extents(&self) -> (usize, usize, usize) {
        let last = self.batch.saturating_sub(1);
        let a_rows = if self.trans_a { self.k } else { self.m };
        let a_cols = if self.trans_a { self.m } else { self.k };
        let b_rows = if self.trans_b { self.n } else { self.k };
        let b_cols = if self.trans_b { self.k } else { self.n };
        let ext = |off: usize, s: usize, rows: usize, ld: usize, cols: usize| {
            if rows == 0 || cols == 0 {
                0
            } else {
                off + last * s + (rows - 1) * ld + cols
            }
        };
        (
            ext(self.off_a, self.s_a, a_rows, self.lda, a_cols),
            ext(self.off_b, self.s_b, b_rows, self.ldb, b_cols),
            ext(self.off_c, self.s_c, self.m, self.ldc, self.n),
        )
    }

    /// Checks the descriptor against the buffers and the 32-bit index limit of the kernels.
    pub(crate) fn check(
        &self,
        a: &Tensor,
        b: &Tensor,
        c: &Tensor,
        bias: Option<&Tensor>,
    ) -> Result<()> {
        let (ea, eb, ec) = self.extents();
        if ea > a.numel() || eb > b.numel() || ec > c.numel() {
            return Err(Error::Invalid(format!(
                "gemm descriptor {self:?} reaches past its buffers ({} / {} / {} elements)",
                a.numel(),
                b.numel(),
                c.numel()
            )));
        }
        let lim = i32::MAX as usize;
        if [ea, eb, ec, self.m * self.n * self.batch.max(1)]
            .iter()
            .any(|&e| e > lim)
        {
            return Err(Error::Limit(format!(
                "gemm {}×{}×{} (batch {}) addresses more than 2^31-1 elements",
                self.m, self.n, self.k, self.batch
            )));
        }
        let need = match self.bias {
            BiasMode::None => 0,
            BiasMode::Row => self.m,
        };
        if need > 0 && bias.is_none_or(|t| t.numel() < need) {
            return Err(Error::Shape(format!("gemm bias needs {need} elements")));
        }
        Ok(())
    }
}

operands! {
    /// The operands of one product: `c = g(a, b)`, plus the bias `g` asks for.
    GemmOp {
        a: &'a Tensor,
        b: &'a Tensor,
        c: &'a Tensor,
        bias: Option<&'a Tensor>,
        g: &'a Gemm,
    }
}

/// Device primitives for matrix products.
pub(crate) trait GemmKernels {
    /// Computes `g` into `c` (every element of every `C[b]` is written).
    fn gemm(&self, device: &Device, op: &GemmOp<'_>) -> Result<()>;
    /// The labels of the candidates the autotuner would measure for `g`.
    fn gemm_labels(&self, g: &Gemm) -> Vec<String>;
    /// Computes `g` with the candidate labelled `label` (bypassing the autotuner).
    fn gemm_forced(&self, device: &Device, op: &GemmOp<'_>, label: &str) -> Result<()>;
    /// Whether products at precision `p` (TF32 or FP16) run on tensor cores here; without them such products
    /// run at FP32.
    fn gemm_tensor_cores(&self, _p: Precision) -> bool {
        false
    }
}
