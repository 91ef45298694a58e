//! Omega's proc-macros: `#[derive(LaunchArgs)]`, the kernel-argument layout derive, and `kernel!`, the
//! typed handle of a PTX entry. Use them through `omega` (`omega::LaunchArgs`, `omega::kernel!`): the
//! generated code names `::omega::...` paths.
//!
//! The entry points are thin: parse, hand to a module function, turn its error into `compile_error!`.

mod kernel;
mod launch_args;
mod layout;
mod ptx;
mod types;

#[cfg(test)]
mod expansion_tests;

use proc_macro::TokenStream;
use syn::{parse_macro_input, DeriveInput};

/// Derives `omega::LaunchArgs` for a struct whose named fields are kernel arguments, in order: device
/// scalars and borrowed data buffers (`&'a Mem<'s, Data<T>>`). See `omega::args`.
#[proc_macro_derive(LaunchArgs)]
pub fn derive_launch_args(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    launch_args::expand(input).unwrap_or_else(syn::Error::into_compile_error).into()
}

/// A typed handle of one PTX entry: `kernel!(VectorAdd = "kernels/vector_add.ptx", entry = "vector_add",
/// params(a: &f32, b: &f32, c: &mut f32, n: u32))`. See `omega::args` for the generated API.
///
/// The path is relative to the calling crate's `CARGO_MANIFEST_DIR`, or, when it starts with `./` or
/// `../`, to the directory of the file that invokes the macro.
#[proc_macro]
pub fn kernel(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as kernel::KernelInput);
    let dirs = kernel::Dirs {
        manifest: std::env::var_os("CARGO_MANIFEST_DIR").map(Into::into),
        source: proc_macro::Span::call_site().local_file().and_then(|f| f.parent().map(Into::into)),
    };
    kernel::expand(input, &dirs).unwrap_or_else(syn::Error::into_compile_error).into()
}
