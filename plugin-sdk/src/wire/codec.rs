//! The generic half of the wire format: postcard over serde for any value,
//! the typed error, and the bounds the slots' reply-length checks use.
//! Knows nothing of slots, so the slot contract can build on it.

use serde::{Serialize, de::DeserializeOwned};

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
    // The type's name only on failure: finding it is a string search.
    match postcard::take_from_bytes::<T>(bytes) {
        Ok((value, [])) => Ok(value),
        Ok((_, rest)) => Err(WireError {
            what: short_type_name::<T>(),
            reason: format!("{} trailing bytes", rest.len()),
        }),
        Err(e) => Err(WireError {
            what: short_type_name::<T>(),
            reason: e.to_string(),
        }),
    }
}

/// Refuses a reply of `bytes` to be decoded as `T` when it is longer than
/// `max`, the longest answer to its view can be (see
/// [`crate::SlotContract::max_reply_bytes`]).
pub(crate) fn check_reply_len<T>(bytes: &[u8], max: usize) -> Result<(), WireError> {
    if bytes.len() > max {
        return Err(WireError {
            what: short_type_name::<T>(),
            reason: format!(
                "a reply of {} bytes is longer than any answer to this view can be ({max})",
                bytes.len()
            ),
        });
    }
    Ok(())
}

/// `FairnessDecision` rather than `gangway_plugin_sdk::fairness::FairnessDecision`.
fn short_type_name<T>() -> &'static str {
    let full = std::any::type_name::<T>();
    match full.find('<') {
        Some(_) => full,
        None => full.rsplit("::").next().unwrap_or(full),
    }
}
