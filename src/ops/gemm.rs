//! Matrix products: `matmul` (2-D), `matmul_t` (with transposes) and `bmm` (batched).
//!
//! Every product is one strided, batched GEMM descriptor ([`Gemm`]) executed by the device's
//! `GemmKernels`. On OpenCL the autotuner picks, per device and shape class, among local-memory tiled
//! kernels (GPUs), packed float8/float16 register-blocked kernels without barriers (CPU OpenCL), and split-K
//! variants of both for long reductions. The convolution family reuses the same descriptor with its own
//! tuning keys (e.g. `conv2d_pointwise_gemm`).
//!
//! Precision ([`crate::precision`]): `matmul`, `matmul_t` and `bmm` multiply at this thread's precision (FP32
//! unless `NETCL_PRECISION` or a [`crate::precision::with`] scope says TF32 or FP16); [`matmul_prec`] and
//! [`bmm_prec`] take it per call. TF32 and FP16 run on tensor cores where the device has usable ones (the
//! tensor-core candidates join the FP32 ones under a precision-keyed tune key) and at FP32 elsewhere. Under
//! FP16, f16 tensors are multiplied as stored and the product is stored in f16 (rounded once, from the f32
//! accumulators); f32 tensors are rounded to f16 as they are staged and the product is f32.

use super::policy::via_f32;
use crate::contract::gemm::{Gemm, GemmOp};
use crate::contract::precision::{self, Math, Precision};
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

fn check_f32(ts: &[&Tensor], op: &str) -> Result<()> {
    for t in ts {
        t.expect_dtype(DType::F32, op)?;
    }
    ts[0].same_device(&ts[1..], op)
}

/// The matrix product of 2-D `a` (m×k) and `b` (k×n).
pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    matmul_t(a, b, false, false)
}

/// `op(a) · op(b)` for 2-D tensors, where `op` transposes when the flag is set (`a` is stored k×m when
/// `trans_a`, `b` is stored n×k when `trans_b`).
///
/// f16 inputs are widened to f32 on the device and the product stored back in f16 ([`crate::ops::policy`]).
pub fn matmul_t(a: &Tensor, b: &Tensor, trans_a: bool, trans_b: bool) -> Result<Tensor> {
    matmul_prec(a, b, trans_a, trans_b, precision::current()?)
}

/// `matmul_t` at precision `p`, whatever this thread's policy: [`Precision::Fp32`] runs the FP32 kernels;
/// TF32 and FP16 run on tensor cores where the device has usable ones, else at FP32 (the decision log says
/// so). Under FP16, two f16 tensors are multiplied as stored and the product is f16.
pub fn matmul_prec(
    a: &Tensor,
    b: &Tensor,
    trans_a: bool,
    trans_b: bool,
    p: Precision,
) -> Result<Tensor> {
    if let Some(g) = f16_direct(a, b, p, || matmul_shape(a, b, trans_a, trans_b))? {
        return product(a, b, &g, &[g.m, g.n], DType::F16);
    }
    via_f32(&[a, b], "matmul", |t| {
        matmul_f32(t[0], t[1], trans_a, trans_b, p)
    })
}

fn matmul_f32(
    a: &Tensor,
    b: &Tensor,
    trans_a: bool,
    trans_b: bool,
    p: Precision,
) -> Result<Tensor> {
    let mut g = matmul_desc(a, b, trans_a, trans_b)?;
    g.math = Math::f32_at(p);
    product(a, b, &g, &[g.m, g.n], DType::F32)
}

/// Runs `g` into a new tensor of `shape` and `dtype`.
fn product(a: &Tensor, b: &Tensor, g: &Gemm, shape: &[usize], dtype: DType) -> Result<Tensor> {
    let out = Tensor::empty(a.device(), shape, dtype)?;
    run(a, b, &out, None, g)?;
    Ok(out)
}

/// The descriptor of a product of two f16 tensors on tensor cores (f16 in, f16 out), when `p` is FP16 and the
/// device can: `desc` gives the shape. `None`: the product goes through f32 ([`via_f32`]).
fn f16_direct(
    a: &Tensor,
    b: &Tensor,
    p: Precision,
    desc: impl FnOnce() -> Result<Gemm>,
) -> Result<Option<Gemm>> {
    if p != Precision::Fp16 || a.dtype() != DType::F16 || b.dtype() != DType::F16 {
        return Ok(None);
    }
    a.same_device(&[b], "matmul")?;
    if !a.device().backend().gemm_tensor_cores(p) {
        return Ok(None);
    }
    let mut g = desc()?;
    g.math = Math {
        precision: p,
        f16_io: true,
    };
    Ok(Some(g))
}

