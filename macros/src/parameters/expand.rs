//! The `Parameters` impl of a validated struct: each field whose type mentions the
//! device parameter, except plain tensors and `PhantomData`, visited as `prefix.field`.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{DeriveInput, Ident, Member, Type};

use crate::to_device::validate::{self, DeriveModel, FieldKind};

/// The element type of the parameters: a type parameter bounded by `Float`, else `f32`.
fn element(input: &DeriveInput) -> TokenStream {
    let float = input.generics.type_params().find(|t| {
        t.bounds.iter().any(|b| match b {
            syn::TypeParamBound::Trait(t) => t.path.segments.last().is_some_and(|s| s.ident == "Float"),
            _ => false,
        })
    });
    match float {
        Some(t) => t.ident.to_token_stream(),
        None => quote!(f32),
    }
}

/// A tensor or a marker: no parameter inside.
fn skipped(ty: &Type) -> bool {
    match ty {
        Type::Path(p) => p.path.segments.last().is_some_and(|s| s.ident == "Tensor" || s.ident == "PhantomData"),
        _ => false,
    }
}

fn name_of(m: &Member) -> String {
    match m {
        Member::Named(i) => i.to_string(),
        Member::Unnamed(i) => i.index.to_string(),
    }
}

/// `impl Parameters<D, T> for ..`.
pub fn expand(model: &DeriveModel) -> TokenStream {
    let fields: Vec<(&Member, &Type)> = model
        .fields
        .iter()
        .filter_map(|f| match f {
            FieldKind::Moved(m, ty) if !skipped(ty) => Some((m, ty)),
            _ => None,
        })
        .collect();
    let (device, elem) = (&model.device, element(&model.input));
    let visit = |method: &str, reference: TokenStream| {
        let method = Ident::new(method, Span::call_site());
        let calls = fields.iter().map(|(m, ty)| {
            let name = name_of(m);
            // At the field's type, so a field that has no parameters reports there,
            // naming the placement and element type.
            let bound = quote_spanned!(ty.span()=> <#ty as ::locus::__private::Parameters<#device, #elem>>);
            quote!(#bound::#method(#reference self.#m, &::locus::__private::join_param_name(__locus_prefix, #name), __locus_f);)
        });
        quote!(#(#calls)*)
    };
    let (by_ref, by_mut) = (visit("visit_params", quote!(&)), visit("visit_params_mut", quote!(&mut)));
    impl_parameters(&model.input, &model.device, &by_ref, &by_mut)
}

/// The impl with the two bodies.
fn impl_parameters(input: &DeriveInput, device: &Ident, by_ref: &TokenStream, by_mut: &TokenStream) -> TokenStream {
    let name = &input.ident;
    let elem = element(input);
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    quote! {
        const _: () = {
            #[automatically_derived]
            impl #impl_generics ::locus::__private::Parameters<#device, #elem> for #name #ty_generics #where_clause {
                #[allow(unused_variables)]
                fn visit_params(
                    &self,
                    __locus_prefix: &str,
                    __locus_f: &mut dyn FnMut(&str, &::locus::__private::Param<#device, #elem>),
                ) {
                    #by_ref
                }

                #[allow(unused_variables)]
                fn visit_params_mut(
                    &mut self,
                    __locus_prefix: &str,
                    __locus_f: &mut dyn FnMut(&str, &mut ::locus::__private::Param<#device, #elem>),
                ) {
                    #by_mut
                }
            }
        };
    }
}

/// `error`, and an impl that visits nothing (for the first device parameter, if any).
pub fn fallback(input: &DeriveInput, error: syn::Error) -> TokenStream {
    let error = error.to_compile_error();
    let Some(device) = validate::device_params(input).first().map(|d| (*d).clone()) else {
        return error;
    };
    let imp = impl_parameters(input, &device, &TokenStream::new(), &TokenStream::new());
    quote! {
        #error
        #imp
    }
}
