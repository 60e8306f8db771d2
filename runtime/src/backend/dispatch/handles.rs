//! The handles of one backend or the other that the layers above hold: a stream, an
//! event, a captured graph, a communicator between processes.

use std::sync::Arc;

use crate::backend::api::fence::Fence;
use crate::backend::cuda;
use crate::backend::host;
use crate::backend::Buffer;

/// A stream of one backend: a simulated stream (a queue with its own worker) on the
/// host, a reference-counted driver stream on CUDA.
#[derive(Clone, Debug)]
pub(crate) enum AnyStream {
    Host(Arc<host::HostStream>),
    Cuda(Arc<cuda::CudaStream>),
}

impl AnyStream {
    /// The stream as code outside locus names it: the driver's `CUstream` on CUDA; on
    /// the host backend an opaque non-null token, distinct for each live stream.
    pub(crate) fn handle(&self) -> usize {
        match self {
            AnyStream::Host(s) => Arc::as_ptr(s) as usize,
            AnyStream::Cuda(s) => s.handle(),
        }
    }

    /// Whether both name the same stream.
    pub(crate) fn same(&self, other: &AnyStream) -> bool {
        match (self, other) {
            (AnyStream::Host(a), AnyStream::Host(b)) => Arc::ptr_eq(a, b),
            (AnyStream::Cuda(a), AnyStream::Cuda(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// An event of one backend: on the host a point in a simulated stream's queue.
#[derive(Clone, Debug)]
pub(crate) enum AnyEvent {
    Host(Arc<host::HostEvent>),
    Cuda(Arc<cuda::CudaEvent>),
}

impl AnyEvent {
    /// The event as the pinned pool holds a block until it.
    pub(crate) fn fence(&self) -> Arc<dyn Fence> {
        match self {
            AnyEvent::Host(e) => Arc::clone(e) as Arc<dyn Fence>,
            AnyEvent::Cuda(e) => Arc::clone(e) as Arc<dyn Fence>,
        }
    }
}

/// A captured graph of one backend, ready to replay.
#[derive(Clone, Debug)]
pub(crate) enum AnyGraph {
    Host(Arc<host::HostGraph>),
    Cuda(Arc<cuda::CudaGraph>),
}

impl AnyGraph {
    /// Whether `b` was made in this graph's capture (it belongs to the graph).
    pub(crate) fn owns(&self, b: &Buffer) -> bool {
        match (self, b) {
            (AnyGraph::Host(g), Buffer::Host(h)) => g.owns(h),
            (AnyGraph::Cuda(g), Buffer::Cuda(c)) => g.owns(c),
            _ => false,
        }
    }

    /// Buffers made in the capture that are still alive.
    pub(crate) fn live_buffers(&self) -> usize {
        match self {
            AnyGraph::Host(g) => g.live_buffers(),
            AnyGraph::Cuda(g) => g.live_buffers(),
        }
    }
}

/// A communicator between processes, one rank per process (NCCL's, on the cuda
/// backend; the host backend moves process collectives through host memory instead).
#[derive(Clone, Debug)]
pub(crate) enum AnyComm {
    Cuda(Arc<cuda::ProcessComm>),
}
