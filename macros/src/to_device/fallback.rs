//! Phase 4 of `#[derive(ToDevice)]`: what a rejected input expands to.
//!
//! The error, and an impl of `ToDevice` anyway (thiserror's `fallback.rs` does the same
//! for `Display`), so that the one mistake is reported and not, at every
//! `.to::<..>()`, `.to_dyn(..)` or `T: ToDevice` bound of the crate, a "no method
//! named `to`" of its own. `On<E>` is the type with its first device parameter replaced,
//! as the derive would make it, so that what the callers expect of it checks too; a
//! type without one moves to itself.
//!
//! The method's body is never run: the crate does not compile, because of the error
//! next to it. It panics rather than returning an `Err`, which a caller could mistake
//! for a run-time failure of a real impl.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::{DeriveInput, Ident};

use super::{expand, validate};

/// `error`, and a `ToDevice` impl for `input` whose method is never called.
pub fn expand(input: &DeriveInput, error: syn::Error) -> TokenStream {
    let target = Ident::new("__LocusE", Span::call_site());
    let placement = Ident::new("__locus_placement", Span::mixed_site());
    let on = match validate::device_params(input).first() {
        Some(device) => expand::on_type(input, device, &target),
        None => quote!(Self),
    };
    let body = quote!(::core::panic!("`#[derive(ToDevice)]` rejected this type"));
    let error = error.to_compile_error();
    let imp = expand::impl_to_device(input, &input.generics, &target, &on, &placement, &body);
    quote! {
        #error
        #imp
    }
}
