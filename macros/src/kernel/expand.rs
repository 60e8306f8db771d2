//! Phase 3: the generated fn. It keeps the user's name, attributes, visibility and
//! parameters; gives every tensor after the first a placement parameter of its own,
//! bound to the first's by `SameKernelDevice` (so that two GPUs give the placement
//! diagnostic, not a bare type mismatch); and returns the `KernelLaunch` its body fills.
//! The source goes in through `include_str!`, so a change to a kernel file rebuilds.

use std::path::Path;

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Attribute, FnArg, GenericArgument, Lifetime, PathArguments, Signature, Type, Visibility};

use super::parse::{self, Args, Decl, Param, Source};
use super::{cuda, validate};
use crate::fallback;

/// `#[kernel(args)] item`.
pub fn attribute(args: TokenStream, item: TokenStream) -> TokenStream {
    match syn::parse2::<Decl>(item.clone()) {
        Ok(decl) => match expand(args, &decl) {
            Ok(out) => out,
            Err(e) => stub(&decl.attrs, &decl.vis, &decl.sig, e),
        },
        // A fn with a body: the one error, and a stub so that callers compile.
        Err(e) => match syn::parse2::<syn::ItemFn>(item.clone()) {
            Ok(f) => stub(&f.attrs, &f.vis, &f.sig, e),
            Err(_) => fallback::item_with_error(item, e),
        },
    }
}

/// The declaration as a fn that launches nothing, next to `error`: the crate fails to
/// build with that one error, and calls of the fn (`.grid(..)`, `.on(..)`, `.launch()`)
/// raise none of their own.
fn stub(attrs: &[Attribute], vis: &Visibility, sig: &Signature, error: syn::Error) -> TokenStream {
    let mut sig = sig.clone();
    (sig.constness, sig.asyncness, sig.safety, sig.abi) = (None, None, syn::Safety::Default, None);
    sig.output = syn::parse_quote!(-> ::locus::__private::KernelFallback);
    let error = error.to_compile_error();
    quote! {
        #(#attrs)*
        #[allow(unused_variables, clippy::all)]
        #vis #sig {
            ::locus::__private::KernelFallback
        }
        #error
    }
}

