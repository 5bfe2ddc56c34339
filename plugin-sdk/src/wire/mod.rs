//! The wire format of views and decisions: postcard over serde, behind this
//! module so it can change without touching any policy's signature.
//!
//! The bulk views and decisions (fairness, locality, gang) have a
//! hand-written codec (private) that writes and reads exactly postcard's
//! bytes, about three times faster; every slot reaches the right codec
//! through its [`crate::SlotContract`].

pub(crate) mod fast;

use serde::{Serialize, de::DeserializeOwned};

use crate::slot::SlotContract;

/// The most bytes a varint of a `u64` takes.
pub(crate) const U64: usize = 10;
/// The most bytes a varint of a `u32` takes.
pub(crate) const U32: usize = 5;
/// The most bytes a sequence length takes.
pub(crate) const LEN: usize = U64;

/// Bytes that did not decode as the expected type.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot decode {what}: {reason}")]
pub struct WireError {
    /// The type that was expected.
    pub what: &'static str,
    /// What was wrong, and where.
    pub reason: String,
}

/// Encodes a view or decision.
///
/// ```
/// use gangway_plugin_sdk::{wire, GangAction};
/// let bytes = wire::encode(&GangAction::Reserve);
/// assert_eq!(wire::decode::<GangAction>(&bytes).unwrap(), GangAction::Reserve);
/// ```
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    // Serializing plain structs into a growable Vec cannot fail.
    postcard::to_allocvec(value).unwrap_or_default()
}

/// Encodes into `buf`, reusing its allocation.
pub fn encode_into<T: Serialize>(value: &T, buf: &mut Vec<u8>) {
    buf.clear();
    let taken = std::mem::take(buf);
    *buf = postcard::to_extend(value, taken).unwrap_or_default();
}

/// Decodes bytes produced by [`encode`]; trailing bytes are an error.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, WireError> {
    let what = short_type_name::<T>();
    match postcard::take_from_bytes::<T>(bytes) {
        Ok((value, [])) => Ok(value),
        Ok((_, rest)) => Err(WireError {
            what,
            reason: format!("{} trailing bytes", rest.len()),
        }),
        Err(e) => Err(WireError {
            what,
            reason: e.to_string(),
        }),
    }
}

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

/// Refuses a reply longer than [`SlotContract::max_reply_bytes`] allows.
pub(crate) fn check_reply_len<S: SlotContract>(
    bytes: &[u8],
    view: &S::View,
) -> Result<(), WireError> {
    let max = S::max_reply_bytes(view);
    if bytes.len() > max {
        return Err(WireError {
            what: short_type_name::<S::Decision>(),
            reason: format!(
                "a reply of {} bytes is longer than any answer to this view can be ({max})",
                bytes.len()
            ),
        });
    }
    Ok(())
}

/// `FairnessDecision` rather than `gangway_plugin_sdk::slots::fairness::FairnessDecision`.
fn short_type_name<T>() -> &'static str {
    let full = std::any::type_name::<T>();
    match full.find('<') {
        Some(_) => full,
        None => full.rsplit("::").next().unwrap_or(full),
    }
}
