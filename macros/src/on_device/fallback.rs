//! Phase 4: what a rejected `#[on_device]` expands to.
//!
//! The user's item, next to the one error, with `Here` still standing for a placement:
//! replaced in its types and aliased at the top of its fn bodies, as a valid attribute
//! does. Left unresolved, a `Here` would be `locus::Here` wherever that is in scope
//! (`use locus::*`), the type that is no placement, and every use would add an error
//! of its own ("`Here` is not a placement", then each op on the tensor).
//!
//! `Here` is the placement the error's fix names, so that code written for the fixed
//! attribute already checks: `Cuda<1>` for `"cuda:1"` or `1.0`, the first of two
//! devices, `Cuda<N>` or `Dyn` for a `Here` under `N` or `dyn`, and `Cuda<0>` where
//! the message names no device. A concrete placement rather than a placeholder type:
//! a placeholder would satisfy the bounds inside the item but mismatch every
//! `Tensor<Cuda<n>>` its callers pass, while `Cuda<n>` mismatches only where the
//! fixed code would too. No guard is entered and no signature check is emitted: the
//! crate does not build anyway, and a check against a guessed device could only add
//! errors.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::visit_mut::{self, VisitMut};
use syn::{Block, Ident, ImplItemFn, Item, ItemFn, Lit, Stmt, Type};

use super::expand::has_own_attribute;
use super::parse::DeviceArg;
use super::signature::{cuda_type, is_here};

/// What `Here` stands for in a rejected item.
pub enum Here {
    /// `Cuda<n>`.
    Cuda(u32),
    /// `Cuda<N>` for the const generic `N` of the attribute.
    ConstParam(Ident),
    /// `Dyn`, for `dyn expr`; the expression is still named in the body (it would be
    /// read by the guard), so its variables raise no unused warning beside the error.
    Dyn(Box<syn::Expr>),
    /// The role of the attribute.
    Role(syn::Path),
}

impl Here {
    /// For arguments that did not parse: the device the parser's message suggests
    /// (`"cuda:1"`, `1.0` and `1u8` give 1; `0, 1` gives 0, the first), or `Cuda<0>`.
    pub fn guess(args: TokenStream) -> Here {
        let ordinal = match args.into_iter().next() {
            Some(TokenTree::Literal(l)) => match Lit::new(l) {
                Lit::Int(i) => i.base10_parse::<u32>().ok(),
                Lit::Str(s) => s.value().strip_prefix("cuda:").and_then(|n| n.parse().ok()),
                Lit::Float(f) => f.base10_digits().split(['.', 'e', 'E']).next().and_then(|w| w.parse().ok()),
                _ => None,
            },
            _ => None,
        };
        Here::Cuda(ordinal.unwrap_or(0))
    }

    /// For a parsed argument on an item the attribute rejects: the literal device, or
    /// `Cuda<0>` (a rejected `N` may be no const parameter at all).
    pub fn of(arg: &DeviceArg) -> Here {
        match arg {
            DeviceArg::Literal { ordinal, .. } => Here::Cuda(*ordinal),
            DeviceArg::Role(path) => Here::Role(path.clone()),
            _ => Here::Cuda(0),
        }
    }

    /// For a `Here` under `N` or `dyn`: the placement the message says to write.
    pub fn stray(arg: &DeviceArg) -> Here {
        match arg {
            DeviceArg::Literal { ordinal, .. } => Here::Cuda(*ordinal),
            DeviceArg::ConstParam(n) => Here::ConstParam(n.clone()),
            DeviceArg::Dynamic { expr, .. } => Here::Dyn(expr.clone()),
            DeviceArg::Role(path) => Here::Role(path.clone()),
        }
    }

    /// The placement's type, at `span` (where the `Here` it replaces was).
    fn ty(&self, span: Span) -> TokenStream {
        match self {
            Here::Cuda(n) => cuda_type(*n, span),
            Here::ConstParam(n) => quote_spanned!(span=> ::locus::__private::Cuda<#n>),
            Here::Dyn(_) => quote_spanned!(span=> ::locus::__private::Dyn),
            Here::Role(path) => quote_spanned!(span=> #path),
        }
    }
}

/// Why the attribute rejected its item, and what `Here` stands for in it meanwhile.
pub struct Rejected {
    pub error: syn::Error,
    pub here: Here,
}

impl Rejected {
    pub fn new(error: syn::Error, here: Here) -> Rejected {
        Rejected { error, here }
    }
}

/// `item` with `Here` standing for `rejected.here`, followed by the error. An item that
/// does not parse goes out unchanged.
pub fn item_with_here(item: TokenStream, rejected: Rejected) -> TokenStream {
    let Rejected { error, here } = rejected;
    let Ok(mut parsed) = syn::parse2::<Item>(item.clone()) else {
        return crate::fallback::item_with_error(item, error);
    };
    // The walk, not `visit_item_mut`, for the item itself: an `#[on_device]` among its
    // own attributes is a second one on the same item, not a nested item's.
    visit_mut::visit_item_mut(&mut ReplaceHere { here: &here }, &mut parsed);
    crate::fallback::item_with_error(parsed.into_token_stream(), error)
}

/// Replaces `Here` in every type and aliases it at the top of every fn body (for paths
/// such as `Here::default()`; not for `Cuda<N>`, which a body's items cannot name),
/// leaving alone items with an `#[on_device]` of their own.
struct ReplaceHere<'a> {
    here: &'a Here,
}

impl ReplaceHere<'_> {
    fn alias(&self, block: &mut Block) {
        // An item in a fn body cannot name the fn's generics: `Cuda<N>` is replaced in
        // types only.
        if let Here::ConstParam(_) = self.here {
            return;
        }
        let ty = self.here.ty(Span::call_site());
        let alias: Stmt = syn::parse_quote! {
            #[allow(dead_code)]
            type Here = #ty;
        };
        block.stmts.insert(0, alias);
        if let Here::Dyn(expr) = self.here {
            let read: Stmt = syn::parse_quote! { let _ = &(#expr); };
            block.stmts.insert(1, read);
        }
    }
}

impl VisitMut for ReplaceHere<'_> {
    fn visit_type_mut(&mut self, ty: &mut Type) {
        if let Type::Path(p) = ty {
            if is_here(p) {
                *ty = Type::Verbatim(self.here.ty(p.span()));
                return;
            }
        }
        visit_mut::visit_type_mut(self, ty);
    }

    fn visit_item_mut(&mut self, item: &mut Item) {
        let attrs = match item {
            Item::Fn(f) => &f.attrs,
            Item::Impl(i) => &i.attrs,
            _ => return visit_mut::visit_item_mut(self, item),
        };
        if !has_own_attribute(attrs) {
            visit_mut::visit_item_mut(self, item);
        }
    }

    fn visit_item_fn_mut(&mut self, f: &mut ItemFn) {
        visit_mut::visit_item_fn_mut(self, f);
        self.alias(&mut f.block);
    }

    fn visit_impl_item_fn_mut(&mut self, f: &mut ImplItemFn) {
        if has_own_attribute(&f.attrs) {
            return;
        }
        visit_mut::visit_impl_item_fn_mut(self, f);
        self.alias(&mut f.block);
    }
}
