//! The wire format of views and decisions: postcard's bytes, written and
//! read by code derived from each type's definition (`#[derive(Wire)]`,
//! crate `gangway-wire-derive`), behind this module so it can change
//! without touching any policy's signature.
//!
//! The derive writes, for every view and decision type, its encoding and
//! decoding byte for byte as `postcard` does through serde ([`Wire`]), and
//! from attributes that say what is not mechanical: which lists of a view
//! travel as runs of a view change and how their entries advance with
//! time ([`WireView`], [`Kept`]), and which lists of a decision are
//! bounded by the view and travel as compact runs ([`WireDecision`]). The
//! algorithms (the diff, the runs, their application) are generic, here;
//! the types declare only their fields. A policy's module thus needs no
//! serde for its views and decisions.

pub(crate) mod change;
pub(crate) mod codec;
pub(crate) mod compact;
mod known;
pub(crate) mod postcard;
#[cfg(test)]
mod vectors;

pub use change::{FromKey, Kept, Keyed};
pub use codec::{WireError, decode, encode, encode_into};
pub use compact::Positioned;
/// Derives [`Wire`] (and, from `#[wire(...)]` attributes, [`Kept`],
/// [`Positioned`], [`WireView`] and [`WireDecision`]); see the
/// `gangway-wire-derive` crate.
pub use gangway_wire_derive::Wire;
pub use known::KnownChanges;
pub use postcard::{Reader, Wire, Writer};

use crate::SlotContract;

/// What the derived code calls: the generic halves of the format.
#[doc(hidden)]
pub mod __derive {
    pub use super::change::{
        Diff, MIN_ENTRIES, Side, apply_runs, apply_runs_paired, diff, diff_list, read_paired,
        runs_max, with_scratch, worth, write_runs,
    };
    pub use super::compact::{
        position_runs_max, read_position_runs, read_value_runs, value_runs, value_runs_max,
        with_position_runs, write_position_runs, write_value_runs,
    };
    pub use super::postcard::{
        add_max, larger_max, read_bounded_list, read_list, smaller_min, write_message,
    };
}

/// A view's encoding whole and as a change from the last one (derived
/// for a type marked `#[wire(view)]`).
pub trait WireView: Wire {
    /// Whether its views can travel as changes (some of its lists travel
    /// as runs): a host keeps a copy of the last view it sent only for
    /// such views.
    const CHANGES: bool;

    /// Encodes `self` as a change from `base`, the view of the instance's
    /// last answered call, into `out` (cleared first); `false` (leaving
    /// `out` unspecified) when the view has no change encoding or the
    /// whole view is about as short. `known`, when the host tracks its
    /// changes, names the entries that may differ other than by time (the
    /// others are kept unread). See [`encode_view_message_known`].
    fn encode_change(&self, base: &Self, known: Option<&KnownChanges>, out: &mut Vec<u8>) -> bool;

    /// Applies a change written by [`WireView::encode_change`] to `self`,
    /// which holds its base. After an error `self` must not be used.
    fn apply_change(&mut self, bytes: &[u8]) -> Result<(), WireError>;
}

/// A decision's decoding bounded by the view it answers, and its compact
/// form as runs over that view (derived for a type marked
/// `#[wire(answers = View)]`).
pub trait WireDecision: Wire {
    /// The view it answers.
    type View;

    /// Decodes a plain reply to `view`: a list bounded by the view
    /// (`#[wire(max = ...)]`) naming more entries than the view has is
    /// refused before anything is allocated. Trailing bytes are an error.
    fn decode_for(bytes: &[u8], view: &Self::View) -> Result<Self, WireError>;

    /// Encodes `self` as runs over `view` into `out` (cleared first);
    /// `false` (leaving `out` unspecified) when the decision has no compact
    /// form or it would not be shorter. See [`encode_reply_message`].
    fn encode_compact(&self, view: &Self::View, out: &mut Vec<u8>) -> bool;

