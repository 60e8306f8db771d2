//! Phase 1: the device argument of `#[on_device(..)]` and the input of `with_device!`.
//!
//! Every parsed piece keeps its tokens, so that later errors can point at them.

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::parse::{Parse, ParseStream};
use syn::{Expr, Ident, Lit, LitInt, Token};

/// The one argument naming the device.
pub enum DeviceArg {
    /// `1`: the guard is on `Cuda<1>`, and `Here` names it.
    Literal { ordinal: u32, lit: LitInt },
    /// `N`: a const generic parameter; the guard is on `Cuda<N>`.
    ConstParam(Ident),
    /// `dyn expr`: an ordinal or `DeviceId` known at run time.
    Dynamic { dyn_token: Token![dyn], expr: Box<Expr> },
    /// `Encoder`: a role (a type name in CamelCase, or a path with `::`); the guard is
    /// on the device the role is bound to, and `Here` names the role.
    Role(syn::Path),
}

/// Whether a bare name is a type's (CamelCase: a capital, then some lower case), so a
/// role; a name without lower case (`N`, `DEV`) is a const parameter's, as Rust's
/// naming conventions have it.
pub fn is_role_name(ident: &Ident) -> bool {
    let name = ident.to_string();
    name.starts_with(|c: char| c.is_uppercase()) && name.chars().any(|c| c.is_lowercase())
}

/// Which macro is parsing, for the wording of its errors.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    Attribute,
    Macro,
}

