//! The wire format of views and decisions: postcard over serde, behind this
//! module so it can change without touching any policy's signature.
//!
//! The bulk views and decisions (fairness, locality, gang) have a
//! hand-written codec (private) that writes and reads exactly postcard's
//! bytes, about three times faster; every slot reaches the right codec
//! through its [`crate::SlotContract`].

pub(crate) mod codec;
pub(crate) mod fast;

pub use codec::{WireError, decode, encode, encode_into};

use crate::slot::SlotContract;

/// Encodes a view of slot `S` with the slot's codec.
///
/// ```
/// use gangway_plugin_sdk::{slots::Fairness, wire, RoundView};
/// let view = RoundView { now_s: 7, ..RoundView::default() };
/// let bytes = wire::encode_view::<Fairness>(&view);
/// assert_eq!(bytes, wire::encode(&view));
/// assert_eq!(wire::decode_view::<Fairness>(&bytes).unwrap(), view);
/// ```
pub fn encode_view<S: SlotContract>(view: &S::View) -> Vec<u8> {
    let mut out = Vec::new();
    S::encode_view(view, &mut out);
    out
}

/// Decodes a view of slot `S` with the slot's codec.
pub fn decode_view<S: SlotContract>(bytes: &[u8]) -> Result<S::View, WireError> {
    let mut view = S::View::default();
    S::decode_view_into(bytes, &mut view)?;
    Ok(view)
}

/// Encodes a decision of slot `S` with the slot's codec.
pub fn encode_decision<S: SlotContract>(decision: &S::Decision) -> Vec<u8> {
    let mut out = Vec::new();
    S::encode_decision(decision, &mut out);
    out
}

/// Decodes the reply of slot `S` to `view`, bounded by the view: a reply
/// longer than any well-formed answer to it, or naming more entries than
/// the view has jobs, is refused before anything is allocated.
///
/// ```
/// use gangway_plugin_sdk::{slots::Fairness, wire, RoundView};
/// let view = RoundView::default(); // no jobs: the only answer is empty
/// assert!(wire::decode_decision::<Fairness>(&[0], &view).is_ok());
/// let err = wire::decode_decision::<Fairness>(&[1, 5, 1], &view).unwrap_err();
/// assert!(err.to_string().contains("more entries than the view has jobs"), "{err}");
/// let err = wire::decode_decision::<Fairness>(&[0; 60], &view).unwrap_err();
/// assert!(err.to_string().contains("longer than"), "{err}");
/// ```
pub fn decode_decision<S: SlotContract>(
    bytes: &[u8],
    view: &S::View,
) -> Result<S::Decision, WireError> {
    S::decode_decision(bytes, view)
}
