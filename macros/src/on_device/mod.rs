//! `#[on_device]` and `with_device!`. One module per phase: `parse` (the device
//! argument, and the macro's `device => body`), `validate` (what the attribute is on, and
//! that a const generic device is one), `signature` (`Here` and the `Cuda<m>` of a
//! signature), `expand` (the guarded fn or impl) with `async_body` (an `async fn`'s body
//! as a future), `with_device` (the macro's block, closure or async block), and
//! `fallback` (the item next to the error, with `Here` still defined, when the attribute
//! rejects it).

mod async_body;
mod expand;
mod fallback;
mod parse;
mod signature;
mod validate;
mod with_device;

pub use expand::attribute;
pub use with_device::macro_call;