/// The C source's text, its name for messages, and the expression that embeds it.
fn read_source(source: &Source) -> syn::Result<(String, String, TokenStream)> {
    match source {
        Source::Inline(lit) => Ok((lit.value(), cuda::INLINE.into(), quote!(#lit))),
        Source::File(lit) => {
            let rel = lit.value();
            let dir = std::env::var("CARGO_MANIFEST_DIR")
                .map_err(|_| syn::Error::new_spanned(lit, "CARGO_MANIFEST_DIR is not set: build with cargo"))?;
            let path = Path::new(&dir).join(&rel);
            let text = std::fs::read_to_string(&path).map_err(|e| {
                syn::Error::new_spanned(
                    lit,
                    format!("cannot read the kernel source `{rel}` (a path relative to this crate's directory): {e}"),
                )
            })?;
            let abs = path.to_str().ok_or_else(|| {
                syn::Error::new_spanned(lit, format!("the path of `{rel}` is not UTF-8, which `include_str!` needs"))
            })?;
            Ok((text, rel, quote_spanned!(lit.span()=> ::core::include_str!(#abs))))
        }
    }
}

fn expand(args: TokenStream, decl: &Decl) -> syn::Result<TokenStream> {
    let args: Args = syn::parse2(args)?;
    let sig = &decl.sig;
    validate::signature(sig)?;
    let params: Vec<Param<'_>> = sig.inputs.iter().map(parse::param).collect::<syn::Result<_>>()?;
    let first = validate::one_placement(sig, &params)?;
    let c_name = args.name.as_ref().map_or_else(|| sig.ident.to_string(), |l| l.value());
    let (text, origin, embedded) = read_source(&args.source)?;
    let pointed = args.name.as_ref().unwrap_or(args.source.lit());
    let c = cuda::find(&text, &c_name, &origin).map_err(|m| syn::Error::new_spanned(pointed, m))?;
    validate::against(sig, &params, &c, &origin, &c_name)?;
    // The runtime's name for a source given inline (it names NVRTC's file after the kernel).
    let origin = if origin == cuda::INLINE { "inline".to_string() } else { origin };

    let lt = Lifetime::new("'__locus", Span::call_site());
    let mut out_sig = sig.clone();
    out_sig.generics.params.insert(0, syn::parse_quote!(#lt));
    let mut bounds = Vec::new();
    let mut tensors = 0usize;
    for (arg, p) in out_sig.inputs.iter_mut().zip(&params) {
        let Param::Tensor { .. } = p else { continue };
        let FnArg::Typed(pt) = arg else { continue };
        let Type::Reference(r) = &mut *pt.ty else { continue };
        r.lifetime = Some(lt.clone());
        if tensors > 0 {
            let own = format_ident!("__LocusP{}", tensors);
            set_placement(&mut r.elem, &own);
            out_sig.generics.params.push(syn::parse_quote!(#own: ::locus::__private::Device));
            let span = parse::ty_span(p);
            bounds.push(quote_spanned!(span=> #own: ::locus::__private::SameKernelDevice<#first>));
        }
        tensors += 1;
    }
    if !bounds.is_empty() {
        let wc = out_sig.generics.make_where_clause();
        for b in bounds {
            wc.predicates.push(syn::parse2(b)?);
        }
    }
    out_sig.output = syn::parse_quote!(-> ::locus::__private::KernelLaunch<#lt, #first>);

    let launch = syn::Ident::new("__locus_launch", Span::mixed_site());
    let pushes = params.iter().map(|p| match p {
        Param::Scalar { ident, ty, .. } => quote!(#launch.scalar::<#ty>(#ident);),
        Param::Tensor { ident, mutable: true, .. } => quote!(#launch.output(#ident);),
        Param::Tensor { ident, .. } => quote!(#launch.input(#ident);),
    });
    let (host_fn, host) = match &args.host {
        Some(path) => (host_adapter(path, &params), quote!(::core::option::Option::Some(__locus_host as _))),
        None => (TokenStream::new(), quote!(::core::option::Option::None)),
    };
    let n = params.len();
    let (attrs, vis) = (&decl.attrs, &decl.vis);
    Ok(quote! {
        #(#attrs)*
        #vis #out_sig {
            #host_fn
            static __LOCUS_KERNEL: ::locus::__private::KernelSource =
                ::locus::__private::KernelSource::new(#c_name, #embedded, #origin, #host);
            let mut #launch = ::locus::__private::KernelLaunch::new(&__LOCUS_KERNEL, #n);
            #(#pushes)*
            #launch
        }
    })
}

/// Replaces the placement of `Tensor<P, ..>` with `own`.
fn set_placement(ty: &mut Type, own: &syn::Ident) {
    let Type::Path(p) = ty else { return };
    let Some(last) = p.path.segments.last_mut() else { return };
    let PathArguments::AngleBracketed(ab) = &mut last.arguments else { return };
    if let Some(GenericArgument::Type(t)) = ab.args.iter_mut().find(|a| matches!(a, GenericArgument::Type(_))) {
        *t = syn::parse_quote!(#own);
    }
}

/// `fn __locus_host`, which hands the fallback at `path` the launch's arguments: slices
/// for tensors, values for scalars, in parameter order. Its type is written out, so a
/// fallback of another signature is an error at `path` naming the expected one.
fn host_adapter(path: &syn::Path, params: &[Param<'_>]) -> TokenStream {
    let call = syn::Ident::new("__locus_call", Span::mixed_site());
    let elem = |name: &str| syn::Ident::new(name, Span::call_site());
    let tys = params.iter().map(|p| match p {
        Param::Scalar { ty, .. } => quote!(#ty),
        Param::Tensor { mutable: true, elem: e, .. } => {
            let e = elem(&e.name);
            quote!(&mut [#e])
        }
        Param::Tensor { elem: e, .. } => {
            let e = elem(&e.name);
            quote!(&[#e])
        }
    });
    let takes = params.iter().map(|p| match p {
        Param::Scalar { ty, .. } => quote!(#call.scalar::<#ty>()?),
        Param::Tensor { mutable: true, elem: e, .. } => {
            let e = elem(&e.name);
            quote!(#call.output::<#e>()?)
        }
        Param::Tensor { elem: e, .. } => {
            let e = elem(&e.name);
            quote!(#call.input::<#e>()?)
        }
    });
    let f = syn::Ident::new("__locus_fallback", Span::mixed_site());
    let typed = quote_spanned!(path.span()=> let #f: fn(#(#tys),*) = #path;);
    quote! {
        // The written-out fn type is as long as the kernel's parameter list.
        #[allow(clippy::type_complexity)]
        fn __locus_host(#call: &mut ::locus::__private::HostCall<'_>) -> ::locus::__private::Result<()> {
            #typed
            #f(#(#takes),*);
            ::core::result::Result::Ok(())
        }
    }
}
