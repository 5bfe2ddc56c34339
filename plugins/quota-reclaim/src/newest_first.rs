//! The running jobs newest first, put in order only as far as they are read.

use std::collections::BinaryHeap;

use gangway_plugin_sdk::{JobId, RunningJob};

/// Running jobs in the order reclaim stops them: latest start first, then
/// highest id (ids are unique, so the order is total). Reading the first
/// `k` costs a heap of all of them and `k` pops, not a sort of all: a
/// round usually reads only the borrowed tail of each VC.
pub(crate) struct NewestFirst<'v> {
    /// (start, id, position in `jobs`) of the jobs not yet read.
    heap: BinaryHeap<(u64, JobId, usize)>,
    jobs: Vec<&'v RunningJob>,
    /// The jobs read so far, in order.
    sorted: Vec<&'v RunningJob>,
}

impl<'v> NewestFirst<'v> {
    /// `jobs` to be read newest first.
    pub(crate) fn new(jobs: Vec<&'v RunningJob>) -> NewestFirst<'v> {
        let keys: Vec<(u64, JobId, usize)> = jobs
            .iter()
            .enumerate()
            .map(|(at, j)| (j.started_s, j.id, at))
            .collect();
        NewestFirst {
            heap: BinaryHeap::from(keys),
            sorted: Vec::with_capacity(jobs.len().min(256)),
            jobs,
        }
    }

    /// The `i`-th newest job, if there are more than `i`.
    pub(crate) fn get(&mut self, i: usize) -> Option<&'v RunningJob> {
        while self.sorted.len() <= i {
            let (_, _, at) = self.heap.pop()?;
            self.sorted.push(self.jobs[at]);
        }
        Some(self.sorted[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Read to the end, the order is the full sort's.
        #[test]
        fn reads_in_the_sorted_order(starts in prop::collection::vec(0u64..20, 0..40)) {
            let jobs: Vec<RunningJob> = starts
                .iter()
                .enumerate()
                .map(|(i, s)| RunningJob { id: JobId(i as u64 * 7 % 41), started_s: *s, ..RunningJob::default() })
                .collect();
            let mut expected: Vec<&RunningJob> = jobs.iter().collect();
            expected.sort_by_key(|j| std::cmp::Reverse((j.started_s, j.id)));
            let mut newest = NewestFirst::new(jobs.iter().collect());
            let read: Vec<JobId> = (0..).map_while(|i| newest.get(i)).map(|j| j.id).collect();
            prop_assert_eq!(read, expected.iter().map(|j| j.id).collect::<Vec<_>>());
        }
    }
}
