//! Phase 2: checks that need both the argument and the item, before anything is
//! generated: what the attribute is on, and that a const generic device is one.

use quote::ToTokens;
use syn::{GenericParam, Generics, Ident, Item, ItemFn, ItemImpl, Type};

use super::parse::DeviceArg;

/// What `#[on_device]` may be put on.
pub enum Target {
    Fn(ItemFn),
    Impl(ItemImpl),
}

/// The item under the attribute, if it is a fn or an impl block.
pub fn target(item: Item) -> syn::Result<Target> {
    let (tokens, what) = match item {
        Item::Fn(f) => {
            if let Some(c) = &f.sig.constness {
                return Err(syn::Error::new_spanned(
                    c,
                    "`#[on_device]` cannot go on a `const fn`: it makes the device current when the fn runs, \
                     which a const evaluation never does; remove `const` or the attribute",
                ));
            }
            return Ok(Target::Fn(f));
        }
        // The `const fn`s of an impl are left alone: they may run at compile time.
        Item::Impl(i) => return Ok(Target::Impl(i)),
        Item::Verbatim(v) => (v, "an item without a body (it needs a fn body to run under the guard)"),
        Item::Struct(s) => (s.struct_token.to_token_stream(), "a struct"),
        Item::Enum(e) => (e.enum_token.to_token_stream(), "an enum"),
        Item::Union(u) => (u.union_token.to_token_stream(), "a union"),
        Item::Const(c) => (c.const_token.to_token_stream(), "a const"),
        Item::Static(s) => (s.static_token.to_token_stream(), "a static"),
        Item::Trait(t) => (t.trait_token.to_token_stream(), "a trait (put it on the impl blocks or the methods)"),
        Item::Mod(m) => (m.mod_token.to_token_stream(), "a module"),
        Item::Type(t) => (t.type_token.to_token_stream(), "a type alias"),
        Item::Use(u) => (u.use_token.to_token_stream(), "a `use`"),
        Item::Macro(m) => (m.mac.path.to_token_stream(), "a macro call (use `with_device!` inside a fn)"),
        other => (other.to_token_stream(), "this item"),
    };
    Err(syn::Error::new_spanned(
        tokens,
        format!("`#[on_device]` goes on a fn, a method or an `impl` block, not on {what}"),
    ))
}

/// For `#[on_device(N)]`: `N` must be a `const N: usize` parameter in scope. `scopes`
/// are the generics that may declare it; `method` tells that an enclosing impl (which
/// the attribute cannot see) may declare it instead.
pub fn const_param(ident: &Ident, scopes: &[&Generics], method: bool, item_name: &str) -> syn::Result<()> {
    for generics in scopes {
        for param in &generics.params {
            match param {
                GenericParam::Const(c) if c.ident == *ident => {
                    return if is_usize(&c.ty) {
                        Ok(())
                    } else {
                        Err(syn::Error::new_spanned(
                            &c.ty,
                            format!(
                                "`Cuda<{ident}>` needs `const {ident}: usize`; change the type of `{ident}` to `usize`"
                            ),
                        ))
                    };
                }
                GenericParam::Type(t) if t.ident == *ident => {
                    return Err(syn::Error::new_spanned(
                        ident,
                        format!(
                            "`{ident}` is a type parameter; `#[on_device]` takes a const generic \
                             (`const {ident}: usize`) or a placement's ordinal"
                        ),
                    ));
                }
                _ => {}
            }
        }
    }
    if method {
        // A const parameter of the impl block, which rustc resolves.
        return Ok(());
    }
    let fix = if ident.to_string().chars().any(|c| c.is_lowercase()) {
        format!("for a device known only at run time write `#[on_device(dyn {ident})]`")
    } else {
        format!("declare `const {ident}: usize` among its generics, or for a run-time value write `#[on_device(dyn {ident})]`")
    };
    Err(syn::Error::new_spanned(ident, format!("`{ident}` is not a const generic parameter of `{item_name}`; {fix}")))
}

fn is_usize(ty: &Type) -> bool {
    matches!(ty, Type::Path(p) if p.qself.is_none() && p.path.is_ident("usize"))
}

/// Whether `Here` can name the device: a literal ordinal or a role.
pub fn names_here(arg: &DeviceArg) -> bool {
    matches!(arg, DeviceArg::Literal { .. } | DeviceArg::Role(_))
}

/// For `with_device!(N => ..)`: the macro cannot see generics, so a name in lower case,
/// which is a variable by Rust's conventions, is taken as a forgotten `dyn`.
pub fn macro_const_param(ident: &Ident) -> syn::Result<()> {
    if ident.to_string().chars().any(|c| c.is_lowercase()) {
        return Err(syn::Error::new_spanned(
            ident,
            format!(
                "`{ident}` looks like a run-time value, and a bare name must be a const generic parameter; \
                 write `with_device!(dyn {ident} => ..)`"
            ),
        ));
    }
    Ok(())
}
