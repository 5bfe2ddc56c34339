//! The gang slot: what a job that does not fit does to the jobs behind it.

use serde::{Deserialize, Serialize};

use crate::slot::{Policy, Slot, SlotContract};
use crate::slots::QueueView;
use crate::wire::codec::{self, WireError};
use crate::wire::{compact, delta, fast};

/// What a job that cannot be placed does to the jobs behind it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum GangAction {
    /// Later jobs may start around it (backfill).
    #[default]
    Backfill,
    /// Later jobs wait too (head-of-line blocking); they are *held by policy*.
    Block,
    /// Free GPUs in the best domain for this job are held for it (up to its
    /// size) so later jobs cannot take them; later jobs may still use the rest.
    Reserve,
}

/// The gang slot's answer: one action per job of the [`QueueView`], used if
/// that job turns out not to fit this round.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GangDecision {
    /// `on_blocked[i]` applies to job `i` of the view.
    pub on_blocked: Vec<GangAction>,
    /// At most this many jobs hold reservations in one round; further
    /// [`GangAction::Reserve`] answers act as [`GangAction::Backfill`].
    pub max_reservations: u32,
}

/// The gang slot: what a blocked job does to the jobs behind it.
pub trait GangPolicy {
    /// Returns one action per job of `view`, in order.
    fn on_blocked(&self, view: &QueueView) -> GangDecision;
}

impl<P: GangPolicy + ?Sized> Policy<Gang> for P {
    fn decide(&self, view: &QueueView) -> GangDecision {
        self.on_blocked(view)
    }
}

/// The gang slot (WIT interface `gang`, function `on-blocked`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gang;

impl SlotContract for Gang {
    const SLOT: Slot = Slot::Gang;
    const VIEW_CHANGES: bool = true;
    type View = QueueView;
    type Decision = GangDecision;

    fn max_reply_bytes(view: &QueueView) -> usize {
        codec::LEN + view.jobs.len() + codec::U32
    }
    fn encode_view(view: &QueueView, out: &mut Vec<u8>) {
        fast::encode_queue_view(view, out);
    }
    fn decode_view_into(bytes: &[u8], view: &mut QueueView) -> Result<(), WireError> {
        fast::decode_queue_view_into(bytes, view)
    }
    fn encode_view_delta(base: &QueueView, view: &QueueView, out: &mut Vec<u8>) -> bool {
        delta::encode_queue_view_delta(base, view, out)
    }
    fn apply_view_delta(bytes: &[u8], view: &mut QueueView) -> Result<(), WireError> {
        delta::apply_queue_view_delta(bytes, view)
    }
    fn encode_decision_compact(d: &GangDecision, _view: &QueueView, out: &mut Vec<u8>) -> bool {
        compact::encode_gang(d, out)
    }
    fn decode_decision_compact(bytes: &[u8], view: &QueueView) -> Result<GangDecision, WireError> {
        compact::decode_gang(bytes, view)
    }
    fn encode_decision(d: &GangDecision, out: &mut Vec<u8>) {
        fast::encode_gang(d, out);
    }
    fn decode_decision(bytes: &[u8], view: &QueueView) -> Result<GangDecision, WireError> {
        codec::check_reply_len::<Self::Decision>(bytes, Self::max_reply_bytes(view))?;
        fast::decode_gang(bytes, view.jobs.len())
    }
}
