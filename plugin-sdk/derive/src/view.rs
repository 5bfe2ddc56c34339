//! `WireView`: a view whole, and as a change from the last one when some
//! of its lists travel as runs (the format is in the SDK's `wire::change`).

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::{DeriveInput, Ident, Member};

use crate::attrs::{Field, Shape};

/// The `WireView` impl, if `input` is a `view`.
pub(crate) fn impls(input: &DeriveInput, shape: &Shape) -> syn::Result<TokenStream> {
    if !shape.ty.view {
        return Ok(TokenStream::new());
    }
    let name = &input.ident;
    let wire = quote!(::gangway_plugin_sdk::wire);
    let change_name = format!("{name} change");
    if !shape.fields.iter().any(|f| f.runs) {
        return Ok(quote! {
            #[automatically_derived]
            impl #wire::WireView for #name {
                const CHANGES: bool = false;
                fn encode_change(
                    &self,
                    _base: &Self,
                    _known: ::core::option::Option<&#wire::KnownChanges>,
                    _out: &mut ::std::vec::Vec<u8>,
                ) -> bool {
                    false
                }
                fn apply_change(&mut self, _bytes: &[u8]) -> ::core::result::Result<(), #wire::WireError> {
                    ::core::result::Result::Err(#wire::WireError {
                        what: #change_name,
                        reason: ::std::string::String::from("its views travel whole"),
                    })
                }
            }
        });
    }
    let plan = Plan::of(input, shape)?;
    let encode = encode_change(&plan);
    let apply = apply_change(&plan);
    Ok(quote! {
        #[automatically_derived]
        impl #wire::WireView for #name {
            const CHANGES: bool = true;
            #encode
            fn apply_change(&mut self, bytes: &[u8]) -> ::core::result::Result<(), #wire::WireError> {
                let mut reader = #wire::Reader::new(bytes, #change_name);
                let r = &mut reader;
                #apply
                r.finish()
            }
        }
    })
}

