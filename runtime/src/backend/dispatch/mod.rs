//! The enum layer above the two backends: a [`buffer::Buffer`] is host or cuda memory and
//! matches its operands' variants once; [`capture`] decides, before any backend sees a
//! call, what a graph capture may record.

pub(crate) mod buffer;
pub(crate) mod capture;
pub(crate) mod handles;
