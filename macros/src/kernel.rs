//! `kernel!`: a typed handle for one PTX entry, generated from the entry's signature at compile time.
//!
//! ```text
//! kernel!( [#[attr]] [vis] Name = "path/to/file.ptx" [, entry = "name"] [, params(p: Ty, ...)] [,] )
//! ```
//!
//! The PTX is read when the macro expands. Its `.entry` gives the parameter types; `params(..)` may name
//! the Rust type of each (`&f32` a read buffer of f32, `&mut f32` a written one, `u32` a scalar), checked
//! against the PTX declaration. The generated `launch` takes exactly those parameters, so a wrong count,
//! order or type does not compile. Loading checks the loaded kernel's own parameter table against the
//! PTX's, so a kernel built from a different source is refused at load, never launched.

use std::path::PathBuf;

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Attribute, Ident, LitStr, Token, Type, Visibility};

use crate::layout;
use crate::ptx::{self, PtxEntry, PtxParam, PtxType};
use crate::types::{classify, show, ArgType, Scalar};

/// The macro's input.
pub struct KernelInput {
    attrs: Vec<Attribute>,
    vis: Visibility,
    name: Ident,
    path: LitStr,
    entry: Option<LitStr>,
    params: Option<(Ident, Punctuated<Annotation, Token![,]>)>,
}

/// `name: Type` in `params(..)`.
pub struct Annotation {
    name: Ident,
    ty: Type,
}

impl Parse for Annotation {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        // PTX names may be Rust keywords (`in`): accept them as written, and make them raw identifiers.
        let raw = input.call(<Ident as syn::ext::IdentExt>::parse_any)?;
        let name = rust_ident(&raw.to_string(), raw.span())
            .ok_or_else(|| syn::Error::new(raw.span(), format!("`{raw}` cannot name a parameter")))?;
        input.parse::<Token![:]>()?;
        Ok(Annotation { name, ty: input.parse()? })
    }
}

/// `name` as an identifier usable for a function parameter: as is, raw for a keyword, `None` for the
/// few keywords that cannot be raw.
fn rust_ident(name: &str, span: Span) -> Option<Ident> {
    let name = name.strip_prefix("r#").unwrap_or(name);
    if syn::parse_str::<Ident>(name).is_ok() {
        Some(Ident::new(name, span))
    } else if matches!(name, "self" | "Self" | "super" | "crate" | "_") {
        None
    } else {
        Some(Ident::new_raw(name, span))
    }
}

impl Parse for KernelInput {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis = input.parse()?;
        let name = input.parse()?;
        input.parse::<Token![=]>()?;
        let path = input.parse()?;
        let mut entry = None;
        let mut params = None;
        while !input.is_empty() {
            input.parse::<Token![,]>()?;
            if input.is_empty() {
                break;
            }
            let key: Ident = input.parse()?;
            if key == "entry" && entry.is_none() {
                input.parse::<Token![=]>()?;
                entry = Some(input.parse()?);
            } else if key == "params" && params.is_none() {
                let content;
                syn::parenthesized!(content in input);
                params = Some((key, content.parse_terminated(Annotation::parse, Token![,])?));
            } else {
                return Err(syn::Error::new(
                    key.span(),
                    format!(
                        "unexpected `{key}`: after the PTX path come `entry = \"name\"` and `params(..)`, once each"
                    ),
                ));
            }
        }
        Ok(KernelInput { attrs, vis, name, path, entry, params })
    }
}

/// Where relative paths start: the calling crate's manifest directory, and the directory of the file
/// that invokes the macro (for paths written `./..` or `../..`, as `include_str!` resolves them).
pub struct Dirs {
    pub manifest: Option<PathBuf>,
    pub source: Option<PathBuf>,
}

fn resolve(path: &LitStr, dirs: &Dirs) -> syn::Result<PathBuf> {
    let p = PathBuf::from(path.value());
    if p.is_absolute() {
        return Ok(p);
    }
    let file_relative = path.value().starts_with("./") || path.value().starts_with("../");
    let (base, what) = if file_relative {
        (dirs.source.as_deref(), "the invoking source file's directory")
    } else {
        (dirs.manifest.as_deref(), "CARGO_MANIFEST_DIR")
    };
    base.map(|b| b.join(&p)).ok_or_else(|| {
        syn::Error::new(path.span(), format!("cannot resolve `{}`: {what} is not known here", path.value()))
    })
}

