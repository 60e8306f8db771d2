//! `DataParallel`: one replica of a module per device, the batch split between them,
//! every replica run under its device (the first on the calling thread, each other on a
//! thread of its own), the outputs gathered; the module owned, so that the replicas
//! follow every change to it.

use std::sync::{Arc, Mutex, PoisonError};
use std::thread;

use super::lists::DeviceList;
use super::scatter::{chunk_sizes, gather_dyn, split_to};
use crate::autograd::linked_replicas;
use crate::device::{Device, DeviceId, Dyn};
use crate::element::Element;
use crate::error::{panic_message, Error, Result};
use crate::guard::DeviceGuard;
use crate::tensor::Tensor;
use crate::to_device::{CopyCache, ToDevice};

/// A model's forward pass on placement `D`: what [`DataParallel`] runs on each device.
///
/// Implement it for every placement (`impl<D: Device> Module<D> for Mlp<D>`), so that
/// the replicas, which are `Mlp<Dyn>`, have it too.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::parallel::Module;
/// use locus::{Cuda, Device, Tensor};
/// struct Scale<D: Device> { by: Tensor<D> }
/// impl<D: Device> Module<D> for Scale<D> {
///     fn forward(&self, x: &Tensor<D>) -> locus::Result<Tensor<D>> {
///         x * &self.by
///     }
/// }
/// let m = Scale { by: Tensor::<Cuda<0>>::full([1], 2.0)? };
/// assert_eq!(m.forward(&Tensor::ones([2])?)?.to_vec()?, vec![2.0, 2.0]);
/// # Ok::<(), locus::Error>(())
/// ```
pub trait Module<D: Device, T: Element = f32> {
    /// The output for a batch `x` (dim 0 is the batch).
    fn forward(&self, x: &Tensor<D, T>) -> Result<Tensor<D, T>>;
}

/// A module replicated over devices (PyTorch's `nn.DataParallel`): `forward` splits the
/// batch along dim 0 as evenly as possible, runs each replica on its own thread under
/// its device ([`DeviceGuard`]), and gathers the outputs, in order, on the output
/// placement `O`.
///
/// `DataParallel` owns the module: it is read through [`module`](Self::module) and
/// changed only through [`module_mut`](Self::module_mut) (a training step), which marks
/// the replicas stale; the next `forward` first copies to each device the tensors that
/// changed since its replica was made, so the replicas can never run on old weights.
/// The replicas are made by [`ToDevice`] (`#[derive(ToDevice)]`); a replica on the
/// device the module already lives on shares its tensors. A batch with fewer rows than
/// devices uses only the first devices.
///
/// A replica that fails or panics makes `forward` return [`Error::Replica`] naming its
/// device (the first by device order, when several fail); every thread has finished by
/// then.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::parallel::{DataParallel, Module};
/// use locus::{devices, Cpu, Cuda, Device, DeviceId, Dyn, Tensor, ToDevice};
///
/// // What #[derive(ToDevice)] writes for this struct.
/// struct Affine<D: Device> { w: Tensor<D>, b: Tensor<D> }
/// impl<D: Device> ToDevice for Affine<D> {
///     type On<E: Device> = Affine<E>;
///     fn to_placement<E: Device>(&self, e: E) -> locus::Result<Affine<E>> {
///         Ok(Affine { w: self.w.to_placement(e)?, b: self.b.to_placement(e)? })
///     }
/// }
/// impl<D: Device> Module<D> for Affine<D> {
///     fn forward(&self, x: &Tensor<D>) -> locus::Result<Tensor<D>> {
///         x.matmul(&self.w)? + &self.b
///     }
/// }
///
/// let model = Affine { w: Tensor::<Cuda<0>>::rand([3, 2], 1)?, b: Tensor::<Cuda<0>>::ones([2])? };
/// let mut dp = DataParallel::new(model, &devices()?, Cuda::<0>)?;
/// let x = Tensor::<Cpu>::rand([5, 3], 2)?;
/// let y: Tensor<Cuda<0>> = dp.forward(&x)?;
/// assert_eq!(y.to_vec()?, dp.module().forward(&x.to::<Cuda<0>>()?)?.to_vec()?);
///
/// // A step changes the module; the next forward runs on the new weights everywhere.
/// let b = (&dp.module().b * 3.0)?;
/// dp.module_mut().b = b;
/// let y: Tensor<Cuda<0>> = dp.forward(&x)?;
/// assert_eq!(y.to_vec()?, dp.module().forward(&x.to::<Cuda<0>>()?)?.to_vec()?);
/// # Ok::<(), locus::Error>(())
/// ```
pub struct DataParallel<M: Replicate, O: Device = Dyn> {
    module: M,
    devices: Vec<DeviceId>,
    output: O,
    replicas: Mutex<ReplicaState<M::On<Dyn>>>,
}