    /// Decodes a compact reply to `view`; trailing bytes are an error.
    fn decode_compact(bytes: &[u8], view: &Self::View) -> Result<Self, WireError>;
}

/// Encodes a view of slot `S`.
///
/// ```
/// use gangway_plugin_sdk::{Fairness, wire, FairnessView};
/// let view = FairnessView { now_s: 7, ..FairnessView::default() };
/// let bytes = wire::encode_view::<Fairness>(&view);
/// assert_eq!(bytes, wire::encode(&view)); // postcard's bytes
/// assert_eq!(wire::decode_view::<Fairness>(&bytes).unwrap(), view);
/// ```
pub fn encode_view<S: SlotContract>(view: &S::View) -> Vec<u8> {
    let mut out = Vec::new();
    encode_view_into::<S>(view, &mut out);
    out
}

/// Encodes a view of slot `S` into `out` (cleared first).
pub fn encode_view_into<S: SlotContract>(view: &S::View, out: &mut Vec<u8>) {
    postcard::encode_into(view, out);
}

/// Decodes a view of slot `S`.
pub fn decode_view<S: SlotContract>(bytes: &[u8]) -> Result<S::View, WireError> {
    let mut view = S::View::default();
    decode_view_into::<S>(bytes, &mut view)?;
    Ok(view)
}

/// Decodes a view of slot `S` into `view`, reusing its memory (what the
/// guest glue does every round). After an error `view` holds a partial
/// decoding and must not be used.
pub fn decode_view_into<S: SlotContract>(
    bytes: &[u8],
    view: &mut S::View,
) -> Result<(), WireError> {
    postcard::decode_into(bytes, view)
}

/// The last byte of a view message that holds the whole view.
pub const VIEW_FULL: u8 = 0;
/// The last byte of a view message that holds a change from the view of
/// the instance's last answered call.
pub const VIEW_CHANGE: u8 = 1;

/// Encodes the view message a host sends a module whose manifest asks for
/// changes ([`crate::Manifest::view_changes`]) into `out` (cleared first):
/// `view` as a change from `base`, the view of the last call the instance
/// answered, when the slot has a change encoding and it is shorter, else
/// whole. The last byte says which ([`VIEW_CHANGE`] or [`VIEW_FULL`]).
///
/// ```
/// use gangway_plugin_sdk::{Fairness, wire, PendingJob, JobId, FairnessView};
/// let base = FairnessView {
///     now_s: 10,
///     jobs: (0..100).map(|i| PendingJob { id: JobId(i), ..PendingJob::default() }).collect(),
///     ..FairnessView::default()
/// };
/// let mut next = base.clone();
/// next.now_s = 11;
/// next.jobs.iter_mut().for_each(|j| j.waiting_s += 1);
/// next.jobs.remove(7);
/// let mut bytes = Vec::new();
/// wire::encode_view_message::<Fairness>(Some(&base), &next, &mut bytes);
/// assert_eq!(bytes.last(), Some(&wire::VIEW_CHANGE));
/// assert!(bytes.len() < 20);
/// let mut held = base.clone(); // what the guest kept from the last call
/// wire::decode_view_message::<Fairness>(&bytes, &mut held).unwrap();
/// assert_eq!(held, next);
/// ```
pub fn encode_view_message<S: SlotContract>(
    base: Option<&S::View>,
    view: &S::View,
    out: &mut Vec<u8>,
) {
    encode_view_message_known::<S>(base, view, None, out);
}

