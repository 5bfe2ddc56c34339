//! The host's side of a guest's reply, without Wasm: the bounded decoder
//! and the contract's rules, on raw bytes or on valid replies mutated.

use gangway_catalog::CatalogSlot;
use gangway_plugin_sdk::SlotContract;
use gangway_plugin_sdk::testing::SlotViews;
use gangway_plugin_sdk::wire;

use super::{by_slot, generate};

/// A reply for `view`: `tail` itself (even `mode`), or a built-in policy's
/// valid decision with `tail`'s (position, byte) pairs written over it.
pub(crate) fn reply_bytes<S: CatalogSlot + SlotViews>(
    mode: u8,
    view: &S::View,
    tail: &[u8],
) -> Vec<u8> {
    if mode.is_multiple_of(2) {
        return tail.to_vec();
    }
    let name = S::NAMES[usize::from(mode / 2) % S::NAMES.len()];
    let Ok(mut policy) = S::native(name, b"") else {
        return tail.to_vec();
    };
    let Ok(decision) = policy.decide(view) else {
        return tail.to_vec();
    };
    let mut bytes = Vec::new();
    wire::encode_decision_into::<S>(&decision, &mut bytes);
    for pair in tail.chunks(2) {
        if let (Some(&at), Some(&value), false) = (pair.first(), pair.get(1), bytes.is_empty()) {
            let i = usize::from(at) % bytes.len();
            bytes[i] = value;
        }
    }
    if tail.len() % 2 == 1 {
        bytes.truncate(usize::from(tail[tail.len() - 1]));
    }
    bytes
}

/// Checks the host's reading of `bytes` as a reply to `view`.
pub(crate) fn check_reply<S: SlotContract>(view: &S::View, bytes: &[u8]) {
    // As a reply message (what a module that takes view messages sends):
    // compact runs are bounded by the view, and validation never panics.
    if let Ok(decision) = wire::decode_reply_message::<S>(bytes, view) {
        let _ = S::validate(view, &decision);
    }
    let Ok(decision) = wire::decode_decision::<S>(bytes, view) else {
        return;
    };
    assert!(
        bytes.len() <= S::max_reply_bytes(view),
        "a reply longer than the view's bound decoded"
    );
    let mut again = Vec::new();
    wire::encode_decision_into::<S>(&decision, &mut again);
    assert_eq!(
        wire::decode_decision::<S>(&again, view).as_ref(),
        Ok(&decision),
        "a decision does not survive re-encoding"
    );
    // Validation decides; it must not panic whatever the decision says.
    let _ = S::validate(view, &decision);
}

fn one<S: CatalogSlot + SlotViews>(mode: u8, seed: &[u8], tail: &[u8]) {
    let Some(view) = generate(S::views(), seed) else {
        return;
    };
    let bytes = reply_bytes::<S>(mode, &view, tail);
    check_reply::<S>(&view, &bytes);
}

/// Byte 0 picks the slot, byte 1 the mode, bytes 2..34 seed the view, the
/// rest is the reply or its mutation.
pub(crate) fn replies(data: &[u8]) {
    if data.len() < 2 {
        return;
    }
    let (slot, mode) = (data[0], data[1]);
    let seed = &data[2..data.len().min(34)];
    let tail = data.get(34..).unwrap_or(&[]);
    by_slot!(slot, one(mode, seed, tail));
}
