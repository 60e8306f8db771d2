//! The backward pass: from a loss down the tape, each op's rule on the stream its
//! forward ran on, gradients summed where a value was used twice, and parameters'
//! gradients accumulated only once every rule has succeeded (a failed pass changes no
//! gradient and frees nothing, so it can be retried).

use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, PoisonError};

use half::{bf16, f16};

use super::mode::no_grad;
use super::node::{Kind, Node};
use crate::backend::{self, dispatch::current};
use crate::device::Dyn;
use crate::element::{DType, Element};
use crate::error::{Error, Result};
use crate::tensor::{Erased, Tensor};

/// A node in the pass's queue, ordered by creation: the latest first.
struct Queued(Arc<Node>);

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        self.0.seq == other.0.seq
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Queued {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.seq.cmp(&other.0.seq)
    }
}

fn err(reason: String) -> Error {
    Error::Backward { reason }
}

/// Every node the pass will reach, checked before any rule runs: no rule freed by an
/// earlier pass, no input written in place since an op read it, no value written in
/// place after its op made it.
fn check(root: &Arc<Node>) -> Result<Vec<Arc<Node>>> {
    let mut seen: HashMap<*const Node, ()> = HashMap::new();
    let mut stack = vec![Arc::clone(root)];
    let mut all = Vec::new();
    while let Some(node) = stack.pop() {
        if seen.insert(Arc::as_ptr(&node), ()).is_some() {
            continue;
        }
        match &node.kind {
            Kind::Written { by } => {
                let made = node.edges.first().and_then(|e| e.as_ref()).map_or("an op", |e| e.node.op);
                return Err(err(format!(
                    "a tensor made by `{made}` was written in place by `{by}` and then used; its gradient \
                     would ignore the write. Write into a `.detach()`ed copy, or make the value with ops"
                )));
            }
            Kind::Op { rule, .. } if rule.lock().unwrap_or_else(PoisonError::into_inner).is_none() => {
                return Err(err(format!(
                    "the tape through `{}` was freed by an earlier backward pass; call \
                     `backward_retain_graph()` the first time to run backward twice",
                    node.op
                )));
            }
            _ => {}
        }
        for edge in node.edges.iter().flatten() {
            let now = edge.node.version();
            if now != edge.version {
                let what = if edge.node.is_leaf() {
                    "a parameter".to_string()
                } else {
                    format!("the result of `{}`", edge.node.op)
                };
                return Err(err(format!(
                    "`{}` read {what}, which `{}` wrote in place afterwards (version {} → {now}); its gradient \
                     would be computed from the new values. Run backward before the write (an optimizer step \
                     after backward), or recompute the forward pass",
                    node.op,
                    edge.node.writer(),
                    edge.version
                )));
            }
            stack.push(Arc::clone(&edge.node));
        }
        all.push(node);
    }
    Ok(all)
}

/// `a + b` for two gradients of one tensor.
fn add(a: Erased, b: Erased) -> Result<Erased> {
    fn typed_add<T: Element>(a: Erased, b: Erased) -> Result<Erased> {
        let at = Dyn::new(a.device());
        Ok((a.typed::<Dyn, T>(at)? + b.typed::<Dyn, T>(at)?)?.erase())
    }
    if a.shape() != b.shape() {
        return Err(err(format!("internal: gradients of shapes {:?} and {:?} for one tensor", a.shape(), b.shape())));
    }
    match a.dtype() {
        DType::F32 => typed_add::<f32>(a, b),
        DType::F64 => typed_add::<f64>(a, b),
        DType::BF16 => typed_add::<bf16>(a, b),
        DType::F16 => typed_add::<f16>(a, b),
        other => Err(err(format!("internal: a gradient of {other}"))),
    }
}

/// Runs the rule of `node` on the stream its forward ran on.
fn run_rule(node: &Node, g: Erased) -> Result<Vec<Option<Erased>>> {
    let Kind::Op { rule, stream, .. } = &node.kind else {
        return Ok(Vec::new());
    };
    let rule = rule.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(rule) = rule.as_ref() else {
        return Err(err(format!("the tape through `{}` was freed by an earlier backward pass", node.op)));
    };
    let device = g.device();
    match stream {
        Some((dev, s)) => current::with_current(*dev, s.clone(), || rule(g)),
        // The forward ran on the default stream; the caller may have made another current.
        None if current::current(device).is_some() => {
            let default = backend::for_device(device)?.default_stream(device)?;
            current::with_current(device, default, || rule(g))
        }
        None => rule(g),
    }
}

