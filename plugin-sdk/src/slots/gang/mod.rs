//! The gang slot: what a job that does not fit does to the jobs behind it.

mod fallback;
mod rules;
#[cfg(any(test, feature = "testing"))]
mod testing;

use serde::{Deserialize, Serialize};

use crate::slot_contract::{InvalidDecision, Policy, SlotContract, WorkCost};
use crate::slots::QueueView;
use crate::slots::Slot;
use crate::slots::queue_view;
use crate::wire::Wire;
use crate::wire::codec;

pub use fallback::Backfill;
/// What a job that cannot be placed does to the jobs behind it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, Wire)]
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
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, Wire)]
#[wire(answers = QueueView)]
pub struct GangDecision {
    /// `on_blocked[i]` applies to job `i` of the view. (In a compact
    /// reply, runs of equal actions.)
    #[wire(max = jobs, runs)]
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

/// The gang slot's export glue, with its WIT names: what
/// [`export!`](crate::export)`(Gang, ...)` expands.
#[doc(hidden)]
#[macro_export]
macro_rules! __gangway_export_gang {
    ($policy:ty) => {
        $crate::__gangway_export!(
            __GangwayGang,
            __gangway_gang,
            "gang-policy-buffered",
            $policy,
            gang,
            gang_buffered,
            on_blocked,
            $crate::Gang
        );
    };
}
#[doc(hidden)]
pub use crate::__gangway_export_gang as Gang;

/// The gang slot (WIT interface `gang`, function `on-blocked`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gang;

impl SlotContract for Gang {
    const SLOT: Slot = Slot::Gang;
    const NAME: &'static str = "gang";
    const CALL: &'static str = "on-blocked";
    const FALLBACK: &'static str = "backfill";
    /// The costliest built-in module (the gang built-ins), measured and rounded up.
    const WORK: WorkCost = WorkCost {
        per_call: 11_000,
        per_job: 600,
        ..WorkCost::NONE
    };
    type View = QueueView;
    type Decision = GangDecision;
    type Fallback = Backfill;

    fn validate(view: &Self::View, d: &Self::Decision) -> Result<(), InvalidDecision> {
        rules::validate(view, d)
    }
    queue_view::queue_view_methods!();

    fn max_reply_bytes(view: &QueueView) -> usize {
        codec::LEN + view.jobs.len() + codec::U32
    }
}
