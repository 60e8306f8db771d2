//! Phase 1: the arguments of `#[kernel(..)]` and the declaration it is put on, each
//! piece kept with its tokens so that later errors point at them.

use proc_macro2::{Span, TokenStream};
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned;
use syn::{Attribute, FnArg, GenericArgument, Ident, LitStr, Pat, PathArguments, Signature, Token, Type, Visibility};

/// Where the CUDA C comes from.
pub enum Source {
    /// `source = "kernels/saxpy.cu"`: a file relative to the crate's directory.
    File(LitStr),
    /// `source = r#"extern "C" __global__ ..."#`: the code itself (it says `__global__`).
    Inline(LitStr),
}

impl Source {
    pub fn lit(&self) -> &LitStr {
        match self {
            Source::File(l) | Source::Inline(l) => l,
        }
    }
}

/// `#[kernel(source = .., name = .., host = ..)]`.
pub struct Args {
    pub source: Source,
    /// The C function's name, when it is not the Rust fn's.
    pub name: Option<LitStr>,
    /// The Rust fallback the host backend runs.
    pub host: Option<syn::Path>,
}

const KEYS: &str = "`source`, `name`, `host`";

impl Parse for Args {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let (mut source, mut name, mut host): (Option<LitStr>, Option<LitStr>, Option<syn::Path>) = (None, None, None);
        while !input.is_empty() {
            let key: Ident = input.call(syn::ext::IdentExt::parse_any)?;
            let _: Token![=] = input
                .parse()
                .map_err(|e| syn::Error::new(e.span(), format!("expected `=` after `{key}`, as in `{key} = ..`")))?;
            let twice = |k: &Ident| syn::Error::new_spanned(k, format!("`{k}` is given twice"));
            match key.to_string().as_str() {
                "source" if source.is_some() => return Err(twice(&key)),
                "name" if name.is_some() => return Err(twice(&key)),
                "host" if host.is_some() => return Err(twice(&key)),
                "source" => source = Some(input.parse()?),
                "name" => {
                    let lit: LitStr = input.parse()?;
                    let v = lit.value();
                    let c_ident = v.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                        && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                    if !c_ident {
                        return Err(syn::Error::new_spanned(&lit, format!("`{v}` is not a C function name")));
                    }
                    name = Some(lit);
                }
                "host" => host = Some(input.parse()?),
                other => {
                    return Err(syn::Error::new_spanned(
                        &key,
                        format!("unknown argument `{other}`: expected one of {KEYS}"),
                    ))
                }
            }
            if !input.is_empty() {
                let _: Token![,] = input.parse()?;
            }
        }
        let source = source.ok_or_else(|| {
            syn::Error::new(
                Span::call_site(),
                "`#[kernel]` needs its CUDA C: `source = \"kernels/my_kernel.cu\"` (a file of this crate) \
                 or `source = r#\"extern \"C\" __global__ void ..\"#`",
            )
        })?;
        let source = if source.value().contains("__global__") { Source::Inline(source) } else { Source::File(source) };
        Ok(Args { source, name, host })
    }
}

/// `fn saxpy<D: Device>(a: f32, x: &Tensor<D>, y: &mut Tensor<D>);`
pub struct Decl {
    pub attrs: Vec<Attribute>,
    pub vis: Visibility,
    pub sig: Signature,
}

impl Parse for Decl {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis: Visibility = input.parse()?;
        let sig: Signature = input.parse()?;
        if input.peek(syn::token::Brace) {
            let body: TokenStream = input.parse()?;
            return Err(syn::Error::new_spanned(
                body,
                "a `#[kernel]` fn has no body (the CUDA source is its body): end the declaration with `;`",
            ));
        }
        let _: Token![;] = input.parse()?;
        Ok(Decl { attrs, vis, sig })
    }
}

/// The element type of a tensor parameter.
pub struct Elem {
    /// `f32`, `f64`, `i32` or `u8`.
    pub name: String,
}

