//! The body of an `async fn` under `#[on_device]`, moved into an async block.
//!
//! An async block, unlike an `async fn`, has no declared return type: its tail and
//! its `return`s are not coerced (`&String` to `&str`, `Box<T>` to `Box<dyn Trait>`)
//! and `?` cannot tell which error type to convert to. So the output type is handed to
//! `on_device_async::<T, _>`, and the tail and every `return` of the body go through
//! `identity::<T>`, a coercion site.

use proc_macro2::TokenStream;
use quote::{quote, ToTokens};
use syn::visit_mut::{self, VisitMut};
use syn::{Block, Expr, ExprReturn, Item, ReturnType};

/// The fn's output type, or `None` where it cannot be written in an expression
/// (`impl Trait`, whose hidden type needs no coercion anyway).
pub fn output_type(output: &ReturnType) -> Option<TokenStream> {
    match output {
        ReturnType::Default => Some(quote!(())),
        ReturnType::Type(_, ty) => {
            let tokens = ty.to_token_stream();
            (!mentions_impl(tokens.clone())).then_some(tokens)
        }
    }
}

fn mentions_impl(tokens: TokenStream) -> bool {
    tokens.into_iter().any(|tt| match tt {
        proc_macro2::TokenTree::Ident(i) => i == "impl",
        proc_macro2::TokenTree::Group(g) => mentions_impl(g.stream()),
        _ => false,
    })
}

/// `async move { .. }` computing what the fn body computed, with coerced returns.
pub fn async_block(block: &Block, output: Option<&TokenStream>) -> TokenStream {
    let Some(ty) = output else {
        let stmts = &block.stmts;
        return quote!(async move { #(#stmts)* });
    };
    let mut block = block.clone();
    CoerceReturns { ty }.visit_block_mut(&mut block);
    let stmts = &block.stmts;
    quote!(async move { ::core::convert::identity::<#ty>({ #(#stmts)* }) })
}

/// Rewrites `return e` into `return identity::<T>(e)`, outside nested closures, async
/// blocks and items, whose `return`s are their own.
struct CoerceReturns<'a> {
    ty: &'a TokenStream,
}

impl VisitMut for CoerceReturns<'_> {
    fn visit_expr_mut(&mut self, e: &mut Expr) {
        match e {
            Expr::Closure(_) | Expr::Async(_) => {}
            Expr::Return(ExprReturn { expr: Some(value), .. }) => {
                self.visit_expr_mut(value);
                let ty = self.ty;
                let inner = &**value;
                **value = Expr::Verbatim(quote!(::core::convert::identity::<#ty>(#inner)));
            }
            _ => visit_mut::visit_expr_mut(self, e),
        }
    }

    fn visit_item_mut(&mut self, _item: &mut Item) {}
}
