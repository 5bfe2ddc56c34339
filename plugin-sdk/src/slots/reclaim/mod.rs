//! The reclaim slot: stop running jobs whole so that waiting ones can start
//! (preemption: quota reclaim, preemptive least-attained-service).

mod give_back;
mod rules;
#[cfg(any(test, feature = "testing"))]
pub(crate) mod testing;

pub use give_back::{GpuCounts, give_back_walk};

use serde::{Deserialize, Serialize};

use crate::ids::JobId;
use crate::manifest::{Manifest, RunningScope};
use crate::slot_contract::{InvalidDecision, Policy, SlotContract, WorkCost};
use crate::slots::Nothing;
use crate::slots::Slot;
use crate::view::{ClusterSummary, RunningJob, ServerState, VcUsage, WaitingJob};
use crate::wire::Wire;
use crate::wire::codec;

/// What the reclaim slot sees, after a round's placement: the jobs running
/// now and the jobs of the round's view that did not start, with why. Its
/// VCs, servers, running and waiting jobs travel as runs of a view change.
#[derive(Debug, Default, PartialEq, Eq, Serialize, Deserialize, Wire)]
#[wire(view)]
pub struct ReclaimView {
    /// The host's clock (seconds).
    #[wire(now)]
    pub now_s: u64,
    /// Cluster capacity after this round's starts.
    pub cluster: ClusterSummary,
    /// Every virtual cluster, indexed by [`crate::VcId`], after this round's starts.
    #[wire(runs)]
    pub vcs: Vec<VcUsage>,
    /// Every server, by id, with its free GPUs after this round's starts
    /// (under [`crate::RunningScope::Borrowed`] and
    /// [`crate::RunningScope::GiveBack`], only the servers with free GPUs or
    /// running a job of `running`, and `waiting` only the jobs their VC's
    /// quota covers).
    #[wire(runs)]
    pub servers: Vec<ServerState>,
    /// Every running job, by id (with [`RunningScope::Borrowed`], only
    /// those of VCs that borrow; with [`RunningScope::GiveBack`], only those
    /// of [`ReclaimView::give_back`]; both per type to a policy that takes
    /// the GPU types, [`ReclaimView::give_back_typed`]).
    #[wire(runs)]
    pub running: Vec<RunningJob>,
    /// The jobs of this round's view still waiting, in fairness order.
    #[wire(runs)]
    pub waiting: Vec<WaitingJob>,
}

impl Clone for ReclaimView {
    fn clone(&self) -> Self {
        ReclaimView {
            now_s: self.now_s,
            cluster: self.cluster.clone(),
            vcs: self.vcs.clone(),
            servers: self.servers.clone(),
            running: self.running.clone(),
            waiting: self.waiting.clone(),
        }
    }

    /// Field by field, reusing the vectors' memory, the running jobs' parts
    /// included (a Wasm host keeps a copy of each view it sent, the base of
    /// the next view change).
    fn clone_from(&mut self, source: &Self) {
        let ReclaimView {
            now_s,
            cluster,
            vcs,
            servers,
            running,
            waiting,
        } = source;
        self.now_s = *now_s;
        self.cluster.clone_from(cluster);
        self.vcs.clone_from(vcs);
        self.servers.clone_from(servers);
        self.running.clone_from(running);
        self.waiting.clone_from(waiting);
    }
}

/// The reclaim slot's answer: which running jobs to stop, for which waiting
/// jobs. Empty: stop nothing.
///
/// The host stops the `stop` jobs whole (each is re-queued as a preempted
/// attempt) and starts the `start` jobs in order, each within its spread
/// limit, at once. It refuses the whole decision, stopping nothing, if a
/// `start` job would not fit after the stops, or if a stopped job's GPUs are
/// not used by any `start` job (it never stops more than it needs).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, Wire)]
#[wire(answers = ReclaimView)]
pub struct ReclaimDecision {
    /// Running jobs to stop, each at most once.
    pub stop: Vec<JobId>,
    /// Waiting jobs to start with what the stops free, in order.
    pub start: Vec<JobId>,
}

