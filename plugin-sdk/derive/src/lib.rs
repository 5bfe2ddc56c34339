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
