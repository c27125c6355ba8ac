//! Reverse-mode automatic differentiation.
//!
//! A [`Var`] wraps a [`Tensor`] and remembers how it was made: its parents and a backward function that maps
//! the output gradient to one gradient per parent. [`Var::backward`] orders the graph topologically from the
//! loss (an iterative depth-first search along parents) and walks it in reverse, summing the gradients that
//! reach each node. Leaves that require gradients accumulate into their `grad` across backward calls until
//! [`Var::zero_grad`]; intermediate gradients are dropped once propagated unless [`Var::retain_grad`] was
//! called. Inside [`no_grad`] no graph is recorded.

pub mod attention;
pub mod ops;

use std::cell::Cell;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// The backward function of one node: output gradient → one optional gradient per parent.
pub type BackwardFn = Box<dyn Fn(&Tensor) -> Result<Vec<Option<Tensor>>> + Send + Sync>;

/// Records the op `op` of `parents` with value `value`, whose gradients `backward` maps from the output's:
/// `Ok(Var::from_op(op, value, parents, Box::new(backward)))`.
pub(crate) fn record(
    op: &'static str,
    value: Tensor,
    parents: &[&Var],
    backward: impl Fn(&Tensor) -> Result<Vec<Option<Tensor>>> + Send + Sync + 'static,
) -> Result<Var> {
    Ok(Var::from_op(op, value, parents, Box::new(backward)))
}

struct GradFn {
    op: &'static str,
    parents: Vec<Var>,
    backward: BackwardFn,
}

struct Node {
    id: u64,
    value: Tensor,
    requires_grad: bool,
    grad: Mutex<Option<Tensor>>,
    grad_fn: Option<GradFn>,
    retain: AtomicBool,
    frozen: AtomicBool,
}

/// A tensor in the autograd graph.
#[derive(Clone)]
pub struct Var(Arc<Node>);

impl fmt::Debug for Var {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Var({:?}, requires_grad={}, op={})",
            self.0.value.shape(),
            self.0.requires_grad,
            self.0.grad_fn.as_ref().map_or("leaf", |g| g.op)
        )
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
}

/// Runs `f` without recording a graph (inference, optimiser updates). Nested calls are fine.
pub fn no_grad<R>(f: impl FnOnce() -> R) -> R {
    let prev = GRAD_ENABLED.with(|g| g.replace(false));
    let r = f();
    GRAD_ENABLED.with(|g| g.set(prev));
    r
}

/// Whether operations on this thread record a graph now.
pub fn is_grad_enabled() -> bool {
    GRAD_ENABLED.with(|g| g.get())
}

impl Var {
    fn new(value: Tensor, requires_grad: bool, grad_fn: Option<GradFn>) -> Var {
        Var(Arc::new(Node {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            value,
            requires_grad,
            grad: Mutex::new(None),
            grad_fn,
            retain: AtomicBool::new(false),
            frozen: AtomicBool::new(false),
        }))
    }

    /// A leaf that does not require a gradient (inputs, labels).
    pub fn constant(value: Tensor) -> Var {
        Var::new(value, false, None)
    }

    /// A leaf whose gradient is accumulated by `backward` (a parameter).
    pub fn param(value: Tensor) -> Var {
        Var::new(value, true, None)
    }

    /// The result of a differentiable op: records `backward` when a parent requires a gradient and
    /// recording is on; otherwise a constant.
    pub fn from_op(op: &'static str, value: Tensor, parents: &[&Var], backward: BackwardFn) -> Var {
        let requires = is_grad_enabled() && parents.iter().any(|p| p.requires_grad());
        if !requires {
            return Var::constant(value);
        }
        let parents = parents.iter().map(|p| (*p).clone()).collect();
        Var::new(
            value,
            true,
            Some(GradFn {
                op,
                parents,
                backward,
            }),
        )
    }

    /// The value.
    pub fn value(&self) -> &Tensor {
        &self.0.value
    }

    /// The shape of the value.
    pub fn shape(&self) -> &[usize] {
        self.0.value.shape()
    }

    /// Whether a gradient flows to this node (false for constants and frozen parameters).
    pub fn requires_grad(&self) -> bool {
        self.0.requires_grad && !self.0.frozen.load(Ordering::Relaxed)
    }

    /// Stops (or resumes) gradient flow into this parameter: backward skips it and optimisers leave it as is.
    pub fn set_frozen(&self, frozen: bool) {
        self.0.frozen.store(frozen, Ordering::Relaxed);
    }

    /// Whether this node is a leaf (made by `param` or `constant`, not by an op).
    pub fn is_leaf(&self) -> bool {
        self.0.grad_fn.is_none()
    }

