//! The running jobs as the reclaim and defragment views show them, by id,
//! and each VC's running jobs by start: what a give-back walk reads newest
//! first without sorting every running job. Foreign load
//! ([`crate::job::FOREIGN_USER`]) is by id only: no walk gives it back.

use std::collections::BTreeMap;
use std::sync::Arc;

use gangway_plugin_sdk::{GpuCounts, GpuTypeId, JobId, RunningJob, VcId};

/// A running job as a VC's start order holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Started {
    pub(crate) started_s: u64,
    pub(crate) id: JobId,
    pub(crate) gpus: u32,
}

/// The running index: every running job by id, and by (VC, start, id).
#[derive(Clone, Debug, Default)]
pub(crate) struct RunningIndex {
    by_id: BTreeMap<JobId, RunningJob>,
    /// (VC, start, id) of every entry of `by_id` a policy may stop (not
    /// foreign load), with its GPUs: what a give-back walk reads of a job.
    by_start: BTreeMap<(VcId, u64, JobId), u32>,
    /// How many of each VC's running jobs in `by_start` hold each GPU count.
    sizes: BTreeMap<VcId, GpuCounts>,
    /// Each server's GPU type, by server id (none known: every server is
    /// of the first type).
    server_types: Arc<[GpuTypeId]>,
    /// GPUs each VC's running jobs (all of them, foreign load too) hold of
    /// each GPU type: what per-type quotas count.
    by_type: BTreeMap<(VcId, GpuTypeId), u32>,
}

/// Whether a policy may stop or move `job`: not foreign load.
pub(crate) fn stoppable(job: &RunningJob) -> bool {
    job.user != crate::job::FOREIGN_USER
}

impl RunningIndex {
    /// An empty index for servers of `server_types` (by server id).
    pub(crate) fn new(server_types: Arc<[GpuTypeId]>) -> RunningIndex {
        RunningIndex {
            server_types,
            ..RunningIndex::default()
        }
    }

    /// The GPU type `job` runs on (a gang runs on one type).
    pub(crate) fn type_of(&self, job: &RunningJob) -> GpuTypeId {
        job.parts
            .first()
            .and_then(|(s, _)| self.server_types.get(s.0 as usize).copied())
            .unwrap_or_default()
    }

    /// GPUs VC `vc`'s running jobs hold of type `t`.
    pub(crate) fn held_of_type(&self, vc: VcId, t: GpuTypeId) -> u32 {
        self.by_type.get(&(vc, t)).copied().unwrap_or(0)
    }

    /// The running jobs by id.
    pub(crate) fn by_id(&self) -> &BTreeMap<JobId, RunningJob> {
        &self.by_id
    }

    /// Files `entry` (replacing the job's old entry). Returns whether the
    /// index changed.
    pub(crate) fn file(&mut self, entry: RunningJob) -> bool {
        match self.by_id.get(&entry.id) {
            Some(old) if *old == entry => false,
            _ => {
                self.remove(entry.id);
                if entry.gpus > 0 {
                    *self
                        .by_type
                        .entry((entry.vc, self.type_of(&entry)))
                        .or_default() += entry.gpus;
                }
                if stoppable(&entry) {
                    self.by_start
                        .insert((entry.vc, entry.started_s, entry.id), entry.gpus);
                    self.sizes.entry(entry.vc).or_default().add(entry.gpus);
                }
                self.by_id.insert(entry.id, entry);
                true
            }
        }
    }

    /// Takes job `id` out. Returns whether it was in.
    pub(crate) fn remove(&mut self, id: JobId) -> bool {
        let Some(old) = self.by_id.remove(&id) else {
            return false;
        };
        let key = (old.vc, self.type_of(&old));
        if let Some(held) = self.by_type.get_mut(&key) {
            *held -= old.gpus.min(*held);
            if *held == 0 {
                self.by_type.remove(&key);
            }
        }
        if !stoppable(&old) {
            return true;
        }
        self.by_start.remove(&(old.vc, old.started_s, id));
        if let Some(sizes) = self.sizes.get_mut(&old.vc) {
            sizes.remove(old.gpus);
            if sizes.smallest().is_none() {
                self.sizes.remove(&old.vc);
            }
        }
        true
    }

    /// VC `vc`'s running jobs, latest start first (then highest id), each
    /// as its start, id and GPUs.
    pub(crate) fn newest_first(&self, vc: VcId) -> impl Iterator<Item = Started> + '_ {
        self.by_start
            .range((vc, 0, JobId(0))..=(vc, u64::MAX, JobId(u64::MAX)))
            .rev()
            .map(|((_, started_s, id), gpus)| Started {
                started_s: *started_s,
                id: *id,
                gpus: *gpus,
            })
    }

    /// How many of VC `vc`'s running jobs hold each GPU count.
    pub(crate) fn sizes(&self, vc: VcId) -> GpuCounts {
        self.sizes.get(&vc).cloned().unwrap_or_default()
    }

    /// Whether the by-start order and the counts match the entries.
    pub(crate) fn is_consistent(&self) -> bool {
        let starts: BTreeMap<(VcId, u64, JobId), u32> = self
            .by_id
            .values()
            .filter(|j| stoppable(j))
            .map(|j| ((j.vc, j.started_s, j.id), j.gpus))
            .collect();
        let mut sizes: BTreeMap<VcId, GpuCounts> = BTreeMap::new();
        for j in self.by_id.values().filter(|j| stoppable(j)) {
            sizes.entry(j.vc).or_default().add(j.gpus);
        }
        let mut by_type: BTreeMap<(VcId, GpuTypeId), u32> = BTreeMap::new();
        for j in self.by_id.values() {
            *by_type.entry((j.vc, self.type_of(j))).or_default() += j.gpus;
        }
        by_type.retain(|_, g| *g != 0);
        starts == self.by_start && sizes == self.sizes && by_type == self.by_type
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever is filed and removed, each VC's jobs come newest first
        /// and the counts follow.
        #[test]
        fn the_start_order_follows_every_change(
            ops in prop::collection::vec((0u64..12, 0u32..3, 0u64..5, 1u32..9, any::<bool>()), 0..80),
        ) {
            let mut index = RunningIndex::default();
            let mut model: BTreeMap<JobId, RunningJob> = BTreeMap::new();
            for (id, vc, started_s, gpus, keep) in ops {
                let id = JobId(id);
                if keep {
                    let entry = RunningJob { id, vc: VcId(vc), started_s, gpus, ..RunningJob::default() };
                    let changed = model.get(&id) != Some(&entry);
                    prop_assert_eq!(index.file(entry.clone()), changed);
                    model.insert(id, entry);
                } else {
                    prop_assert_eq!(index.remove(id), model.remove(&id).is_some());
                }
                prop_assert!(index.is_consistent());
                prop_assert_eq!(index.by_id(), &model);
            }
            for vc in 0..3 {
                let mut want: Vec<&RunningJob> = model.values().filter(|j| j.vc == VcId(vc)).collect();
                want.sort_by_key(|j| std::cmp::Reverse((j.started_s, j.id)));
                let want: Vec<Started> = want
                    .iter()
                    .map(|j| Started { started_s: j.started_s, id: j.id, gpus: j.gpus })
                    .collect();
                let got: Vec<Started> = index.newest_first(VcId(vc)).collect();
                prop_assert_eq!(got, want);
            }
        }
    }
}
