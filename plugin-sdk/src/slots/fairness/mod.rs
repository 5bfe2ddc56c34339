//! The fairness slot: order the pending jobs and mark which may start now.

mod fallback;
mod rules;
#[cfg(any(test, feature = "testing"))]
pub(crate) mod testing;

use serde::{Deserialize, Serialize};

use crate::gpu_types::{TypeChoices, TypesView};
use crate::ids::JobId;
use crate::manifest::{Manifest, QueueOrder};
use crate::slot_contract::{InvalidDecision, Policy, SlotContract, WorkCost};
use crate::slots::Slot;
use crate::view::{ClusterSummary, PendingJob, VcUsage};
use crate::wire::Wire;
use crate::wire::codec;

pub use fallback::FifoQuota;
/// Everything the fairness slot sees. Its VCs and jobs travel as runs of
/// a view change.
#[derive(Debug, Default, PartialEq, Eq, Serialize, Deserialize, Wire)]
#[wire(view)]
pub struct FairnessView {
    /// The host's clock for this round (seconds).
    #[wire(now)]
    pub now_s: u64,
    /// Cluster capacity.
    pub cluster: ClusterSummary,
    /// Every virtual cluster known to the scheduler, indexed by [`crate::VcId`].
    #[wire(runs)]
    pub vcs: Vec<VcUsage>,
    /// The pending jobs of this round, ordered by (submit time, id): all of
    /// them, or each VC's first ones in the policy's [`QueueOrder`] (see
    /// [`FairnessPolicy::queue_order`]; `vcs[v].pending_jobs` says how many
    /// a VC has in all).
    #[wire(runs)]
    pub jobs: Vec<PendingJob>,
}

impl Clone for FairnessView {
    fn clone(&self) -> Self {
        FairnessView {
            now_s: self.now_s,
            cluster: self.cluster.clone(),
            vcs: self.vcs.clone(),
            jobs: self.jobs.clone(),
        }
    }

    /// Field by field, reusing the vectors' memory (a Wasm host keeps a
    /// copy of each view it sent, the base of the next view change).
    fn clone_from(&mut self, source: &Self) {
        let FairnessView {
            now_s,
            cluster,
            vcs,
            jobs,
        } = source;
        self.now_s = *now_s;
        self.cluster.clone_from(cluster);
        self.vcs.clone_from(vcs);
        self.jobs.clone_from(jobs);
    }
}

/// One entry of a [`FairnessDecision`]: a job of the view, and whether
/// it may start (in a compact reply, runs of view positions with the flag).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, Wire)]
pub struct Ranked {
    /// The job.
    #[wire(key)]
    pub job: JobId,
    /// Whether it may start this round.
    #[wire(flag)]
    pub eligible: bool,
}

/// The fairness slot's answer: the order in which to try the view's jobs,
/// and which of them may start now.
///
/// `order` must be a permutation of exactly the view's jobs. A job with
/// `eligible == false` waits this round with the reason *fair-share*.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, Wire)]
#[wire(answers = FairnessView)]
pub struct FairnessDecision {
    /// Every job of the view once, most urgent first, with its eligibility.
    #[wire(max = jobs, positions)]
    pub order: Vec<Ranked>,
}

/// The fairness slot: order pending jobs and mark which may start now.
pub trait FairnessPolicy {
    /// Orders every job of `view` and marks eligibility.
    fn order(&self, view: &FairnessView) -> FairnessDecision;

    /// The order within each VC this policy follows, so the host can show
    /// it only each VC's first jobs in that order (see [`QueueOrder`]). The
    /// default, [`QueueOrder::All`], shows every pending job every round.
    fn queue_order(&self) -> QueueOrder {
        QueueOrder::All
    }

    /// Whether the policy takes the cluster's GPU types beside its view
    /// (contract 2.2): then, on a cluster of several types, the host asks
    /// [`FairnessPolicy::order_typed`] instead of [`FairnessPolicy::order`].
    /// The default: no, the view alone. A constant, so that a module that
    /// does not take them carries no code for them.
    const GPU_TYPES: bool = false;

    /// Orders every job of `view` knowing the GPU types (`types`), and
    /// chooses a type for any of them: a job with a choice starts this
    /// round only on that type, one of its allowed types. The default
    /// orders as [`FairnessPolicy::order`] and chooses nothing.
    fn order_typed(
        &self,
        view: &FairnessView,
        types: &TypesView,
    ) -> (FairnessDecision, TypeChoices) {
        let _ = types;
        (self.order(view), TypeChoices::default())
    }
}

impl<P: FairnessPolicy + ?Sized> Policy<Fairness> for P {
    const GPU_TYPES: bool = P::GPU_TYPES;
    fn decide(&self, view: &FairnessView) -> FairnessDecision {
        self.order(view)
    }
    fn decide_typed(
        &self,
        view: &FairnessView,
        types: &TypesView,
    ) -> (FairnessDecision, TypeChoices) {
        self.order_typed(view, types)
    }
    fn manifest(&self) -> Manifest {
        Manifest {
            queue_order: self.queue_order(),
            gpu_types: P::GPU_TYPES,
            ..Manifest::default()
        }
    }
}

/// The fairness slot's export glue, with its WIT names: what
/// [`export!`](crate::export)`(Fairness, ...)` expands.
#[doc(hidden)]
#[macro_export]
macro_rules! __gangway_export_fairness {
    ($policy:ty) => {
        $crate::__gangway_export!(
            __GangwayFairness,
            __gangway_fairness,
            "fairness-policy-buffered",
            $policy,
            fairness,
            fairness_buffered,
            order,
            $crate::Fairness
        );
    };
}
#[doc(hidden)]
pub use crate::__gangway_export_fairness as Fairness;

/// The fairness slot (WIT interface `fairness`, function `order`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fairness;

impl SlotContract for Fairness {
    const SLOT: Slot = Slot::Fairness;
    const NAME: &'static str = "fairness";
    const CALL: &'static str = "order";
    const FALLBACK: &'static str = "fifo-quota";
    /// The costliest built-in module (vc-quota), measured and rounded up.
    const WORK: WorkCost = WorkCost {
        per_call: 32_000,
        per_job: 1_200,
        ..WorkCost::NONE
    };
    type View = FairnessView;
    type Decision = FairnessDecision;
    type Fallback = FifoQuota;

    fn validate(view: &Self::View, d: &Self::Decision) -> Result<(), InvalidDecision> {
        rules::validate(view, d)
    }
    fn view_jobs(view: &FairnessView) -> usize {
        view.jobs.len()
    }
    fn idle_view(cluster: &ClusterSummary, vcs: &[VcUsage]) -> FairnessView {
        FairnessView {
            cluster: cluster.clone(),
            vcs: vcs.to_vec(),
            ..FairnessView::default()
        }
    }

    fn max_reply_bytes(view: &FairnessView) -> usize {
        codec::LEN + view.jobs.len() * (codec::U64 + 1)
    }
}
