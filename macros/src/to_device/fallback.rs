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
    let name = &input.ident;
    let target = Ident::new("__LocusE", Span::call_site());
    let on = match validate::device_params(input).first() {
        Some(device) => expand::on_type(input, device, &target),
        None => quote!(Self),
    };
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let error = error.to_compile_error();
    quote! {
        #error
        const _: () = {
            #[automatically_derived]
            impl #impl_generics ::locus::__private::ToDevice for #name #ty_generics #where_clause {
                type On<#target: ::locus::__private::Device> = #on;

                fn to_placement<#target: ::locus::__private::Device>(
                    &self,
                    _: #target,
                ) -> ::locus::__private::Result<Self::On<#target>> {
                    ::core::panic!("`#[derive(ToDevice)]` rejected this type")
                }
            }
        };
    }
}
