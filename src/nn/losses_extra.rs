//! Metric-learning and margin losses with netcl's arguments and formulas, built from differentiable ops so
//! their gradients come from autograd: triplet margin, contrastive (Hadsell et al., 2006), InfoNCE (NT-Xent)
//! and the multi-class hinge.

use super::graph_ops::matmul_nt;
use crate::autograd::ops::same_shape;
use crate::autograd::{Var, ops as ag};
use crate::error::{Error, Result};
use crate::ops::{self, UnaryOp};
use crate::tensor::{DType, Tensor};

fn reduce(per_row: &Var, reduction: &str, op: &str) -> Result<Var> {
    match reduction {
        "mean" => ag::mean_all(per_row),
        "sum" => ag::sum_all(per_row),
        r => Err(Error::Invalid(format!(
            "{op}: reduction `{r}` is not mean or sum"
        ))),
    }
}

fn rows(x: &Var, op: &str, what: &str) -> Result<(usize, usize)> {
    match *x.shape() {
        [n, d] => Ok((n, d)),
        _ => Err(Error::Shape(format!(
            "{op}: {what} {:?} is not (N, D)",
            x.shape()
        ))),
    }
}

/// Σ over the last axis of (a − b)²: (N, D) → (N).
fn sq_dist(a: &Var, b: &Var) -> Result<Var> {
    let d = ag::sub(a, b)?;
    ag::sum(&ag::mul(&d, &d)?, Some(&[-1]), false)
}

/// `reduction_i max(0, d(a_i, p_i) − d(a_i, n_i) + margin)` over rows of (N, D); `distance` is `squared`
/// (‖a − b‖²) or `euclidean` (√(‖a − b‖² + 1e-8)); `reduction` is `mean` or `sum` (netcl's `triplet_loss`).
pub fn triplet_loss(
    anchor: &Var,
    positive: &Var,
    negative: &Var,
    margin: f32,
    distance: &str,
    reduction: &str,
) -> Result<Var> {
    let op = "triplet_loss";
    rows(anchor, op, "anchor")?;
    same_shape(anchor, positive, op, "positive")?;
    same_shape(anchor, negative, op, "negative")?;
    let (mut dp, mut dn) = (sq_dist(anchor, positive)?, sq_dist(anchor, negative)?);
    match distance {
        "squared" => {}
        "euclidean" => {
            dp = ag::unary(UnaryOp::Sqrt, &ag::add_scalar(&dp, 1e-8)?)?;
            dn = ag::unary(UnaryOp::Sqrt, &ag::add_scalar(&dn, 1e-8)?)?;
        }
        d => {
            return Err(Error::Invalid(format!(
                "{op}: distance `{d}` is not squared or euclidean"
            )));
        }
    }
    let l = ag::relu(&ag::add_scalar(&ag::sub(&dp, &dn)?, margin)?)?;
    reduce(&l, reduction, op)
}

/// Labels as an f32 column of N values in {0, 1} (1: a similar pair).
fn pair_labels(labels: &Tensor, n: usize, op: &str) -> Result<Tensor> {
    let v: Vec<f32> = match labels.dtype() {
        DType::I32 => labels.to_vec::<i32>()?.iter().map(|&x| x as f32).collect(),
        DType::F32 => labels.to_vec::<f32>()?,
        d => {
            return Err(Error::Invalid(format!(
                "{op}: labels must be i32 or f32, got {}",
                d.name()
            )));
        }
    };
    if v.len() != n {
        return Err(Error::shape_mismatch(
            format!("{op} labels"),
            &[n],
            labels.shape(),
        ));
    }
    if let Some(bad) = v.iter().find(|&&x| x != 0.0 && x != 1.0) {
        return Err(Error::Invalid(format!(
            "{op}: label {bad} is not 0 (dissimilar) or 1 (similar)"
        )));
    }
    Tensor::from_slice(labels.device(), &v, &[n])
}

/// `reduction_i [y_i·d_i² + (1 − y_i)·max(0, margin − d_i)²]` with d_i = √(‖x1_i − x2_i‖² + 1e-8) and labels y
/// (N) in {0, 1}, 1 for a similar pair (netcl's `contrastive_loss`).
pub fn contrastive_loss(
    x1: &Var,
    x2: &Var,
    labels: &Tensor,
    margin: f32,
    reduction: &str,
) -> Result<Var> {
    let op = "contrastive_loss";
    let (n, _) = rows(x1, op, "x1")?;
    same_shape(x1, x2, op, "x2")?;
    let y = pair_labels(labels, n, op)?;
    let not_y = ops::rsub_scalar(&y, 1.0)?;
    let d_sq = sq_dist(x1, x2)?;
    let d = ag::unary(UnaryOp::Sqrt, &ag::add_scalar(&d_sq, 1e-8)?)?;
    let hinge = ag::relu(&ag::add_scalar(&ag::mul_scalar(&d, -1.0)?, margin)?)?;
    let l = ag::add(
        &ag::mul(&d_sq, &Var::constant(y))?,
        &ag::mul(&ag::mul(&hinge, &hinge)?, &Var::constant(not_y))?,
    )?;
    reduce(&l, reduction, op)
}