/// The (rows, cols) of `op(t)` for the last two dimensions of `t`: swapped when `trans`.
fn op_dims(t: &Tensor, trans: bool) -> (usize, usize) {
    let s = t.shape();
    let (r, c) = (s[s.len() - 2], s[s.len() - 1]);
    if trans { (c, r) } else { (r, c) }
}

/// Batched product of 3-D tensors: `out[i] = op(a[i]) · op(b[i])`. A batch of 1 on either side is shared by
/// every batch of the other.
pub fn bmm(a: &Tensor, b: &Tensor, trans_a: bool, trans_b: bool) -> Result<Tensor> {
    bmm_prec(a, b, trans_a, trans_b, precision::current()?)
}

/// `bmm` at precision `p` (see [`matmul_prec`]).
pub fn bmm_prec(
    a: &Tensor,
    b: &Tensor,
    trans_a: bool,
    trans_b: bool,
    p: Precision,
) -> Result<Tensor> {
    if let Some(g) = f16_direct(a, b, p, || bmm_shape(a, b, trans_a, trans_b))? {
        return product(a, b, &g, &[g.batch, g.m, g.n], DType::F16);
    }
    via_f32(&[a, b], "bmm", |t| bmm_f32(t[0], t[1], trans_a, trans_b, p))
}

fn bmm_f32(a: &Tensor, b: &Tensor, trans_a: bool, trans_b: bool, p: Precision) -> Result<Tensor> {
    let mut g = bmm_desc(a, b, trans_a, trans_b)?;
    g.math = Math::f32_at(p);
    product(a, b, &g, &[g.batch, g.m, g.n], DType::F32)
}

fn bmm_desc(a: &Tensor, b: &Tensor, trans_a: bool, trans_b: bool) -> Result<Gemm> {
    check_f32(&[a, b], "bmm")?;
    bmm_shape(a, b, trans_a, trans_b)
}

/// The descriptor of `bmm` from the shapes alone (the dtypes are the caller's to check).
fn bmm_shape(a: &Tensor, b: &Tensor, trans_a: bool, trans_b: bool) -> Result<Gemm> {
    if a.rank() != 3 || b.rank() != 3 {
        return Err(Error::Shape(format!(
            "bmm needs 3-D tensors (batch, rows, cols), got {:?} and {:?}",
            a.shape(),
            b.shape()
        )));
    }
    let (ba, bb) = (a.shape()[0], b.shape()[0]);
    if ba != bb && ba != 1 && bb != 1 {
        return Err(Error::Shape(format!(
            "bmm: batch sizes {ba} and {bb} differ (one of them may be 1)"
        )));
    }
    let batch = ba.max(bb);
    let ((m, ka), (kb, n)) = (op_dims(a, trans_a), op_dims(b, trans_b));
    if ka != kb {
        return Err(Error::Shape(format!(
            "bmm: op(a) is {m}×{ka} but op(b) is {kb}×{n} (a {:?}, b {:?}); the inner sizes must match",
            a.shape(),
            b.shape()
        )));
    }
    let mut g = Gemm::dense(m, n, ka, batch, trans_a, trans_b, ba == 1);
    if bb == 1 {
        g.s_b = 0;
    }
    Ok(g)
}

/// The kernel candidates for `bmm(a, b, trans_a, trans_b)` on their device at this thread's precision, as
/// labels (with a shared `a`, the GPU kernels can fold the batches into the columns: `tiled_flat`; under TF32
/// or FP16 with usable tensor cores, `["tc_tf32",128,128,16,64,32]` and the like), measured by the autotuner
/// as [`matmul_candidates`] says.
pub fn bmm_candidates(a: &Tensor, b: &Tensor, trans_a: bool, trans_b: bool) -> Result<Vec<String>> {
    let (g, _) = labelled_desc(a, b, "bmm", || bmm_shape(a, b, trans_a, trans_b))?;
    Ok(a.device().backend().gemm_labels(&g))
}

/// `bmm` computed by the candidate `label` (one of [`bmm_candidates`]), without autotuning; f16 tensors under
/// FP16 as [`matmul_with`].
pub fn bmm_with(
    a: &Tensor,
    b: &Tensor,
    trans_a: bool,
    trans_b: bool,
    label: &str,
) -> Result<Tensor> {
    let (g, dtype) = labelled_desc(a, b, "bmm", || bmm_shape(a, b, trans_a, trans_b))?;
    forced(a, b, &g, &[g.batch, g.m, g.n], dtype, label)
}

/// The descriptor of a product named by label, at this thread's precision, and its output dtype: two f16
/// tensors under FP16 on a device with usable tensor cores multiply as stored into f16 (as `matmul_prec`
/// does); anything else is an f32 product of f32 tensors (`op` names it in a dtype error).
fn labelled_desc(
    a: &Tensor,
    b: &Tensor,
    op: &str,
    shape: impl Fn() -> Result<Gemm>,
) -> Result<(Gemm, DType)> {
    let p = precision::current()?;
    if let Some(g) = f16_direct(a, b, p, &shape)? {
        return Ok((g, DType::F16));
    }
    check_f32(&[a, b], op)?;
    let mut g = shape()?;
    g.math = Math::f32_at(p);
    Ok((g, DType::F32))
}

