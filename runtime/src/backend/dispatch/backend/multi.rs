//! [`AnyBackend`]'s calls over several devices or processes and over whole graphs:
//! peer access, collectives, communicators, captures and replays, user kernels.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::api::user_kernel::{Grid, KernelArg, KernelSource};
use crate::backend::dispatch::backend::{
    cuda_of, cuda_or_mismatch, cudas, host_or_mismatch, hosts, kernel_args, mismatch, process_collective, AnyBackend,
    Imp,
};
use crate::backend::few::with_refs;
use crate::backend::{AnyComm, AnyGraph, AnyStream, BackendDevice, Buffer, Collective, CommOp};
use crate::device_id::DeviceId;
use crate::element::DType;
use crate::error::Result;

impl AnyBackend {
    pub(crate) fn can_access_peer(&self, device: DeviceId, peer: DeviceId) -> Result<bool> {
        match self.imp {
            Imp::Host(b) => b.can_access_peer(device, peer),
            Imp::Cuda(b) => b.can_access_peer(device, peer),
        }
    }

    pub(crate) fn enable_peer_access(&self, device: DeviceId, peer: DeviceId) -> Result<()> {
        self.gate_refuse(
            "enable_peer_access",
            "it changes the devices, not a stream; enable peer access before the capture",
        )?;
        match self.imp {
            Imp::Host(b) => b.enable_peer_access(device, peer),
            Imp::Cuda(b) => b.enable_peer_access(device, peer),
        }
    }

    pub(crate) fn collective(
        &self,
        devices: &[DeviceId],
        dtype: DType,
        len: usize,
        op: Collective<'_, Buffer>,
    ) -> Result<Option<Vec<Buffer>>> {
        self.gate_refuse(
            "a collective (NCCL)",
            "a graph captures the work of one device; run collectives between replays",
        )?;
        match self.imp {
            Imp::Host(b) => {
                let ins;
                let op = match op {
                    Collective::Broadcast { root, buf } => Collective::Broadcast { root, buf: hosts(&[buf])?[0] },
                    Collective::AllReduceSum(bufs) => {
                        ins = hosts(bufs)?;
                        Collective::AllReduceSum(&ins)
                    }
                    Collective::AllGather(bufs) => {
                        ins = hosts(bufs)?;
                        Collective::AllGather(&ins)
                    }
                };
                Ok(b.collective(devices, dtype, len, op)?.map(|v| v.into_iter().map(Buffer::host).collect()))
            }
            Imp::Cuda(b) => {
                let ins;
                let op = match op {
                    Collective::Broadcast { root, buf } => Collective::Broadcast { root, buf: cudas(&[buf])?[0] },
                    Collective::AllReduceSum(bufs) => {
                        ins = cudas(bufs)?;
                        Collective::AllReduceSum(&ins)
                    }
                    Collective::AllGather(bufs) => {
                        ins = cudas(bufs)?;
                        Collective::AllGather(&ins)
                    }
                };
                Ok(b.collective(devices, dtype, len, op)?.map(|v| v.into_iter().map(Buffer::Cuda).collect()))
            }
        }
    }

    pub(crate) fn has_process_comm(&self, device: DeviceId) -> bool {
        match self.imp {
            Imp::Host(b) => b.has_process_comm(device),
            Imp::Cuda(b) => b.has_process_comm(device),
        }
    }

    pub(crate) fn new_comm_id(&self) -> Result<Vec<u8>> {
        match self.imp {
            Imp::Host(b) => b.new_comm_id(),
            Imp::Cuda(b) => b.new_comm_id(),
        }
    }

    pub(crate) fn join_comm(
        &self,
        device: DeviceId,
        id: &[u8],
        rank: usize,
        world: usize,
        timeout: Duration,
    ) -> Result<AnyComm> {
        if self.gated {
            return Err(process_collective());
        }
        match self.imp {
            Imp::Host(b) => match b.join_comm(device, id, rank, world, timeout)? {},
            Imp::Cuda(b) => b.join_comm(device, id, rank, world, timeout).map(AnyComm::Cuda),
        }
    }

