//! `Wire`: postcard's encoding of a struct (its fields in order) or an enum
//! (its variant's index as a varint, then its fields).

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::{Data, DeriveInput, Fields, Type, Variant};

use crate::attrs::Shape;

/// The `Wire` impl of `input`.
pub(crate) fn wire(input: &DeriveInput, shape: &Shape) -> syn::Result<TokenStream> {
    let name = &input.ident;
    let name_str = name.to_string();
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let body = match &input.data {
        Data::Struct(_) => struct_body(shape),
        Data::Enum(e) => enum_body(&e.variants.iter().collect::<Vec<_>>()),
        Data::Union(_) => unreachable!("refused by Shape::of"),
    };
    Ok(quote! {
        #[automatically_derived]
        impl #impl_generics ::gangway_plugin_sdk::wire::Wire for #name #ty_generics #where_clause {
            const NAME: &'static str = #name_str;
            #body
        }
    })
}

/// How a value's writing and reading are inlined. Natively always, so that
/// a whole message is read by one function whose reader keeps its cursor in
/// a register (a reader passed by reference to a function of its own keeps
/// it in memory: a decode of a 1,000-job view 40% slower). In a Wasm guest
/// only as the compiler judges: forced inlining makes every module 10-40%
/// larger (fifo 85 to 93 KB, las 350 to 396 KB) while the guest's decoding
/// under fuel was already no slower than the hand codec's. (Reading: see
/// [`read_inline`].)
fn inline() -> TokenStream {
    quote!(
        #[cfg_attr(not(target_arch = "wasm32"), inline(always))]
        #[cfg_attr(target_arch = "wasm32", inline)]
    )
}

/// How a value's reading is inlined: natively always, as [`inline`]; in a
/// Wasm guest with no hint at all (whole-program optimization still inlines
/// as it judges). A hint makes every module that uses a type keep a copy of
/// its reading in each crate that reads it, the SDK's and the policy's, each
/// specialised for the messages it reads (a module exporting two slots read
/// the jobs and the cluster of its views twice). Without it most modules
/// are 5-10 KB smaller (het-max-min 9.5 KB); the retry and defragment
/// modules were about 1 KB larger, which the reader's out-of-line varints
/// more than make up.
fn read_inline() -> TokenStream {
    quote!(
        #[cfg_attr(not(target_arch = "wasm32"), inline(always))]
    )
}

