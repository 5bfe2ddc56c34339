//! The book's change log: which jobs and VCs changed how a view shows them
//! (other than by time passing), in the order they changed. A backend that
//! keeps the view of its last call asks what changed since it
//! ([`crate::policy::ViewChanges`]) instead of comparing both views entry by
//! entry.

use std::sync::atomic::{AtomicU64, Ordering};

use gangway_plugin_sdk::wire::KnownChanges;
use gangway_plugin_sdk::{JobId, VcId};

/// A point in a scheduler's change log: the state a view was built from.
/// A backend keeps the stamp of the view it last answered and asks
/// [`crate::policy::ViewChanges::since`] what changed after it. Stamps of another
/// scheduler (or of one restored from a snapshot) are never confused with
/// this one's: asking with them answers "unknown".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub(crate) log: u64,
    pub(crate) at: u64,
}

/// Ids for logs: a stamp of one log means nothing to another (a restored
/// or cloned book starts a new one).
static NEXT_LOG: AtomicU64 = AtomicU64::new(1);

/// How many entries the log keeps at least; a backend whose last view is
/// older than them is told the changes are unknown (and compares whole).
const KEEP: usize = 1 << 15;

/// A change to how views show a job or a VC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Changed {
    Job(JobId),
    Vc(VcId),
}

/// The jobs and VCs whose view entries changed, in order (see the module
/// docs). Entry `i` has stamp `floor + i`.
#[derive(Debug)]
pub(crate) struct ChangeLog {
    log: u64,
    floor: u64,
    entries: Vec<Changed>,
}

impl Default for ChangeLog {
    fn default() -> Self {
        ChangeLog {
            log: NEXT_LOG.fetch_add(1, Ordering::Relaxed),
            floor: 0,
            entries: Vec::new(),
        }
    }
}

impl Clone for ChangeLog {
    /// A new, empty log: the copy's changes are not the original's.
    fn clone(&self) -> Self {
        ChangeLog::default()
    }
}

impl ChangeLog {
    fn push(&mut self, change: Changed) {
        if self.entries.len() >= 2 * KEEP {
            self.entries.drain(..KEEP);
            self.floor = self.floor.saturating_add(KEEP as u64);
        }
        self.entries.push(change);
    }

    /// Job `id`'s entry in some view changed.
    pub(crate) fn job(&mut self, id: JobId) {
        self.push(Changed::Job(id));
    }

    /// VC `id`'s entry changed.
    pub(crate) fn vc(&mut self, id: VcId) {
        self.push(Changed::Vc(id));
    }

    /// The stamp of the state as it is now.
    pub(crate) fn now(&self) -> Stamp {
        Stamp {
            log: self.log,
            at: self.floor.saturating_add(self.entries.len() as u64),
        }
    }

    /// Writes what changed since `stamp` into `out` (cleared first,
    /// sealed); `false` when this log cannot tell (a stamp of another log,
    /// or older than the entries kept).
    pub(crate) fn since(&self, stamp: Stamp, out: &mut KnownChanges) -> bool {
        out.clear();
        if stamp.log != self.log || stamp.at < self.floor || stamp.at > self.now().at {
            return false;
        }
        let from = usize::try_from(stamp.at - self.floor).unwrap_or(usize::MAX);
        for change in self.entries.get(from..).unwrap_or(&[]) {
            match *change {
                Changed::Job(id) => out.add_job(id),
                Changed::Vc(id) => out.add_vc(id),
            }
        }
        out.seal();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jobs(known: &KnownChanges) -> Vec<u64> {
        known.jobs().map(|j| j.0).collect()
    }

    #[test]
    fn since_a_stamp_names_each_change_once() {
        let mut log = ChangeLog::default();
        log.job(JobId(3));
        let at = log.now();
        let mut known = KnownChanges::default();
        assert!(log.since(at, &mut known));
        assert_eq!(jobs(&known), Vec::<u64>::new());
        log.job(JobId(9));
        log.vc(VcId(1));
        log.job(JobId(4));
        log.job(JobId(9));
        assert!(log.since(at, &mut known));
        assert_eq!(jobs(&known), vec![4, 9]);
        assert_eq!(known.vcs().map(|v| v.0).collect::<Vec<_>>(), vec![1]);
        assert!(!known.job_changed(JobId(3)));
    }

    #[test]
    fn stamps_of_other_logs_or_too_old_are_unknown() {
        let mut log = ChangeLog::default();
        let first = log.now();
        let other = ChangeLog::default();
        let mut known = KnownChanges::default();
        assert!(!other.since(first, &mut known));
        assert!(!log.clone().since(first, &mut known));
        for i in 0..(2 * KEEP as u64 + 1) {
            log.job(JobId(i));
        }
        assert!(!log.since(first, &mut known), "trimmed past the stamp");
        let recent = log.now();
        log.job(JobId(0));
        assert!(log.since(recent, &mut known));
        assert_eq!(jobs(&known), vec![0]);
    }
}
