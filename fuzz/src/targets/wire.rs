//! The wire format: the guest's view decoders (bare and as view messages,
//! whole or as changes), the fast codec against postcard, reply messages,
//! and manifests.

use gangway_plugin_sdk::testing::SlotViews;
use gangway_plugin_sdk::{Manifest, SlotContract, wire};

use super::{by_slot, generate};

fn decode_view<S: SlotContract>(bytes: &[u8]) {
    // As a view message over an empty base: whole or a change, it must
    // decode or be refused, never panic.
    let mut held = S::View::default();
    let _ = wire::decode_view_message::<S>(bytes, &mut held);
    let mut view = S::View::default();
    if wire::decode_view_into::<S>(bytes, &mut view).is_err() {
        return;
    }
    // And over the view the bytes hold.
    let mut held = view.clone();
    let _ = wire::decode_view_message::<S>(bytes, &mut held);
    // The fast decoder reads exactly postcard: serde agrees on the value.
    match wire::decode::<S::View>(bytes) {
        Ok(serde) => assert_eq!(serde, view, "the fast and serde decoders disagree"),
        Err(e) => panic!("the fast decoder accepted what postcard refuses: {e}"),
    }
    let mut again = Vec::new();
    wire::encode_view_into::<S>(&view, &mut again);
    let mut back = S::View::default();
    wire::decode_view_into::<S>(&again, &mut back).expect("a re-encoded view decodes");
    assert_eq!(back, view, "a view does not survive re-encoding");
}

/// Byte 0 picks the slot; the rest is a view as the guest receives it.
pub(crate) fn view_decode(data: &[u8]) {
    let Some((&slot, bytes)) = data.split_first() else {
        return;
    };
    by_slot!(slot, decode_view(bytes));
}

fn roundtrip<S: SlotContract + SlotViews>(seed: &[u8]) {
    let Some(view) = generate(S::views(), seed) else {
        return;
    };
    let mut fast = Vec::new();
    wire::encode_view_into::<S>(&view, &mut fast);
    assert_eq!(
        fast,
        wire::encode(&view),
        "the fast codec's view bytes are not postcard's"
    );
    let mut back = S::View::default();
    wire::decode_view_into::<S>(&fast, &mut back).expect("an encoded view decodes");
    assert_eq!(back, view);

    let decision = gangway_plugin_sdk::Policy::<S>::decide(&S::Fallback::default(), &view);
    let mut bytes = Vec::new();
    wire::encode_decision_into::<S>(&decision, &mut bytes);
    assert_eq!(
        bytes,
        wire::encode(&decision),
        "the fast codec's decision bytes are not postcard's"
    );
    let back = wire::decode_decision::<S>(&bytes, &view).expect("an encoded decision decodes");
    assert_eq!(back, decision);

    // View messages: the same view again (a change of time alone), and
    // another generated view, each rebuild exactly over the first.
    let reversed: Vec<u8> = seed.iter().rev().copied().collect();
    let mut message = Vec::new();
    for next in [Some(view.clone()), generate(S::views(), &reversed)]
        .into_iter()
        .flatten()
    {
        wire::encode_view_message::<S>(Some(&view), &next, &mut message);
        let mut held = view.clone();
        wire::decode_view_message::<S>(&message, &mut held).expect("a view message decodes");
        assert_eq!(held, next, "a view message does not rebuild the view");
    }
    // Reply messages: compact or plain, the decision comes back.
    wire::encode_reply_message::<S>(&decision, &view, &mut message);
    let back = wire::decode_reply_message::<S>(&message, &view).expect("a reply message decodes");
    assert_eq!(
        back, decision,
        "a reply message does not give the decision back"
    );
}

/// Byte 0 picks the slot, the rest seeds a generated view.
pub(crate) fn wire_roundtrip(data: &[u8]) {
    let Some((&slot, seed)) = data.split_first() else {
        return;
    };
    by_slot!(slot, roundtrip(seed));
}

/// Any bytes as a manifest.
pub(crate) fn manifest(data: &[u8]) {
    if let Ok(m) = Manifest::decode(data) {
        assert_eq!(
            Manifest::decode(&m.encode()).as_ref(),
            Ok(&m),
            "a manifest does not survive re-encoding"
        );
    }
}
