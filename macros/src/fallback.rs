//! Phase 4: what is emitted when a macro rejects its input.
//!
//! The user's item goes out unchanged next to the error, so that the one real mistake
//! is reported, not a cascade of "cannot find function" errors at its callers.

use proc_macro2::TokenStream;

/// `item`, unchanged, followed by `error`.
pub fn item_with_error(item: TokenStream, error: syn::Error) -> TokenStream {
    let mut out = item;
    out.extend(error.to_compile_error());
    out
}
