//! The enum layer above the two backends, where the variants of their handles are matched
//! once: [`backend::AnyBackend`] (device-level calls), [`buffer::Buffer`] (memory and its
//! ops; the row ops in `rows`), the stream, event, graph and communicator handles, the current stream of each
//! thread, and [`capture`], which decides before any backend sees a call what a graph
//! capture may record.

pub(crate) mod backend;
pub(crate) mod buffer;
pub(crate) mod capture;
pub(crate) mod current;
pub(crate) mod handles;
pub(crate) mod rows;
