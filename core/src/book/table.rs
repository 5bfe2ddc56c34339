//! Every job record the scheduler knows, by id, with each running job kept
//! on the side as the reclaim and defragment views show it. A round builds
//! those views from the running index alone, so their cost follows the
//! running jobs, not every record ever submitted.

use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut};

use gangway_plugin_sdk::{JobId, RunningJob};

use super::ChangeLog;
use super::running::RunningIndex;
use crate::job::{JobRecord, JobState};

/// The job records by id (read through `Deref`) and the running jobs.
/// Every change to a record goes through this type (a [`RecordMut`] brings
/// the running index up to date when it is dropped), which keeps the two in
/// step.
#[derive(Clone, Debug, Default)]
pub(crate) struct JobTable {
    records: BTreeMap<JobId, JobRecord>,
    running: RunningIndex,
    /// The jobs whose running entry changed, with the book's other changes.
    changes: ChangeLog,
}

/// Write access to one record; when dropped, files the job in the running
/// index (or takes it out) as its state now says.
pub(crate) struct RecordMut<'a> {
    id: JobId,
    record: &'a mut JobRecord,
    running: &'a mut RunningIndex,
    changes: &'a mut ChangeLog,
}

impl Deref for RecordMut<'_> {
    type Target = JobRecord;

    fn deref(&self) -> &JobRecord {
        self.record
    }
}

impl DerefMut for RecordMut<'_> {
    fn deref_mut(&mut self) -> &mut JobRecord {
        self.record
    }
}

impl Drop for RecordMut<'_> {
    fn drop(&mut self) {
        if file_running(self.running, self.id, self.record) {
            self.changes.job(self.id);
        }
    }
}

/// Job `id` as the running index holds it: its attempt's placement and
/// start, and the GPU time it attained before this attempt. `None` unless
/// it is running.
fn running_entry(id: JobId, record: &JobRecord) -> Option<RunningJob> {
    let JobState::Running {
        started_s, choice, ..
    } = &record.state
    else {
        return None;
    };
    Some(RunningJob {
        id,
        vc: record.spec.vc,
        user: record.spec.user,
        gpus: choice.placement.gpu_count(),
        submitted_s: record.spec.submitted_s,
        started_s: *started_s,
        attempts: record.attempts,
        attained_gpu_s: record.attained_gpu_s,
        parts: choice
            .placement
            .parts
            .iter()
            .map(|p| (p.server, p.gpus.count_ones()))
            .collect(),
    })
}

/// The GPU-seconds running job `r` (as the index holds it) has received by
/// `now`: before its attempt, and in it since it started.
pub(crate) fn attained_at(r: &RunningJob, now: u64) -> u64 {
    r.attained_gpu_s
        .saturating_add(u64::from(r.gpus).saturating_mul(now.saturating_sub(r.started_s)))
}

/// Files `id` in `running` as `record` says: in it (up to date) if it is
/// running, out of it otherwise. Returns whether its entry changed.
fn file_running(running: &mut RunningIndex, id: JobId, record: &JobRecord) -> bool {
    match running_entry(id, record) {
        Some(entry) => running.file(entry),
        None => running.remove(id),
    }
}

impl Deref for JobTable {
    type Target = BTreeMap<JobId, JobRecord>;

    fn deref(&self) -> &Self::Target {
        &self.records
    }
}

impl JobTable {
    /// An empty table for servers of `server_types` (by server id).
    pub(crate) fn new(server_types: std::sync::Arc<[gangway_plugin_sdk::GpuTypeId]>) -> JobTable {
        JobTable {
            running: RunningIndex::new(server_types),
            ..JobTable::default()
        }
    }

    /// The running jobs by id, each with the GPU time it attained before
    /// its current attempt.
    pub(crate) fn running(&self) -> &BTreeMap<JobId, RunningJob> {
        self.running.by_id()
    }

    /// The running jobs, with each VC's by start.
    pub(crate) fn running_index(&self) -> &RunningIndex {
        &self.running
    }

