//! Procedural macros of locus. Use them through the `locus` crate.

use proc_macro::TokenStream;

/// Placeholder until `#[on_device]` lands: emits the item unchanged.
#[doc(hidden)]
#[proc_macro_attribute]
pub fn __locus_placeholder(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}
