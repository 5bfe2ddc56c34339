//! What the core tells a backend about its view: which jobs and VCs changed
//! since a backend's last view, so a backend that keeps that view (a Wasm
//! module's glue does) sends a change without comparing every entry.

use gangway_plugin_sdk::wire::KnownChanges;

use crate::book::{ChangeLog, Stamp};

/// The change log as a round shows it with a view: the view's stamp, and
/// what changed since any earlier stamp.
///
/// A job changes when it is submitted, becomes pending again, starts, moves,
/// stops, ends, is killed or forgotten; a VC when it is created, its quota or
/// weight is set, or its GPUs held or asked for or its attained service
/// change. Time passing is not a change: views advance a pending job's wait
/// and a running job's attained GPU time by the time between them (the
/// rule of `gangway_plugin_sdk::wire`'s view changes; a change still
/// compares those two fields, which stop following the clock for a job
/// submitted ahead of it). Servers are not logged; a change compares them
/// whole.
///
/// ```
/// use gangway_core::{JobId, JobSpec, Scheduler, Topology};
/// use gangway_plugin_sdk::wire::KnownChanges;
///
/// let mut sched = Scheduler::new(Topology::uniform(1, 2, 4).unwrap());
/// let vc = sched.virtual_cluster("research");
/// let before = sched.view_changes().stamp();
/// sched.submit(JobSpec { id: JobId(1), vc, user: 0, gpus: 2, submitted_s: 0 }).unwrap();
/// let mut known = KnownChanges::default();
/// assert!(sched.view_changes().since(before, &mut known));
/// assert!(known.job_changed(JobId(1)) && known.vc_changed(vc));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct ViewChanges<'a> {
    log: &'a ChangeLog,
    view: Stamp,
}

impl<'a> ViewChanges<'a> {
    /// The log, with a view built at `view`.
    pub(crate) fn new(log: &'a ChangeLog, view: Stamp) -> Self {
        ViewChanges { log, view }
    }

    /// The stamp of the view this comes with: what a backend keeps to ask
    /// about the next view.
    pub fn stamp(&self) -> Stamp {
        self.view
    }

    /// Writes the jobs and VCs that changed since `stamp` into `known`
    /// (cleared first): every change up to now, which includes those a
    /// view built at [`ViewChanges::stamp`] shows. `false` (and `known`
    /// empty) when the log cannot tell: a stamp of another scheduler or
    /// older than the changes it keeps (a few tens of thousands); compare
    /// whole then.
    pub fn since(&self, stamp: Stamp, known: &mut KnownChanges) -> bool {
        self.log.since(stamp, known)
    }
}