impl Caller {
    fn example(self, arg: &str) -> String {
        match self {
            Caller::Attribute => format!("`#[on_device({arg})]`"),
            Caller::Macro => format!("`with_device!({arg} => {{ .. }})`"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Caller::Attribute => "`#[on_device]`",
            Caller::Macro => "`with_device!`",
        }
    }

    /// The forms the device argument can take, for "expected …" messages.
    fn forms(self) -> String {
        format!(
            "an integer literal ({}), a const generic parameter ({}), a role ({}) or `dyn` and an expression ({})",
            self.example("1"),
            self.example("N"),
            self.example("Encoder"),
            self.example("dyn rank")
        )
    }

    /// Whether the argument ends here.
    fn at_end(self, input: ParseStream) -> bool {
        match self {
            Caller::Attribute => input.is_empty() || input.peek(Token![,]),
            Caller::Macro => input.is_empty() || input.peek(Token![=>]) || input.peek(Token![,]),
        }
    }
}

impl DeviceArg {
    /// Parses one device argument, stopping before a `,` or (for the macro) `=>`.
    pub fn parse(input: ParseStream, caller: Caller) -> syn::Result<DeviceArg> {
        if caller.at_end(input) {
            let span = if input.is_empty() { Span::call_site() } else { input.span() };
            return Err(syn::Error::new(span, format!("{} needs a device: {}", caller.name(), caller.forms())));
        }
        if input.peek(Token![dyn]) {
            let dyn_token: Token![dyn] = input.parse()?;
            if caller.at_end(input) {
                return Err(syn::Error::new_spanned(
                    dyn_token,
                    format!(
                        "`dyn` needs an expression giving the device at run time, as in {}",
                        caller.example("dyn rank")
                    ),
                ));
            }
            let expr = match caller {
                // `dyn rank { .. }` must not parse as a struct literal.
                Caller::Macro => Expr::parse_without_eager_brace(input)?,
                Caller::Attribute => input.parse()?,
            };
            return Ok(DeviceArg::Dynamic { dyn_token, expr: Box::new(expr) });
        }
        if input.peek(Token![-]) {
            let minus: Token![-] = input.parse()?;
            let rest: TokenStream = take_argument(input, caller)?;
            return Err(syn::Error::new_spanned(
                quote::quote!(#minus #rest),
                format!("a device ordinal cannot be negative: CUDA ordinals start at 0, as in {}", caller.example("0")),
            ));
        }
        if input.peek(Lit) {
            return parse_literal(input.parse()?, caller);
        }
        if input.peek(Ident) && !input.peek(Token![self]) && !input.peek2(Token![::]) {
            let ident: Ident = input.parse()?;
            if !caller.at_end(input) {
                return Err(syn::Error::new_spanned(
                    &ident,
                    format!("unknown keyword `{ident}`: {} takes {}", caller.name(), caller.forms()),
                ));
            }
            if is_role_name(&ident) {
                return Ok(DeviceArg::Role(ident.into()));
            }
            return Ok(DeviceArg::ConstParam(ident));
        }
        if input.peek(Token![::]) || input.peek2(Token![::]) {
            let path = syn::Path::parse_mod_style(input)?;
            if !caller.at_end(input) {
                let rest = take_argument(input, caller)?;
                return Err(syn::Error::new_spanned(
                    quote::quote!(#path #rest),
                    format!("expected a device: {}", caller.forms()),
                ));
            }
            return Ok(DeviceArg::Role(path));
        }
        let rest = take_argument(input, caller)?;
        Err(syn::Error::new_spanned(
            &rest,
            format!("expected a device: {}; for a value known only at run time write `dyn {rest}`", caller.forms()),
        ))
    }

    /// The tokens of the argument, for errors that point at it.
    pub fn tokens(&self) -> TokenStream {
        match self {
            DeviceArg::Literal { lit, .. } => lit.to_token_stream(),
            DeviceArg::ConstParam(ident) => ident.to_token_stream(),
            DeviceArg::Dynamic { dyn_token, expr } => quote::quote!(#dyn_token #expr),
            DeviceArg::Role(path) => path.to_token_stream(),
        }
    }
}

/// The tokens up to the end of the argument.
fn take_argument(input: ParseStream, caller: Caller) -> syn::Result<TokenStream> {
    let mut rest = TokenStream::new();
    while !caller.at_end(input) {
        let tt: proc_macro2::TokenTree = input.parse()?;
        rest.extend([tt]);
    }
    Ok(rest)
}

fn parse_literal(lit: Lit, caller: Caller) -> syn::Result<DeviceArg> {
    match lit {
        Lit::Int(lit) => {
            if !matches!(lit.suffix(), "" | "usize" | "u32") {
                return Err(syn::Error::new_spanned(
                    &lit,
                    format!(
                        "a device ordinal is a `usize`: write it without the `{}` suffix, as in {}",
                        lit.suffix(),
                        caller.example(lit.base10_digits())
                    ),
                ));
            }
            let ordinal = lit.base10_parse::<u32>().map_err(|_| {
                syn::Error::new_spanned(&lit, format!("device ordinal `{lit}` is too large (at most {})", u32::MAX))
            })?;
            Ok(DeviceArg::Literal { ordinal, lit })
        }
        Lit::Str(s) => {
            let value = s.value();
            let fix = match value.strip_prefix("cuda:").filter(|n| n.parse::<u32>().is_ok()) {
                Some(n) => format!("write {}", caller.example(n)),
                None => {
                    format!("for a name parsed at run time write {}", caller.example("dyn name.parse::<DeviceId>()?"))
                }
            };
            Err(syn::Error::new_spanned(s, format!("a device is an ordinal, not a string: {fix}")))
        }
        Lit::Float(f) => {
            let whole = f.base10_digits().split(['.', 'e', 'E']).next().unwrap_or("0").to_string();
            Err(syn::Error::new_spanned(
                f,
                format!("a device ordinal is a whole number, as in {}", caller.example(&whole)),
            ))
        }
        other => Err(syn::Error::new_spanned(&other, format!("expected a device: {}", caller.forms()))),
    }
}

/// The arguments of `#[on_device(..)]`: exactly one device, an optional trailing comma.
pub fn attribute_args(input: ParseStream) -> syn::Result<DeviceArg> {
    let arg = DeviceArg::parse(input, Caller::Attribute)?;
    finish_single_argument(input, Caller::Attribute)?;
    Ok(arg)
}

fn finish_single_argument(input: ParseStream, caller: Caller) -> syn::Result<()> {
    if input.peek(Token![,]) {
        let _: Token![,] = input.parse()?;
    }
    if caller.at_end(input) && !input.peek(Token![,]) {
        return Ok(());
    }
    let mut extra = TokenStream::new();
    while !(input.is_empty() || (caller == Caller::Macro && input.peek(Token![=>]))) {
        let tt: proc_macro2::TokenTree = input.parse()?;
        extra.extend([tt]);
    }
    Err(syn::Error::new_spanned(
        &extra,
        format!(
            "{} takes one device; remove `{extra}` (to run on several devices, call once per device)",
            caller.name()
        ),
    ))
}

/// `with_device!(device => body)`.
pub struct MacroInput {
    pub device: DeviceArg,
    pub body: Expr,
}

impl Parse for MacroInput {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let device = DeviceArg::parse(input, Caller::Macro)?;
        if input.peek(Token![,]) {
            finish_single_argument(input, Caller::Macro)?;
        }
        if !input.peek(Token![=>]) {
            let found = match input.cursor().token_tree() {
                Some((tt, _)) => {
                    let text = tt.to_string();
                    // A whole group reads badly in a message: show its opening delimiter.
                    let shown = if text.len() > 12 { text.chars().take(1).collect() } else { text };
                    format!("`{shown}`")
                }
                None => "the end of the input".to_string(),
            };
            let span = if input.is_empty() { Span::call_site() } else { input.span() };
            return Err(syn::Error::new(
                span,
                format!(
                    "expected `=>` after the device, found {found}: write `with_device!({} => {{ .. }})` \
                     or `with_device!({} => |x| ..)`",
                    device.tokens(),
                    device.tokens()
                ),
            ));
        }
        let _: Token![=>] = input.parse()?;
        if input.is_empty() {
            return Err(syn::Error::new(
                Span::call_site(),
                "expected a block or a closure after `=>`: `with_device!(1 => { .. })`",
            ));
        }
        let body: Expr = input.parse()?;
        if !input.is_empty() {
            return Err(input.error("unexpected tokens after the body; wrap several statements in `{ .. }`"));
        }
        Ok(MacroInput { device, body })
    }
}
