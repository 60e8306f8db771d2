//! `#[kernel]`: a CUDA C kernel declared as a typed Rust fn. One module per phase, as for
//! `#[on_device]`: `parse` (the attribute's arguments and the Rust declaration), `cuda`
//! (the C declaration, read from the source), `validate` (the one against the other),
//! `expand` (the fn that collects a `KernelLaunch`, or a stub next to the error).

mod cuda;
mod expand;
mod parse;
mod validate;

pub use expand::attribute;
