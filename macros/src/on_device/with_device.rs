//! Phase 3 of `with_device!`: the block, closure or async block run with the device
//! current, each giving a `locus::Result`.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{Expr, ExprClosure, Pat};

use super::expand::{device_id, here_alias, local};
use super::parse::{DeviceArg, MacroInput};
use super::{signature, validate};

/// `with_device!(device => body)`.
pub fn macro_call(input: TokenStream) -> TokenStream {
    match syn::parse2::<MacroInput>(input).and_then(expand_macro) {
        Ok(out) => out,
        Err(e) => e.to_compile_error(),
    }
}

fn expand_macro(mut m: MacroInput) -> syn::Result<TokenStream> {
    if let DeviceArg::ConstParam(n) = &m.device {
        validate::macro_const_param(n)?;
    }
    if !validate::names_here(&m.device) {
        if let Some(span) = signature::find_here_in_expr(&mut m.body) {
            return Err(signature::here_error(span, &m.device, "`with_device!(1 => ..)`"));
        }
    }
    let here = here_alias(&m.device);
    let id = device_id(&m.device);
    let body = match &m.body {
        Expr::Closure(c) => closure(id, c)?,
        Expr::Async(a) => quote!(::locus::__private::on_device_async::<_, _>(#id, #a)),
        other => {
            let (guard, value, err) = (local("__locus_guard"), local("__locus_value"), local("__locus_error"));
            quote! {
                match ::locus::__private::enter(#id) {
                    ::core::result::Result::Ok(#guard) => {
                        let #value = #other;
                        ::core::mem::drop(#guard);
                        ::core::result::Result::Ok(#value)
                    }
                    ::core::result::Result::Err(#err) => ::core::result::Result::Err(#err),
                }
            }
        }
    };
    Ok(quote!({ #here #body }))
}

/// A closure that enters the guard around every call of the user's closure and
/// returns `locus::Result` of its value.
fn closure(id: TokenStream, c: &ExprClosure) -> syn::Result<TokenStream> {
    if let Some(a) = &c.asyncness {
        return Err(syn::Error::new_spanned(
            a,
            "`with_device!` takes a sync closure; for async code write `with_device!(n => async { .. })`",
        ));
    }
    let (device, f, guard, value, err) = (
        local("__locus_device"),
        local("__locus_f"),
        local("__locus_guard"),
        local("__locus_value"),
        local("__locus_error"),
    );
    let names: Vec<syn::Ident> = (0..c.inputs.len()).map(|i| local(&format!("__locus_arg{i}"))).collect();
    let params = c.inputs.iter().zip(&names).map(|(p, name)| match p {
        Pat::Type(t) => {
            let ty = &t.ty;
            quote!(#name: #ty)
        }
        _ => quote!(#name),
    });
    Ok(quote! {
        let #device = #id;
        // `mut` for an `FnMut` closure; an `Fn` or `FnOnce` one does not need it.
        #[allow(unused_mut)]
        let mut #f = #c;
        move |#(#params),*| match ::locus::__private::enter(::core::clone::Clone::clone(&#device)) {
            ::core::result::Result::Ok(#guard) => {
                let #value = #f(#(#names),*);
                ::core::mem::drop(#guard);
                ::core::result::Result::Ok(#value)
            }
            ::core::result::Result::Err(#err) => ::core::result::Result::Err(#err),
        }
    })
}