/// The items of a struct's impl.
fn struct_body(shape: &Shape) -> TokenStream {
    let tys: Vec<&Type> = shape.fields.iter().map(|f| &f.ty).collect();
    let inline = inline();
    let read_inline = read_inline();
    let members: Vec<_> = shape.fields.iter().map(|f| &f.member).collect();
    let wire = quote!(::gangway_plugin_sdk::wire::Wire);
    let d = quote!(::gangway_plugin_sdk::wire::__derive);
    // A trailing field counts for nothing in the minimum (it may be
    // absent), is written only when not its default, and read only when
    // bytes are left: a reader of the layout before it never sees it.
    let min_tys: Vec<&Type> = shape
        .fields
        .iter()
        .filter(|f| !f.trailing)
        .map(|f| &f.ty)
        .collect();
    let writes = shape.fields.iter().map(|f| {
        let m = &f.member;
        if f.trailing {
            let ty = &f.ty;
            quote!(if self.#m != <#ty as ::core::default::Default>::default() { #wire::write(&self.#m, w); })
        } else {
            quote!(#wire::write(&self.#m, w);)
        }
    });
    let reads = shape.fields.iter().map(|f| {
        let m = &f.member;
        if f.trailing {
            quote!(if r.is_at_end() {
                self.#m = ::core::default::Default::default();
            } else {
                #wire::read_into(&mut self.#m, r)?;
            })
        } else {
            quote!(#wire::read_into(&mut self.#m, r)?;)
        }
    });
    quote! {
        const MIN_BYTES: usize = 0 #(+ <#min_tys as #wire>::MIN_BYTES)*;
        const MAX_BYTES: ::core::option::Option<usize> = {
            let max = ::core::option::Option::Some(0);
            #(let max = #d::add_max(max, <#tys as #wire>::MAX_BYTES);)*
            max
        };
        #[inline]
        fn max_bytes(&self) -> usize {
            match <Self as #wire>::MAX_BYTES {
                ::core::option::Option::Some(max) => max,
                ::core::option::Option::None => 0 #(+ #wire::max_bytes(&self.#members))*,
            }
        }
        #inline
        fn write(&self, w: &mut ::gangway_plugin_sdk::wire::Writer<'_>) {
            #(#writes)*
        }
        #read_inline
        fn read_into(
            &mut self,
            r: &mut ::gangway_plugin_sdk::wire::Reader<'_>,
        ) -> ::core::result::Result<(), ::gangway_plugin_sdk::wire::WireError> {
            #(#reads)*
            ::core::result::Result::Ok(())
        }
    }
}

/// A variant's fields as bindings: their names in a pattern, their types.
fn bindings(v: &Variant) -> (TokenStream, Vec<syn::Ident>, Vec<&Type>) {
    let names: Vec<syn::Ident> = (0..v.fields.len())
        .map(|i| format_ident!("field{}", i))
        .collect();
    let tys: Vec<&Type> = v.fields.iter().map(|f| &f.ty).collect();
    let ident = &v.ident;
    let pattern = match &v.fields {
        Fields::Named(named) => {
            let fields = named.named.iter().map(|f| &f.ident);
            quote!(Self::#ident { #(#fields: #names),* })
        }
        Fields::Unnamed(_) => quote!(Self::#ident ( #(#names),* )),
        Fields::Unit => quote!(Self::#ident),
    };
    (pattern, names, tys)
}

/// The items of an enum's impl: the variant index is a `u32` varint.
fn enum_body(variants: &[&Variant]) -> TokenStream {
    let wire = quote!(::gangway_plugin_sdk::wire::Wire);
    let d = quote!(::gangway_plugin_sdk::wire::__derive);
    let mut min = Vec::new();
    let mut max = Vec::new();
    let mut sizes = Vec::new();
    let mut writes = Vec::new();
    let mut reads = Vec::new();
    for (index, v) in variants.iter().enumerate() {
        let (pattern, names, tys) = bindings(v);
        let index = index as u32;
        min.push(quote!(0 #(+ <#tys as #wire>::MIN_BYTES)*));
        max.push(quote! {{
            let max = ::core::option::Option::Some(0);
            #(let max = #d::add_max(max, <#tys as #wire>::MAX_BYTES);)*
            max
        }});
        sizes.push(quote!(#pattern => 0 #(+ #wire::max_bytes(#names))*));
        writes.push(quote!(#pattern => {
            w.varint(#index as u64);
            #(#wire::write(#names, w);)*
        }));
        reads.push(quote!(#index => {
            #(let mut #names: #tys = ::core::default::Default::default();
              #wire::read_into(&mut #names, r)?;)*
            #pattern
        }));
    }
    let inline = inline();
    let read_inline = read_inline();
    let first_min = min.first().cloned().unwrap_or(quote!(0));
    let first_max = max
        .first()
        .cloned()
        .unwrap_or(quote!(::core::option::Option::Some(0)));
    quote! {
        const MIN_BYTES: usize = 1 + {
            let min = #first_min;
            #(let min = #d::smaller_min(min, #min);)*
            min
        };
        const MAX_BYTES: ::core::option::Option<usize> = #d::add_max(
            ::core::option::Option::Some(5),
            {
                let max = #first_max;
                #(let max = #d::larger_max(max, #max);)*
                max
            },
        );
        #[inline]
        fn max_bytes(&self) -> usize {
            5 + match self { #(#sizes,)* }
        }
        #inline
        fn write(&self, w: &mut ::gangway_plugin_sdk::wire::Writer<'_>) {
            match self { #(#writes)* }
        }
        #read_inline
        fn read_into(
            &mut self,
            r: &mut ::gangway_plugin_sdk::wire::Reader<'_>,
        ) -> ::core::result::Result<(), ::gangway_plugin_sdk::wire::WireError> {
            *self = match r.u32()? {
                #(#reads)*
                _ => return ::core::result::Result::Err(r.error("bad enum variant")),
            };
            ::core::result::Result::Ok(())
        }
    }
}