/// How one parameter is passed, decided from the PTX type and the annotation, if any.
enum Pass {
    Scalar(Scalar),
    /// A device buffer of a named element type.
    Buffer {
        elem: Box<Type>,
        mutable: bool,
    },
    /// A device buffer of any element type (`.u64` without an annotation).
    AnyBuffer,
    /// Any argument of exactly this many bytes (`.bN` without an annotation).
    Bits(u32),
}

fn unannotated(p: &PtxParam) -> Pass {
    match p.ty {
        PtxType::U(8) | PtxType::B(8) if p.ptr => Pass::AnyBuffer,
        PtxType::U(8) => Pass::AnyBuffer,
        PtxType::B(n) => Pass::Bits(n),
        PtxType::U(n) => Pass::Scalar(scalar_of(false, false, n)),
        PtxType::S(n) => Pass::Scalar(scalar_of(true, false, n)),
        PtxType::F(n) => Pass::Scalar(scalar_of(false, true, n)),
    }
}

fn scalar_of(signed: bool, float: bool, bytes: u32) -> Scalar {
    match (float, signed, bytes) {
        (true, _, 2) => Scalar::F16,
        (true, _, 4) => Scalar::F32,
        (true, _, _) => Scalar::F64,
        (false, false, 1) => Scalar::U8,
        (false, true, 1) => Scalar::I8,
        (false, false, 2) => Scalar::U16,
        (false, true, 2) => Scalar::I16,
        (false, false, 4) => Scalar::U32,
        (false, true, 4) => Scalar::I32,
        (false, false, _) => Scalar::U64,
        (false, true, _) => Scalar::I64,
    }
}

/// Checks an annotation against the PTX declaration.
fn annotated(entry: &str, index: usize, p: &PtxParam, a: &Annotation) -> syn::Result<Pass> {
    let err = |msg: String| Err(syn::Error::new_spanned(&a.ty, msg));
    let written = show(&a.ty);
    let decl =
        format!("parameter {index} of `{entry}` is declared `{}{}`", p.ty.name(), if p.ptr { " .ptr" } else { "" });
    if let Type::Reference(r) = &a.ty {
        let elem = &*r.elem;
        let elem_ok = matches!(classify(elem), Ok(ArgType::Scalar(_)));
        if !elem_ok {
            return err(format!(
                "`{written}` names a device buffer of `{}`, which is not a device scalar: write `&T` or \
                 `&mut T` with T one of u8..u64, i8..i64, f32, f64, half::bf16, half::f16",
                show(elem)
            ));
        }
        return match p.ty {
            PtxType::U(8) | PtxType::B(8) => {
                Ok(Pass::Buffer { elem: Box::new(elem.clone()), mutable: r.mutability.is_some() })
            }
            _ => err(format!("{decl}: a {}-byte scalar, not a 64-bit device address", p.ty.size())),
        };
    }
    let s = match classify(&a.ty) {
        Ok(ArgType::Scalar(s)) => s,
        Ok(ArgType::Buffer) | Err(_) => {
            return err(format!(
                "annotate a parameter as a device scalar (`u32`, `f32`, ...) or as a buffer of one (`&f32`, \
                 `&mut f32`); {decl}"
            ))
        }
    };
    if p.ptr {
        return err(format!("{decl}: a device address; annotate it as a buffer, `&T` or `&mut T`"));
    }
    let fits = s.size() == p.ty.size()
        && match p.ty {
            PtxType::U(_) => !s.is_float() && !s.is_signed(),
            PtxType::S(_) => s.is_signed(),
            PtxType::F(_) => s.is_float(),
            PtxType::B(_) => true,
        };
    if !fits {
        return err(format!("{decl}, which `{written}` ({} bytes) does not match", s.size()));
    }
    Ok(Pass::Scalar(s))
}

fn param_ident(p: &PtxParam, entry: &str, index: usize) -> Ident {
    p.short_name(entry).and_then(|n| rust_ident(n, Span::call_site())).unwrap_or_else(|| format_ident!("p{index}"))
}