    /// Job `id`'s record, to change its state (not its spec).
    pub(crate) fn get_mut(&mut self, id: &JobId) -> Option<RecordMut<'_>> {
        let record = self.records.get_mut(id)?;
        Some(RecordMut {
            id: *id,
            record,
            running: &mut self.running,
            changes: &mut self.changes,
        })
    }

    /// Adds (or replaces) job `id`'s record.
    pub(crate) fn insert(&mut self, id: JobId, record: JobRecord) -> Option<JobRecord> {
        if file_running(&mut self.running, id, &record) {
            self.changes.job(id);
        }
        self.records.insert(id, record)
    }

    /// Drops job `id`'s record.
    pub(crate) fn remove(&mut self, id: &JobId) -> Option<JobRecord> {
        if self.running.remove(*id) {
            self.changes.job(*id);
        }
        self.records.remove(id)
    }

    /// Keeps only the records `keep` accepts.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&JobId, &JobRecord) -> bool) {
        let (running, changes) = (&mut self.running, &mut self.changes);
        self.records.retain(|id, j| {
            let kept = keep(id, j);
            if !kept && running.remove(*id) {
                changes.job(*id);
            }
            kept
        });
    }

    /// The log of changes to how views show jobs and VCs.
    pub(crate) fn changes(&self) -> &ChangeLog {
        &self.changes
    }

    /// The log, to record a change the table does not see (a job's queue
    /// entry, a VC's counters).
    pub(crate) fn changes_mut(&mut self) -> &mut ChangeLog {
        &mut self.changes
    }

    /// Whether the running index matches the records: one entry per
    /// running record, equal to what its record says.
    pub(crate) fn index_matches(&self) -> bool {
        self.records
            .iter()
            .filter_map(|(id, j)| running_entry(*id, j))
            .eq(self.running.by_id().values().cloned())
            && self.running.is_consistent()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::PlacementChoice;
    use crate::state::{Placement, ServerGpus};
    use crate::{JobSpec, ServerId};
    use gangway_plugin_sdk::{Level, VcId};

    fn record(id: u64, vc: u32) -> JobRecord {
        JobRecord::submitted(JobSpec {
            id: JobId(id),
            vc: VcId(vc),
            user: 0,
            gpus: 1,
            submitted_s: 0,
        })
    }

    /// Starts `id` on `gpus` GPUs of server `server` at `at`.
    fn run(t: &mut JobTable, id: u64, server: u32, gpus: u32, at: u64) {
        let placement = Placement {
            parts: vec![ServerGpus {
                server: ServerId(server),
                gpus: (1 << gpus) - 1,
            }],
        };
        if let Some(mut job) = t.get_mut(&JobId(id)) {
            job.attempts += 1;
            job.state = JobState::Running {
                started_s: at,
                choice: PlacementChoice {
                    placement,
                    locality: Level(1),
                    servers: 1,
                },
                probe_s: None,
            };
        }
    }

    #[test]
    fn the_running_index_follows_every_change() {
        let mut t = JobTable::default();
        for i in 0..6 {
            t.insert(JobId(i), record(i, (i % 3) as u32));
        }
        assert!(t.running().is_empty());
        run(&mut t, 1, 0, 2, 10);
        run(&mut t, 4, 1, 1, 20);
        run(&mut t, 5, 2, 1, 30);
        let ids: Vec<JobId> = t.running().keys().copied().collect();
        assert_eq!(ids, vec![JobId(1), JobId(4), JobId(5)]);
        let one = &t.running()[&JobId(1)];
        assert_eq!(
            (one.vc, one.gpus, one.started_s, one.attempts),
            (VcId(1), 2, 10, 1)
        );
        assert_eq!(one.parts, vec![(ServerId(0), 2)]);
        // A change to a running record shows; leaving the running state
        // takes the job out.
        if let Some(mut job) = t.get_mut(&JobId(1)) {
            job.attained_gpu_s = 500;
        }
        assert_eq!(t.running()[&JobId(1)].attained_gpu_s, 500);
        if let Some(mut job) = t.get_mut(&JobId(4)) {
            job.state = JobState::Finished {
                status: crate::FinalStatus::Passed,
                at_s: 40,
            };
        }
        assert!(!t.running().contains_key(&JobId(4)));
        t.remove(&JobId(5));
        assert!(!t.running().contains_key(&JobId(5)));
        // A record inserted running (a restored snapshot) is filed.
        let mut restored = record(9, 0);
        restored.state = t[&JobId(1)].state.clone();
        t.insert(JobId(9), restored);
        assert!(t.running().contains_key(&JobId(9)));
        t.retain(|id, _| id.0 != 9);
        assert!(!t.running().contains_key(&JobId(9)));
        assert_eq!(t.len(), 5);
        assert!(t.index_matches());
    }
}
