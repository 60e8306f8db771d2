//! Phase 3 of `#[derive(ToDevice)]`: the `ToDevice` impl of a validated struct.

use proc_macro2::{Group, Span, TokenStream, TokenTree};
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{GenericParam, Ident};

use super::validate::{self, DeriveModel, FieldKind};

/// `impl ToDevice for ..`, moving every field by its kind.
pub fn expand(model: &DeriveModel) -> TokenStream {
    let name = &model.input.ident;
    let target = Ident::new("__LocusE", Span::call_site());
    let placement = Ident::new("__locus_placement", Span::mixed_site());

    let on = on_type(&model.input, &model.device, &target);

    let mut generics = model.input.generics.clone();
    let where_clause = generics.make_where_clause();
    let type_params: Vec<&Ident> = model.input.generics.type_params().map(|t| &t.ident).collect();
    for f in &model.fields {
        // A field of a generic type is cloned only where that type is `Clone`; one of
        // a concrete type needs no bound (and reports a missing `Clone` at its type).
        if let FieldKind::Cloned(_, ty) = f {
            if type_params.iter().any(|p| validate::mentions_ident(ty.to_token_stream(), p)) {
                where_clause.predicates.push(syn::parse_quote_spanned!(ty.span()=> #ty: ::core::clone::Clone));
            }
        }
    }
    let fields = model.fields.iter().map(|f| match f {
        FieldKind::Placement(m) => quote!(#m: ::locus::__private::move_placement(#placement)?),
        // Every token at the type's first token, the type included, so that a field
        // that is not `ToDevice` gets one error there rather than one per obligation.
        FieldKind::Moved(m, ty) => {
            let span = ty.span();
            let ty = respan(ty.to_token_stream(), span);
            quote_spanned!(span=> #m: ::locus::__private::move_field::<#ty, _>(&self.#m, #placement)?)
        }
        FieldKind::Cloned(m, ty) => quote_spanned!(ty.span()=> #m: ::core::clone::Clone::clone(&self.#m)),
    });

    let body = quote!(::core::result::Result::Ok(#name { #(#fields,)* }));
    impl_to_device(&model.input, &generics, &target, &on, &placement, &body)
}

/// The `ToDevice` impl of `input` (with `generics`, its own or with added bounds):
/// `type On<E> = on`, and `to_placement(&self, placement: E)` returning `body`.
pub fn impl_to_device(
    input: &syn::DeriveInput,
    generics: &syn::Generics,
    target: &Ident,
    on: &TokenStream,
    placement: &Ident,
    body: &TokenStream,
) -> TokenStream {
    let name = &input.ident;
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    quote! {
        const _: () = {
            #[automatically_derived]
            impl #impl_generics ::locus::__private::ToDevice for #name #ty_generics #where_clause {
                type On<#target: ::locus::__private::Device> = #on;

                #[allow(unused_variables)]
                fn to_placement<#target: ::locus::__private::Device>(
                    &self,
                    #placement: #target,
                ) -> ::locus::__private::Result<Self::On<#target>> {
                    #body
                }
            }
        };
    }
}

/// `Name<A, __LocusE, B>`: the type with its device parameter `device` replaced by
/// `target`.
pub fn on_type(input: &syn::DeriveInput, device: &Ident, target: &Ident) -> TokenStream {
    let name = &input.ident;
    let args = input.generics.params.iter().map(|p| match p {
        GenericParam::Type(t) if t.ident == *device => quote!(#target),
        GenericParam::Type(t) => {
            let i = &t.ident;
            quote!(#i)
        }
        GenericParam::Lifetime(l) => {
            let l = &l.lifetime;
            quote!(#l)
        }
        GenericParam::Const(c) => {
            let i = &c.ident;
            quote!(#i)
        }
    });
    quote!(#name<#(#args),*>)
}

fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut tt| {
            if let TokenTree::Group(g) = &tt {
                let mut group = Group::new(g.delimiter(), respan(g.stream(), span));
                group.set_span(span);
                tt = TokenTree::Group(group);
            } else {
                tt.set_span(span);
            }
            tt
        })
        .collect()
}
