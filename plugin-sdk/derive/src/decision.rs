//! `WireDecision`: a decision decoded bounded by the view it answers, and
//! its compact form as runs over that view (the format is in the SDK's
//! `wire::compact`).

use proc_macro2::TokenStream;
use quote::quote;
use syn::DeriveInput;

use crate::attrs::{Field, Shape};

/// The `WireDecision` impl, if `input` answers a view.
pub(crate) fn impls(input: &DeriveInput, shape: &Shape) -> syn::Result<TokenStream> {
    let Some(view) = &shape.ty.answers else {
        return Ok(TokenStream::new());
    };
    let name = &input.ident;
    let wire = quote!(::gangway_plugin_sdk::wire);
    let name_str = name.to_string();
    let compact_name = format!("compact {name}");
    let plain: Vec<TokenStream> = shape.fields.iter().map(plain_read).collect();
    let compacts: Vec<&Field> = shape
        .fields
        .iter()
        .filter(|f| f.runs || f.positions)
        .collect();
    let (encode, decode) = match compacts.as_slice() {
        [] => (
            quote!(false),
            quote!(::core::result::Result::Err(#wire::WireError {
                what: #compact_name,
                reason: ::std::string::String::from("its replies are plain"),
            })),
        ),
        [runs] => (
            encode_compact(shape, runs),
            decode_compact(shape, &compact_name),
        ),
        [_, second, ..] => {
            return Err(syn::Error::new(
                second.span,
                "a decision has at most one list that travels as runs",
            ));
        }
    };
    Ok(quote! {
        #[automatically_derived]
        impl #wire::WireDecision for #name {
            type View = #view;
            fn decode_for(bytes: &[u8], view: &#view) -> ::core::result::Result<Self, #wire::WireError> {
                let _ = view;
                let mut reader = #wire::Reader::new(bytes, #name_str);
                let r = &mut reader;
                let mut decision = <Self as ::core::default::Default>::default();
                #(#plain)*
                r.finish()?;
                ::core::result::Result::Ok(decision)
            }
            fn encode_compact(&self, view: &#view, out: &mut ::std::vec::Vec<u8>) -> bool {
                let _ = (view, &out);
                #encode
            }
            fn decode_compact(bytes: &[u8], view: &#view) -> ::core::result::Result<Self, #wire::WireError> {
                let _ = (view, bytes);
                #decode
            }
        }
    })
}

/// Reads field `f` of `decision` in a plain reply: bounded by the view's
/// list when it has `max`.
fn plain_read(f: &Field) -> TokenStream {
    let wire = quote!(::gangway_plugin_sdk::wire);
    let m = &f.member;
    match &f.max {
        Some(list) => quote! {
            #wire::__derive::read_bounded_list(r, &mut decision.#m, view.#list.len())?;
        },
        None => quote!(#wire::Wire::read_into(&mut decision.#m, r)?;),
    }
}

/// `encode_compact`'s body: the runs field as runs, the others plain.
fn encode_compact(shape: &Shape, runs: &Field) -> TokenStream {
    let wire = quote!(::gangway_plugin_sdk::wire);
    let d = quote!(#wire::__derive);
    let r = &runs.member;
    let others: Vec<TokenStream> = shape
        .fields
        .iter()
        .filter(|f| f.member != runs.member)
        .map(|f| {
            let m = &f.member;
            quote!(#wire::Wire::max_bytes(&self.#m))
        })
        .collect();
    let writes = |runs_write: TokenStream| -> Vec<TokenStream> {
        shape
            .fields
            .iter()
            .map(|f| {
                let m = &f.member;
                if f.member == runs.member {
                    runs_write.clone()
                } else {
                    quote!(#wire::Wire::write(&self.#m, w);)
                }
            })
            .collect()
    };
    if runs.positions {
        let list = runs.max.as_ref();
        let writes = writes(quote!(#d::write_position_runs(w, runs);));
        quote! {
            #d::with_position_runs(&self.#r, &view.#list, |runs| {
                let max = #d::position_runs_max(runs) #(+ #others)*;
                #d::write_message(out, max, |w| { #(#writes)* });
                true
            })
        }
    } else {
        let writes = writes(quote!(#d::write_value_runs(w, &self.#r, runs);));
        quote! {
            let ::core::option::Option::Some(runs) = #d::value_runs(&self.#r) else {
                return false;
            };
            let max = #d::value_runs_max(&self.#r, runs) #(+ #others)*;
            #d::write_message(out, max, |w| { #(#writes)* });
            true
        }
    }
}

/// `decode_compact`'s body: the runs field as runs over the view, the
/// others as in a plain reply.
fn decode_compact(shape: &Shape, what: &str) -> TokenStream {
    let wire = quote!(::gangway_plugin_sdk::wire);
    let d = quote!(#wire::__derive);
    let reads: Vec<TokenStream> = shape
        .fields
        .iter()
        .map(|f| {
            let m = &f.member;
            match (&f.max, f.runs, f.positions) {
                (Some(list), true, _) => {
                    quote!(#d::read_value_runs(r, &mut decision.#m, view.#list.len())?;)
                }
                (Some(list), _, true) => {
                    quote!(#d::read_position_runs(r, &mut decision.#m, &view.#list)?;)
                }
                _ => plain_read(f),
            }
        })
        .collect();
    quote! {
        let mut reader = #wire::Reader::new(bytes, #what);
        let r = &mut reader;
        let mut decision = <Self as ::core::default::Default>::default();
        #(#reads)*
        r.finish()?;
        ::core::result::Result::Ok(decision)
    }
}