    /// The op that made this node (`leaf` for leaves).
    pub fn op_name(&self) -> &'static str {
        self.0.grad_fn.as_ref().map_or("leaf", |g| g.op)
    }

    /// The accumulated gradient, if any.
    pub fn grad(&self) -> Option<Tensor> {
        self.0.grad.lock().ok().and_then(|g| g.clone())
    }

    /// Forgets the accumulated gradient.
    pub fn zero_grad(&self) {
        if let Ok(mut g) = self.0.grad.lock() {
            *g = None;
        }
    }

    /// Keeps this intermediate node's gradient after `backward` (leaves always keep theirs).
    pub fn retain_grad(&self) {
        self.0.retain.store(true, Ordering::Relaxed);
    }

    /// A new leaf with the same value and no history.
    pub fn detach(&self) -> Var {
        Var::constant(self.0.value.clone())
    }

    /// Whether two handles are the same node.
    pub fn same_node(&self, other: &Var) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Back-propagates from this scalar (one-element) node, seeding its gradient with 1.
    pub fn backward(&self) -> Result<()> {
        if self.0.value.numel() != 1 {
            return Err(Error::Shape(format!(
                "backward() needs a one-element loss, got shape {:?}; reduce it (sum, mean) or use backward_with",
                self.shape()
            )));
        }
        let seed =
            Tensor::full(self.0.value.device(), self.shape(), 1.0)?.cast(self.0.value.dtype())?;
        self.backward_with(seed)
    }

    /// Back-propagates `grad` (the gradient of some scalar with respect to this node).
    pub fn backward_with(&self, grad: Tensor) -> Result<()> {
        if grad.shape() != self.shape() {
            return Err(Error::shape_mismatch(
                "backward_with gradient",
                self.shape(),
                grad.shape(),
            ));
        }
        if !self.requires_grad() {
            return Err(Error::Invalid(
                "backward: this value does not depend on anything that requires a gradient (all inputs are constants, \
                 frozen, or it was computed under no_grad)"
                    .into(),
            ));
        }
        let order = topo_order(self);
        let mut pending: HashMap<u64, Tensor> = HashMap::new();
        pending.insert(self.0.id, grad);
        for node in order.iter().rev() {
            let Some(g) = pending.remove(&node.0.id) else {
                continue;
            };
            match &node.0.grad_fn {
                None => accumulate_into(node, g)?,
                Some(f) => {
                    if node.0.retain.load(Ordering::Relaxed) {
                        accumulate_into(node, g.clone())?;
                    }
                    let grads = (f.backward)(&g).map_err(|e| match e {
                        Error::Shape(m) => Error::Shape(format!("backward of {}: {m}", f.op)),
                        Error::ShapeMismatch { op, expected, got } => Error::ShapeMismatch {
                            op: format!("backward of {}: {op}", f.op),
                            expected,
                            got,
                        },
                        other => other,
                    })?;
                    if grads.len() != f.parents.len() {
                        return Err(Error::Invalid(format!(
                            "backward of {} returned {} gradients for {} inputs",
                            f.op,
                            grads.len(),
                            f.parents.len()
                        )));
                    }
                    for (p, pg) in f.parents.iter().zip(grads) {
                        let Some(pg) = pg else { continue };
                        if !p.requires_grad() {
                            continue;
                        }
                        if pg.shape() != p.shape() {
                            return Err(Error::shape_mismatch(
                                format!("backward of {}: gradient", f.op),
                                p.shape(),
                                pg.shape(),
                            ));
                        }
                        // A gradient has its tensor's dtype (f16 activations, f32 master weights).
                        let pg = crate::ops::policy::store_as(pg, p.0.value.dtype())?;
                        let merged = match pending.remove(&p.0.id) {
                            Some(prev) => add_same(&prev, &pg)?,
                            None => pg,
                        };
                        pending.insert(p.0.id, merged);
                    }
                }
            }
        }
        Ok(())
    }
}

fn accumulate_into(node: &Var, g: Tensor) -> Result<()> {
    let mut slot = node
        .0
        .grad
        .lock()
        .map_err(|_| Error::Invalid("gradient lock poisoned".into()))?;
    *slot = Some(match slot.take() {
        Some(prev) => add_same(&prev, &g)?,
        None => g,
    });
    Ok(())
}

/// `a + b` for two gradients of one tensor, in their dtype whatever the mixed-precision policy says.
fn add_same(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let _keep = crate::ops::policy::autocast(false);
    crate::ops::add(a, b)
}

/// Nodes reachable from `root` through parents that require gradients, parents before children.
fn topo_order(root: &Var) -> Vec<Var> {
    let mut order = Vec::new();
    let mut visited = std::collections::HashSet::new();
    // Iterative DFS with an explicit "children done" marker, so deep graphs do not overflow the stack.
    let mut stack: Vec<(Var, bool)> = vec![(root.clone(), false)];
    while let Some((v, done)) = stack.pop() {
        if done {
            order.push(v);
            continue;
        }
        if !visited.insert(v.0.id) {
            continue;
        }
        stack.push((v.clone(), true));
        if let Some(f) = &v.0.grad_fn {
            for p in &f.parents {
                if p.requires_grad() && !visited.contains(&p.0.id) {
                    stack.push((p.clone(), false));
                }
            }
        }
    }
    order
}
