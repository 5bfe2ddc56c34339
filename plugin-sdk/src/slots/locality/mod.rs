//! The locality-relaxation slot: how widely each eligible gang may spread.

mod fallback;
mod rules;
#[cfg(any(test, feature = "testing"))]
mod testing;

use serde::{Deserialize, Serialize};

use crate::slot_contract::{InvalidDecision, Policy, SlotContract, WorkCost};
use crate::slots::QueueView;
use crate::slots::Slot;
use crate::slots::queue_view;
use crate::view::SpreadLimit;
use crate::wire::Wire;
use crate::wire::codec;

pub use fallback::Strict;
/// The locality slot's answer: one spread limit per job of the
/// [`QueueView`], in the same order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, Wire)]
#[wire(answers = QueueView)]
pub struct LocalityDecision {
    /// `limits[i]` bounds where job `i` may go this round: no level deeper
    /// than the server level. (In a compact reply, runs of equal limits.)
    #[wire(max = jobs, runs)]
    pub limits: Vec<SpreadLimit>,
}

/// The locality-relaxation slot: a spread limit per eligible job.
pub trait LocalityPolicy {
    /// Returns one spread limit per job of `view`, in order.
    fn spread(&self, view: &QueueView) -> LocalityDecision;
}

impl<P: LocalityPolicy + ?Sized> Policy<Locality> for P {
    fn decide(&self, view: &QueueView) -> LocalityDecision {
        self.spread(view)
    }
}

/// The locality slot's export glue, with its WIT names: what
/// [`export!`](crate::export)`(Locality, ...)` expands.
#[doc(hidden)]
#[macro_export]
macro_rules! __gangway_export_locality {
    ($policy:ty) => {
        $crate::__gangway_export!(
            __GangwayLocality,
            __gangway_locality,
            "locality-policy-buffered",
            $policy,
            locality,
            locality_buffered,
            spread,
            $crate::Locality
        );
    };
}
#[doc(hidden)]
pub use crate::__gangway_export_locality as Locality;

/// The locality slot (WIT interface `locality`, function `spread`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Locality;

impl SlotContract for Locality {
    const SLOT: Slot = Slot::Locality;
    const NAME: &'static str = "locality";
    const CALL: &'static str = "spread";
    const FALLBACK: &'static str = "strict";
    /// The costliest built-in module (the locality built-ins), measured and rounded up.
    const WORK: WorkCost = WorkCost {
        per_call: 14_000,
        per_job: 600,
        ..WorkCost::NONE
    };
    type View = QueueView;
    type Decision = LocalityDecision;
    type Fallback = Strict;

    fn validate(view: &Self::View, d: &Self::Decision) -> Result<(), InvalidDecision> {
        rules::validate(view, d)
    }
    queue_view::queue_view_methods!();

    fn max_reply_bytes(view: &QueueView) -> usize {
        codec::LEN + view.jobs.len() * (1 + codec::U32)
    }
}
