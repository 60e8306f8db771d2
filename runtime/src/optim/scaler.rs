//! Loss scaling for 16-bit training (PyTorch's `torch.amp.GradScaler`), with the scaled
//! gradients a state of the model that the types track: while a [`Scaled`] holds the
//! model, nothing else can use it (no optimizer step, no clipping, no gradient read
//! through it), and the only way on is [`Scaled::unscale`].

use crate::autograd::no_grad;
use crate::device::Device;
use crate::element::Float;
use crate::error::{Error, Result};
use crate::nn::Parameters;
use crate::tensor::Tensor;

use super::{AdamW, Sgd};

/// An optimizer's update of a model's parameters, for [`GradScaler::step`].
pub trait Optimizer<D: Device, T: Float = f32> {
    /// One update of every parameter of `model` that has a gradient.
    fn step(&mut self, model: &mut impl Parameters<D, T>) -> Result<()>;
}

impl<D: Device, T: Float> Optimizer<D, T> for Sgd<D, T> {
    fn step(&mut self, model: &mut impl Parameters<D, T>) -> Result<()> {
        Sgd::step(self, model)
    }
}

impl<D: Device, T: Float> Optimizer<D, T> for AdamW<D, T> {
    fn step(&mut self, model: &mut impl Parameters<D, T>) -> Result<()> {
        AdamW::step(self, model)
    }
}

/// Multiplies the loss by a scale before backward, so that small 16-bit gradients do not
/// flush to zero, and adapts the scale: halved (`backoff`) after a step whose gradients
/// overflowed (that step is skipped), doubled (`growth`) after `interval` good steps in a
/// row. PyTorch's defaults: 65536, 2, 0.5, 2000.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::nn::{self, Linear, Module};
/// use locus::optim::{GradScaler, Sgd};
/// use locus::{f16, Cuda, Tensor};
/// let mut model = Linear::<Cuda<0>, f16>::new(4, 1, 0)?;
/// let mut opt = Sgd::new(0.1);
/// let mut scaler = GradScaler::with(1024.0, 2.0, 0.5, 2000)?;
/// let x = Tensor::<Cuda<0>, f16>::ones([8, 4])?;
/// nn::zero_grad(&model);
/// let loss = model.forward(&x)?.square()?.mean()?;
/// let scaled = scaler.backward(&loss, &mut model)?; // the gradients are scaled now
/// let grads = scaled.unscale()?;                    // and back to their true values
/// locus::optim::clip_grad_norm(grads.model(), 1.0)?;
/// assert!(scaler.step(&mut opt, grads)?);           // finite: the step ran
/// // With the default scale, 65536, f16 gradients overflow: the step is skipped and
/// // the scale halves, as PyTorch's first steps do.
/// let mut scaler = GradScaler::new();
/// nn::zero_grad(&model);
/// let loss = model.forward(&x)?.square()?.mean()?;
/// let grads = scaler.backward(&loss, &mut model)?.unscale()?;
/// if !scaler.step(&mut opt, grads)? {
///     assert_eq!(scaler.scale(), 32768.0);
/// }
/// # Ok::<(), locus::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct GradScaler {
    scale: f64,
    growth: f64,
    backoff: f64,
    interval: u64,
    good_steps: u64,
}

impl Default for GradScaler {
    fn default() -> Self {
        GradScaler { scale: 65536.0, growth: 2.0, backoff: 0.5, interval: 2000, good_steps: 0 }
    }
}

/// The model while its gradients are scaled: it holds the model's only reference, so
/// that no optimizer steps, clips or reads the scaled gradients.
#[must_use = "the gradients are scaled until `.unscale()`"]
pub struct Scaled<'m, M> {
    model: &'m mut M,
    scale: f64,
}

/// The model with its gradients unscaled, and whether they are all finite.
#[must_use = "hand it to `GradScaler::step`, which steps the optimizer unless a gradient overflowed"]
pub struct Unscaled<'m, M> {
    model: &'m mut M,
    finite: bool,
}