/// One parameter of the declaration.
pub enum Param<'a> {
    /// A value: `a: f32`.
    Scalar { arg: &'a FnArg, ident: &'a Ident, ty: &'a Type, name: String },
    /// A tensor: `x: &Tensor<D>` (`mutable`: `&mut Tensor<D>`).
    Tensor { arg: &'a FnArg, ident: &'a Ident, mutable: bool, placement: &'a Type, elem: Elem },
}

impl Param<'_> {
    pub fn arg(&self) -> &FnArg {
        match self {
            Param::Scalar { arg, .. } | Param::Tensor { arg, .. } => arg,
        }
    }

    pub fn ident(&self) -> &Ident {
        match self {
            Param::Scalar { ident, .. } | Param::Tensor { ident, .. } => ident,
        }
    }
}

/// The Rust types a kernel takes by value.
pub const SCALARS: [&str; 13] =
    ["f32", "f64", "i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64", "isize", "usize", "bool"];

/// The element types of tensors.
const ELEMENTS: [&str; 4] = ["f32", "f64", "i32", "u8"];

fn single_ident(ty: &Type) -> Option<&Ident> {
    match ty {
        Type::Path(p) if p.qself.is_none() => p.path.get_ident(),
        _ => None,
    }
}

/// Classifies one parameter.
pub fn param(arg: &FnArg) -> syn::Result<Param<'_>> {
    let FnArg::Typed(pt) = arg else {
        return Err(syn::Error::new_spanned(arg, "a kernel is a free fn: it takes no `self`"));
    };
    let Pat::Ident(pi) = &*pt.pat else {
        return Err(syn::Error::new_spanned(&pt.pat, "a kernel parameter is a plain name, as in `x: &Tensor<D>`"));
    };
    if pi.by_ref.is_some() || pi.subpat.is_some() {
        return Err(syn::Error::new_spanned(&pt.pat, "a kernel parameter is a plain name, as in `x: &Tensor<D>`"));
    }
    let neither = || {
        syn::Error::new_spanned(
            &pt.ty,
            "a kernel parameter is a tensor (`&Tensor<D, T>` read, `&mut Tensor<D, T>` written) or a scalar \
             (`f32`, `f64`, `i32`, `u32`, `usize`, ...)",
        )
    };
    if let Some(id) = single_ident(&pt.ty) {
        let name = id.to_string();
        if SCALARS.contains(&name.as_str()) {
            return Ok(Param::Scalar { arg, ident: &pi.ident, ty: &pt.ty, name });
        }
        return Err(neither());
    }
    let Type::Reference(r) = &*pt.ty else { return Err(neither()) };
    let Type::Path(p) = &*r.elem else { return Err(neither()) };
    let Some(last) = p.path.segments.last() else { return Err(neither()) };
    if last.ident != "Tensor" {
        return Err(neither());
    }
    let PathArguments::AngleBracketed(ab) = &last.arguments else {
        return Err(syn::Error::new_spanned(r, "a tensor parameter names its placement: `&Tensor<D>`"));
    };
    let types: Vec<&Type> = ab
        .args
        .iter()
        .filter_map(|a| match a {
            GenericArgument::Type(t) => Some(t),
            _ => None,
        })
        .collect();
    let (placement, elem) = match types.as_slice() {
        [p] => (*p, Elem { name: "f32".into() }),
        [p, e] => {
            let name = single_ident(e).map(|i| i.to_string()).filter(|n| ELEMENTS.contains(&n.as_str()));
            let name = name.ok_or_else(|| {
                syn::Error::new_spanned(e, "a kernel's tensors hold `f32`, `f64`, `i32` or `u8`, named as such")
            })?;
            (*p, Elem { name })
        }
        _ => return Err(syn::Error::new_spanned(r, "a tensor parameter is `&Tensor<D>` or `&Tensor<D, T>`")),
    };
    Ok(Param::Tensor { arg, ident: &pi.ident, mutable: r.mutability.is_some(), placement, elem })
}

/// The span of a parameter's type, for bounds that should point at it.
pub fn ty_span(p: &Param<'_>) -> Span {
    match p.arg() {
        FnArg::Typed(pt) => pt.ty.span(),
        other => other.span(),
    }
}
