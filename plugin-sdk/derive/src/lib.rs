//! `#[derive(Wire)]`: the wire code of a Gangway view or decision type,
//! written from its definition, so that a field is declared once and the
//! encoding, the kept-view decoding, the view changes and the compact
//! replies follow it.
//!
//! What is mechanical comes from the fields alone: every type gets
//! `gangway_plugin_sdk::wire::Wire`, postcard's encoding written and read
//! without serde (a struct is its fields in declaration order, an enum its
//! variant's index as a varint and then its fields, the ids and
//! primitives as postcard writes them through serde), decoded into a value
//! kept from the last call. What is not mechanical is said with
//! `#[wire(...)]` attributes:
//!
//! | on | attribute | meaning |
//! |---|---|---|
//! | struct | `entry` | an entry of a view list that travels as runs of a view change (`Kept`) |
//! | struct | `entry, tracked = jobs` / `vcs` | ... that the host's change log names by its key, as a job or a VC |
//! | field of an entry | `key` | its id: how a diff finds it when it moved |
//! | field of an entry | `clock` / `clock = gpus` | advances with the time between two views: by `dt`, or by `gpus * dt` |
//! | field of an entry | `entry` | itself an entry (its key, clock and tracking are this entry's; the other fields are compared) |
//! | struct | `view` | a view (`WireView`): whole, and as a change from the last one when some lists travel as runs |
//! | field of a view | `now` | the view's clock (a `u64`): `dt` is its difference from the base's |
//! | field of a view | `runs` | a list of entries that travels as runs (keep/new) |
//! | field of a view | `pairs_with = list` | one entry per entry of `list`: travels with its runs when both views pair, else whole |
//! | struct | `answers = View` | a decision answering `View` (`WireDecision`) |
//! | field of a decision | `max = list` | at most as many entries as `view.list`, refused before allocating |
//! | field of a decision | `max = list, runs` | ... and in a compact reply, runs of equal values |
//! | field of a decision | `max = list, positions` | ... and in a compact reply, runs of positions of `view.list` |
//! | field of a decision's entry | `key`, `flag` | the view entry it names and its flag (`Positioned`) |
//! | last fields of a plain struct | `trailing` | added after the layout shipped: written only when not its default, read only when bytes are left (so only in a struct that ends its message) |
//!
//! The generated code calls the generic algorithms of
//! `gangway_plugin_sdk::wire` (the diff, the runs, their application) and
//! refers to the SDK as `::gangway_plugin_sdk`.
//!
//! Written with syn and quote, the standard toolkit of derives (serde's
//! own), rather than by hand on token streams.

mod attrs;
mod codec;
mod decision;
mod entry;
mod view;

use proc_macro::TokenStream;
use quote::quote;
use syn::{DeriveInput, parse_macro_input};

/// Derives `gangway_plugin_sdk::wire::Wire` and, from `#[wire(...)]`
/// attributes, the view, decision and entry traits (see the crate docs).
#[proc_macro_derive(Wire, attributes(wire))]
pub fn derive_wire(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand(&input)
        .unwrap_or_else(|e| e.to_compile_error())
        .into()
}

/// Every impl the type's attributes ask for.
fn expand(input: &DeriveInput) -> syn::Result<proc_macro2::TokenStream> {
    let shape = attrs::Shape::of(input)?;
    let codec = codec::wire(input, &shape)?;
    let entry = entry::impls(input, &shape)?;
    let view = view::impls(input, &shape)?;
    let decision = decision::impls(input, &shape)?;
    Ok(quote! {
        #codec
        #entry
        #view
        #decision
    })
}

#[cfg(test)]
mod tests {
    use syn::parse_quote;

    use super::expand;

    /// The error the derive gives for `input`, or what it expanded.
    fn error(input: syn::DeriveInput) -> String {
        match expand(&input) {
            Ok(tokens) => panic!("expanded: {tokens}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_plain_struct_gets_wire_alone() {
        let input: syn::DeriveInput = parse_quote! {
            struct Pair { a: u32, b: u64 }
        };
        let out = expand(&input).map(|t| t.to_string()).unwrap_or_default();
        assert!(out.contains("Wire for Pair"), "{out}");
        assert!(!out.contains("Kept") && !out.contains("WireView"), "{out}");
    }

    #[test]
    fn an_entry_needs_one_key() {
        let e = error(parse_quote! {
            #[wire(entry)]
            struct Job { id: u64, #[wire(clock)] waiting_s: u64 }
        });
        assert!(e.contains("exactly one `key` or `entry` field"), "{e}");
    }

    #[test]
    fn a_decisions_runs_name_the_list_they_cover() {
        let e = error(parse_quote! {
            #[wire(answers = View)]
            struct Answer { #[wire(runs)] limits: Vec<u32> }
        });
        assert!(e.contains("need `max = list`"), "{e}");
    }

    #[test]
    fn a_views_runs_follow_its_clock() {
        let e = error(parse_quote! {
            #[wire(view)]
            struct View { #[wire(runs)] jobs: Vec<u32>, #[wire(now)] now_s: u64 }
        });
        assert!(e.contains("follow the `now` field"), "{e}");
    }

    #[test]
    fn a_paired_list_follows_its_list() {
        let e = error(parse_quote! {
            #[wire(view)]
            struct View {
                #[wire(now)] now_s: u64,
                #[wire(pairs_with = jobs)] spread: Vec<u8>,
                #[wire(runs)] jobs: Vec<u32>,
            }
        });
        assert!(e.contains("follows the runs list it pairs with"), "{e}");
    }

    #[test]
    fn unknown_attributes_are_refused() {
        let e = error(parse_quote! {
            struct Pair { #[wire(kee)] a: u32 }
        });
        assert!(e.contains("expected key, clock"), "{e}");
    }
}