impl GradScaler {
    /// A scaler with PyTorch's defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// With another initial scale, growth factor, backoff factor and growth interval.
    pub fn with(scale: f64, growth: f64, backoff: f64, interval: u64) -> Result<Self> {
        let ok = scale.is_finite() && scale > 0.0 && growth >= 1.0 && backoff > 0.0 && backoff < 1.0 && interval > 0;
        if !ok {
            return Err(Error::InvalidArgument {
                op: "GradScaler::with",
                reason: format!(
                    "needs a finite scale > 0, growth >= 1, 0 < backoff < 1 and interval > 0; got {scale}, {growth}, \
                     {backoff}, {interval}"
                ),
            });
        }
        Ok(GradScaler { scale, growth, backoff, interval, good_steps: 0 })
    }

    /// The current scale.
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Backward of `loss × scale`, adding scaled gradients to `model`'s parameters; the
    /// model is held until [`Scaled::unscale`].
    pub fn backward<'m, D: Device, T: Float, M: Parameters<D, T>>(
        &self,
        loss: &Tensor<D, T>,
        model: &'m mut M,
    ) -> Result<Scaled<'m, M>> {
        loss.binary_scalar(crate::backend::BinaryOp::Mul, T::from_f64(self.scale))?.backward()?;
        Ok(Scaled { model, scale: self.scale })
    }

    /// Steps `opt` on the model unless a gradient overflowed, then adapts the scale.
    /// Returns whether the step ran.
    pub fn step<D: Device, T: Float, M: Parameters<D, T>>(
        &mut self,
        opt: &mut impl Optimizer<D, T>,
        grads: Unscaled<'_, M>,
    ) -> Result<bool> {
        if !grads.finite {
            self.scale *= self.backoff;
            self.good_steps = 0;
            return Ok(false);
        }
        opt.step(grads.model)?;
        self.good_steps += 1;
        if self.good_steps == self.interval {
            self.scale *= self.growth;
            self.good_steps = 0;
        }
        Ok(true)
    }
}

/// What an optimizer or `clip_grad_norm` would need of a model whose gradients are still
/// scaled: no type has it, so handing them a [`Scaled`] fails to compile with this message.
#[diagnostic::on_unimplemented(
    message = "the gradients of `{Self}` are still scaled",
    label = "scaled gradients: unscale them first",
    note = "`let grads = scaled.unscale()?;` divides them by the scale; then clip `grads.model()` if you wish, and step with `scaler.step(&mut opt, grads)?`"
)]
pub trait StillScaled {}

/// A `Scaled` lists its parameters only once unscaled: the bound no type meets (so an
/// optimizer handed one names `StillScaled` in its error).
impl<'m, D: Device, T: Float, M: Parameters<D, T>> Parameters<D, T> for Scaled<'m, M>
where
    Scaled<'m, M>: StillScaled,
{
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &crate::autograd::Param<D, T>)) {
        self.model.visit_params(prefix, f)
    }
    fn visit_params_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut crate::autograd::Param<D, T>)) {
        self.model.visit_params_mut(prefix, f)
    }
}

impl<'m, M> Scaled<'m, M> {
    /// Divides every gradient by the scale and checks that all are finite (one read of a
    /// single value back from the device, as PyTorch's `step` does).
    pub fn unscale<D: Device, T: Float>(self) -> Result<Unscaled<'m, M>>
    where
        M: Parameters<D, T>,
    {
        let _off = no_grad();
        let inverse = T::from_f64(1.0 / self.scale);
        let mut result = Ok(());
        // Σ 0·g over every gradient: 0 when all are finite, NaN otherwise.
        let mut check: Option<Tensor<D, T>> = None;
        self.model.visit_params("", &mut |_, p| {
            let Some(g) = p.grad() else { return };
            if result.is_err() {
                return;
            }
            result = (|| {
                let g = g.binary_scalar(crate::backend::BinaryOp::Mul, inverse)?;
                let nan_if_not_finite = g.scaled(0.0)?.sum()?;
                check = Some(match check.take() {
                    Some(c) => (&c + &nan_if_not_finite)?,
                    None => nan_if_not_finite,
                });
                p.set_grad(Some(g))
            })();
        });
        result?;
        let finite = match check {
            Some(c) => c.item()?.to_f64() == 0.0,
            None => true,
        };
        Ok(Unscaled { model: self.model, finite })
    }
}

impl<M> Unscaled<'_, M> {
    /// The model, to read (clip its gradients, log their norm).
    pub fn model(&self) -> &M {
        self.model
    }

    /// Whether every gradient is finite (the step will run).
    pub fn is_finite(&self) -> bool {
        self.finite
    }
}
