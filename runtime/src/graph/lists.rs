//! What a graph takes and gives: [`GraphInputs`] (a `&mut Tensor`, or a tuple or `Vec` of
//! them, lent to the capture closure as `&Tensor`s and written between replays through
//! [`InputMut`]s) and [`GraphOutputs`] (what the closure returns: a `Tensor`, a tuple or
//! `Vec` of them, or `()`, read after a replay through [`Output`]s).

use std::sync::Arc;

use super::views::{InputMut, Output, WritesOn};
use crate::device::Device;
use crate::element::Element;
use crate::error::Result;
use crate::placement::SameGraphDevice;
use crate::storage::Storage;
use crate::tensor::Tensor;

mod sealed {
    pub trait Sealed {}
}

/// The tensors of a list, for the graph to check and order (not for users).
#[doc(hidden)]
pub struct Parts<'s> {
    pub(crate) tensors: Vec<&'s Arc<Storage>>,
}

thread_local! {
    /// The list a replay's [`Parts`] took last, emptied: every replay reuses one
    /// allocation instead of making one.
    static SPARE: std::cell::Cell<Vec<&'static Arc<Storage>>> = const { std::cell::Cell::new(Vec::new()) };
}

impl<'s> Parts<'s> {
    /// An empty list in the allocation the thread's last [`Parts::recycle`] gave back.
    pub(crate) fn reused() -> Self {
        Parts { tensors: SPARE.try_with(|s| s.take()).unwrap_or_default() }
    }

    /// Gives the list's allocation back for the thread's next [`Parts::reused`].
    pub(crate) fn recycle(self) {
        let mut v = self.tensors;
        v.clear();
        // Empty, the list holds no reference: the same allocation as a list of
        // `'static` references (an in-place collect of nothing; `filter` could not change
        // the lifetime).
        #[allow(clippy::unnecessary_filter_map)]
        let spare: Vec<&'static Arc<Storage>> = v.into_iter().filter_map(|_| None).collect();
        let _ = SPARE.try_with(|s| s.set(spare));
    }
}

/// Every tensor of a list, one by one.
#[doc(hidden)]
pub trait TensorList: sealed::Sealed {
    /// Adds the storage of every tensor in the list to `parts`.
    #[doc(hidden)]
    fn parts<'s>(&'s self, parts: &mut Parts<'s>);
    /// Gives every tensor of the list memory of its own (copying any it shares), as a
    /// write in place needs.
    #[doc(hidden)]
    fn own_memory(&mut self) -> Result<()>;
}

/// The inputs of a graph on `D`, lent to the capture closure for the duration of the call
/// (`'c`), and written between replays. Implemented for `&mut Tensor`, tuples of up to
/// six of them (each its own element type), and `Vec<&mut Tensor<_, T>>`.
///
/// The unused `Bound` parameter makes `for<'c> GraphInputs<'c, D>` imply `Self: 'c`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be the inputs of a graph on `{D}`",
    label = "not a `&mut Tensor`, a tuple of them or a `Vec` of them",
    note = "a graph borrows its inputs mutably for as long as it lives: pass `&mut x`, `(&mut x, &mut w)` or a `Vec<&mut Tensor<_, T>>`"
)]
pub trait GraphInputs<'c, D: Device, Bound = &'c Self>: TensorList {
    /// What the capture closure gets: `&Tensor`s, in the same shape as the list.
    type Refs;
    /// What [`Graph::inputs_mut`](super::Graph::inputs_mut) gives: [`InputMut`]s.
    type Writers;
    /// Lends the inputs to the closure.
    #[doc(hidden)]
    fn refs(&'c self) -> Self::Refs;
    /// Lends the inputs for writing.
    #[doc(hidden)]
    fn writers(&'c mut self, on: &WritesOn) -> Self::Writers;
}

/// What a graph's capture closure returns: the memory a replay writes, read through
/// [`Output`] views after [`Graph::replay`](super::Graph::replay). Implemented for
/// `Tensor`, `()`, tuples of up to six outputs, and `Vec`s of them.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be an output of a graph, nor a part of its outputs",
    label = "not a `Tensor`, `()`, a tuple or a `Vec` of them",
    note = "return the tensors the graph writes from the capture closure; read them after `replay()`"
)]
pub trait GraphOutputs: TensorList {
    /// The outputs as read after a replay: [`Output`]s, in the same shape.
    type View<'g>
    where
        Self: 'g;
    /// Views of the outputs.
    #[doc(hidden)]
    fn view(&self) -> Self::View<'_>;
}

impl<D: Device, T: Element> sealed::Sealed for &mut Tensor<D, T> {}

impl<D: Device, T: Element> TensorList for &mut Tensor<D, T> {
    fn parts<'s>(&'s self, parts: &mut Parts<'s>) {
        parts.tensors.push(self.shared_storage());
    }

    fn own_memory(&mut self) -> Result<()> {
        Tensor::own_memory(self)
    }
}

impl<'c, G: Device, D: Device + SameGraphDevice<G>, T: Element> GraphInputs<'c, G> for &mut Tensor<D, T> {
    type Refs = &'c Tensor<D, T>;
    type Writers = InputMut<'c, D, T>;

