//! The pending jobs of each virtual cluster, kept sorted by the key the
//! fairness policy declares ([`QueueOrder`]), so a round can show fairness
//! the first jobs of each VC without looking at the rest of the backlog.
//!
//! Each entry keeps the job as policies see it ([`PendingJob`], fixed while
//! the job is pending but for its wait), so a round builds its view from the
//! queue heads alone, without looking each job up.

use std::collections::BTreeMap;

use gangway_plugin_sdk::{JobId, PendingJob, QueueOrder};

use crate::job::JobRecord;

/// A pending job's position in its VC's queue.
type Key = (u64, u64, JobId);

/// A queued job: as policies see it, and since when it has been pending.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Queued {
    /// When the job last became pending (its view's `waiting_s` counts from here).
    pub(crate) since_s: u64,
    /// The job as a view shows it, with `waiting_s` 0.
    pub(crate) job: PendingJob,
}

impl Queued {
    /// The job as a view at `now` shows it.
    pub(crate) fn at(&self, now: u64) -> PendingJob {
        PendingJob {
            waiting_s: now.saturating_sub(self.since_s),
            ..self.job
        }
    }
}

/// Per-VC queues of pending jobs in one [`QueueOrder`].
#[derive(Clone, Debug, Default)]
pub(crate) struct QueueIndex {
    order: QueueOrder,
    per_vc: Vec<BTreeMap<Key, Queued>>,
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

    /// Adds a job that became pending, as `queued` shows it.
    pub(crate) fn insert(&mut self, job: &JobRecord, queued: Queued) {
        let vc = job.spec.vc.0 as usize;
        if self.per_vc.len() <= vc {
            self.per_vc.resize_with(vc + 1, BTreeMap::new);
        }
        let key = self.key(job);
        self.per_vc[vc].insert(key, queued);
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
        pending: impl Iterator<Item = (&'a JobRecord, Queued)>,
    ) {
        self.order = order;
        for q in &mut self.per_vc {
            q.clear();
        }
        for (job, queued) in pending {
            self.insert(job, queued);
        }
    }

    /// The first `window` jobs of each VC's queue, VC by VC.
    pub(crate) fn heads(&self, window: usize) -> impl Iterator<Item = &Queued> + '_ {
        self.per_vc
            .iter()
            .flat_map(move |q| q.values().take(window))
    }

    /// The first `window` jobs of each VC's queue as a view at `now` shows
    /// them, in (submit time, id) order. Only small keys are sorted; in
    /// submit order each VC's heads are one sorted run, which the stable
    /// sort merges.
    pub(crate) fn heads_by_submit(&self, window: usize, now: u64) -> Vec<PendingJob> {
        let heads: Vec<&Queued> = self.heads(window).collect();
        let mut keys: Vec<(u64, JobId, usize)> = heads
            .iter()
            .enumerate()
            .map(|(i, q)| (q.job.submitted_s, q.job.id, i))
            .collect();
        keys.sort();
        keys.into_iter().map(|(_, _, i)| heads[i].at(now)).collect()
    }

    /// Jobs queued, all VCs.
    pub(crate) fn len(&self) -> usize {
        self.per_vc.iter().map(BTreeMap::len).sum()
    }

    /// `job`'s entry, if it (pending) is in its VC's queue.
    pub(crate) fn get(&self, job: &JobRecord) -> Option<&Queued> {
        self.per_vc
            .get(job.spec.vc.0 as usize)
            .and_then(|q| q.get(&self.key(job)))
    }
}