/// The replicas of a `DataParallel<M, _>` with their devices, in device order
/// ([`DataParallel::replicas`]); shared, so that a forward keeps the replicas it started
/// with whatever happens to the module meanwhile.
pub type Replicas<M> = Arc<[(DeviceId, <M as ToDevice>::On<Dyn>)]>;

/// The replicas as last made (`None` once the module may have changed), and the copies
/// they were made of, for the next refresh to reuse.
struct ReplicaState<R> {
    current: Option<Arc<[(DeviceId, R)]>>,
    copies: CopyCache,
}

/// A model [`DataParallel`] can take: any [`ToDevice`] value, by value. Its own trait
/// only so that a mistake (a reference to the model, the old spelling, or a type that is
/// not `ToDevice`) is reported as what `DataParallel` needs, not as a field of a derive.
#[diagnostic::on_unimplemented(
    message = "`DataParallel` cannot replicate `{Self}`: it takes the model by value, and the model's type must be `ToDevice`",
    label = "a `{Self}`, not a `ToDevice` model",
    note = "pass the model itself, not a reference: `DataParallel::new(model, ..)` keeps it (clone it first to keep a copy; `dp.module()` lends it back); a model type gets `ToDevice` from `#[derive(ToDevice)]`"
)]
pub trait Replicate: ToDevice {}

#[diagnostic::do_not_recommend]
impl<M: ToDevice> Replicate for M {}

impl<M: Replicate, O: Device> DataParallel<M, O> {
    /// Takes `module` and replicates it onto each of `devices` (distinct, at least one);
    /// outputs are gathered on `output`.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::parallel::DataParallel;
    /// use locus::{Cpu, Cuda, DeviceId, Tensor};
    /// let w = Tensor::<Cpu>::ones([2])?;
    /// # if !locus::testing::needs_devices(2)? { return Ok(()); }
    /// let dp = DataParallel::new(w.clone(), &[DeviceId::Cuda(1), DeviceId::Cuda(0)], Cuda::<0>)?;
    /// assert_eq!(dp.devices(), vec![DeviceId::Cuda(1), DeviceId::Cuda(0)]);
    /// assert!(DataParallel::new(w.clone(), &[], Cuda::<0>).is_err());
    /// assert!(DataParallel::new(w.clone(), &[DeviceId::Cuda(0), DeviceId::Cuda(0)], Cpu).is_err());
    /// assert!(DataParallel::new(w, &[DeviceId::Cuda(99)], Cpu).is_err());
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn new(module: M, devices: &[DeviceId], output: O) -> Result<Self> {
        let bad = |reason: String| Error::InvalidArgument { op: "DataParallel::new", reason };
        if devices.is_empty() {
            return Err(bad("no devices to replicate to".into()));
        }
        for (i, d) in devices.iter().enumerate() {
            if devices[..i].contains(d) {
                return Err(bad(format!("{d} is listed twice")));
            }
        }
        crate::backend::for_device(output.id())?;
        let dp = DataParallel {
            module,
            devices: devices.to_vec(),
            output,
            replicas: Mutex::new(ReplicaState { current: None, copies: CopyCache::default() }),
        };
        // A missing device is an error here, not at the first forward.
        dp.replicas()?;
        Ok(dp)
    }

    /// The module.
    pub fn module(&self) -> &M {
        &self.module
    }

