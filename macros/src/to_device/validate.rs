//! Phase 1 and 2 of `#[derive(ToDevice)]`: which struct the derive can handle, and how
//! each of its fields moves.

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Generics, Ident, Index, Member, Token, Type, TypeParam, TypeParamBound, WherePredicate};

/// A struct `#[derive(ToDevice)]` can handle: one device parameter, named fields or
/// tuple fields.
pub struct DeriveModel {
    pub input: DeriveInput,
    /// The type parameter bounded by `Device`.
    pub device: Ident,
    pub fields: Vec<FieldKind>,
}

/// How one field moves.
pub enum FieldKind {
    /// Its type is the device parameter itself: it becomes the new placement.
    Placement(Member),
    /// Its type mentions the device parameter: it moves with `ToDevice`.
    Moved(Member, Type),
    /// Anything else is cloned.
    Cloned(Member, Type),
}

/// The struct and its fields' moves, or why the derive cannot handle `input`.
pub fn derive_model(input: DeriveInput) -> syn::Result<DeriveModel> {
    let name = &input.ident;
    let fields = match &input.data {
        Data::Struct(s) => s.fields.clone(),
        Data::Enum(e) => {
            return Err(syn::Error::new_spanned(
                e.enum_token,
                format!(
                    "`#[derive(ToDevice)]` supports structs only; for the enum `{name}`, implement `ToDevice` \
                     by hand, matching each variant and calling `to_placement` on its fields"
                ),
            ))
        }
        Data::Union(u) => {
            return Err(syn::Error::new_spanned(
                u.union_token,
                "`#[derive(ToDevice)]` supports structs only, not unions",
            ))
        }
    };
    let device = match device_params(&input).as_slice() {
        [one] => (*one).clone(),
        [] => {
            return Err(syn::Error::new_spanned(
                name,
                format!(
                    "`#[derive(ToDevice)]` needs a device type parameter, as in `struct {name}<D: Device>`, \
                     with its tensors typed `Tensor<D>`; `{name}` has none"
                ),
            ))
        }
        [first, second, ..] => {
            return Err(syn::Error::new_spanned(
                second,
                format!(
                    "`{name}` has two device parameters, `{first}` and `{second}`: `ToDevice` moves every tensor \
                     to one device, so give all of them the one parameter `{first}`"
                ),
            ))
        }
    };
    let fields = fields
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let member = match &f.ident {
                Some(ident) => Member::Named(ident.clone()),
                None => Member::Unnamed(Index { index: i as u32, span: f.ty.span() }),
            };
            let ty = f.ty.clone();
            if matches!(&ty, Type::Path(p) if p.qself.is_none() && p.path.is_ident(&device)) {
                FieldKind::Placement(member)
            } else if mentions_ident(ty.to_token_stream(), &device) {
                FieldKind::Moved(member, ty)
            } else {
                FieldKind::Cloned(member, ty)
            }
        })
        .collect();
    Ok(DeriveModel { input, device, fields })
}

/// The type parameters bounded by `Device`, in the order they are declared.
pub fn device_params(input: &DeriveInput) -> Vec<&Ident> {
    input.generics.type_params().filter(|t| is_device_param(t, &input.generics)).map(|t| &t.ident).collect()
}

fn is_device_bound(bounds: &Punctuated<TypeParamBound, Token![+]>) -> bool {
    bounds.iter().any(|b| match b {
        TypeParamBound::Trait(t) => t.path.segments.last().is_some_and(|s| s.ident == "Device"),
        _ => false,
    })
}

fn is_device_param(t: &TypeParam, generics: &Generics) -> bool {
    if is_device_bound(&t.bounds) {
        return true;
    }
    generics.where_clause.iter().flat_map(|w| &w.predicates).any(|p| match p {
        WherePredicate::Type(pt) => {
            matches!(&pt.bounded_ty, Type::Path(bp) if bp.qself.is_none() && bp.path.is_ident(&t.ident))
                && is_device_bound(&pt.bounds)
        }
        _ => false,
    })
}

/// Whether `tokens` name `ident` anywhere, inside groups too.
pub fn mentions_ident(tokens: TokenStream, ident: &Ident) -> bool {
    tokens.into_iter().any(|tt| match tt {
        proc_macro2::TokenTree::Ident(i) => i == *ident,
        proc_macro2::TokenTree::Group(g) => mentions_ident(g.stream(), ident),
        _ => false,
    })
}
