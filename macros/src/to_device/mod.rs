//! `#[derive(ToDevice)]`: `validate` (which struct the derive can handle, and how each
//! field moves), `expand` (the `ToDevice` impl) and `fallback` (a stub impl next to the
//! error when the input is rejected, so that `.to::<..>()` on the type raises nothing
//! of its own).

pub(crate) mod expand;
mod fallback;
pub(crate) mod validate;

use proc_macro2::TokenStream;
use syn::DeriveInput;

/// `#[derive(ToDevice)] struct ..`.
pub fn derive(input: TokenStream) -> TokenStream {
    let input = match syn::parse2::<DeriveInput>(input) {
        Ok(input) => input,
        Err(e) => return e.to_compile_error(),
    };
    match validate::derive_model(input.clone()) {
        Ok(model) => expand::expand(&model),
        Err(e) => fallback::expand(&input, e),
    }
}
