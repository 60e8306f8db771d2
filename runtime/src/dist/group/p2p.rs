//! Point-to-point: one rank sends a tensor, one other rank receives it.

use super::wire::{write_msg, Header, Kind};
use super::{describe, dist, ProcessGroup};
use crate::device::{Device, StaticDevice};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

impl ProcessGroup {
    /// Sends `t` to rank `dst`, which takes it with [`recv`](Self::recv) of the same
    /// shape. Returns when the data is handed to the operating system (small tensors do
    /// not wait for `dst`; large ones wait for it to read, up to the timeout).
    pub fn send<D: Device, T: Element>(&self, t: &Tensor<D, T>, dst: usize) -> Result<()> {
        const OP: &str = "send";
        self.check_peer(OP, "dst", dst)?;
        let data = t.to_vec()?;
        let header = Header::new(Kind::Send, T::DTYPE, t.shape(), data.len()).encode();
        self.run(|s| {
            let l = s.links[dst].as_mut().expect("a link to every other rank");
            write_msg(&mut l.write, &header, bytemuck::cast_slice(&data))
                .map_err(|e| dist(OP, describe(dst, &e, self.timeout)))
        })
    }

    /// The tensor of `shape` that rank `src` sends with [`send`](Self::send), on the
    /// static placement `D` (see [`recv_on`](Self::recv_on) for `Dyn`).
    pub fn recv<D: StaticDevice, T: Element>(&self, src: usize, shape: impl AsRef<[usize]>) -> Result<Tensor<D, T>> {
        self.recv_on(D::default(), src, shape)
    }

    /// [`recv`](Self::recv) onto `device`. A sent tensor of another shape or type is an
    /// `Err` naming both ranks.
    pub fn recv_on<D: Device, T: Element>(
        &self,
        device: D,
        src: usize,
        shape: impl AsRef<[usize]>,
    ) -> Result<Tensor<D, T>> {
        const OP: &str = "recv";
        self.check_peer(OP, "src", src)?;
        let shape = shape.as_ref();
        let count = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).ok_or_else(|| Error::InvalidArgument {
            op: OP,
            reason: format!("shape {shape:?} has too many elements"),
        })?;
        let want = Header::new(Kind::Send, T::DTYPE, shape, count);
        let data = self.run(|s| {
            let l = s.links[src].as_mut().expect("a link to every other rank");
            self.read_checked(OP, src, &mut l.read, &want, true).map_err(|r| dist(OP, r))
        })?;
        Tensor::from_vec_on(device, data, shape)
    }
}
