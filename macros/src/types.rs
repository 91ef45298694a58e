//! Which Rust types are kernel arguments, read from the syntax: device scalars and borrowed data
//! buffers. Everything else is refused with a message that names what the type is (a host pointer, host
//! memory, a code buffer) and what to write instead, spanned on the type.
//!
//! The typed check behind it is `omega::KernelArg`: the generated code names every field type through it,
//! so a type that looks right here but is not (an alias to something else) still fails to compile.

use syn::{GenericArgument, PathArguments, Type};

/// A device scalar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scalar {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    U64,
    I64,
    F32,
    F64,
    BF16,
    F16,
}

impl Scalar {
    pub fn from_name(name: &str) -> Option<Scalar> {
        Some(match name {
            "u8" => Scalar::U8,
            "i8" => Scalar::I8,
            "u16" => Scalar::U16,
            "i16" => Scalar::I16,
            "u32" => Scalar::U32,
            "i32" => Scalar::I32,
            "u64" => Scalar::U64,
            "i64" => Scalar::I64,
            "f32" => Scalar::F32,
            "f64" => Scalar::F64,
            "bf16" => Scalar::BF16,
            "f16" => Scalar::F16,
            _ => return None,
        })
    }

    pub fn size(self) -> u32 {
        match self {
            Scalar::U8 | Scalar::I8 => 1,
            Scalar::U16 | Scalar::I16 | Scalar::BF16 | Scalar::F16 => 2,
            Scalar::U32 | Scalar::I32 | Scalar::F32 => 4,
            Scalar::U64 | Scalar::I64 | Scalar::F64 => 8,
        }
    }

    /// The Rust path of the type, as generated code names it.
    pub fn path(self) -> proc_macro2::TokenStream {
        match self {
            Scalar::U8 => quote::quote!(u8),
            Scalar::I8 => quote::quote!(i8),
            Scalar::U16 => quote::quote!(u16),
            Scalar::I16 => quote::quote!(i16),
            Scalar::U32 => quote::quote!(u32),
            Scalar::I32 => quote::quote!(i32),
            Scalar::U64 => quote::quote!(u64),
            Scalar::I64 => quote::quote!(i64),
            Scalar::F32 => quote::quote!(f32),
            Scalar::F64 => quote::quote!(f64),
            Scalar::BF16 => quote::quote!(::omega::half::bf16),
            Scalar::F16 => quote::quote!(::omega::half::f16),
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, Scalar::F32 | Scalar::F64 | Scalar::BF16 | Scalar::F16)
    }

    pub fn is_signed(self) -> bool {
        matches!(self, Scalar::I8 | Scalar::I16 | Scalar::I32 | Scalar::I64)
    }
}

/// A kernel argument type, as far as the syntax tells.
#[derive(Clone, Debug)]
pub enum ArgType {
    /// A device scalar passed by value.
    Scalar(Scalar),
    /// `&Mem<'s, Data<T>>` or `&mut Mem<'s, Data<T>>`: a 64-bit device address.
    Buffer,
}

const WHAT_IS_ALLOWED: &str = "kernel arguments are device scalars (u8..u64, i8..i64, f32, f64, half::bf16, \
                               half::f16) or borrowed data buffers (`&'a Mem<'s, Data<T>>`)";

fn last_ident(ty: &Type) -> Option<(&syn::PathSegment, &syn::Path)> {
    match ty {
        Type::Path(p) if p.qself.is_none() => p.path.segments.last().map(|s| (s, &p.path)),
        Type::Group(g) => last_ident(&g.elem),
        Type::Paren(p) => last_ident(&p.elem),
        _ => None,
    }
}