    pub(crate) fn run_comm<'a>(
        &self,
        comm: &AnyComm,
        dtype: DType,
        len: usize,
        op: CommOp<'a, Buffer>,
    ) -> Result<Option<Buffer>> {
        if self.gated {
            return Err(process_collective());
        }
        let AnyComm::Cuda(c) = comm;
        let Imp::Cuda(b) = self.imp else { return Err(mismatch("a communicator")) };
        let one = |buf: &'a Buffer| cuda_of(buf).ok_or_else(|| mismatch("memory"));
        let op = match op {
            CommOp::AllReduce { buf, op } => CommOp::AllReduce { buf: one(buf)?, op },
            CommOp::Broadcast { buf, root } => CommOp::Broadcast { buf: one(buf)?, root },
            CommOp::AllGather { buf } => CommOp::AllGather { buf: one(buf)? },
            CommOp::ReduceScatter { buf, op } => CommOp::ReduceScatter { buf: one(buf)?, op },
            CommOp::Send { buf, peer } => CommOp::Send { buf: one(buf)?, peer },
            CommOp::Recv { peer } => CommOp::Recv { peer },
        };
        Ok(b.run_comm(c, dtype, len, op)?.map(Buffer::Cuda))
    }

    pub(crate) fn begin_capture(&self, stream: &AnyStream, inputs: &[&Buffer]) -> Result<()> {
        self.gate_refuse("Graph::capture", "a capture cannot start inside another")?;
        match (self.imp, stream) {
            (Imp::Host(b), AnyStream::Host(s)) => b.begin_capture(s, &hosts(inputs)?),
            (Imp::Cuda(b), AnyStream::Cuda(s)) => b.begin_capture(s, &cudas(inputs)?),
            _ => Err(mismatch("a stream")),
        }
    }

    pub(crate) fn end_capture(&self, stream: &AnyStream) -> Result<AnyGraph> {
        match (self.imp, stream) {
            (Imp::Host(b), AnyStream::Host(s)) => b.end_capture(s).map(|g| AnyGraph::Host(Arc::new(g))),
            (Imp::Cuda(b), AnyStream::Cuda(s)) => b.end_capture(s).map(|g| AnyGraph::Cuda(Arc::new(g))),
            _ => Err(mismatch("a stream")),
        }
    }

    pub(crate) fn launch_graph(
        &self,
        graph: &AnyGraph,
        stream: &AnyStream,
        reads: &[&Buffer],
        writes: &[&Buffer],
    ) -> Result<()> {
        self.gate_refuse("Graph::replay", "a graph cannot replay inside a capture; replay it before or after")?;
        match (self.imp, graph, stream) {
            (Imp::Host(b), AnyGraph::Host(g), AnyStream::Host(s)) => {
                let (reads, writes) =
                    (reads.iter().map(|x| host_or_mismatch(x)), writes.iter().map(|x| host_or_mismatch(x)));
                with_refs(reads, |r| with_refs(writes, |w| b.launch_graph(g, s, r, w)))
            }
            (Imp::Cuda(b), AnyGraph::Cuda(g), AnyStream::Cuda(s)) => {
                let (reads, writes) =
                    (reads.iter().map(|x| cuda_or_mismatch(x)), writes.iter().map(|x| cuda_or_mismatch(x)));
                with_refs(reads, |r| with_refs(writes, |w| b.launch_graph(g, s, r, w)))
            }
            _ => Err(mismatch("a graph or a stream")),
        }
    }

    pub(crate) fn launch_kernel(
        &self,
        device: DeviceId,
        kernel: &'static KernelSource,
        stream: &AnyStream,
        grid: Grid,
        args: &[KernelArg<'_, Buffer>],
    ) -> Result<()> {
        // A kernel is recorded as any op is: what it reads must be made in the capture or
        // be an input (the backends check that as they order the buffers).
        self.gate_device(kernel.name, device)?;
        match (self.imp, stream) {
            (Imp::Host(b), AnyStream::Host(s)) => {
                b.launch_kernel(device, kernel, s, grid, &kernel_args(args, Buffer::as_host)?)
            }
            (Imp::Cuda(b), AnyStream::Cuda(s)) => {
                b.launch_kernel(device, kernel, s, grid, &kernel_args(args, cuda_of)?)
            }
            _ => Err(mismatch("a stream")),
        }
    }
}