pub fn expand(input: KernelInput, dirs: &Dirs) -> syn::Result<TokenStream> {
    let KernelInput { attrs, vis, name, path, entry, params } = input;
    let file = resolve(&path, dirs)?;
    let src = std::fs::read_to_string(&file).map_err(|e| {
        syn::Error::new(path.span(), format!("cannot read `{}` ({}): {e}", path.value(), file.display()))
    })?;
    let entries = ptx::entries(&src).map_err(|e| syn::Error::new(path.span(), format!("`{}`: {e}", path.value())))?;
    let list = || entries.iter().map(|e| format!("`{}`", e.name)).collect::<Vec<_>>().join(", ");
    let entry: &PtxEntry = match &entry {
        Some(lit) => entries.iter().find(|e| e.name == lit.value()).ok_or_else(|| {
            let existing =
                if entries.is_empty() { "it has none".to_string() } else { format!("its entries are {}", list()) };
            syn::Error::new(lit.span(), format!("no `.entry {}` in `{}`: {existing}", lit.value(), path.value()))
        })?,
        None => match entries.as_slice() {
            [only] => only,
            [] => return Err(syn::Error::new(path.span(), format!("`{}` has no `.entry`", path.value()))),
            _ => {
                return Err(syn::Error::new(
                    path.span(),
                    format!("`{}` has several entries ({}): choose one with `entry = \"..\"`", path.value(), list()),
                ))
            }
        },
    };
    let ename = entry.name.as_str();

    let passes: Vec<Pass> = match &params {
        None => entry.params.iter().map(unannotated).collect(),
        Some((key, anns)) => {
            if anns.len() != entry.params.len() {
                let sig: Vec<String> = entry
                    .params
                    .iter()
                    .enumerate()
                    .map(|(i, p)| format!("{}: {}", param_ident(p, ename, i), p.ty.name()))
                    .collect();
                return Err(syn::Error::new(
                    key.span(),
                    format!(
                        "`{ename}` takes {} parameters ({}); `params(..)` names {}",
                        entry.params.len(),
                        sig.join(", "),
                        anns.len()
                    ),
                ));
            }
            let mut out = Vec::new();
            for (i, (p, a)) in entry.params.iter().zip(anns).enumerate() {
                if let Some(n) = p.short_name(ename) {
                    if a.name.to_string().trim_start_matches("r#") != n.trim_start_matches("r#") {
                        return Err(syn::Error::new(
                            a.name.span(),
                            format!("parameter {i} of `{ename}` is `{n}` in the PTX, not `{}`: same order as the PTX, same names", a.name),
                        ));
                    }
                }
                out.push(annotated(ename, i, p, a)?);
            }
            out
        }
    };

    let idents: Vec<Ident> = match &params {
        Some((_, anns)) => anns.iter().map(|a| a.name.clone()).collect(),
        None => entry.params.iter().enumerate().map(|(i, p)| param_ident(p, ename, i)).collect(),
    };
    let slots = layout::natural(entry.params.iter().map(|p| p.ty.size()));
    let layout_entries = slots.iter().map(|s| {
        let (o, off, sz) = (s.ordinal, s.offset, s.size);
        quote!(::omega::session::ParamInfo { ordinal: #o, offset: #off, size: #sz })
    });

    let mut generics = Vec::new();
    let mut args = Vec::new();
    for (i, (pass, id)) in passes.iter().zip(&idents).enumerate() {
        let span = match &params {
            Some((_, anns)) => anns[i].ty.span(),
            None => Span::call_site(),
        };
        let ty = match pass {
            Pass::Scalar(s) => s.path(),
            Pass::Buffer { elem, mutable: false } => quote_spanned!(span=> &'k ::omega::Mem<'s, ::omega::Data<#elem>>),
            Pass::Buffer { elem, mutable: true } => {
                quote_spanned!(span=> &'k mut ::omega::Mem<'s, ::omega::Data<#elem>>)
            }
            Pass::AnyBuffer => {
                let t = format_ident!("T{i}");
                generics.push(quote!(#t: ::omega::DeviceScalar));
                quote!(&'k ::omega::Mem<'s, ::omega::Data<#t>>)
            }
            Pass::Bits(n) => {
                let t = format_ident!("B{i}");
                generics.push(quote!(#t: ::omega::args::Bits<#n> + 'k));
                quote!(#t)
            }
        };
        args.push(quote!(#id: #ty));
    }

    // `include_str!` resolves a relative path from the invoking file, not from where the macro read it:
    // hand it an absolute one. (Source paths of workspace members are relative to rustc's directory.)
    let file = std::fs::canonicalize(&file).unwrap_or(file);
    let file_str = file.to_string_lossy().into_owned();
    let path_str = path.value();
    let sig_doc: Vec<String> = entry
        .params
        .iter()
        .zip(&slots)
        .map(|(p, s)| {
            format!("- `{}`: `{}{}` at offset {}", p.name, p.ty.name(), if p.ptr { " .ptr" } else { "" }, s.offset)
        })
        .collect();
    let struct_doc = format!("Typed handle of kernel `{ename}` from `{path_str}`, bound to scope `'s`.");
    let launch_doc = format!(
        "A launch of `{ename}` with these arguments, in the PTX's order ({} bytes):\n\n{}\n\nSet grid, block and the rest on the returned builder; `Gpu::launch` runs it.",
        layout::bytes(&slots),
        if sig_doc.is_empty() { "(no parameters)".to_string() } else { sig_doc.join("\n") }
    );
    let name_str = name.to_string();
    let has_doc = attrs.iter().any(|a| a.path().is_ident("doc"));
    let default_doc = (!has_doc).then(|| quote!(#[doc = #struct_doc]));

    Ok(quote! {
        #(#attrs)*
        #default_doc
        #vis struct #name<'s> {
            kernel: ::omega::Kernel<'s>,
        }

        impl<'s> #name<'s> {
            /// The entry's name in the PTX.
            pub const ENTRY: &'static str = #ename;
            /// The PTX the handle was generated from (read at compile time; a change rebuilds the caller).
            pub const PTX: &'static str = ::core::include_str!(#file_str);
            /// The parameter layout of the entry, as the contract lays it out.
            pub const LAYOUT: &'static [::omega::session::ParamInfo] = &[#(#layout_entries),*];

            /// Loads the kernel by its entry name (the repository's kernels: the cubin on a GPU, the host
            /// reference on the simulator) and checks its parameter table against the PTX's.
            pub fn load(scope: &'s ::omega::Scope<'s>) -> ::omega::Result<Self> {
                Self::from_kernel(scope.load(Self::ENTRY)?)
            }

            /// Loads the entry from a cubin and checks its parameter table against the PTX's.
            pub fn load_cubin(scope: &'s ::omega::Scope<'s>, cubin: &[u8]) -> ::omega::Result<Self> {
                Self::from_kernel(scope.load_cubin(cubin, Self::ENTRY)?)
            }

            /// On the simulator: the host implementation registered under the entry's name, declared with
            /// the PTX's parameter table. Refused on a GPU.
            pub fn load_host(scope: &'s ::omega::Scope<'s>) -> ::omega::Result<Self> {
                Self::from_kernel(::omega::Kernel::load_host(scope, Self::ENTRY, Self::LAYOUT)?)
            }

            /// Wraps a loaded kernel after checking its name and parameter table against the PTX's;
            /// a mismatch is `Error::Load`, naming both tables.
            pub fn from_kernel(kernel: ::omega::Kernel<'s>) -> ::omega::Result<Self> {
                ::omega::args::check_kernel(&kernel, #name_str, Self::ENTRY, Self::LAYOUT)?;
                ::core::result::Result::Ok(Self { kernel })
            }

            /// The loaded kernel.
            pub fn kernel(&self) -> &::omega::Kernel<'s> {
                &self.kernel
            }

            #[doc = #launch_doc]
            #[allow(clippy::too_many_arguments)]
            pub fn launch<'k, #(#generics),*>(&'k self, #(#args),*) -> ::omega::Launch<'k, 's> {
                ::omega::Launch::new(&self.kernel) #(.arg(#idents))*
            }
        }
    })
}
