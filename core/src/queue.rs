//! The pending jobs of each virtual cluster, kept sorted by the key the
//! fairness policy declares ([`QueueOrder`]), so a round can show fairness
//! the first jobs of each VC without looking at the rest of the backlog.

use std::collections::BTreeSet;

use gangway_plugin_sdk::{JobId, QueueOrder};

use crate::job::JobRecord;

/// A pending job's position in its VC's queue.
type Key = (u64, u64, JobId);

/// Per-VC queues of pending jobs in one [`QueueOrder`].
#[derive(Clone, Debug, Default)]
pub(crate) struct QueueIndex {
    order: QueueOrder,
    per_vc: Vec<BTreeSet<Key>>,
}

impl QueueIndex {
    /// The order the queues are kept in.
    pub(crate) fn order(&self) -> &QueueOrder {
        &self.order
    }

    fn key(&self, job: &JobRecord) -> Key {
        let primary = match &self.order {
            QueueOrder::All | QueueOrder::Submit => 0,
            QueueOrder::AttainedBands(thresholds) => {
                thresholds.partition_point(|t| *t <= job.attained_gpu_s) as u64
            }
            QueueOrder::Smallest => u64::from(job.next_gpus()),
        };
        (primary, job.spec.submitted_s, job.spec.id)
    }

    /// Adds a job that became pending.
    pub(crate) fn insert(&mut self, job: &JobRecord) {
        let vc = job.spec.vc.0 as usize;
        if self.per_vc.len() <= vc {
            self.per_vc.resize_with(vc + 1, BTreeSet::new);
        }
        let key = self.key(job);
        self.per_vc[vc].insert(key);
    }

    /// Removes a job that stopped being pending (call before changing what
    /// its key depends on).
    pub(crate) fn remove(&mut self, job: &JobRecord) {
        let key = self.key(job);
        if let Some(q) = self.per_vc.get_mut(job.spec.vc.0 as usize) {
            q.remove(&key);
        }
    }

    /// Re-sorts every queue in `order`, from the pending jobs.
    pub(crate) fn rebuild<'a>(
        &mut self,
        order: QueueOrder,
        pending: impl Iterator<Item = &'a JobRecord>,
    ) {
        self.order = order;
        for q in &mut self.per_vc {
            q.clear();
        }
        for job in pending {
            self.insert(job);
        }
    }

    /// The first `window` jobs of each VC's queue, VC by VC.
    pub(crate) fn heads(&self, window: usize) -> impl Iterator<Item = JobId> + '_ {
        self.per_vc
            .iter()
            .flat_map(move |q| q.iter().take(window).map(|(_, _, id)| *id))
    }

    /// Jobs queued, all VCs.
    pub(crate) fn len(&self) -> usize {
        self.per_vc.iter().map(BTreeSet::len).sum()
    }

    /// Whether `job` (pending) is in its VC's queue.
    pub(crate) fn contains(&self, job: &JobRecord) -> bool {
        self.per_vc
            .get(job.spec.vc.0 as usize)
            .is_some_and(|q| q.contains(&self.key(job)))
    }
}
