//! The view the locality and gang slots share: the jobs fairness made
//! eligible, in fairness order, and (for the gang slot) their spread limits.
#[cfg(any(test, feature = "testing"))]
pub(crate) mod testing;

use serde::{Deserialize, Serialize};

use crate::view::{ClusterSummary, PendingJob, SpreadLimit};
use crate::wire::Wire;

/// The `SlotContract` methods of a slot whose view is the [`QueueView`]
/// (its size and its idle form), shared by locality and gang.
macro_rules! queue_view_methods {
    () => {
        fn view_jobs(view: &QueueView) -> usize {
            view.jobs.len()
        }
        fn idle_view(cluster: &$crate::ClusterSummary, _vcs: &[$crate::VcUsage]) -> QueueView {
            QueueView {
                cluster: cluster.clone(),
                ..QueueView::default()
            }
        }
    };
}
pub(crate) use queue_view_methods;

/// What the locality and gang slots see: the jobs fairness made eligible, in
/// fairness order. Its jobs travel as runs of a view change, with their
/// limits when each job has one.
#[derive(Debug, Default, PartialEq, Eq, Serialize, Deserialize, Wire)]
#[wire(view)]
pub struct QueueView {
    /// The host's clock for this round (seconds).
    #[wire(now)]
    pub now_s: u64,
    /// Cluster capacity.
    pub cluster: ClusterSummary,
    /// The eligible jobs, in the order they will be placed.
    #[wire(runs)]
    pub jobs: Vec<PendingJob>,
    /// For the gang slot: the spread limit the locality slot chose for each
    /// job (same order as `jobs`); empty when the locality slot is asked.
    #[wire(pairs_with = jobs)]
    pub spread: Vec<SpreadLimit>,
}

impl Clone for QueueView {
    fn clone(&self) -> Self {
        QueueView {
            now_s: self.now_s,
            cluster: self.cluster.clone(),
            jobs: self.jobs.clone(),
            spread: self.spread.clone(),
        }
    }

    /// Field by field, reusing the vectors' memory (a Wasm host keeps a
    /// copy of each view it sent, the base of the next view change).
    fn clone_from(&mut self, source: &Self) {
        let QueueView {
            now_s,
            cluster,
            jobs,
            spread,
        } = source;
        self.now_s = *now_s;
        self.cluster.clone_from(cluster);
        self.jobs.clone_from(jobs);
        self.spread.clone_from(spread);
    }
}