/// The backward pass from `root`, whose gradient is `seed`.
pub(crate) fn backward(root: &Arc<Node>, seed: Erased, retain_graph: bool) -> Result<()> {
    let all = check(root)?;
    let _off = no_grad();
    let mut grads: HashMap<*const Node, Erased> = HashMap::new();
    grads.insert(Arc::as_ptr(root), seed);
    let mut queue = BinaryHeap::from([Queued(Arc::clone(root))]);
    let mut leaves: Vec<(Arc<Node>, Erased)> = Vec::new();
    while let Some(Queued(node)) = queue.pop() {
        let Some(g) = grads.remove(&Arc::as_ptr(&node)) else { continue };
        if node.is_leaf() {
            leaves.push((node, g));
            continue;
        }
        let outs = run_rule(&node, g)?;
        for (edge, g) in node.edges.iter().zip(outs) {
            let (Some(edge), Some(g)) = (edge, g) else { continue };
            let key = Arc::as_ptr(&edge.node);
            match grads.remove(&key) {
                Some(sum) => {
                    grads.insert(key, add(sum, g)?);
                }
                None => {
                    grads.insert(key, g);
                    queue.push(Queued(Arc::clone(&edge.node)));
                }
            }
        }
    }
    // Every rule ran: now the parameters' gradients change, all or none, and one pass at
    // a time (replicas on several threads add to the same parameters).
    static ACCUMULATE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = ACCUMULATE.lock().unwrap_or_else(PoisonError::into_inner);
    let mut sums = Vec::with_capacity(leaves.len());
    for (leaf, g) in leaves {
        let sum = match leaf.leaf_grad() {
            Some(old) => add(old, g)?,
            None => g,
        };
        sums.push((leaf, sum));
    }
    for (leaf, sum) in sums {
        leaf.set_leaf_grad(Some(sum));
    }
    if !retain_graph {
        for node in all {
            if let Kind::Op { rule, keep: false, .. } = &node.kind {
                rule.lock().unwrap_or_else(PoisonError::into_inner).take();
            }
        }
    }
    Ok(())
}

impl<D: crate::device::Device, T: crate::element::Float> Tensor<D, T> {
    /// Computes the gradient of this one-element tensor (a loss) with respect to every
    /// [`Param`](crate::Param) it was computed from, adding it to each parameter's
    /// [`grad`](crate::Param::grad) (PyTorch's `loss.backward()`). The tape is freed
    /// afterwards: a second call is an `Err` ([`backward_retain_graph`](Self::backward_retain_graph)
    /// keeps it). An `Err` changes no gradient.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Param, Tensor};
    /// let w = Param::new(Tensor::<Cuda<0>>::from_vec(vec![1.0, 2.0, 3.0], [3])?);
    /// let loss = w.square()?.sum()?;          // Σ w²
    /// loss.backward()?;
    /// let g: Tensor<Cuda<0>> = w.grad().unwrap(); // 2w, on w's placement
    /// assert_eq!(g.to_vec()?, vec![2.0, 4.0, 6.0]);
    /// assert!(loss.backward().is_err());      // the tape is gone
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn backward(&self) -> Result<()> {
        self.backward_impl(None, false)
    }

    /// [`backward`](Self::backward) that keeps the tape for another pass
    /// (`retain_graph=True`).
    pub fn backward_retain_graph(&self) -> Result<()> {
        self.backward_impl(None, true)
    }

    /// The backward pass of a tensor of any shape, given the gradient of its elements
    /// (PyTorch's `y.backward(gradient)`); `grad` has this tensor's shape and placement.
    pub fn backward_with(&self, grad: &Tensor<D, T>, retain_graph: bool) -> Result<()> {
        self.backward_impl(Some(grad), retain_graph)
    }

    fn backward_impl(&self, grad: Option<&Tensor<D, T>>, retain_graph: bool) -> Result<()> {
        let Some(root) = self.grad_fn() else {
            return Err(err(
                "this tensor tracks no gradients: no `Param` went into it, or it was made under `no_grad`".into(),
            ));
        };
        let seed = match grad {
            Some(g) => {
                self.same_device("backward", g)?;
                if g.shape() != self.shape() {
                    return Err(Error::ShapeMismatch {
                        op: "backward",
                        lhs: self.shape().to_vec(),
                        rhs: g.shape().to_vec(),
                    });
                }
                g.saved()
            }
            None if self.numel() == 1 => Tensor::ones_on(self.placement(), self.shape())?,
            None => {
                return Err(err(format!(
                    "backward() needs a one-element loss, not shape {:?}; reduce it first (`.sum()`, `.mean()`) or \
                     pass the gradient with `backward_with`",
                    self.shape()
                )))
            }
        };
        backward(root, seed.erase(), retain_graph)
    }
}
