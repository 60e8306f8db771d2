//! Phase 2: the Rust declaration against the C one. Every mismatch is an error at the
//! Rust parameter (or the place a parameter is missing) that quotes the C declaration.

use quote::ToTokens;
use syn::{ReturnType, Signature};

use super::cuda::{CKernel, CType};
use super::parse::Param;

/// The qualifiers and return type a kernel declaration may not have.
pub fn signature(sig: &Signature) -> syn::Result<()> {
    let refuse = |tokens: &dyn ToTokens, what: &str| {
        Err(syn::Error::new_spanned(tokens.to_token_stream(), format!("a `#[kernel]` fn cannot be {what}")))
    };
    if let Some(c) = &sig.constness {
        return refuse(c, "`const`");
    }
    if let Some(a) = &sig.asyncness {
        return refuse(a, "`async` (a launch is queued on a stream and returns at once)");
    }
    match &sig.safety {
        syn::Safety::Unsafe(u) => {
            return refuse(
                u,
                "`unsafe`: remove it (the launch checks every pointer against its tensor's element type, \
                 placement and borrows, so calling it is safe)",
            );
        }
        syn::Safety::Safe(s) => return refuse(s, "`safe`: remove it (kernel fns are safe without it)"),
        syn::Safety::Default => {}
    }
    if let Some(abi) = &sig.abi {
        return refuse(abi, "`extern`");
    }
    if let Some(v) = &sig.variadic {
        return refuse(v, "variadic");
    }
    if let ReturnType::Type(_, ty) = &sig.output {
        return Err(syn::Error::new_spanned(
            ty,
            "a `#[kernel]` fn returns a `KernelLaunch` (run it with `.launch()?`): remove the return type",
        ));
    }
    Ok(())
}

/// The one placement of all tensor parameters: the first tensor's. A later tensor of
/// another is an error at it.
pub fn one_placement<'a>(sig: &Signature, params: &[Param<'a>]) -> syn::Result<&'a syn::Type> {
    let mut first: Option<&syn::Type> = None;
    for p in params {
        let Param::Tensor { placement, .. } = p else { continue };
        match first {
            None => first = Some(placement),
            Some(f) if f.to_token_stream().to_string() != placement.to_token_stream().to_string() => {
                return Err(syn::Error::new_spanned(
                    placement,
                    format!(
                        "all tensors of a kernel share one placement: this one is on `{}`, the first on `{}`",
                        show(placement),
                        show(f)
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    first.ok_or_else(|| {
        syn::Error::new_spanned(
            &sig.ident,
            "a kernel takes at least one tensor (`&Tensor<D>` or `&mut Tensor<D>`): its placement says where it runs",
        )
    })
}

/// Checks the parameters against the kernel's, in order.
pub fn against(sig: &Signature, params: &[Param<'_>], c: &CKernel, origin: &str, name: &str) -> syn::Result<()> {
    let at = super::cuda::at(origin, c.line);
    if params.len() != c.params.len() {
        let msg = format!(
            "`{name}` takes {} parameter{} ({at}: `{}`), but this declaration has {}",
            c.params.len(),
            if c.params.len() == 1 { "" } else { "s" },
            c.decl,
            params.len()
        );
        return Err(match params.get(c.params.len()) {
            Some(extra) => syn::Error::new_spanned(extra.arg(), msg),
            None => syn::Error::new(sig.paren_token.span.close(), msg),
        });
    }
    for (i, (p, cp)) in params.iter().zip(&c.params).enumerate() {
        let rust = show(p.arg());
        let quoted = format!("`{}` ({at}, parameter {})", cp.text, i + 1);
        let err = |msg: String| Err(syn::Error::new_spanned(p.arg(), msg));
        match (&cp.ty, p) {
            (CType::Unsupported, _) | (CType::Pointer { elem: None, .. }, _) => {
                return err(format!(
                    "the kernel's {quoted} has a type locus cannot pass: pointers to `float`, `double`, `int` or \
                     `unsigned char` are tensors, and scalars are C's integer, floating-point and `bool` types"
                ));
            }
            (CType::Value(s), Param::Scalar { name: rust_ty, .. }) => {
                if rust_ty != s.rust() {
                    return err(format!(
                        "`{rust}` does not match the kernel's {quoted}: that C type is a Rust `{}`",
                        s.rust()
                    ));
                }
            }
            (CType::Value(s), Param::Tensor { .. }) => {
                return err(format!(
                    "`{rust}` is a tensor, but the kernel's {quoted} is a value: take `{}: {}`",
                    p.ident(),
                    s.rust()
                ));
            }
            (CType::Pointer { elem: Some(e), is_const }, Param::Scalar { .. }) => {
                let r = if *is_const { "&" } else { "&mut " };
                return err(format!(
                    "`{rust}` is a value, but the kernel's {quoted} is a pointer: take `{}: {r}Tensor<D, {}>`",
                    p.ident(),
                    e.rust()
                ));
            }
            (CType::Pointer { elem: Some(e), is_const }, Param::Tensor { mutable, placement, elem, .. }) => {
                let placement = show(*placement);
                if elem.name != e.rust() {
                    let r = if *mutable { "&mut " } else { "&" };
                    return err(format!(
                        "`{rust}` holds `{}`, but the kernel's {quoted} points to `{}`: take `{r}Tensor<{placement}, {}>`",
                        elem.name,
                        e.rust(),
                        e.rust()
                    ));
                }
                if !*is_const && !*mutable {
                    return err(format!(
                        "`{rust}` is read-only, but the kernel's {quoted} lets it write there: take \
                         `&mut Tensor<{placement}, {}>` (or declare it `const` in C if the kernel only reads it)",
                        e.rust()
                    ));
                }
                if *is_const && *mutable {
                    return err(format!(
                        "`{rust}` is an output, but the kernel's {quoted} is `const`: it only reads it; take \
                         `&Tensor<{placement}, {}>`",
                        e.rust()
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Rust tokens as the user would write them.
pub fn show(t: &dyn ToTokens) -> String {
    let mut s = t.to_token_stream().to_string();
    for (from, to) in
        [(" :", ":"), ("& ", "&"), (" <", "<"), ("< ", "<"), (" >", ">"), (" ,", ","), (":: ", "::"), (" ::", "::")]
    {
        s = s.replace(from, to);
    }
    s
}