    /// The module, to change (an optimiser step). The replicas are marked stale now, so
    /// the next [`forward`](Self::forward) refreshes them whatever is done with the
    /// reference; it copies only the tensors that changed.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::parallel::DataParallel;
    /// use locus::{Cpu, Cuda, DeviceId, Tensor};
    /// let mut dp = DataParallel::new(Tensor::<Cpu>::ones([2])?, &[DeviceId::Cuda(0)], Cpu)?;
    /// *dp.module_mut() = Tensor::full([2], 5.0)?;
    /// assert_eq!(dp.replicas()?[0].1.to_vec()?, vec![5.0, 5.0]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn module_mut(&mut self) -> &mut M {
        self.replicas.get_mut().unwrap_or_else(PoisonError::into_inner).current = None;
        &mut self.module
    }

    /// The module back; the replicas are dropped.
    pub fn into_inner(self) -> M {
        self.module
    }

    /// The devices of the replicas, in order.
    pub fn devices(&self) -> Vec<DeviceId> {
        self.devices.clone()
    }

    /// The replicas with their devices, in order, up to date with the module (made
    /// again here if the module may have changed since they were last made).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::parallel::DataParallel;
    /// use locus::{Cpu, DeviceId, Tensor};
    /// # if !locus::testing::needs_devices(2)? { return Ok(()); }
    /// let dp = DataParallel::new(Tensor::<Cpu>::ones([2])?, &[DeviceId::Cuda(1), DeviceId::Cuda(0)], Cpu)?;
    /// let replicas = dp.replicas()?;
    /// assert_eq!(replicas[0].0, DeviceId::Cuda(1));
    /// assert_eq!(replicas[0].1.device(), DeviceId::Cuda(1));
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn replicas(&self) -> Result<Replicas<M>> {
        let mut replicas = self.replicas.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(current) = &replicas.current {
            return Ok(Arc::clone(current));
        }
        // Parameters become replicas linked to the module's: a backward pass through a
        // replica's output adds its gradients to the module's parameters.
        let made: Vec<_> = replicas.copies.reuse_in(|| {
            linked_replicas(|| self.devices.iter().map(|&d| Ok((d, self.module.to_dyn(d)?))).collect::<Result<_>>())
        })?;
        let made: Arc<[_]> = made.into();
        replicas.current = Some(Arc::clone(&made));
        Ok(made)
    }

    /// The replicas typed to `devices`, the replicas' devices (in order) as placements
    /// known at compile time: `dp.replicas_on((Cuda::<0>, Cuda::<1>))` gives
    /// `(M::On<Cuda<0>>, M::On<Cuda<1>>)`, so code that runs each replica by hand keeps
    /// the compile-time checks of each device (a replica on `Cuda<1>` takes tensors on
    /// `Cuda<1>` only). Like [`replicas`](Self::replicas), they are linked to the module:
    /// a backward pass through their outputs adds to the module's gradients. An `Err` when
    /// `devices` are not the replicas' devices in order.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::nn::{Linear, Module};
    /// use locus::parallel::{scatter, DataParallel};
    /// use locus::{Cuda, DeviceId, Tensor};
    /// # if !locus::testing::needs_devices(2)? { return Ok(()); }
    /// let dp = DataParallel::new(Linear::<Cuda<0>>::new(3, 1, 0)?, &[DeviceId::Cuda(0), DeviceId::Cuda(1)], Cuda::<0>)?;
    /// let (r0, r1) = dp.replicas_on((Cuda::<0>, Cuda::<1>))?; // Linear<Cuda<0>>, Linear<Cuda<1>>
    /// let (x0, x1) = scatter(&Tensor::<Cuda<0>>::ones([4, 3])?, (Cuda::<0>, Cuda::<1>))?;
    /// let (y0, y1) = (r0.forward(&x0)?, r1.forward(&x1)?);
    /// let loss = (y0.sum()? + y1.sum()?.to::<Cuda<0>>()?)?;
    /// loss.backward()?;
    /// assert_eq!(dp.module().weight.grad().unwrap().to_vec()?, vec![4.0; 3]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn replicas_on<L: DeviceList>(&self, devices: L) -> Result<L::Replicas<M>> {
        let ids = devices.device_ids();
        if ids != self.devices {
            return Err(Error::InvalidArgument {
                op: "DataParallel::replicas_on",
                reason: format!("the replicas are on {:?}, not on {ids:?}", self.devices),
            });
        }
        let mut replicas = self.replicas.lock().unwrap_or_else(PoisonError::into_inner);
        replicas.copies.reuse_in(|| linked_replicas(|| devices.replicate(&self.module)))
    }

    /// The placement outputs are gathered on.
    pub fn output(&self) -> O {
        self.output
    }

    /// The module's output for the batch `x` (on any placement), computed by the
    /// replicas in parallel and gathered on the output placement.
    pub fn forward<D: Device, T: Element>(&self, x: &Tensor<D, T>) -> Result<Tensor<O, T>>
    where
        M::On<Dyn>: Module<Dyn, T> + Sync,
    {
        let rows = x.shape().first().copied().ok_or_else(|| Error::InvalidArgument {
            op: "DataParallel::forward",
            reason: "a 0-d tensor has no batch dim".into(),
        })?;
        let replicas = self.replicas()?;
        // Devices that get no rows sit out; an empty batch still runs on one replica, so
        // that the output has the module's shape.
        let sizes: Vec<usize> = chunk_sizes(rows, replicas.len()).into_iter().filter(|&n| n > 0).collect();
        let sizes = if sizes.is_empty() { vec![0] } else { sizes };
        let used = &replicas[..sizes.len()];
        let ids: Vec<DeviceId> = used.iter().map(|r| r.0).collect();
        let parts = split_to("DataParallel::forward", x, &ids, &sizes)?;
        let outputs = run_replicas(used, parts)?;
        gather_dyn(&outputs, self.output)
    }
}

