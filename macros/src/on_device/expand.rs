//! Phase 3: generating the guarded code of `#[on_device]` (and the pieces `with_device!`
//! shares with it).
//!
//! Generated code names only `::locus::__private::…`; its own locals are
//! `Span::mixed_site()` identifiers, invisible to the user's code.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned, ToTokens};
use syn::parse::Parser;
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{Attribute, Block, Expr, ImplItem, Item, ItemFn, ItemImpl, ReturnType, Type, TypePath};

use super::async_body;
use super::fallback::{self, Here, Rejected};
use super::parse::{self, DeviceArg};
use super::signature::{self, cuda_type, Signature};
use super::validate::{self, Target};

/// `#[on_device(args)] item`.
pub fn attribute(args: TokenStream, item: TokenStream) -> TokenStream {
    match try_attribute(args, item.clone()) {
        Ok(out) => out,
        Err(rejected) => fallback::item_with_here(item, rejected),
    }
}

fn try_attribute(args: TokenStream, item: TokenStream) -> Result<TokenStream, Rejected> {
    let arg = parse::attribute_args.parse2(args.clone()).map_err(|e| Rejected::new(e, Here::guess(args)))?;
    let rejected = |e| Rejected::new(e, Here::of(&arg));
    let item: Item = syn::parse2(item).map_err(rejected)?;
    match validate::target(item).map_err(rejected)? {
        Target::Fn(f) => expand_fn(&arg, f),
        Target::Impl(i) => expand_impl(&arg, i),
    }
}

pub fn local(name: &str) -> syn::Ident {
    syn::Ident::new(name, Span::mixed_site())
}

/// An expression of type `locus::Result<DeviceId>` naming the device.
pub fn device_id(arg: &DeviceArg) -> TokenStream {
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
        DeviceArg::Role(path) => {
            quote_spanned!(path.span()=> ::locus::__private::static_id::<#path>())
        }
    }
}

/// `type Here = Cuda<n>;` for a literal device, `type Here = Role;` for a role, nothing
/// otherwise.
pub fn here_alias(arg: &DeviceArg) -> TokenStream {
    match signature::here_type(arg, arg.tokens().span()) {
        Some(ty) => quote! {
            #[allow(dead_code)]
            type Here = #ty;
        },
        None => TokenStream::new(),
    }
}

/// One statement per placement fixed in the signature (a `Cuda<m>`, a role), failing to
/// compile unless it is the attribute's device; each error points at its type.
fn signature_checks(arg: &DeviceArg, fixed: &[TypePath]) -> TokenStream {
    let Some(guard) = signature::here_type(arg, arg.tokens().span()) else {
        return TokenStream::new();
    };
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
fn reject_stray_here(arg: &DeviceArg, seen: impl IntoIterator<Item = Option<Span>>) -> Result<(), Rejected> {
    if validate::names_here(arg) {
        return Ok(());
    }
    match seen.into_iter().flatten().next() {
        Some(span) => Err(Rejected::new(signature::here_error(span, arg, "`#[on_device(1)]`"), Here::stray(arg))),
        None => Ok(()),
    }
}

fn expand_fn(arg: &DeviceArg, mut f: ItemFn) -> Result<TokenStream, Rejected> {
    let name = f.sig.ident.to_string();
    if let DeviceArg::ConstParam(n) = arg {
        validate::const_param(n, &[&f.sig.generics], f.sig.receiver().is_some(), &name)
            .map_err(|e| Rejected::new(e, Here::of(arg)))?;
    }
    let generics = f.sig.generics.clone();
    let mut sig = Signature::new(arg, vec![&generics]);
    sig.visit_signature_mut(&mut f.sig);
    reject_stray_here(arg, [sig.stray_here, signature::find_here(&mut f.block)])?;
    let checks = signature_checks(arg, &sig.fixed);
    *f.block = guarded_body(arg, &f.sig, &f.block, checks);
    Ok(f.into_token_stream())
}

/// Whether a method or an item inside the item has an `#[on_device]` of its own.
pub fn has_own_attribute(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| a.path().segments.last().is_some_and(|s| s.ident == "on_device"))
}

fn expand_impl(arg: &DeviceArg, mut imp: ItemImpl) -> Result<TokenStream, Rejected> {
    if let DeviceArg::ConstParam(n) = arg {
        validate::const_param(n, &[&imp.generics], false, "this impl block")
            .map_err(|e| Rejected::new(e, Here::of(arg)))?;
    }
    let impl_generics = imp.generics.clone();
    let mut header = Signature::new(arg, vec![&impl_generics]);
    header.visit_type_mut(&mut imp.self_ty);
    reject_stray_here(arg, [header.stray_here])?;
    for item in &mut imp.items {
        match item {
            ImplItem::Fn(f) if f.sig.constness.is_none() && !has_own_attribute(&f.attrs) => {
                let method_generics = f.sig.generics.clone();
                let mut sig = Signature::new(arg, vec![&impl_generics, &method_generics]);
                sig.visit_signature_mut(&mut f.sig);
                reject_stray_here(arg, [sig.stray_here, signature::find_here(&mut f.block)])?;
                let mut fixed = header.fixed.clone();
                fixed.extend(sig.fixed);
                let checks = signature_checks(arg, &fixed);
                f.block = guarded_body(arg, &f.sig, &f.block, checks);
            }
            ImplItem::Type(t) => {
                let mut v = Signature::new(arg, vec![&impl_generics]);
                v.visit_type_mut(&mut t.ty);
                reject_stray_here(arg, [v.stray_here])?;
            }
            ImplItem::Const(c) => {
                let mut v = Signature::new(arg, vec![&impl_generics]);
                v.visit_type_mut(&mut c.ty);
                reject_stray_here(arg, [v.stray_here])?;
            }
            _ => {}
        }
    }
    Ok(imp.into_token_stream())
}
