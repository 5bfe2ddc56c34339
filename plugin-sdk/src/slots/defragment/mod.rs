//! The defragment slot: migrate running jobs (checkpoint and restart them
//! elsewhere) so that a waiting gang finds the local room it needs.

mod rules;
#[cfg(any(test, feature = "testing"))]
pub(crate) mod testing;

use serde::{Deserialize, Serialize};

use crate::ids::{JobId, ServerId};
use crate::slot_contract::{InvalidDecision, Policy, SlotContract, WorkCost};
use crate::slots::Nothing;
use crate::slots::Slot;
use crate::view::ServerState;
use crate::view::{ClusterSummary, RunningJob, VcUsage, WaitingJob};
use crate::wire::Wire;
use crate::wire::codec;

/// What the defragment slot sees, after a round's placement and reclaim.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, Wire)]
#[wire(view)]
pub struct DefragmentView {
    /// The host's clock (seconds).
    pub now_s: u64,
    /// Cluster capacity.
    pub cluster: ClusterSummary,
    /// Every server, by id.
    pub servers: Vec<ServerState>,
    /// Every running job, by id.
    pub running: Vec<RunningJob>,
    /// The jobs of the round still waiting with fragmentation delay: enough
    /// GPUs are free, not within their spread limit.
    pub waiting: Vec<WaitingJob>,
}

/// One migration: `job` is checkpointed and restarted with these GPUs per
/// server.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, Wire)]
pub struct Move {
    /// A running job.
    pub job: JobId,
    /// Where it goes: GPUs per server, adding up to the job's GPUs.
    pub to: Vec<(ServerId, u32)>,
}

/// The defragment slot's answer: migrations that make room for one waiting
/// gang. Empty: move nothing.
///
/// The host applies the moves in order, each onto GPUs free at that point,
/// then starts `start` within its spread limit; if any move does not fit or
/// the gang still does not fit, it refuses the whole decision and moves
/// nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, Wire)]
#[wire(answers = DefragmentView)]
pub struct DefragmentDecision {
    /// Migrations, in order.
    pub moves: Vec<Move>,
    /// The waiting job the moves make room for (required when there are moves).
    pub start: Option<JobId>,
}

/// The defragment slot: propose migrations that free room for a waiting gang.
pub trait DefragmentPolicy {
    /// The moves, and the job they are for.
    fn plan(&self, view: &DefragmentView) -> DefragmentDecision;
}

impl<P: DefragmentPolicy + ?Sized> Policy<Defragment> for P {
    fn decide(&self, view: &DefragmentView) -> DefragmentDecision {
        self.plan(view)
    }
}

/// The defragment slot's export glue, with its WIT names: what
/// [`export!`](crate::export)`(Defragment, ...)` expands.
#[doc(hidden)]
#[macro_export]
macro_rules! __gangway_export_defragment {
    ($policy:ty) => {
        $crate::__gangway_export!(
            __GangwayDefragment,
            __gangway_defragment,
            "defragment-policy-buffered",
            $policy,
            defragment,
            defragment_buffered,
            plan,
            $crate::Defragment
        );
    };
}
#[doc(hidden)]
pub use crate::__gangway_export_defragment as Defragment;

/// The defragment slot (WIT interface `defragment`, function `plan`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Defragment;

impl SlotContract for Defragment {
    const SLOT: Slot = Slot::Defragment;
    const NAME: &'static str = "defragment";
    const CALL: &'static str = "plan";
    const FALLBACK: &'static str = "none";
    /// The costliest built-in module (gandiva), measured and rounded up:
    /// its costliest call in the replays measured, 33.5 million units on
    /// 1,344 jobs and 539 servers, is under it.
    const WORK: WorkCost = WorkCost {
        per_call: 2_500,
        per_job: 21_000,
        per_server: 21_000,
    };
    const FALLBACK_DECIDES_NOTHING: bool = true;
    type View = DefragmentView;
    type Decision = DefragmentDecision;
    type Fallback = Nothing;

    fn validate(view: &Self::View, d: &Self::Decision) -> Result<(), InvalidDecision> {
        rules::validate(view, d)
    }
    fn view_size(view: &DefragmentView) -> crate::ViewSize {
        crate::ViewSize {
            jobs: (view.running.len() + view.waiting.len()) as u64,
            servers: view.servers.len() as u64,
        }
    }
    fn view_jobs(view: &DefragmentView) -> usize {
        view.running.len() + view.waiting.len() + view.servers.len()
    }
    fn idle_view(cluster: &ClusterSummary, _vcs: &[VcUsage]) -> DefragmentView {
        DefragmentView {
            cluster: cluster.clone(),
            ..DefragmentView::default()
        }
    }

    fn max_reply_bytes(view: &DefragmentView) -> usize {
        let gpus: usize = view.running.iter().map(|j| j.gpus as usize).sum();
        2 * codec::LEN
            + 1
            + codec::U64
            + view.running.len() * (codec::U64 + codec::LEN)
            + gpus * 2 * codec::U32
    }
}
