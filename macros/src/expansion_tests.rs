//! Golden expansions (zerocopy-derive's `output_tests` shape): what each macro generates for a
//! representative input, formatted, compared with `expansion_tests/*.expected.rs`. A change to the
//! generated code shows up as a diff of those files; `OMEGA_BLESS=1 cargo test -p omega-macros`
//! rewrites them (then read the diff). Also the kernel macro's refusals, by message.

use std::path::{Path, PathBuf};

use quote::quote;

use crate::kernel::{self, Dirs, KernelInput};
use crate::launch_args;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("macros/ is inside the workspace").to_path_buf()
}

fn golden(name: &str, tokens: proc_macro2::TokenStream) {
    // The checkout's path replaced before formatting, so line breaks do not depend on where it is.
    let tokens = tokens.to_string().replace(&workspace().display().to_string(), "$WORKSPACE");
    let file: syn::File = syn::parse_str(&tokens).expect("the expansion parses as items");
    let text = prettyplease::unparse(&file);
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/expansion_tests").join(format!("{name}.expected.rs"));
    if std::env::var_os("OMEGA_BLESS").is_some() {
        std::fs::write(&path, &text).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(want == text, "expansion of {name} changed; run with OMEGA_BLESS=1 and review the diff:\n{text}");
}

fn kernel(tokens: proc_macro2::TokenStream) -> Result<proc_macro2::TokenStream, String> {
    let input: KernelInput = syn::parse2(tokens).map_err(|e| e.to_string())?;
    let dirs = Dirs { manifest: Some(workspace()), source: Some(workspace().join("src")) };
    kernel::expand(input, &dirs).map_err(|e| e.to_string())
}

#[test]
fn derive_launch_args() {
    let input = syn::parse2(quote! {
        struct VectorAddArgs<'a, 's> {
            a: &'a Mem<'s, Data<f32>>,
            b: &'a Mem<'s, Data<f32>>,
            c: &'a mut Mem<'s, Data<f32>>,
            n: u32,
        }
    })
    .unwrap();
    golden("derive_launch_args", launch_args::expand(input).unwrap());
}

#[test]
fn derive_reports_every_bad_field() {
    let input = syn::parse2(quote! {
        struct Bad<'a> { p: *const f32, ok: u32, s: &'a [f32], v: Vec<f32> }
    })
    .unwrap();
    let e = launch_args::expand(input).unwrap_err();
    let msgs: Vec<String> = e.into_iter().map(|e| e.to_string()).collect();
    assert_eq!(msgs.len(), 3, "{msgs:?}");
    assert!(msgs[0].starts_with("`*const f32` is a host pointer"));
    assert!(msgs[1].starts_with("`&'a [f32]` is host memory"));
    assert!(msgs[2].starts_with("`Vec<f32>` is host memory"));
    let tuple = syn::parse2(quote!(
        struct T(u32);
    ))
    .unwrap();
    assert!(launch_args::expand(tuple).unwrap_err().to_string().contains("named fields"));
}

#[test]
fn kernel_with_annotations() {
    let out = kernel(quote! {
        /// Adds.
        pub VectorAdd = "kernels/vector_add.ptx", entry = "vector_add", params(a: &f32, b: &f32, c: &mut f32, n: u32)
    });
    golden("kernel_vector_add", out.unwrap());
}

#[test]
fn kernel_without_annotations() {
    // `.u64` is a buffer of any element type; `in` (a keyword) becomes `r#in`.
    golden("kernel_shared_reverse", kernel(quote!(SharedReverse = "kernels/shared_reverse.ptx")).unwrap());
}

#[test]
fn kernel_refusals_say_why() {
    let e = kernel(quote!(K = "kernels/vector_add.ptx", entry = "vector_ad")).unwrap_err();
    assert_eq!(e, "no `.entry vector_ad` in `kernels/vector_add.ptx`: its entries are `vector_add`");
    let e = kernel(quote!(K = "kernels/nope.ptx")).unwrap_err();
    assert!(e.starts_with("cannot read `kernels/nope.ptx`"), "{e}");
    let e = kernel(quote!(K = "kernels/vector_add.ptx", params(a: &f32, b: &f32, c: &mut f32))).unwrap_err();
    assert_eq!(e, "`vector_add` takes 4 parameters (a: .u64, b: .u64, c: .u64, n: .u32); `params(..)` names 3");
    let e = kernel(quote!(K = "kernels/vector_add.ptx", params(b: &f32, a: &f32, c: &mut f32, n: u32))).unwrap_err();
    assert!(e.starts_with("parameter 0 of `vector_add` is `a` in the PTX, not `b`"), "{e}");
    let e = kernel(quote!(K = "kernels/vector_add.ptx", params(a: &f32, b: &f32, c: &mut f32, n: &u32))).unwrap_err();
    assert!(e.starts_with("parameter 3 of `vector_add` is declared `.u32`: a 4-byte scalar"), "{e}");
    let e = kernel(quote!(K = "kernels/vector_add.ptx", params(a: &f32, b: &f32, c: &mut f32, n: f32))).unwrap_err();
    assert!(e.contains("which `f32` (4 bytes) does not match"), "{e}");
    let e = kernel(quote!(K = "kernels/vector_add.ptx", params(a: &f32, b: &f32, c: &mut String, n: u32))).unwrap_err();
    assert!(e.contains("which is not a device scalar"), "{e}");
    let e = kernel(quote!(K = "kernels/vector_add.ptx", entry = "vector_add", entry = "x")).unwrap_err();
    assert!(e.starts_with("unexpected `entry`"), "{e}");
}

#[test]
fn ptr_parameters_must_be_buffers_and_file_paths_resolve_from_the_source() {
    let src = workspace().join("tests/typed_fixtures/sum_params.ptx");
    let path = src.display().to_string();
    let anns: Vec<proc_macro2::TokenStream> = std::iter::once(quote!(out: u64))
        .chain((0..40).map(|i| {
            let id = quote::format_ident!("v{i}");
            quote!(#id: u32)
        }))
        .collect();
    let e = kernel(quote!(K = #path, params(#(#anns),*))).unwrap_err();
    assert!(e.contains("declared `.u64 .ptr`: a device address"), "{e}");
    // `./` and `../` start from the invoking file's directory (here: the workspace's src/).
    assert!(kernel(quote!(K = "../kernels/empty.ptx")).is_ok());
    assert!(kernel(quote!(K = "./kernels/empty.ptx")).unwrap_err().starts_with("cannot read"));
}