/// Rows divided by their L2 norm plus 1e-8.
fn l2_normalize(x: &Var) -> Result<Var> {
    let sq = ag::sum(&ag::mul(x, x)?, Some(&[-1]), true)?;
    let norm = ag::add_scalar(&ag::unary(UnaryOp::Sqrt, &sq)?, 1e-8)?;
    ag::div(x, &norm)
}

/// InfoNCE (NT-Xent) with the positives on the diagonal (`queries[i]` matches `keys[i]`):
/// `reduction_i(−s_ii/τ + log Σ_j exp(s_ij/τ))` with s the cosine similarities when `normalize` (rows
/// divided by ‖·‖ + 1e-8), else dot products; `symmetric` averages the query→key and key→query losses
/// (netcl's `info_nce_loss`).
pub fn info_nce_loss(
    queries: &Var,
    keys: &Var,
    temperature: f32,
    normalize: bool,
    reduction: &str,
    symmetric: bool,
) -> Result<Var> {
    let op = "info_nce_loss";
    let (n, _) = rows(queries, op, "queries")?;
    same_shape(queries, keys, op, "keys")?;
    if !(temperature.is_finite() && temperature > 0.0) {
        return Err(Error::Invalid(format!(
            "{op}: temperature {temperature} must be positive"
        )));
    }
    let (q, k) = if normalize {
        (l2_normalize(queries)?, l2_normalize(keys)?)
    } else {
        (queries.clone(), keys.clone())
    };
    let targets: Vec<i32> = (0..n as i32).collect();
    let targets = Tensor::from_slice(queries.value().device(), &targets, &[n])?;
    let inv_t = 1.0 / temperature;
    // cross_entropy is the mean over rows of −log softmax at the target: exactly the mean row loss.
    let mut l = ag::cross_entropy(&ag::mul_scalar(&matmul_nt(&q, &k)?, inv_t)?, &targets, -100)?;
    if symmetric {
        let back = ag::cross_entropy(&ag::mul_scalar(&matmul_nt(&k, &q)?, inv_t)?, &targets, -100)?;
        l = ag::mul_scalar(&ag::add(&l, &back)?, 0.5)?;
    }
    match reduction {
        "mean" => Ok(l),
        "sum" => ag::mul_scalar(&l, n as f32),
        r => Err(Error::Invalid(format!(
            "{op}: reduction `{r}` is not mean or sum"
        ))),
    }
}

/// Multi-class hinge: `(1/N) Σ_i Σ_{c ≠ y_i} max(0, margin − x_{i,y_i} + x_{i,c})` over logits (N, C), with
/// targets one-hot (N, C) as in netcl, or i32 class indices (N).
pub fn hinge_loss(logits: &Var, targets: &Tensor, margin: f32) -> Result<Var> {
    let op = "hinge_loss";
    let (n, c) = rows(logits, op, "logits")?;
    let onehot = match targets.dtype() {
        DType::I32 => {
            ag::check_labels(targets, c)?;
            if targets.shape() != [n] {
                return Err(Error::shape_mismatch(
                    format!("{op} labels"),
                    &[n],
                    targets.shape(),
                ));
            }
            ops::one_hot(targets, c)?
        }
        _ => {
            targets.expect_dtype(DType::F32, op)?;
            if targets.shape() != [n, c] {
                return Err(Error::shape_mismatch(
                    format!("{op} one-hot targets"),
                    &[n, c],
                    targets.shape(),
                ));
            }
            targets.clone()
        }
    };
    let t = Var::constant(onehot.clone());
    let true_score = ag::sum(&ag::mul(logits, &t)?, Some(&[-1]), true)?;
    let m = ag::relu(&ag::add_scalar(&ag::sub(logits, &true_score)?, margin)?)?;
    let off = Var::constant(ops::rsub_scalar(&onehot, 1.0)?);
    ag::mul_scalar(&ag::sum_all(&ag::mul(&m, &off)?)?, 1.0 / n.max(1) as f32)
}
