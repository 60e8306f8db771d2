//! Phase 3: generating the guarded code of `#[on_device]` and `with_device!`.
//!
//! Generated code names only `::locus::__private::…`; its own locals are
//! `Span::mixed_site()` identifiers, invisible to the user's code.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned, ToTokens};
use syn::parse::Parser;
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{Block, Expr, ExprClosure, ImplItem, ImplItemFn, Item, ItemFn, ItemImpl, Pat, ReturnType, Type, TypePath};

use crate::async_body;
use crate::fallback;
use crate::parse::{self, DeviceArg, MacroInput};
use crate::signature::{self, cuda_type, Signature};
use crate::validate::{self, Target};

/// `#[on_device(args)] item`.
pub fn attribute(args: TokenStream, item: TokenStream) -> TokenStream {
    match try_attribute(args, item.clone()) {
        Ok(out) => out,
        Err(e) => fallback::item_with_error(item, e),
    }
}

fn try_attribute(args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let arg = parse::attribute_args.parse2(args)?;
    let item: Item = syn::parse2(item)?;
    match validate::target(item)? {
        Target::Fn(f) => expand_fn(&arg, f),
        Target::Impl(i) => expand_impl(&arg, i),
    }
}

fn local(name: &str) -> syn::Ident {
    syn::Ident::new(name, Span::mixed_site())
}

