//! `#[derive(Parameters)]`: the struct is validated as `#[derive(ToDevice)]` validates it
//! (one device parameter; `to_device::validate`), then `expand` writes the
//! `Parameters` impl that visits each field mentioning the device parameter under its
//! name. Plain tensors (`Tensor<D>`: buffers, not parameters) and `PhantomData` are
//! skipped. A rejected input gets its error and an impl that visits nothing, so the
//! optimizers' bounds add no errors of their own.

mod expand;

use proc_macro2::TokenStream;
use syn::DeriveInput;

use crate::to_device::validate;

/// `#[derive(Parameters)] struct ..`.
pub fn derive(input: TokenStream) -> TokenStream {
    let input = match syn::parse2::<DeriveInput>(input) {
        Ok(input) => input,
        Err(e) => return e.to_compile_error(),
    };
    match validate::derive_model(input.clone()) {
        Ok(model) => expand::expand(&model),
        Err(e) => expand::fallback(&input, e),
    }
}