/// [`encode_view_message`] by a host that knows what changed since `base`:
/// `known` names the jobs and VCs whose entries may differ other than by
/// time passing, and an entry of any other id found in `base` is kept
/// without comparing it (see [`KnownChanges`]). `None` compares every
/// entry, as [`encode_view_message`] does.
///
/// ```
/// use gangway_plugin_sdk::{Fairness, wire, PendingJob, JobId, FairnessView};
/// let base = FairnessView {
///     now_s: 10,
///     jobs: (0..100).map(|i| PendingJob { id: JobId(i), ..PendingJob::default() }).collect(),
///     ..FairnessView::default()
/// };
/// let mut next = base.clone();
/// next.now_s = 11;
/// next.jobs.iter_mut().for_each(|j| j.waiting_s += 1);
/// next.jobs[3].attempts = 1;
/// let mut known = wire::KnownChanges::default();
/// known.add_job(JobId(3));
/// let mut bytes = Vec::new();
/// wire::encode_view_message_known::<Fairness>(Some(&base), &next, Some(&known), &mut bytes);
/// let mut held = base.clone();
/// wire::decode_view_message::<Fairness>(&bytes, &mut held).unwrap();
/// assert_eq!(held, next);
/// ```
pub fn encode_view_message_known<S: SlotContract>(
    base: Option<&S::View>,
    view: &S::View,
    known: Option<&KnownChanges>,
    out: &mut Vec<u8>,
) {
    match base {
        Some(base) if view.encode_change(base, known, out) => out.push(VIEW_CHANGE),
        _ => {
            encode_view_into::<S>(view, out);
            out.push(VIEW_FULL);
        }
    }
}

/// Decodes a view message ([`encode_view_message`]) into `view`, which
/// holds the view of the last call (what the guest glue keeps). After an
/// error `view` must not be used.
pub fn decode_view_message<S: SlotContract>(
    bytes: &[u8],
    view: &mut S::View,
) -> Result<(), WireError> {
    match bytes.split_last() {
        Some((&VIEW_FULL, body)) => decode_view_into::<S>(body, view),
        Some((&VIEW_CHANGE, body)) => view.apply_change(body),
        _ => Err(WireError {
            what: "view message",
            reason: "empty, or its last byte is neither 0 (whole view) nor 1 (change)".into(),
        }),
    }
}

/// The last byte of a view or reply message that carries contract 2.2's
/// GPU types after it: the message, then the types' bytes (a
/// [`crate::TypesView`] beside a view, [`crate::TypeChoices`] beside a
/// decision), their length as 4 bytes little-endian, then this byte. Only
/// a module whose manifest takes the types is sent one, and only on a
/// cluster of several types.
pub const TYPED: u8 = 2;

/// Appends `extra` to the view or reply message in `out` ([`TYPED`]).
///
/// ```
/// use gangway_plugin_sdk::{wire, TypeChoice, TypeChoices, JobId, GpuTypeId};
/// let choices = TypeChoices { choices: vec![TypeChoice { job: JobId(3), gpu_type: GpuTypeId(1) }] };
/// let mut message = vec![7, wire::REPLY_PLAIN];
/// wire::append_typed(&choices, &mut message);
/// let (reply, extra) = wire::split_typed(&message).unwrap();
/// assert_eq!(reply, [7, wire::REPLY_PLAIN]);
/// assert_eq!(wire::decode_typed::<TypeChoices>(extra.unwrap()).unwrap(), choices);
/// assert_eq!(wire::split_typed(&[7, 0]).unwrap(), (&[7u8, 0][..], None));
/// ```
pub fn append_typed<T: Wire>(extra: &T, out: &mut Vec<u8>) {
    let mut bytes = Vec::new();
    postcard::encode_into(extra, &mut bytes);
    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&bytes);
    out.extend_from_slice(&len.to_le_bytes());
    out.push(TYPED);
}

/// Splits a message that may carry contract 2.2's types ([`TYPED`]): the
/// message before them, and their bytes if it carries them.
pub fn split_typed(bytes: &[u8]) -> Result<(&[u8], Option<&[u8]>), WireError> {
    let bad = |reason: &str| WireError {
        what: "typed message",
        reason: reason.into(),
    };
    let Some((&TYPED, rest)) = bytes.split_last() else {
        return Ok((bytes, None));
    };
    let Some((body, len)) = rest.split_last_chunk::<4>() else {
        return Err(bad("shorter than its length"));
    };
    let len = usize::try_from(u32::from_le_bytes(*len)).unwrap_or(usize::MAX);
    match body.len().checked_sub(len) {
        Some(at) => Ok((&body[..at], Some(&body[at..]))),
        None => Err(bad("its types are longer than the message")),
    }
}