/// Runs `g` into a new tensor of `shape` and `dtype` with the candidate `label`, bypassing the autotuner.
fn forced(
    a: &Tensor,
    b: &Tensor,
    g: &Gemm,
    shape: &[usize],
    dtype: DType,
    label: &str,
) -> Result<Tensor> {
    let out = Tensor::empty(a.device(), shape, dtype)?;
    g.check(a, b, &out, None)?;
    if out.numel() > 0 {
        let op = GemmOp::new(a, b, &out, None, g);
        a.device().backend().gemm_forced(a.device(), &op, label)?;
    }
    Ok(out)
}

fn matmul_desc(a: &Tensor, b: &Tensor, trans_a: bool, trans_b: bool) -> Result<Gemm> {
    check_f32(&[a, b], "matmul")?;
    matmul_shape(a, b, trans_a, trans_b)
}

/// The descriptor of `matmul_t` from the shapes alone (the dtypes are the caller's to check).
fn matmul_shape(a: &Tensor, b: &Tensor, trans_a: bool, trans_b: bool) -> Result<Gemm> {
    if a.rank() != 2 || b.rank() != 2 {
        return Err(Error::Shape(format!(
            "matmul needs 2-D tensors, got {:?} and {:?} (use bmm for batches)",
            a.shape(),
            b.shape()
        )));
    }
    let ((m, ka), (kb, n)) = (op_dims(a, trans_a), op_dims(b, trans_b));
    if ka != kb {
        return Err(Error::Shape(format!(
            "matmul: op(a) is {m}×{ka} but op(b) is {kb}×{n} (a {:?}{}, b {:?}{}); the inner sizes must match",
            a.shape(),
            if trans_a { " transposed" } else { "" },
            b.shape(),
            if trans_b { " transposed" } else { "" }
        )));
    }
    Ok(Gemm::dense(m, n, ka, 1, trans_a, trans_b, false))
}

/// The kernel candidates for `matmul_t(a, b, trans_a, trans_b)` on their device at this thread's precision,
/// as labels (e.g. `["packed",16,16,4,1]`, `["tiled",256,128,8,16,8,1]`, or
/// `["tiled_sliced",64,32,32,4,4,4,1]` with the K tile sliced among 4 layers of work-items; under TF32 or FP16
/// with usable tensor cores also `["tc_tf32",128,128,16,64,32]`: block tile, K tile, warp tile, and where the
/// operands' rows lie on 16 bytes the pipelined `["tc_tf32_async",128,128,16,64,32,3]`, with its count of
/// local buffers; two f16 tensors under FP16 list the candidates of their f16 product); the built-in
/// device has the one candidate `reference`. The autotuner measures every one except those shaped for the
/// other kind of memory (the tiled kernels where local memory is not on chip, as on CPU OpenCL; the packed and
/// register kernels where it is, as on GPUs), which never win there; they still run when forced.
pub fn matmul_candidates(
    a: &Tensor,
    b: &Tensor,
    trans_a: bool,
    trans_b: bool,
) -> Result<Vec<String>> {
    let (g, _) = labelled_desc(a, b, "matmul", || matmul_shape(a, b, trans_a, trans_b))?;
    Ok(a.device().backend().gemm_labels(&g))
}

/// `matmul_t` computed by the candidate `label` (one of [`matmul_candidates`]), without autotuning: to test
/// and compare individual kernels. Two f16 tensors under FP16 (with usable tensor cores) give an f16 product,
/// as [`matmul_prec`] does; otherwise the tensors are f32 and so is the product.
pub fn matmul_with(
    a: &Tensor,
    b: &Tensor,
    trans_a: bool,
    trans_b: bool,
    label: &str,
) -> Result<Tensor> {
    let (g, dtype) = labelled_desc(a, b, "matmul", || matmul_shape(a, b, trans_a, trans_b))?;
    forced(a, b, &g, &[g.m, g.n], dtype, label)
}

/// Validates `g` against the buffers and runs it on their device (k = 0 writes the epilogue of an empty sum).
pub(crate) fn run(
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    bias: Option<&Tensor>,
    g: &Gemm,
) -> Result<()> {
    g.check(a, b, c, bias)?;
    if g.m == 0 || g.n == 0 || g.batch == 0 {
        return Ok(());
    }
    c.device()
        .backend()
        .gemm(c.device(), &GemmOp::new(a, b, c, bias, g))
}