/// The reclaim slot: choose running jobs to stop so waiting ones can start.
pub trait ReclaimPolicy {
    /// The jobs to stop and the jobs to start in their place.
    fn reclaim(&self, view: &ReclaimView) -> ReclaimDecision;

    /// Which running jobs the policy needs to see (declared once, at load):
    /// by default every one.
    fn running_scope(&self) -> RunningScope {
        RunningScope::All
    }

    /// Whether the policy takes the cluster's GPU types beside its view
    /// (contract 2.2): then, on a cluster of several types, the host asks
    /// [`ReclaimPolicy::reclaim_typed`]. The default: no. A constant, so
    /// that a module that does not take them carries no code for them.
    const GPU_TYPES: bool = false;

    /// The jobs to stop and start knowing the GPU types (`types`). The
    /// default decides as [`ReclaimPolicy::reclaim`].
    fn reclaim_typed(&self, view: &ReclaimView, types: &crate::TypesView) -> ReclaimDecision {
        let _ = types;
        self.reclaim(view)
    }
}

impl<P: ReclaimPolicy + ?Sized> Policy<Reclaim> for P {
    const GPU_TYPES: bool = P::GPU_TYPES;
    fn decide(&self, view: &ReclaimView) -> ReclaimDecision {
        self.reclaim(view)
    }
    fn decide_typed(
        &self,
        view: &ReclaimView,
        types: &crate::TypesView,
    ) -> (ReclaimDecision, crate::TypeChoices) {
        (
            self.reclaim_typed(view, types),
            crate::TypeChoices::default(),
        )
    }
    fn manifest(&self) -> Manifest {
        Manifest {
            running: self.running_scope(),
            gpu_types: P::GPU_TYPES,
            server_types: P::GPU_TYPES,
            ..Manifest::default()
        }
    }
}

/// The reclaim slot's export glue, with its WIT names: what
/// [`export!`](crate::export)`(Reclaim, ...)` expands.
#[doc(hidden)]
#[macro_export]
macro_rules! __gangway_export_reclaim {
    ($policy:ty) => {
        $crate::__gangway_export!(
            __GangwayReclaim,
            __gangway_reclaim,
            "reclaim-policy-buffered",
            $policy,
            reclaim,
            reclaim_buffered,
            reclaim,
            $crate::Reclaim
        );
    };
}
#[doc(hidden)]
pub use crate::__gangway_export_reclaim as Reclaim;

/// The reclaim slot (WIT interface `reclaim`, function `reclaim`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reclaim;

impl SlotContract for Reclaim {
    const SLOT: Slot = Slot::Reclaim;
    const NAME: &'static str = "reclaim";
    const CALL: &'static str = "reclaim";
    const FALLBACK: &'static str = "none";
    /// The costliest built-in module (las and quota-reclaim), measured and
    /// rounded up: the costliest call in the replays measured, `las`'s 19.9
    /// million units on 1,062 jobs (and 539 servers, which cost it less than
    /// its jobs), is under it.
    const WORK: WorkCost = WorkCost {
        per_call: 340_000,
        per_job: 20_000,
        ..WorkCost::NONE
    };
    const FALLBACK_DECIDES_NOTHING: bool = true;
    type View = ReclaimView;
    type Decision = ReclaimDecision;
    type Fallback = Nothing;

    fn validate(view: &Self::View, d: &Self::Decision) -> Result<(), InvalidDecision> {
        rules::validate(view, d)
    }
    fn view_size(view: &ReclaimView) -> crate::ViewSize {
        crate::ViewSize {
            jobs: (view.running.len() + view.waiting.len()) as u64,
            servers: view.servers.len() as u64,
        }
    }
    fn view_jobs(view: &ReclaimView) -> usize {
        view.running.len() + view.waiting.len()
    }
    fn idle_view(cluster: &ClusterSummary, vcs: &[VcUsage]) -> ReclaimView {
        ReclaimView {
            cluster: cluster.clone(),
            vcs: vcs.to_vec(),
            ..ReclaimView::default()
        }
    }

    fn max_reply_bytes(view: &ReclaimView) -> usize {
        2 * codec::LEN + (view.running.len() + view.waiting.len()) * codec::U64
    }
}
