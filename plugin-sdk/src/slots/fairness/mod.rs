//! The fairness slot: order the pending jobs and mark which may start now.

mod fallback;
mod rules;
pub(crate) mod wire;

use serde::{Deserialize, Serialize};

use crate::ids::JobId;
use crate::manifest::{Manifest, QueueOrder};
use crate::slot_contract::{InvalidDecision, Policy, SlotContract, WorkCost};
use crate::slots::Slot;
use crate::view::{ClusterSummary, PendingJob, VcUsage};
use crate::wire::codec::{self, WireError};

pub use fallback::FifoQuota;
/// Everything the fairness slot sees.
#[derive(Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FairnessView {
    /// The host's clock for this round (seconds).
    pub now_s: u64,
    /// Cluster capacity.
    pub cluster: ClusterSummary,
    /// Every virtual cluster known to the scheduler, indexed by [`crate::VcId`].
    pub vcs: Vec<VcUsage>,
    /// The pending jobs of this round, ordered by (submit time, id): all of
    /// them, or each VC's first ones in the policy's [`QueueOrder`] (see
    /// [`FairnessPolicy::queue_order`]; `vcs[v].pending_jobs` says how many
    /// a VC has in all).
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

/// One entry of a [`FairnessDecision`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ranked {
    /// The job.
    pub job: JobId,
    /// Whether it may start this round.
    pub eligible: bool,
}

/// The fairness slot's answer: the order in which to try the view's jobs,
/// and which of them may start now.
///
/// `order` must be a permutation of exactly the view's jobs. A job with
/// `eligible == false` waits this round with the reason *fair-share*.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FairnessDecision {
    /// Every job of the view once, most urgent first, with its eligibility.
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
}

impl<P: FairnessPolicy + ?Sized> Policy<Fairness> for P {
    fn decide(&self, view: &FairnessView) -> FairnessDecision {
        self.order(view)
    }
    fn manifest(&self) -> Manifest {
        Manifest {
            queue_order: self.queue_order(),
            ..Manifest::default()
        }
    }
}

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
    };
    const VIEW_CHANGES: bool = true;
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
    fn encode_view(view: &FairnessView, out: &mut Vec<u8>) {
        wire::encode_view(view, out);
    }
    fn decode_view_into(bytes: &[u8], view: &mut FairnessView) -> Result<(), WireError> {
        wire::decode_view_into(bytes, view)
    }
    fn encode_view_change(
        base: &FairnessView,
        view: &FairnessView,
        known: Option<&crate::wire::KnownChanges>,
        out: &mut Vec<u8>,
    ) -> bool {
        wire::encode_view_change(base, view, known, out)
    }
    fn apply_view_change(bytes: &[u8], view: &mut FairnessView) -> Result<(), WireError> {
        wire::apply_view_change(bytes, view)
    }
    fn encode_decision_compact(
        d: &FairnessDecision,
        view: &FairnessView,
        out: &mut Vec<u8>,
    ) -> bool {
        wire::encode_decision_compact(d, view, out)
    }
    fn decode_decision_compact(
        bytes: &[u8],
        view: &FairnessView,
    ) -> Result<FairnessDecision, WireError> {
        wire::decode_decision_compact(bytes, view)
    }
    fn encode_decision(d: &FairnessDecision, out: &mut Vec<u8>) {
        wire::encode_decision(d, out);
    }
    fn decode_decision(bytes: &[u8], view: &FairnessView) -> Result<FairnessDecision, WireError> {
        codec::check_reply_len::<Self::Decision>(bytes, Self::max_reply_bytes(view))?;
        wire::decode_decision(bytes, view.jobs.len())
    }
}

#[cfg(any(test, feature = "testing"))]
impl crate::testing::SlotViews for Fairness {
    fn views() -> proptest::strategy::BoxedStrategy<Self::View> {
        use proptest::strategy::Strategy;
        crate::testing::strategy::fairness_view().boxed()
    }

    fn smaller(view: &FairnessView) -> Vec<FairnessView> {
        use crate::testing::shrink;
        let mut out = Vec::new();
        for (dropped, vcs) in shrink::without_each_vc(&view.vcs, |v| v.id, |v, id| v.id = id) {
            let mut v = view.clone();
            v.vcs = vcs;
            v.jobs.retain(|j| j.vc != dropped);
            for j in &mut v.jobs {
                j.vc = shrink::renumbered(j.vc, dropped);
            }
            out.push(v);
        }
        for jobs in shrink::smaller_lists(&view.jobs) {
            out.push(FairnessView {
                jobs,
                ..view.clone()
            });
        }
        out
    }
}