/// What one field of a view does in a change.
enum Part<'a> {
    /// The view's clock.
    Now(&'a Member),
    /// Whole, as in the view.
    Whole(&'a Member),
    /// A list as runs, with its number among the lists and the list paired
    /// with it, if any.
    Runs(&'a Member, usize, Option<&'a Member>),
    /// A list paired with the runs list of that number.
    Paired(&'a Member, usize),
}

/// A view's fields as the parts of its change.
struct Plan<'a> {
    parts: Vec<Part<'a>>,
    /// The `now` field.
    now: &'a Member,
}

impl<'a> Plan<'a> {
    fn of(input: &DeriveInput, shape: &'a Shape) -> syn::Result<Plan<'a>> {
        let now = shape.fields.iter().position(|f| f.now).ok_or_else(|| {
            syn::Error::new(input.ident.span(), "a view with runs needs a `now` field")
        })?;
        let runs: Vec<&Field> = shape.fields.iter().filter(|f| f.runs).collect();
        let mut parts = Vec::new();
        for (i, f) in shape.fields.iter().enumerate() {
            parts.push(if f.now {
                Part::Now(&f.member)
            } else if f.runs {
                if i < now {
                    return Err(syn::Error::new(f.span, "runs lists follow the `now` field"));
                }
                let n = runs.iter().position(|r| r.member == f.member).unwrap_or(0);
                let paired = shape.fields.iter().find(|p| pairs(p, &f.member));
                Part::Runs(&f.member, n, paired.map(|p| &p.member))
            } else if let Some(list) = &f.pairs_with {
                let at = position(shape, list)?;
                if at > i || !shape.fields[at].runs {
                    return Err(syn::Error::new(
                        f.span,
                        "a paired list follows the runs list it pairs with",
                    ));
                }
                let n = runs
                    .iter()
                    .position(|r| r.member == shape.fields[at].member)
                    .unwrap_or(0);
                Part::Paired(&f.member, n)
            } else {
                Part::Whole(&f.member)
            });
        }
        Ok(Plan {
            parts,
            now: &shape.fields[now].member,
        })
    }
}

/// Whether `f` pairs with the list `list`.
fn pairs(f: &Field, list: &Member) -> bool {
    matches!((&f.pairs_with, list), (Some(p), Member::Named(l)) if p == l)
}

/// The position of the field named `name`.
fn position(shape: &Shape, name: &Ident) -> syn::Result<usize> {
    let f = shape.field(name)?;
    Ok(shape
        .fields
        .iter()
        .position(|g| g.member == f.member)
        .unwrap_or(0))
}

/// The pieces of `encode_change`, gathered part by part.
#[derive(Default)]
struct Pieces {
    /// The lengths of the runs lists.
    entries: Vec<TokenStream>,
    /// Whether each paired list travels with its runs.
    paired: Vec<TokenStream>,
    /// Each runs list's diff into the scratch.
    diffs: Vec<TokenStream>,
    /// Each part's most bytes.
    maxes: Vec<TokenStream>,
    /// Each part's writing.
    writes: Vec<TokenStream>,
}

/// A runs list's pieces: `m` (with paired list `p`, if any) is list `n`.
fn runs_pieces(pieces: &mut Pieces, m: &Member, n: usize, paired: Option<&Member>) {
    let d = quote!(::gangway_plugin_sdk::wire::__derive);
    let (start, end) = (format_ident!("start{}", n), format_ident!("end{}", n));
    pieces.entries.push(quote!(self.#m.len()));
    let diff = match paired {
        Some(p) => {
            let flag = format_ident!("paired{}", n);
            pieces.paired.push(quote! {
                let #flag = self.#p.len() == self.#m.len() && base.#p.len() == base.#m.len();
            });
            let with = quote!(#flag.then_some(&self.#p[..]));
            pieces
                .maxes
                .push(quote!(1 + #d::runs_max(&runs[#start..#end], &self.#m, #with)));
            pieces.writes.push(quote! {
                w.byte(u8::from(#flag));
                #d::write_runs(w, &runs[#start..#end], &self.#m, #with);
            });
            quote!(#d::diff(#d::Diff {
                base: #d::Side { list: &base.#m, paired: &base.#p },
                new: #d::Side { list: &self.#m, paired: &self.#p },
                paired: #flag,
                dt,
                known,
            }, scratch))
        }
        None => {
            pieces
                .maxes
                .push(quote!(#d::runs_max::<_, ()>(&runs[#start..#end], &self.#m, None)));
            pieces
                .writes
                .push(quote!(#d::write_runs::<_, ()>(w, &runs[#start..#end], &self.#m, None);));
            quote!(#d::diff_list(&base.#m, &self.#m, dt, known, scratch))
        }
    };
    pieces.diffs.push(quote! {
        let #start = scratch.runs.len();
        literal += #diff;
        let #end = scratch.runs.len();
    });
}

/// `encode_change`: diffs every runs list into the shared scratch, then
/// writes the parts in order.
fn encode_change(plan: &Plan<'_>) -> TokenStream {
    let wire = quote!(::gangway_plugin_sdk::wire);
    let d = quote!(#wire::__derive);
    let now = plan.now;
    let mut p = Pieces::default();
    for part in &plan.parts {
        match part {
            Part::Now(m) | Part::Whole(m) => {
                p.maxes.push(quote!(#wire::Wire::max_bytes(&self.#m)));
                p.writes.push(quote!(#wire::Wire::write(&self.#m, w);));
            }
            Part::Runs(m, n, paired) => runs_pieces(&mut p, m, *n, *paired),
            Part::Paired(m, n) => {
                let flag = format_ident!("paired{}", n);
                p.maxes
                    .push(quote!(if #flag { 0 } else { #wire::Wire::max_bytes(&self.#m) }));
                p.writes
                    .push(quote!(if !#flag { #wire::Wire::write(&self.#m, w); }));
            }
        }
    }
    let Pieces {
        entries,
        paired,
        diffs,
        maxes,
        writes,
    } = p;
    quote! {
        fn encode_change(
            &self,
            base: &Self,
            known: ::core::option::Option<&#wire::KnownChanges>,
            out: &mut ::std::vec::Vec<u8>,
        ) -> bool {
            let entries = 0 #(+ #entries)*;
            if entries < #d::MIN_ENTRIES {
                return false;
            }
            let dt = self.#now.wrapping_sub(base.#now);
            #(#paired)*
            #d::with_scratch(|scratch| {
                let mut literal = 0usize;
                #(#diffs)*
                if !#d::worth(literal, entries) {
                    return false;
                }
                let runs = &scratch.runs;
                let max = 0 #(+ #maxes)*;
                #d::write_message(out, max, |w| {
                    #(#writes)*
                });
                true
            })
        }
    }
}

/// `apply_change`'s body: reads the parts in order over `self`, the base.
fn apply_change(plan: &Plan<'_>) -> TokenStream {
    let wire = quote!(::gangway_plugin_sdk::wire);
    let d = quote!(#wire::__derive);
    let mut flags = Vec::new();
    let mut reads = Vec::new();
    for part in &plan.parts {
        reads.push(match part {
            Part::Now(m) => quote! {
                let now = r.u64()?;
                let dt = now.wrapping_sub(self.#m);
                self.#m = now;
            },
            Part::Whole(m) => quote!(#wire::Wire::read_into(&mut self.#m, r)?;),
            Part::Runs(m, n, Some(p)) => {
                let flag = format_ident!("paired{}", n);
                flags.push(quote!(let #flag: bool;));
                quote! {
                    #flag = #d::read_paired(r, self.#m.len(), self.#p.len())?;
                    if #flag {
                        #d::apply_runs_paired(r, &mut self.#m, ::core::option::Option::Some(&mut self.#p), dt)?;
                    } else {
                        #d::apply_runs(r, &mut self.#m, dt)?;
                    }
                }
            }
            Part::Runs(m, _, None) => quote!(#d::apply_runs(r, &mut self.#m, dt)?;),
            Part::Paired(m, n) => {
                let flag = format_ident!("paired{}", n);
                quote!(if !#flag { #wire::Wire::read_into(&mut self.#m, r)?; })
            }
        });
    }
    quote! {
        #(#flags)*
        #(#reads)*
    }
}
