//! Reading and rewriting the types of a signature: the `Cuda<m>` it names (checked
//! against the attribute's device) and `Here` (replaced by that device).

use proc_macro2::{Span, TokenStream};
use quote::{quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::visit_mut::{self, VisitMut};
use syn::{Block, Expr, GenericArgument, Generics, Ident, PathArguments, Type, TypePath};

use super::parse::DeviceArg;

/// The device type `::locus::__private::Cuda<n>`, with every token at `span`.
pub fn cuda_type(ordinal: u32, span: Span) -> TokenStream {
    let mut n = proc_macro2::Literal::usize_unsuffixed(ordinal as usize);
    n.set_span(span);
    quote_spanned!(span=> ::locus::__private::Cuda<#n>)
}

/// The type `Here` stands for under `arg`, at `span`: `Cuda<n>` for a literal, the role
/// for a role; `None` for `N` and `dyn`.
pub fn here_type(arg: &DeviceArg, span: Span) -> Option<TokenStream> {
    match arg {
        DeviceArg::Literal { ordinal, .. } => Some(cuda_type(*ordinal, span)),
        DeviceArg::Role(path) => Some(quote_spanned!(span=> #path)),
        _ => None,
    }
}

/// The placement types of locus that take a placement as their first generic argument.
const PLACED: [&str; 4] = ["Tensor", "Stream", "Event", "Graph"];

/// The placements that fit a fn on any device (host memory, or checked at run time).
const ANYWHERE: [&str; 3] = ["Cpu", "Pinned", "Dyn"];

/// Replaces `Here` in types by the attribute's device (`Cuda<n>` or the role), outside
/// fn bodies (which get a `type Here` alias instead), and collects the placements fixed
/// at the definition: `Cuda<m>` types whose `m` is fixed, and the named placement of a
/// `Tensor`, `Stream`, `Event` or `Graph` (a role, or an alias).
pub struct Signature<'a> {
    /// The attribute's device argument.
    arg: &'a DeviceArg,
    /// Generic parameters in scope: a `Cuda<N>` of one of them is not fixed.
    generics: Vec<&'a Generics>,
    /// `Cuda<m>` types with a fixed `m`, to check against the attribute.
    pub fixed: Vec<TypePath>,
    /// A `Here` seen where it has no meaning (no literal device).
    pub stray_here: Option<Span>,
}

impl<'a> Signature<'a> {
    pub fn new(arg: &'a DeviceArg, generics: Vec<&'a Generics>) -> Self {
        Signature { arg, generics, fixed: Vec::new(), stray_here: None }
    }

    /// The first generic argument of a `Tensor<X, ..>` (and the others of [`PLACED`]) when
    /// it names a placement fixed here: a path that is no generic parameter, `Here`,
    /// `Cuda<..>` (collected on its own) or one of [`ANYWHERE`].
    fn named_placement(&self, p: &TypePath) -> Option<TypePath> {
        let last = p.path.segments.last()?;
        if !PLACED.iter().any(|n| last.ident == n) {
            return None;
        }
        let PathArguments::AngleBracketed(args) = &last.arguments else { return None };
        let Some(GenericArgument::Type(Type::Path(found))) = args.args.first() else { return None };
        let head = found.path.segments.last()?;
        let skip = found.qself.is_some()
            || is_here(found)
            || head.ident == "Cuda"
            || head.ident == "Self"
            || ANYWHERE.iter().any(|n| head.ident == n)
            || found.path.get_ident().is_some_and(|i| self.is_generic(i));
        (!skip).then(|| found.clone())
    }

    fn is_generic(&self, ident: &Ident) -> bool {
        self.generics.iter().flat_map(|g| g.params.iter()).any(|p| match p {
            syn::GenericParam::Const(c) => c.ident == *ident,
            syn::GenericParam::Type(t) => t.ident == *ident,
            syn::GenericParam::Lifetime(_) => false,
        })
    }

    /// Whether the argument of a `Cuda<..>` is fixed at the definition: a literal, or
    /// a const that is not a generic parameter.
    fn is_fixed(&self, arg: &GenericArgument) -> bool {
        match arg {
            GenericArgument::Const(Expr::Lit(_)) => true,
            GenericArgument::Const(e @ Expr::Block(_)) => !mentions(e.to_token_stream(), &|i| self.is_generic(i)),
            GenericArgument::Type(Type::Path(p)) if p.qself.is_none() => {
                p.path.get_ident().is_some_and(|i| !self.is_generic(i))
            }
            _ => false,
        }
    }
}

fn mentions(tokens: TokenStream, pred: &dyn Fn(&Ident) -> bool) -> bool {
    tokens.into_iter().any(|tt| match tt {
        proc_macro2::TokenTree::Ident(i) => pred(&i),
        proc_macro2::TokenTree::Group(g) => mentions(g.stream(), pred),
        _ => false,
    })
}

pub fn is_here(p: &TypePath) -> bool {
    p.qself.is_none() && p.path.is_ident("Here")
}

impl VisitMut for Signature<'_> {
    fn visit_type_mut(&mut self, ty: &mut Type) {
        if let Type::Path(p) = ty {
            if is_here(p) {
                let span = p.path.segments[0].ident.span();
                match here_type(self.arg, span) {
                    Some(t) => *ty = Type::Verbatim(t),
                    None => {
                        self.stray_here.get_or_insert(span);
                    }
                }
                return;
            }
            if let Some(found) = self.named_placement(p) {
                self.fixed.push(found);
            }
            if let Some(last) = p.path.segments.last() {
                if last.ident == "Cuda" {
                    if let PathArguments::AngleBracketed(args) = &last.arguments {
                        if args.args.len() == 1 && self.is_fixed(&args.args[0]) {
                            self.fixed.push(p.clone());
                        }
                    }
                }
            }
        }
        visit_mut::visit_type_mut(self, ty);
    }

    fn visit_block_mut(&mut self, _block: &mut Block) {
        // Bodies get a `type Here` alias; items inside them are the user's own.
    }
}

/// The first `Here` in `block`, changing nothing.
pub fn find_here(block: &mut Block) -> Option<Span> {
    let mut scan = FindHere(None);
    scan.visit_block_mut(block);
    scan.0
}

/// The first `Here` in `expr`, changing nothing.
pub fn find_here_in_expr(expr: &mut syn::Expr) -> Option<Span> {
    let mut scan = FindHere(None);
    scan.visit_expr_mut(expr);
    scan.0
}

struct FindHere(Option<Span>);

impl VisitMut for FindHere {
    fn visit_type_path_mut(&mut self, p: &mut TypePath) {
        if is_here(p) {
            self.0.get_or_insert(p.span());
        }
        visit_mut::visit_type_path_mut(self, p);
    }
}

/// The error for a `Here` under a device that is neither a literal nor a role.
pub fn here_error(span: Span, arg: &DeviceArg, caller: &str) -> syn::Error {
    let instead = match arg {
        DeviceArg::ConstParam(n) => format!("with `{n}` write `Cuda<{n}>`"),
        DeviceArg::Role(path) => format!("write `{}`", path.to_token_stream()),
        _ => "with `dyn` the device is known only at run time: write `Dyn`".to_string(),
    };
    syn::Error::new(span, format!("`Here` is defined only for a literal device or a role, as in {caller}; {instead}"))
}