    fn refs(&'c self) -> Self::Refs {
        self
    }

    fn writers(&'c mut self, on: &WritesOn) -> Self::Writers {
        InputMut::new(self, on)
    }
}

impl<D: Device, T: Element> sealed::Sealed for Vec<&mut Tensor<D, T>> {}

impl<D: Device, T: Element> TensorList for Vec<&mut Tensor<D, T>> {
    fn parts<'s>(&'s self, parts: &mut Parts<'s>) {
        parts.tensors.extend(self.iter().map(|t| t.shared_storage()));
    }

    fn own_memory(&mut self) -> Result<()> {
        self.iter_mut().try_for_each(|t| t.own_memory())
    }
}

impl<'c, G: Device, D: Device + SameGraphDevice<G>, T: Element> GraphInputs<'c, G> for Vec<&mut Tensor<D, T>> {
    type Refs = Vec<&'c Tensor<D, T>>;
    type Writers = Vec<InputMut<'c, D, T>>;

    fn refs(&'c self) -> Self::Refs {
        self.iter().map(|t| &**t).collect()
    }

    fn writers(&'c mut self, on: &WritesOn) -> Self::Writers {
        self.iter_mut().map(|t| InputMut::new(t, on)).collect()
    }
}

impl<D: Device, T: Element> sealed::Sealed for Tensor<D, T> {}

impl<D: Device, T: Element> TensorList for Tensor<D, T> {
    fn parts<'s>(&'s self, parts: &mut Parts<'s>) {
        parts.tensors.push(self.shared_storage());
    }

    fn own_memory(&mut self) -> Result<()> {
        Ok(()) // outputs are never written in place by the user
    }
}

impl<D: Device, T: Element> GraphOutputs for Tensor<D, T> {
    type View<'g> = Output<'g, D, T>;

    fn view(&self) -> Self::View<'_> {
        Output::new(self)
    }
}

impl sealed::Sealed for () {}

impl TensorList for () {
    fn parts<'s>(&'s self, _: &mut Parts<'s>) {}

    fn own_memory(&mut self) -> Result<()> {
        Ok(())
    }
}

impl GraphOutputs for () {
    type View<'g> = ();

    fn view(&self) -> Self::View<'_> {}
}

impl<O: GraphOutputs> sealed::Sealed for Vec<O> {}

impl<O: GraphOutputs> TensorList for Vec<O> {
    fn parts<'s>(&'s self, parts: &mut Parts<'s>) {
        self.iter().for_each(|o| o.parts(parts));
    }

    fn own_memory(&mut self) -> Result<()> {
        Ok(())
    }
}

impl<O: GraphOutputs> GraphOutputs for Vec<O> {
    type View<'g>
        = Vec<O::View<'g>>
    where
        Self: 'g;

    fn view(&self) -> Self::View<'_> {
        self.iter().map(O::view).collect()
    }
}

macro_rules! tuples {
    ($(($($n:tt $A:ident),+)),+) => {$(
        impl<$($A: TensorList),+> sealed::Sealed for ($($A,)+) {}

        impl<$($A: TensorList),+> TensorList for ($($A,)+) {
            fn parts<'s>(&'s self, parts: &mut Parts<'s>) {
                $(self.$n.parts(parts);)+
            }

            fn own_memory(&mut self) -> Result<()> {
                $(self.$n.own_memory()?;)+
                Ok(())
            }
        }

        impl<'c, G: Device, $($A: GraphInputs<'c, G>),+> GraphInputs<'c, G> for ($($A,)+) {
            type Refs = ($($A::Refs,)+);
            type Writers = ($($A::Writers,)+);

            fn refs(&'c self) -> Self::Refs {
                ($(self.$n.refs(),)+)
            }

            fn writers(&'c mut self, on: &WritesOn) -> Self::Writers {
                ($(self.$n.writers(on),)+)
            }
        }

        impl<$($A: GraphOutputs),+> GraphOutputs for ($($A,)+) {
            type View<'g> = ($($A::View<'g>,)+) where Self: 'g;

            fn view(&self) -> Self::View<'_> {
                ($(self.$n.view(),)+)
            }
        }
    )+};
}

tuples!(
    (0 A),
    (0 A, 1 B),
    (0 A, 1 B, 2 C),
    (0 A, 1 B, 2 C, 3 E),
    (0 A, 1 B, 2 C, 3 E, 4 F),
    (0 A, 1 B, 2 C, 3 E, 4 F, 5 H)
);

#[cfg(test)]
mod tests {
    use super::Parts;
    use crate::device::Cpu;
    use crate::tensor::Tensor;

    /// A replay's list of inputs takes the allocation the thread's last replay gave back,
    /// emptied.
    #[test]
    fn a_replays_list_reuses_one_allocation() {
        let t = Tensor::<Cpu>::zeros([2]).unwrap();
        let mut first = Parts::reused();
        first.tensors.push(t.shared_storage());
        let at = first.tensors.as_ptr();
        first.recycle();
        let again = Parts::reused();
        assert!(again.tensors.is_empty());
        assert_eq!(again.tensors.as_ptr(), at, "a new allocation");
        assert!(again.tensors.capacity() >= 1);
    }
}
