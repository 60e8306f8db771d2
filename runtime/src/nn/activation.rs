//! The activations as blocks, for [`Sequential`](super::Sequential): `Relu`, `Gelu`
//! (the erf form; `Gelu::tanh()` for the approximation), `Tanh`, `Sigmoid`.

use std::marker::PhantomData;

use super::params::Parameters;
use crate::autograd::Param;
use crate::device::Device;
use crate::element::Float;
use crate::error::Result;
use crate::parallel::Module;
use crate::tensor::Tensor;
use crate::to_device::ToDevice;

macro_rules! activation {
    ($(#[$doc:meta])* $name:ident, |$x:ident, $s:ident| $body:expr) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $name<D: Device = crate::device::Dyn, T: Float = f32> {
            _on: PhantomData<fn() -> (D, T)>,
            approximate: bool,
        }

        impl<D: Device, T: Float> $name<D, T> {
            /// The activation.
            pub fn new() -> Self {
                $name { _on: PhantomData, approximate: false }
            }
        }

        impl<D: Device, T: Float> Module<D, T> for $name<D, T> {
            fn forward(&self, $x: &Tensor<D, T>) -> Result<Tensor<D, T>> {
                let $s = self;
                $body
            }
        }

        impl<D: Device, T: Float> Parameters<D, T> for $name<D, T> {
            fn visit_params(&self, _: &str, _: &mut dyn FnMut(&str, &Param<D, T>)) {}
            fn visit_params_mut(&mut self, _: &str, _: &mut dyn FnMut(&str, &mut Param<D, T>)) {}
        }

        impl<D: Device, T: Float> ToDevice for $name<D, T> {
            type On<E: Device> = $name<E, T>;
            fn to_placement<E: Device>(&self, _: E) -> Result<$name<E, T>> {
                Ok($name { _on: PhantomData, approximate: self.approximate })
            }
        }
    };
}

activation!(
    /// `max(x, 0)`.
    Relu, |x, _s| x.relu()
);
activation!(
    /// `x Φ(x)`; [`Gelu::tanh`] for PyTorch's `approximate='tanh'`.
    Gelu, |x, s| if s.approximate { x.gelu_tanh() } else { x.gelu() }
);
activation!(
    /// `tanh(x)`.
    Tanh, |x, _s| x.tanh()
);
activation!(
    /// `1 / (1 + e^-x)`.
    Sigmoid, |x, _s| x.sigmoid()
);

impl<D: Device, T: Float> Gelu<D, T> {
    /// The tanh approximation (`approximate='tanh'`).
    pub fn tanh() -> Self {
        Gelu { _on: PhantomData, approximate: true }
    }
}
