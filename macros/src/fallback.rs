//! What is emitted when a macro rejects an item it cannot read: the item, unchanged,
//! next to the error, so that the one real mistake is reported and not a cascade of
//! "cannot find function" errors at its callers. `#[on_device]` (`on_device/fallback.rs`)
//! and `#[kernel]` (a stub fn) recover further where they can read the item.

use proc_macro2::TokenStream;

/// `item`, unchanged, followed by `error`.
pub fn item_with_error(item: TokenStream, error: syn::Error) -> TokenStream {
    let mut out = item;
    out.extend(error.to_compile_error());
    out
}
