//! What a host knows changed between two views: the jobs and VCs whose
//! entries may differ other than by time passing. A host that tracks its
//! own changes (Gangway's core keeps a change log) hands it to
//! [`crate::wire::encode_view_message_known`], which then finds the entries
//! a view change keeps by their ids alone, instead of comparing every entry
//! of both views field by field.

use crate::ids::{JobId, VcId};

/// The jobs and VCs whose view entries may have changed (other than by time
/// passing: a pending job's wait, a running job's attained GPU time) since
/// the view a change is made from. An entry of any other job or VC found at
/// the same id in both views is kept when its time field moved with the
/// clock (compared, since a job submitted ahead of a host's clock waits 0
/// until then); its other fields are not read.
///
/// Naming an entry that did not change costs only that entry travelling in
/// full; leaving out one that did change sends a stale entry, so a host
/// must name every change it made (Gangway's core proves its log does with
/// a differential test over every mutation).
///
/// ```
/// use gangway_plugin_sdk::{JobId, VcId, wire::KnownChanges};
/// let mut known = KnownChanges::default();
/// known.add_job(JobId(7));
/// known.add_vc(VcId(2));
/// assert!(known.job_changed(JobId(7)) && !known.job_changed(JobId(8)));
/// assert!(known.vc_changed(VcId(2)) && !known.vc_changed(VcId(3)));
/// known.clear();
/// assert!(!known.job_changed(JobId(7)));
/// ```
#[derive(Clone, Debug, Default)]
pub struct KnownChanges {
    /// Changed job ids, sorted once a lookup needs them.
    jobs: Vec<u64>,
    /// Changed VC ids, sorted once a lookup needs them.
    vcs: Vec<u32>,
    /// A bit per hashed job id: an unset bit answers "unchanged" without a
    /// search (most lookups, for a standing backlog).
    filter: [u64; FILTER_WORDS],
    /// Whether `jobs` and `vcs` are sorted and free of repeats.
    sorted: bool,
}

/// The filter's size in 64-bit words (1,024 bits).
const FILTER_WORDS: usize = 16;

/// The filter bit of job `id`.
fn bit(id: u64) -> (usize, u64) {
    let h = id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - 10);
    // `h` < 1,024: both casts are exact.
    ((h >> 6) as usize, 1 << (h & 63))
}

impl KnownChanges {
    /// Forgets every change (keeping the memory).
    pub fn clear(&mut self) {
        self.jobs.clear();
        self.vcs.clear();
        self.filter = [0; FILTER_WORDS];
        self.sorted = true;
    }

    /// Records that job `id`'s entry may have changed.
    pub fn add_job(&mut self, id: JobId) {
        let (word, mask) = bit(id.0);
        self.filter[word] |= mask;
        self.jobs.push(id.0);
        self.sorted = false;
    }

    /// Records that VC `id`'s entry may have changed.
    pub fn add_vc(&mut self, id: VcId) {
        self.vcs.push(id.0);
        self.sorted = false;
    }

    /// Sorts the ids (and drops repeats) so lookups search them instead of
    /// scanning: call it once after the last change is added.
    pub fn seal(&mut self) {
        if !self.sorted {
            self.jobs.sort_unstable();
            self.jobs.dedup();
            self.vcs.sort_unstable();
            self.vcs.dedup();
            self.sorted = true;
        }
    }

    /// The changed jobs, sorted (call [`KnownChanges::seal`] first, or see
    /// them in the order they were added).
    pub fn jobs(&self) -> impl Iterator<Item = JobId> + '_ {
        self.jobs.iter().map(|&id| JobId(id))
    }

    /// The changed VCs, sorted (call [`KnownChanges::seal`] first, or see
    /// them in the order they were added).
    pub fn vcs(&self) -> impl Iterator<Item = VcId> + '_ {
        self.vcs.iter().map(|&id| VcId(id))
    }

    /// Whether job `id`'s entry may have changed.
    #[inline]
    pub fn job_changed(&self, id: JobId) -> bool {
        let (word, mask) = bit(id.0);
        self.filter[word] & mask != 0
            && if self.sorted {
                self.jobs.binary_search(&id.0).is_ok()
            } else {
                self.jobs.contains(&id.0)
            }
    }

    /// Whether VC `id`'s entry may have changed.
    #[inline]
    pub fn vc_changed(&self, id: VcId) -> bool {
        if self.sorted {
            self.vcs.binary_search(&id.0).is_ok()
        } else {
            self.vcs.contains(&id.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Sealed or not, a lookup answers exactly whether the id was added.
        #[test]
        fn lookups_answer_what_was_added(
            jobs in prop::collection::vec(0u64..5_000, 0..200),
            vcs in prop::collection::vec(0u32..40, 0..20),
            seal in any::<bool>(),
        ) {
            let mut known = KnownChanges::default();
            jobs.iter().for_each(|&j| known.add_job(JobId(j)));
            vcs.iter().for_each(|&v| known.add_vc(VcId(v)));
            if seal {
                known.seal();
            }
            for j in 0..5_000 {
                prop_assert_eq!(known.job_changed(JobId(j)), jobs.contains(&j));
            }
            for v in 0..40 {
                prop_assert_eq!(known.vc_changed(VcId(v)), vcs.contains(&v));
            }
        }
    }
}
