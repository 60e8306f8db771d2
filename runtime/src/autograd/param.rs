//! `Param<D, T>`: a tensor whose gradient is kept (PyTorch's `nn.Parameter`, a leaf
//! with `requires_grad=True`), typed to its placement, and the tensor methods of the
//! tape (`tracks_grad`, `detach`, and the compile error of a gradient read of a result).

use std::cell::Cell;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use super::node::{Edge, Node, Rule};
use crate::copy::HostPlacement;
use crate::device::{Device, Dyn};
use crate::element::{Element, Float};
use crate::error::{Error, Result};
use crate::tensor::{Erased, Tensor};
use crate::to_device::ToDevice;

/// A tensor that gradients are computed for: ops on it record the tape, and
/// [`Tensor::backward`] adds the gradient of a loss to [`grad`](Param::grad), a tensor on
/// the parameter's own placement `D` (so an optimizer for `Cuda<0>` never meets a
/// gradient on `Cuda<1>`).
///
/// A `Param` reads as a tensor (`Deref`): `x.matmul(&w)`, `w.exp()`, `&*w + &b`. Its
/// values change only through [`set`](Param::set) or [`as_mut_slice`](Param::as_mut_slice)
/// (an optimizer step); ops that read it before such a write make their backward an `Err`
/// (PyTorch's version counter). Clones are the same parameter (one gradient).
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{Cpu, Param, Tensor};
/// let w = Param::new(Tensor::<Cpu>::from_vec(vec![1.0, -2.0], [2])?);
/// let x = Tensor::<Cpu>::from_vec(vec![3.0, 4.0], [2])?;
/// let loss = (&x * &*w)?.sum()?;
/// loss.backward()?;
/// assert_eq!(w.grad().unwrap().to_vec()?, vec![3.0, 4.0]); // d(x·w)/dw = x
/// w.zero_grad();
/// assert!(w.grad().is_none());
/// # Ok::<(), locus::Error>(())
/// ```
pub struct Param<D: Device, T: Float = f32> {
    /// The values, whose autograd node is `leaf`.
    tensor: Tensor<D, T>,
    leaf: Arc<Node>,
}

impl<D: Device, T: Float> Param<D, T> {
    /// A parameter holding `value`'s elements (shared, not copied); whatever tape `value`
    /// had is not part of it.
    pub fn new(value: Tensor<D, T>) -> Self {
        let leaf = Node::leaf();
        Param { tensor: value.with_grad_fn(Some(Arc::clone(&leaf))), leaf }
    }

    /// The parameter's leaf in the tape (one per parameter, shared by its clones).
    pub(crate) fn node(&self) -> &Arc<Node> {
        &self.leaf
    }

    /// The gradient accumulated by backward passes since the last
    /// [`zero_grad`](Param::zero_grad), or `None` if none reached this parameter.
    pub fn grad(&self) -> Option<Tensor<D, T>> {
        self.node().leaf_grad().and_then(|g| g.typed(self.tensor.placement()).ok())
    }

    /// Forgets the gradient (PyTorch's `zero_grad(set_to_none=True)`): the next backward
    /// pass starts from nothing.
    pub fn zero_grad(&self) {
        self.node().set_leaf_grad(None);
    }

    /// Replaces the gradient (gradient clipping, scaling); `grad` has the parameter's
    /// shape.
    pub fn set_grad(&self, grad: Option<Tensor<D, T>>) -> Result<()> {
        if let Some(g) = &grad {
            self.check_shape("set_grad", g)?;
        }
        self.node().set_leaf_grad(grad.map(|g| g.saved().erase()));
        Ok(())
    }

    /// The parameter as a tensor that records the tape (what `Deref` gives).
    pub fn tensor(&self) -> &Tensor<D, T> {
        &self.tensor
    }

    /// The values, without the tape (PyTorch's `p.detach()`).
    pub fn detach(&self) -> Tensor<D, T> {
        self.tensor.saved()
    }

    fn check_shape(&self, op: &'static str, value: &Tensor<D, T>) -> Result<()> {
        self.tensor.same_device(op, value)?;
        if value.shape() != self.tensor.shape() {
            return Err(Error::ShapeMismatch { op, lhs: self.tensor.shape().to_vec(), rhs: value.shape().to_vec() });
        }
        Ok(())
    }

    /// New values of the same shape (an optimizer step, `p.data = value`): counts as a
    /// write in place, so ops that read the old values cannot run their backward.
    pub fn set(&mut self, value: Tensor<D, T>) -> Result<()> {
        self.check_shape("Param::set", &value)?;
        self.node().bump("Param::set");
        let node = Arc::clone(self.node());
        self.tensor = value.with_grad_fn(Some(node));
        Ok(())
    }
}

