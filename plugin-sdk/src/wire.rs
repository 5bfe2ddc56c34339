//! The wire format of bulk views and decisions: postcard over serde, behind a
//! wrapper so it can change without touching any policy's signature.

use serde::{Serialize, de::DeserializeOwned};

/// Bytes that did not decode as the expected type.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot decode {what}: {reason}")]
pub struct WireError {
    /// The type that was expected.
    pub what: &'static str,
    /// postcard's explanation.
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
    let what = std::any::type_name::<T>();
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