/// Decodes the types a typed message carries ([`split_typed`]).
pub fn decode_typed<T: Wire + Default>(bytes: &[u8]) -> Result<T, WireError> {
    let mut value = T::default();
    postcard::decode_into(bytes, &mut value)?;
    Ok(value)
}

/// The last byte of a reply message that holds the plain decision.
pub const REPLY_PLAIN: u8 = 0;
/// The last byte of a reply message that holds the decision as runs over
/// the view it answers.
pub const REPLY_COMPACT: u8 = 1;

/// Encodes the reply message a module sends to a view message into `out`
/// (cleared first): `decision` as runs over `view` when the slot has a
/// compact encoding and it is shorter, else plain; the last byte says
/// which ([`REPLY_COMPACT`] or [`REPLY_PLAIN`]).
///
/// ```
/// use gangway_plugin_sdk::{Gang, wire, GangAction, GangDecision, QueueView};
/// let view = QueueView { jobs: vec![Default::default(); 300], ..QueueView::default() };
/// let backfill = GangDecision { on_blocked: vec![GangAction::Backfill; 300], max_reservations: 0 };
/// let mut bytes = Vec::new();
/// wire::encode_reply_message::<Gang>(&backfill, &view, &mut bytes);
/// assert_eq!(bytes, [1, 0xac, 0x02, 0, 0, wire::REPLY_COMPACT]); // one run of 300
/// assert_eq!(wire::decode_reply_message::<Gang>(&bytes, &view).unwrap(), backfill);
/// ```
pub fn encode_reply_message<S: SlotContract>(
    decision: &S::Decision,
    view: &S::View,
    out: &mut Vec<u8>,
) {
    if decision.encode_compact(view, out) {
        out.push(REPLY_COMPACT);
    } else {
        encode_decision_into::<S>(decision, out);
        out.push(REPLY_PLAIN);
    }
}

/// Decodes a reply message ([`encode_reply_message`]) to `view`, refused
/// unheard when longer than any plain answer to it can be (plus its tag).
pub fn decode_reply_message<S: SlotContract>(
    bytes: &[u8],
    view: &S::View,
) -> Result<S::Decision, WireError> {
    codec::check_reply_len::<S::Decision>(bytes, S::max_reply_bytes(view).saturating_add(1))?;
    match bytes.split_last() {
        Some((&REPLY_PLAIN, body)) => decode_decision::<S>(body, view),
        Some((&REPLY_COMPACT, body)) => S::Decision::decode_compact(body, view),
        _ => Err(WireError {
            what: "reply message",
            reason: "empty, or its last byte is neither 0 (plain) nor 1 (compact)".into(),
        }),
    }
}

/// Encodes a decision of slot `S`.
pub fn encode_decision<S: SlotContract>(decision: &S::Decision) -> Vec<u8> {
    let mut out = Vec::new();
    encode_decision_into::<S>(decision, &mut out);
    out
}

/// Encodes a decision of slot `S` into `out` (cleared first).
pub fn encode_decision_into<S: SlotContract>(decision: &S::Decision, out: &mut Vec<u8>) {
    postcard::encode_into(decision, out);
}

/// Decodes the reply of slot `S` to `view`, bounded by the view: a reply
/// longer than any well-formed answer to it
/// ([`SlotContract::max_reply_bytes`]), or naming more entries than the
/// view has jobs, is refused before anything is allocated.
///
/// ```
/// use gangway_plugin_sdk::{Fairness, wire, FairnessView};
/// let view = FairnessView::default(); // no jobs: the only answer is empty
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
    codec::check_reply_len::<S::Decision>(bytes, S::max_reply_bytes(view))?;
    S::Decision::decode_for(bytes, view)
}