pub fn show(ty: &Type) -> String {
    let s = quote::quote!(#ty).to_string();
    // Token streams print `& 'a Mem < 's , Data < f32 > >`; close up the spaces for messages.
    let mut out = String::with_capacity(s.len());
    let mut prev = ' ';
    for c in s.chars() {
        if c == ' ' && matches!(prev, '&' | '<' | '*' | ':' | '(' | '[' | '\'') {
            continue;
        }
        if matches!(c, '>' | ',' | ':' | ')' | ']' | '<' | ';') && out.ends_with(' ') && !out.ends_with(", ") {
            out.pop();
        }
        out.push(c);
        prev = c;
    }
    out.replace(": :", "::").replace(" ::", "::").replace(":: ", "::")
}

/// Classifies a field or parameter type. `Err` carries the message for a `compile_error!` on `ty`.
pub fn classify(ty: &Type) -> Result<ArgType, syn::Error> {
    let err = |msg: String| Err(syn::Error::new_spanned(ty, msg));
    match ty {
        Type::Ptr(p) => {
            let elem = show(&p.elem);
            err(format!(
                "`{}` is a host pointer: the GPU cannot dereference it; pass a device buffer, \
                 `&'a Mem<'s, Data<{elem}>>`",
                show(ty)
            ))
        }
        Type::Reference(r) => match &*r.elem {
            Type::Slice(s) => err(format!(
                "`{}` is host memory: the GPU cannot read it; copy it to the device with `scope.alloc_from(..)` \
                 and pass the buffer, `&'a Mem<'s, Data<{}>>`",
                show(ty),
                show(&s.elem)
            )),
            inner => match last_ident(inner) {
                Some((seg, _)) if seg.ident == "Mem" => buffer(ty, seg).map(|()| ArgType::Buffer),
                _ => {
                    err(format!("`{}` is a host reference: the GPU cannot dereference it; {WHAT_IS_ALLOWED}", show(ty)))
                }
            },
        },
        Type::Array(_) | Type::Slice(_) | Type::Tuple(_) => {
            err(format!("`{}` is not a kernel argument: {WHAT_IS_ALLOWED}", show(ty)))
        }
        _ => match last_ident(ty) {
            Some((seg, path)) => {
                let name = seg.ident.to_string();
                if let (Some(s), PathArguments::None) = (Scalar::from_name(&name), &seg.arguments) {
                    let qualified_ok = path.segments.len() == 1
                        || (matches!(s, Scalar::BF16 | Scalar::F16)
                            && path.segments.iter().rev().nth(1).is_some_and(|p| p.ident == "half"));
                    if qualified_ok {
                        return Ok(ArgType::Scalar(s));
                    }
                }
                match name.as_str() {
                    "Vec" | "Box" | "String" | "Rc" | "Arc" | "Cow" => err(format!(
                        "`{}` is host memory: the GPU cannot read it; copy it to the device with \
                         `scope.alloc_from(..)` and pass the buffer, `&'a Mem<'s, Data<T>>`",
                        show(ty)
                    )),
                    "Mem" => err(format!(
                        "`{}` is a buffer by value: borrow it instead, `&'a {}`, so the buffer outlives the \
                         arguments",
                        show(ty),
                        show(ty)
                    )),
                    "usize" | "isize" => {
                        err(format!("`{name}` has no fixed size on the device: use `u32`/`u64` (or `i32`/`i64`)"))
                    }
                    "bool" | "char" => {
                        err(format!("`{name}` has no device representation as a kernel argument: pass it as `u32`"))
                    }
                    _ => err(format!("`{}` is not a kernel argument: {WHAT_IS_ALLOWED}", show(ty))),
                }
            }
            None => err(format!("`{}` is not a kernel argument: {WHAT_IS_ALLOWED}", show(ty))),
        },
    }
}

/// Checks the arguments of a `Mem<..>` behind a reference: a data buffer, not code or cached memory.
fn buffer(ty: &Type, seg: &syn::PathSegment) -> Result<(), syn::Error> {
    let err = |msg: String| Err(syn::Error::new_spanned(ty, msg));
    let PathArguments::AngleBracketed(args) = &seg.arguments else {
        return err(format!("`{}`: name the buffer's kind, `Mem<'s, Data<T>>`", show(ty)));
    };
    let kinds: Vec<&Type> = args
        .args
        .iter()
        .filter_map(|a| match a {
            GenericArgument::Type(t) => Some(t),
            _ => None,
        })
        .collect();
    let [kind] = kinds.as_slice() else {
        return err(format!("`{}`: name the buffer's kind, `Mem<'s, Data<T>>`", show(ty)));
    };
    match last_ident(kind).map(|(s, _)| s.ident.to_string()).as_deref() {
        Some("Data") => Ok(()),
        Some("Code") => err(format!(
            "`{}` is a code buffer: kernels take data buffers (`&'a Mem<'s, Data<T>>`) as arguments",
            show(ty)
        )),
        Some("Cached") => err(format!(
            "`{}` is GPU-cached memory, which is not a kernel argument: pass a data buffer, \
             `&'a Mem<'s, Data<T>>`",
            show(ty)
        )),
        _ => err(format!("`{}`: the buffer kind must be `Data<T>`", show(ty))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(s: &str) -> Result<ArgType, String> {
        classify(&syn::parse_str::<Type>(s).unwrap()).map_err(|e| e.to_string())
    }

    #[test]
    fn accepts_scalars_and_borrowed_data_buffers() {
        assert!(matches!(class("u32"), Ok(ArgType::Scalar(Scalar::U32))));
        assert!(matches!(class("half::bf16"), Ok(ArgType::Scalar(Scalar::BF16))));
        assert!(matches!(class("::half::f16"), Ok(ArgType::Scalar(Scalar::F16))));
        assert!(matches!(class("&'a Mem<'s, Data<f32>>"), Ok(ArgType::Buffer)));
        assert!(matches!(class("&'a mut omega::Mem<'s, omega::Data<T>>"), Ok(ArgType::Buffer)));
        assert!(matches!(class("&Mem<'s, Data>"), Ok(ArgType::Buffer)));
    }

    #[test]
    fn names_what_a_refused_type_is() {
        let host_ptr = class("*const f32").unwrap_err();
        assert!(host_ptr.starts_with("`*const f32` is a host pointer"), "{host_ptr}");
        assert!(host_ptr.contains("`&'a Mem<'s, Data<f32>>`"), "{host_ptr}");
        let slice = class("&'a [f32]").unwrap_err();
        assert!(slice.starts_with("`&'a [f32]` is host memory"), "{slice}");
        assert!(class("Vec<f32>").unwrap_err().starts_with("`Vec<f32>` is host memory"));
        assert!(class("&'a Mem<'s, Code>").unwrap_err().contains("is a code buffer"));
        assert!(class("&'a Mem<'s, Cached<f32>>").unwrap_err().contains("GPU-cached"));
        assert!(class("Mem<'s, Data<f32>>").unwrap_err().contains("buffer by value"));
        assert!(class("usize").unwrap_err().contains("no fixed size"));
        assert!(class("&'a u32").unwrap_err().contains("host reference"));
        assert!(class("other::u32").unwrap_err().contains("is not a kernel argument"));
        assert!(class("(u32, u32)").unwrap_err().contains("is not a kernel argument"));
    }
}
