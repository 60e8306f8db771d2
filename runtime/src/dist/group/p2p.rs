//! Point-to-point: one rank sends a tensor, one other rank receives it.

use super::{dist, ProcessGroup, Route};
use crate::backend::{self, CommOp};
use crate::device::{Device, StaticDevice};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::shape::Shape;
use crate::tensor::Tensor;

impl ProcessGroup {
    /// Sends `t` to rank `dst`, which takes it with [`recv`](Self::recv) of the same
    /// shape, and of the same kind of placement (a device tensor of a group bound to a
    /// device with NCCL goes through NCCL, so the receiver must receive onto its device).
    /// Over TCP it returns when the data is handed to the operating system (small tensors
    /// do not wait for `dst`; large ones wait for it to read, up to the timeout); on NCCL
    /// it is queued on the current stream.
    pub fn send<D: Device, T: Element>(&self, t: &Tensor<D, T>, dst: usize) -> Result<()> {
        const OP: &str = "send";
        self.check_peer(OP, "dst", dst)?;
        match self.route(OP, t)? {
            Route::Comm(c) => {
                backend::for_device(t.device())?.run_comm(
                    c,
                    T::DTYPE,
                    t.numel(),
                    CommOp::Send { buf: t.buffer(), peer: dst },
                )?;
                Ok(())
            }
            Route::Tcp => {
                let t = t.clone();
                self.submit(move |tcp| tcp.send(&t.to_vec()?, t.shape(), dst))?.wait()
            }
        }
    }

    /// The tensor of `shape` that rank `src` sends with [`send`](Self::send), on the
    /// static placement `D` (see [`recv_on`](Self::recv_on) for `Dyn`).
    pub fn recv<D: StaticDevice, T: Element>(&self, src: usize, shape: impl AsRef<[usize]>) -> Result<Tensor<D, T>> {
        self.recv_on(D::resolve()?, src, shape)
    }

    /// [`recv`](Self::recv) onto `device`. Over TCP a sent tensor of another shape or
    /// type is an `Err` naming both ranks.
    pub fn recv_on<D: Device, T: Element>(
        &self,
        device: D,
        src: usize,
        shape: impl AsRef<[usize]>,
    ) -> Result<Tensor<D, T>> {
        const OP: &str = "recv";
        self.check_peer(OP, "src", src)?;
        let shape = shape.as_ref().to_vec();
        let count = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).ok_or_else(|| Error::InvalidArgument {
            op: OP,
            reason: format!("shape {shape:?} has too many elements"),
        })?;
        match self.route_at(OP, device.id())? {
            Route::Comm(c) => {
                let out = backend::for_device(device.id())?
                    .run_comm(c, T::DTYPE, count, CommOp::Recv { peer: src })?
                    .ok_or_else(|| dist(OP, "the communicator gave no result"))?;
                Ok(Tensor::from_buffer(device, out, Shape::new(OP, shape, T::DTYPE)?))
            }
            Route::Tcp => {
                let data = self.submit({
                    let shape = shape.clone();
                    move |tcp| tcp.recv::<T>(src, &shape, count)
                })?;
                Tensor::from_vec_on(device, data.wait()?, shape)
            }
        }
    }
}