impl<D: Device, T: Float> Param<D, T> {
    /// Gives the values memory of their own if they share it (a graph that writes them
    /// in place needs it); the same values, so no write.
    pub(crate) fn own_memory(&mut self) -> Result<()> {
        self.tensor.own_memory()
    }

    /// The values, for an optimizer's kernel to write in place: counts as a write by `op`.
    pub(crate) fn values_mut(&mut self, op: &'static str) -> &mut Tensor<D, T> {
        self.leaf.bump(op);
        &mut self.tensor
    }

    /// The values moved out, for an optimizer's kernel to write in place among other
    /// parameters' (counts as a write by `op`); `stand_in`, of the same shape and device and
    /// sharing no memory with them, holds their place until [`put_values`](Self::put_values).
    pub(crate) fn take_values(&mut self, op: &'static str, stand_in: Tensor<D, T>) -> Tensor<D, T> {
        self.leaf.bump(op);
        std::mem::replace(&mut self.tensor, stand_in)
    }

    /// Puts back the values [`take_values`](Self::take_values) took.
    pub(crate) fn put_values(&mut self, values: Tensor<D, T>) {
        self.tensor = values;
    }
}

impl<D: HostPlacement, T: Float> Param<D, T> {
    /// The elements of a parameter in host memory, written in place: counts as a write
    /// as [`set`](Param::set) does.
    pub fn as_mut_slice(&mut self) -> Result<&mut [T]> {
        self.tensor.as_mut_slice()
    }
}

impl<D: Device, T: Float> Deref for Param<D, T> {
    type Target = Tensor<D, T>;
    fn deref(&self) -> &Tensor<D, T> {
        &self.tensor
    }
}

impl<D: Device, T: Float> Clone for Param<D, T> {
    /// The same parameter: one gradient, one version.
    fn clone(&self) -> Self {
        Param { tensor: self.tensor.clone(), leaf: Arc::clone(&self.leaf) }
    }
}

impl<D: Device, T: Float> fmt::Debug for Param<D, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Param({:?})", self.tensor)
    }
}

impl<D: Device, T: Float> ToDevice for Param<D, T> {
    type On<E: Device> = Param<E, T>;

    /// A new parameter on `placement` with a copy of the values and no gradient
    /// (PyTorch's `module.to(device)`); on the same placement, a parameter sharing the
    /// values but with a gradient of its own. Inside [`linked_replicas`] (what
    /// `DataParallel` makes its replicas in), a replica instead: the same values on
    /// `placement`, whose gradients flow back to this parameter, on its device.
    fn to_placement<E: Device>(&self, placement: E) -> Result<Param<E, T>> {
        let values = self.detach().to_placement(placement)?;
        if !LINKED.with(Cell::get) {
            return Ok(Param::new(values));
        }
        let home = self.tensor.placement();
        let edge = Edge { node: Arc::clone(&self.leaf), version: self.leaf.version() };
        let rule: Rule = Box::new(move |g: Erased| {
            let device = g.device();
            Ok(vec![Some(g.typed::<Dyn, T>(Dyn::new(device))?.copy_to(home)?.erase())])
        });
        let link = Node::kept("a replica of a parameter", edge, rule);
        Ok(Param { tensor: values.with_grad_fn(Some(Arc::clone(&link))), leaf: link })
    }
}

thread_local! {
    static LINKED: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with [`Param`]s moved as replicas linked to their originals (gradients of a
/// replica are added to the original's, on the original's device): how `DataParallel`
/// replicates a module, so that its backward pass reaches the module's parameters.
pub(crate) fn linked_replicas<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            LINKED.with(|l| l.set(self.0));
        }
    }
    let _restore = Restore(LINKED.with(|l| l.replace(true)));
    f()
}

/// Gradients are kept for [`Param`]s only. No type implements it: it is the bound that
/// turns a gradient read of an op's result into a compile error with a message.
#[diagnostic::on_unimplemented(
    message = "gradients are kept for `Param`s only, not for `{Self}`, the result of an op",
    label = "this tensor is no parameter",
    note = "make the value a leaf with `Param::new(tensor)` and read `param.grad()`; a result's gradient is not kept"
)]
pub trait GradLeaf {}

impl<D: Device, T: Element> Tensor<D, T> {
    /// Whether this tensor records the tape: a [`Param`], or the result of an op on one
    /// outside [`no_grad`](crate::no_grad).
    pub fn tracks_grad(&self) -> bool {
        self.grad_fn().is_some()
    }

    /// The same values without the tape (PyTorch's `detach()`): ops on it record nothing.
    pub fn detach(&self) -> Self {
        self.saved()
    }

    /// Not callable: only a [`Param`] keeps its gradient (see [`GradLeaf`]).
    pub fn grad(&self) -> Option<Self>
    where
        Self: GradLeaf,
    {
        None
    }
}
