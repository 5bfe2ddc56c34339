//! Every job record the scheduler knows, by id, with each job's VC indexed
//! on the side: a round picks out the running jobs of some VCs (the reclaim
//! view of borrowed work) without touching the records of the others.

use std::collections::BTreeMap;
use std::ops::Deref;

use gangway_plugin_sdk::{JobId, VcId};
use rustc_hash::FxHashMap;

use crate::job::JobRecord;

/// The job records by id (read through `Deref`), and each job's VC. A job's
/// spec, and so its VC, never changes after it is submitted; every change
/// to the set of records goes through this type, which keeps both in step.
#[derive(Clone, Debug, Default)]
pub(crate) struct JobTable {
    records: BTreeMap<JobId, JobRecord>,
    vcs: FxHashMap<JobId, VcId>,
}

impl Deref for JobTable {
    type Target = BTreeMap<JobId, JobRecord>;

    fn deref(&self) -> &Self::Target {
        &self.records
    }
}

impl JobTable {
    /// The VC of job `id`, if known.
    pub(crate) fn vc_of(&self, id: &JobId) -> Option<VcId> {
        self.vcs.get(id).copied()
    }

    /// Job `id`'s record, to change its state (not its spec).
    pub(crate) fn get_mut(&mut self, id: &JobId) -> Option<&mut JobRecord> {
        self.records.get_mut(id)
    }

    /// Adds (or replaces) job `id`'s record.
    pub(crate) fn insert(&mut self, id: JobId, record: JobRecord) -> Option<JobRecord> {
        self.vcs.insert(id, record.spec.vc);
        self.records.insert(id, record)
    }

    /// Drops job `id`'s record.
    pub(crate) fn remove(&mut self, id: &JobId) -> Option<JobRecord> {
        self.vcs.remove(id);
        self.records.remove(id)
    }

    /// Keeps only the records `keep` accepts.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&JobId, &mut JobRecord) -> bool) {
        let vcs = &mut self.vcs;
        self.records.retain(|id, j| {
            let kept = keep(id, j);
            if !kept {
                vcs.remove(id);
            }
            kept
        });
    }

    /// Whether the VC index matches the records: one entry per record, with
    /// its spec's VC.
    pub(crate) fn index_matches(&self) -> bool {
        self.vcs.len() == self.records.len()
            && self
                .records
                .iter()
                .all(|(id, j)| self.vcs.get(id) == Some(&j.spec.vc))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::JobSpec;

    fn record(id: u64, vc: u32) -> JobRecord {
        JobRecord::submitted(JobSpec {
            id: JobId(id),
            vc: VcId(vc),
            user: 0,
            gpus: 1,
            submitted_s: 0,
        })
    }

    #[test]
    fn the_vc_index_follows_every_change() {
        let mut t = JobTable::default();
        for i in 0..6 {
            t.insert(JobId(i), record(i, (i % 3) as u32));
        }
        assert_eq!(t.vc_of(&JobId(4)), Some(VcId(1)));
        t.remove(&JobId(4));
        assert_eq!(t.vc_of(&JobId(4)), None);
        t.retain(|id, _| id.0 % 2 == 0);
        assert_eq!(t.len(), 2);
        assert_eq!(t.vc_of(&JobId(5)), None);
        assert_eq!(t.vc_of(&JobId(2)), Some(VcId(2)));
        assert!(t.index_matches());
    }
}
