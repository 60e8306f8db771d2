//! The backward pass: from a loss down the tape, each op's rule on the stream its
//! forward ran on, gradients summed where a value was used twice, and parameters'
//! gradients accumulated only once every rule has succeeded (a failed pass changes no
//! gradient and frees nothing, so it can be retried).

use std::collections::BinaryHeap;
use std::sync::{Arc, PoisonError};

use half::{bf16, f16};

use super::mode::no_grad;
use super::node::{Kind, Node};
use crate::backend::fast_map::FastMap;
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

/// For each node, the edges into it from the nodes a pass reaches (keyed by address: FNV,
/// not SipHash, for the lookups every node of a pass makes).
type Deps = FastMap<*const Node, usize>;

/// Every node the pass will reach, checked before any rule runs: no rule freed by an
/// earlier pass, no input written in place since an op read it, no value written in
/// place after its op made it. With the nodes comes, for each, the number of edges into
/// it from reachable nodes: once that many rules have run, its gradient is complete.
fn check(root: &Arc<Node>) -> Result<(Vec<Arc<Node>>, Deps)> {
    let mut seen: FastMap<*const Node, ()> = FastMap::default();
    let mut deps = Deps::default();
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
            *deps.entry(Arc::as_ptr(&edge.node)).or_default() += 1;
            stack.push(Arc::clone(&edge.node));
        }
        all.push(node);
    }
    Ok((all, deps))
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

/// Told of each parameter's gradient of a pass as soon as it is complete, while the
/// pass goes on (DistributedDataParallel starts exchanging a bucket then). It gets the
/// leaf and the gradient this pass adds to it; an `Err` stops the pass, changing no
/// gradient.
pub(crate) type OnLeafReady<'a> = &'a mut dyn FnMut(&Arc<Node>, &Erased) -> Result<()>;

/// The backward pass from `root`, whose gradient is `seed`.
pub(crate) fn backward(root: &Arc<Node>, seed: Erased, retain_graph: bool) -> Result<()> {
    backward_observed(root, seed, retain_graph, &mut |_, _| Ok(()))
}

/// [`backward`], calling `on_ready` with each parameter's gradient once the last rule
/// that adds to it has run.
pub(crate) fn backward_observed(
    root: &Arc<Node>,
    seed: Erased,
    retain_graph: bool,
    on_ready: OnLeafReady<'_>,
) -> Result<()> {
    let (all, mut deps) = check(root)?;
    let _off = no_grad();
    let mut grads: FastMap<*const Node, Erased> = FastMap::default();
    let mut leaves: Vec<(Arc<Node>, Erased)> = Vec::new();
    if root.is_leaf() {
        on_ready(root, &seed)?;
        leaves.push((Arc::clone(root), seed));
    } else {
        grads.insert(Arc::as_ptr(root), seed);
    }
    let mut queue = BinaryHeap::from([Queued(Arc::clone(root))]);
    while let Some(Queued(node)) = queue.pop() {
        let Some(g) = grads.remove(&Arc::as_ptr(&node)) else { continue };
        let mut outs = run_rule(&node, g)?.into_iter();
        for edge in node.edges.iter() {
            let g = outs.next().flatten();
            let Some(edge) = edge else { continue };
            let key = Arc::as_ptr(&edge.node);
            if let Some(g) = g {
                match grads.remove(&key) {
                    Some(sum) => {
                        grads.insert(key, add(sum, g)?);
                    }
                    None => {
                        grads.insert(key, g);
                        if !edge.node.is_leaf() {
                            queue.push(Queued(Arc::clone(&edge.node)));
                        }
                    }
                }
            }
            // The last edge into a leaf: its gradient of this pass is complete.
            let left = deps.get_mut(&key).map(|d| {
                *d -= 1;
                *d
            });
            if edge.node.is_leaf() && left == Some(0) {
                if let Some(g) = grads.remove(&key) {
                    on_ready(&edge.node, &g)?;
                    leaves.push((Arc::clone(&edge.node), g));
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

    /// [`backward`](Self::backward), telling `on_ready` of each parameter's gradient as
    /// soon as the pass has it complete.
    pub(crate) fn backward_observing(&self, on_ready: OnLeafReady<'_>) -> Result<()> {
        let (root, seed) = self.root_and_seed(None)?;
        backward_observed(root, seed, false, on_ready)
    }

    fn backward_impl(&self, grad: Option<&Tensor<D, T>>, retain_graph: bool) -> Result<()> {
        let (root, seed) = self.root_and_seed(grad)?;
        backward(root, seed, retain_graph)
    }

    /// The node a pass starts from and its gradient: `grad`, or 1 for a one-element loss.
    fn root_and_seed(&self, grad: Option<&Tensor<D, T>>) -> Result<(&Arc<Node>, Erased)> {
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
        Ok((root, seed.erase()))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::autograd::Param;
    use crate::device::Cpu;
    use crate::tensor::Tensor;

    /// Each parameter is reported once, with its whole gradient of the pass, as soon as the
    /// last rule adding to it has run: `w2`'s (read by the last op) before `w1`'s (read by
    /// the first op and the last).
    #[test]
    fn observers_get_each_gradient_once_complete() {
        let w1 = Param::new(Tensor::<Cpu>::from_vec(vec![1.0, 2.0], [2]).unwrap());
        let w2 = Param::new(Tensor::<Cpu>::from_vec(vec![3.0, 4.0], [2]).unwrap());
        let x = Tensor::<Cpu>::from_vec(vec![5.0, 6.0], [2]).unwrap();
        let y = (&x * &*w1).unwrap();
        let z = (&y * &*w2).unwrap();
        let loss = (&z + &*w1).unwrap().sum().unwrap();
        let mut seen = Vec::new();
        loss.backward_observing(&mut |leaf, g| {
            let name = if Arc::ptr_eq(leaf, w1.node()) { "w1" } else { "w2" };
            let g: Tensor<Cpu> = g.clone().typed(Cpu).unwrap();
            seen.push((name, g.to_vec().unwrap()));
            Ok(())
        })
        .unwrap();
        // d/dw1 = x·w2 + 1, d/dw2 = x·w1.
        assert_eq!(seen, vec![("w2", vec![5.0, 12.0]), ("w1", vec![16.0, 25.0])]);
        assert_eq!(w1.grad().unwrap().to_vec().unwrap(), vec![16.0, 25.0]);
    }

    /// An observer's `Err` stops the pass and changes no gradient.
    #[test]
    fn an_observer_error_changes_no_gradient() {
        let w = Param::new(Tensor::<Cpu>::from_vec(vec![1.0, 2.0], [2]).unwrap());
        let loss = w.square().unwrap().sum().unwrap();
        let r = loss.backward_observing(&mut |_, _| Err(crate::error::Error::Backward { reason: "stop".into() }));
        assert!(r.is_err());
        assert!(w.grad().is_none());
    }
}