/// An expression of type `locus::Result<DeviceId>` naming the device.
fn device_id(arg: &DeviceArg) -> TokenStream {
    match arg {
        DeviceArg::Literal { ordinal, lit } => {
            let ty = cuda_type(*ordinal, lit.span());
            quote_spanned!(lit.span()=> ::locus::__private::static_id::<#ty>())
        }
        DeviceArg::ConstParam(n) => {
            quote_spanned!(n.span()=> ::locus::__private::static_id::<::locus::__private::Cuda<#n>>())
        }
        DeviceArg::Dynamic { expr, .. } => {
            quote_spanned!(expr.span()=> ::locus::__private::dynamic_id(#expr))
        }
    }
}

/// `type Here = Cuda<n>;` for a literal device, nothing otherwise.
fn here_alias(arg: &DeviceArg) -> TokenStream {
    match arg {
        DeviceArg::Literal { ordinal, lit } => {
            let ty = cuda_type(*ordinal, lit.span());
            quote! {
                #[allow(dead_code)]
                type Here = #ty;
            }
        }
        _ => TokenStream::new(),
    }
}

/// One statement per fixed `Cuda<m>` of the signature, failing to compile unless it
/// is the attribute's device; each error points at its type.
fn signature_checks(arg: &DeviceArg, fixed: &[TypePath]) -> TokenStream {
    let DeviceArg::Literal { ordinal, lit } = arg else {
        return TokenStream::new();
    };
    let guard = cuda_type(*ordinal, lit.span());
    fixed
        .iter()
        .map(|found| {
            quote_spanned! {found.span()=>
                let () = <#found as ::locus::__private::SignatureOn<#guard>>::ON;
            }
        })
        .collect()
}

/// The span of a `Result` return type: such fns propagate a failed guard with `?`.
fn result_return(output: &ReturnType) -> Option<Span> {
    let ReturnType::Type(_, ty) = output else { return None };
    let Type::Path(p) = &**ty else { return None };
    let last = p.path.segments.last()?;
    (last.ident == "Result").then(|| ty.span())
}

/// The body of a guarded fn or method.
fn guarded_body(arg: &DeviceArg, sig: &syn::Signature, block: &Block, checks: TokenStream) -> Block {
    let here = here_alias(arg);
    let id = device_id(arg);
    let result = result_return(&sig.output);
    let body = if sig.asyncness.is_some() {
        let device = local("__locus_device");
        let out = async_body::output_type(&sig.output);
        let inner = async_body::async_block(block, out.as_ref());
        let out = out.unwrap_or_else(|| quote!(_));
        let fut = quote! {
            ::locus::__private::on_device_async::<#out, _>(#device, #inner).await
        };
        let finish = match result {
            Some(span) => quote_spanned!(span=> #fut?),
            None => quote!(::locus::__private::expect_entered(#fut)),
        };
        quote! {
            #here
            #checks
            let #device = #id;
            #finish
        }
    } else {
        let guard = local("__locus_guard");
        let stmts = &block.stmts;
        let enter = match result {
            Some(span) => quote_spanned!(span=> ::locus::__private::enter(#id)?),
            None => quote!(::locus::__private::enter_or_panic(#id)),
        };
        quote! {
            #here
            #checks
            let #guard = #enter;
            #(#stmts)*
        }
    };
    Block { brace_token: block.brace_token, stmts: vec![syn::Stmt::Expr(Expr::Verbatim(body), None)] }
}

/// An error at the first `Here` seen, unless the device is a literal (which `Here`
/// names).
fn reject_stray_here(arg: &DeviceArg, seen: impl IntoIterator<Item = Option<Span>>) -> syn::Result<()> {
    if validate::literal(arg).is_some() {
        return Ok(());
    }
    match seen.into_iter().flatten().next() {
        Some(span) => Err(signature::here_error(span, arg, "`#[on_device(1)]`")),
        None => Ok(()),
    }
}

fn expand_fn(arg: &DeviceArg, mut f: ItemFn) -> syn::Result<TokenStream> {
    let name = f.sig.ident.to_string();
    if let DeviceArg::ConstParam(n) = arg {
        validate::const_param(n, &[&f.sig.generics], f.sig.receiver().is_some(), &name)?;
    }
    let generics = f.sig.generics.clone();
    let mut sig = Signature::new(validate::literal(arg), vec![&generics]);
    sig.visit_signature_mut(&mut f.sig);
    reject_stray_here(arg, [sig.stray_here, signature::find_here(&mut f.block)])?;
    let checks = signature_checks(arg, &sig.fixed);
    *f.block = guarded_body(arg, &f.sig, &f.block, checks);
    Ok(f.into_token_stream())
}

fn has_own_attribute(f: &ImplItemFn) -> bool {
    f.attrs.iter().any(|a| a.path().segments.last().is_some_and(|s| s.ident == "on_device"))
}

fn expand_impl(arg: &DeviceArg, mut imp: ItemImpl) -> syn::Result<TokenStream> {
    if let DeviceArg::ConstParam(n) = arg {
        validate::const_param(n, &[&imp.generics], false, "this impl block")?;
    }
    let ordinal = validate::literal(arg);
    let impl_generics = imp.generics.clone();
    let mut header = Signature::new(ordinal, vec![&impl_generics]);
    header.visit_type_mut(&mut imp.self_ty);
    reject_stray_here(arg, [header.stray_here])?;
    for item in &mut imp.items {
        match item {
            ImplItem::Fn(f) if f.sig.constness.is_none() && !has_own_attribute(f) => {
                let method_generics = f.sig.generics.clone();
                let mut sig = Signature::new(ordinal, vec![&impl_generics, &method_generics]);
                sig.visit_signature_mut(&mut f.sig);
                reject_stray_here(arg, [sig.stray_here, signature::find_here(&mut f.block)])?;
                let mut fixed = header.fixed.clone();
                fixed.extend(sig.fixed);
                let checks = signature_checks(arg, &fixed);
                f.block = guarded_body(arg, &f.sig, &f.block, checks);
            }
            ImplItem::Type(t) => {
                let mut v = Signature::new(ordinal, vec![&impl_generics]);
                v.visit_type_mut(&mut t.ty);
                reject_stray_here(arg, [v.stray_here])?;
            }
            ImplItem::Const(c) => {
                let mut v = Signature::new(ordinal, vec![&impl_generics]);
                v.visit_type_mut(&mut c.ty);
                reject_stray_here(arg, [v.stray_here])?;
            }
            _ => {}
        }
    }
    Ok(imp.into_token_stream())
}

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
    if validate::literal(&m.device).is_none() {
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
