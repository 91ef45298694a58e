//! `#[derive(LaunchArgs)]`: a struct of kernel arguments, laid out as the contract says.
//!
//! Each field is one parameter, in declaration order, at its natural alignment. A field whose type is
//! not a kernel argument is refused with an error on that field's type. The layout the generated
//! `LAYOUT` states is computed from the same field types, through `omega::KernelArg::SIZE`, that `block`
//! writes — one source for both, so they cannot disagree.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Fields};

use crate::types::classify;

pub fn expand(input: DeriveInput) -> syn::Result<TokenStream> {
    let name = &input.ident;
    let fields = match &input.data {
        Data::Struct(s) => match &s.fields {
            Fields::Named(f) => &f.named,
            Fields::Unnamed(_) | Fields::Unit => {
                return Err(syn::Error::new(
                    name.span(),
                    "#[derive(LaunchArgs)] needs a struct with named fields: each field is one kernel parameter",
                ))
            }
        },
        Data::Enum(e) => {
            return Err(syn::Error::new(
                e.enum_token.span(),
                "#[derive(LaunchArgs)] needs a struct: an enum has no fixed parameter layout",
            ))
        }
        Data::Union(u) => {
            return Err(syn::Error::new(
                u.union_token.span(),
                "#[derive(LaunchArgs)] needs a struct: a union has no fixed parameter layout",
            ))
        }
    };

    let mut errors: Option<syn::Error> = None;
    for f in fields {
        if let Err(e) = classify(&f.ty) {
            match errors.as_mut() {
                Some(all) => all.combine(e),
                None => errors = Some(e),
            }
        }
    }
    if let Some(e) = errors {
        return Err(e);
    }

    let count = fields.len();
    let sizes = fields.iter().map(|f| {
        let ty = &f.ty;
        quote_spanned!(ty.span()=> <#ty as ::omega::KernelArg>::SIZE)
    });
    let pushes = fields.iter().map(|f| {
        let ty = &f.ty;
        let ident = f.ident.as_ref().expect("named fields");
        quote_spanned!(ty.span()=> ::omega::args::__private::push::<#ty>(&mut block, &self.#ident);)
    });
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    Ok(quote! {
        #[automatically_derived]
        unsafe impl #impl_generics ::omega::LaunchArgs for #name #ty_generics #where_clause {
            const LAYOUT: &'static [::omega::session::ParamInfo] =
                &::omega::args::__private::layout::<#count>([#(#sizes),*]);

            fn block(&self) -> ::omega::ArgBlock {
                let mut block = ::omega::args::__private::block::<Self>();
                #(#pushes)*
                block
            }

            #[doc(hidden)]
            fn only_derive_is_allowed_to_implement_this_trait() {}
        }
    })
}