/// Runs replica `i` on `parts[i]` and joins them all: the first on the calling thread
/// (as `torch.nn.DataParallel` does with one device; a thread would only add its start-up
/// time), each other on a thread of its own, started before the first runs.
fn run_replicas<R: Module<Dyn, T> + Sync, T: Element>(
    replicas: &[(DeviceId, R)],
    parts: Vec<Tensor<Dyn, T>>,
) -> Result<Vec<Tensor<Dyn, T>>> {
    let results: Vec<Result<Tensor<Dyn, T>>> = thread::scope(|scope| {
        let mut work = replicas.iter().zip(parts);
        let here = work.next();
        let handles: Vec<_> = work
            .map(|((device, replica), part)| {
                let device = *device;
                let run = move || run_replica(device, replica, &part);
                (device, thread::Builder::new().name(format!("locus-replica-{device}")).spawn_scoped(scope, run))
            })
            .collect();
        let first = here.map(|((device, replica), part)| {
            let device = *device;
            // A panic in the replica is its error; the threads above are joined whatever it did.
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_replica(device, replica, &part)))
                .unwrap_or_else(|payload| Err(panicked(device, &*payload)))
        });
        // Every started thread is joined here, whatever the others did.
        let rest = handles.into_iter().map(|(device, handle)| match handle {
            Err(e) => Err(Error::Replica { device, source: Box::new(Error::Thread { message: e.to_string() }) }),
            Ok(h) => h.join().unwrap_or_else(|payload| Err(panicked(device, &*payload))),
        });
        first.into_iter().chain(rest).collect()
    });
    results.into_iter().collect()
}

/// The error of the replica on `device` that panicked with `payload`.
fn panicked(device: DeviceId, payload: &(dyn std::any::Any + Send)) -> Error {
    Error::Replica { device, source: Box::new(Error::Panicked { message: panic_message(payload) }) }
}

/// `replica`'s forward of `part` under `device`; an error of it is the replica's.
fn run_replica<R: Module<Dyn, T>, T: Element>(
    device: DeviceId,
    replica: &R,
    part: &Tensor<Dyn, T>,
) -> Result<Tensor<Dyn, T>> {
    let run = || -> Result<Tensor<Dyn, T>> {
        let _on = DeviceGuard::enter(device)?;
        replica.forward(part)
    };
    run().map_err(|e| Error::Replica { device, source: Box::new(e) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Cpu;

    #[test]
    fn a_refresh_copies_only_the_tensors_that_changed() -> Result<()> {
        let ids: Vec<DeviceId> = crate::device::devices()?.into_iter().take(2).collect();
        let module = vec![Tensor::<Cpu>::ones([2])?, Tensor::<Cpu>::zeros([3])?];
        let mut dp = DataParallel::new(module, &ids, Cpu)?;
        let before = dp.replicas()?;
        assert!(Arc::ptr_eq(&before, &dp.replicas()?), "no change, no new replicas");
        dp.module_mut()[1] = Tensor::full([3], 2.0)?;
        let after = dp.replicas()?;
        for ((_, old), (_, new)) in before.iter().zip(after.iter()) {
            assert!(Arc::ptr_eq(old[0].shared_storage(), new[0].shared_storage()), "unchanged: the same copy");
            assert!(!Arc::ptr_eq(old[1].shared_storage(), new[1].shared_storage()));
            assert_eq!(new[1].to_vec()?, vec![2.0; 3]);
        }
        Ok(())
    }
}
