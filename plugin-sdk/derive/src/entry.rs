//! The traits of list entries: `Keyed` and `Kept` for an `entry` (its key,
//! how it advances with time and how the host's change log names it), and
//! `Positioned` for a decision's entry that names a view entry and a flag.

use proc_macro2::TokenStream;
use quote::quote;
use syn::DeriveInput;

use crate::attrs::{Field, Shape};

/// The impls for entries and positioned entries that `input` asks for.
pub(crate) fn impls(input: &DeriveInput, shape: &Shape) -> syn::Result<TokenStream> {
    let mut out = TokenStream::new();
    if shape.ty.entry {
        out.extend(kept(input, shape)?);
    }
    if shape.fields.iter().any(|f| f.flag) {
        out.extend(positioned(input, shape)?);
    }
    Ok(out)
}

/// The field that gives an entry its key: a `key` field, or an `entry`
/// field (whose key it is).
fn key_field<'a>(input: &DeriveInput, shape: &'a Shape) -> syn::Result<&'a Field> {
    let keys: Vec<&Field> = shape.fields.iter().filter(|f| f.key || f.entry).collect();
    match keys.as_slice() {
        [one] => Ok(one),
        _ => Err(syn::Error::new(
            input.ident.span(),
            "an entry needs exactly one `key` or `entry` field",
        )),
    }
}

/// How much a clock field advances in `dt` seconds.
fn advance(f: &Field) -> TokenStream {
    match &f.clock {
        Some(Some(per)) => quote!(u64::from(self.#per).wrapping_mul(dt)),
        _ => quote!(dt),
    }
}

/// `Keyed` and `Kept` for an `entry`.
fn kept(input: &DeriveInput, shape: &Shape) -> syn::Result<TokenStream> {
    let name = &input.ident;
    let wire = quote!(::gangway_plugin_sdk::wire);
    let key = key_field(input, shape)?;
    let key_member = &key.member;
    // Each field of `self` compared with `new`'s, `dt` seconds later.
    let later: Vec<TokenStream> = shape
        .fields
        .iter()
        .map(|f| {
            let m = &f.member;
            if f.entry {
                quote!(#wire::Kept::later_is(&self.#m, &new.#m, dt))
            } else if f.clock.is_some() {
                let by = advance(f);
                quote!((self.#m.wrapping_add(#by) == new.#m))
            } else {
                quote!((self.#m == new.#m))
            }
        })
        .collect();
    let clocks: Vec<TokenStream> = shape
        .fields
        .iter()
        .filter(|f| f.clock.is_some())
        .map(|f| {
            let m = &f.member;
            let by = advance(f);
            quote!((self.#m.wrapping_add(#by) == new.#m))
        })
        .collect();
    let known = known(shape, key, &clocks)?;
    let advances: Vec<TokenStream> = shape
        .fields
        .iter()
        .filter_map(|f| {
            let m = &f.member;
            if f.entry {
                Some(quote!(#wire::Kept::advance(&mut self.#m, dt);))
            } else if f.clock.is_some() {
                let by = advance(f);
                Some(quote!(self.#m = self.#m.wrapping_add(#by);))
            } else {
                None
            }
        })
        .collect();
    Ok(quote! {
        #[automatically_derived]
        impl #wire::Keyed for #name {
            #[inline(always)]
            fn key(&self) -> u64 {
                #wire::Keyed::key(&self.#key_member)
            }
        }
        #[automatically_derived]
        impl #wire::Kept for #name {
            #[inline(always)]
            fn later_is(&self, new: &Self, dt: u64) -> bool {
                // Without short-circuits: one branch per entry, not one per field.
                true #(& #later)*
            }
            #[inline(always)]
            fn later_is_known(&self, new: &Self, dt: u64, known: &#wire::KnownChanges) -> bool {
                #known
            }
            #[inline]
            fn advance(&mut self, dt: u64) {
                let _ = dt;
                #(#advances)*
            }
        }
    })
}

/// `later_is_known`'s body: a tracked entry compares its key and clocks
/// and asks the change log; an entry holding an entry asks that one and
/// compares its other fields; an untracked entry compares every field.
fn known(shape: &Shape, key: &Field, clocks: &[TokenStream]) -> syn::Result<TokenStream> {
    let wire = quote!(::gangway_plugin_sdk::wire);
    let k = &key.member;
    if let Some(kind) = &shape.ty.tracked {
        if key.entry {
            return Err(syn::Error::new(
                key.span,
                "a tracked entry's key is an id field (`key`), not an entry",
            ));
        }
        let changed = if kind == "jobs" {
            quote!(known.job_changed(self.#k))
        } else {
            quote!(known.vc_changed(self.#k))
        };
        // The clocks are compared: a clock follows time only once the
        // entry's time has come (a host may submit ahead of its clock).
        return Ok(quote!(((self.#k == new.#k) #(& #clocks)*) && !#changed));
    }
    if key.entry {
        let others: Vec<TokenStream> = shape
            .fields
            .iter()
            .filter(|f| !f.entry)
            .map(|f| {
                let m = &f.member;
                quote!(&& self.#m == new.#m)
            })
            .collect();
        return Ok(quote!(#wire::Kept::later_is_known(&self.#k, &new.#k, dt, known) #(#others)*));
    }
    // The host does not track it: compared whole.
    Ok(quote! {
        let _ = known;
        #wire::Kept::later_is(self, new, dt)
    })
}

/// `Positioned` for a decision's entry: its `key` field names a view
/// entry, its `flag` field is the flag.
fn positioned(input: &DeriveInput, shape: &Shape) -> syn::Result<TokenStream> {
    let name = &input.ident;
    let wire = quote!(::gangway_plugin_sdk::wire);
    let (Some(key), Some(flag)) = (
        shape.fields.iter().find(|f| f.key),
        shape.fields.iter().find(|f| f.flag),
    ) else {
        return Err(syn::Error::new(
            input.ident.span(),
            "a positioned entry needs a `key` field and a `flag` field",
        ));
    };
    let (k, fl) = (&key.member, &flag.member);
    let key_ty = &key.ty;
    let rest = if shape.fields.len() > 2 {
        quote!(..::core::default::Default::default())
    } else {
        TokenStream::new()
    };
    Ok(quote! {
        #[automatically_derived]
        impl #wire::Positioned for #name {
            #[inline(always)]
            fn key(&self) -> u64 {
                #wire::Keyed::key(&self.#k)
            }
            #[inline(always)]
            fn flag(&self) -> bool {
                self.#fl
            }
            #[inline(always)]
            fn at(key: u64, flag: bool) -> Self {
                Self {
                    #k: <#key_ty as #wire::FromKey>::from_key(key),
                    #fl: flag,
                    #rest
                }
            }
        }
    })
}
