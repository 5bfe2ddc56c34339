//! The `queued` wait split by what each job's virtual cluster waited behind
//! ([`QueuedBehind`]), kept per VC so that a round costs its changes, not
//! the backlog: each VC accrues seconds per kind ([`QueuedTime::charge`]),
//! and a job takes its VC's accrual between the rounds it became queued and
//! stopped being queued. Which jobs change is read from the scheduler's
//! change log (every pending job when it cannot tell) and the jobs shown
//! this round and the last.

use gangway_core::policy::Stamp;
use gangway_core::{JobId, JobState, Scheduler, WaitReason};
use gangway_plugin_sdk::wire::KnownChanges;

/// What a job waiting `queued` (behind earlier jobs of its own virtual
/// cluster) waited behind: the wait reason of the earliest job its VC
/// showed the fairness policy that round, or that round's starts when
/// every job shown either started or was itself queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueuedBehind {
    /// Its VC's first shown job waited for this reason.
    Reason(WaitReason),
    /// Its VC's queue moved: the jobs ahead of it started.
    Starts,
    /// Queued time no round attributed (it waited through skipped rounds only).
    Unattributed,
}

impl QueuedBehind {
    /// Number of kinds: every wait reason but `queued`, starts, unattributed.
    pub const COUNT: usize = 9;

    /// Every kind, in the order of [`QueuedBehind::index`].
    pub const ALL: [QueuedBehind; QueuedBehind::COUNT] = [
        QueuedBehind::Reason(WaitReason::FairShare),
        QueuedBehind::Reason(WaitReason::Fragmentation),
        QueuedBehind::Reason(WaitReason::Reserved),
        QueuedBehind::Reason(WaitReason::HeldByPolicy),
        QueuedBehind::Reason(WaitReason::NoCapacity),
        QueuedBehind::Reason(WaitReason::Queued),
        QueuedBehind::Reason(WaitReason::RetryDelay),
        QueuedBehind::Starts,
        QueuedBehind::Unattributed,
    ];

    /// Its place in [`QueuedBehind::ALL`].
    pub fn index(self) -> usize {
        match self {
            QueuedBehind::Reason(r) => r.index(),
            QueuedBehind::Starts => 7,
            QueuedBehind::Unattributed => 8,
        }
    }

    /// Its name in `report.json`: the wait reason's, `starts` or `unattributed`.
    ///
    /// ```
    /// use gangway_replay::sim::QueuedBehind;
    /// assert_eq!(QueuedBehind::ALL.map(|b| b.index()), [0, 1, 2, 3, 4, 5, 6, 7, 8]);
    /// assert_eq!(QueuedBehind::Starts.as_str(), "starts");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            QueuedBehind::Reason(r) => r.as_str(),
            QueuedBehind::Starts => "starts",
            QueuedBehind::Unattributed => "unattributed",
        }
    }
}

/// The per-VC accruals and each queued job's starting point.
#[derive(Debug, Default)]
pub(crate) struct QueuedTime {
    /// Per VC: seconds its queued jobs accrued behind each kind since the
    /// start.
    acc: Vec<[u64; QueuedBehind::COUNT]>,
    /// Per VC: what its queued jobs wait behind until the next round.
    behind: Vec<QueuedBehind>,
    /// Per job (by trace index): its VC and its VC's accrual when it became
    /// queued, while it is.
    open: Vec<Option<(u32, [u64; QueuedBehind::COUNT])>>,
    /// Jobs shown with a reason of their own by the last round, by id.
    shown: Vec<u32>,
    /// The change log's stamp at the last round.
    stamp: Option<Stamp>,
    /// When the last round ran.
    at: u64,
    known: KnownChanges,
}

impl QueuedTime {
    /// Accounting for `jobs` jobs.
    pub(crate) fn new(jobs: usize) -> QueuedTime {
        QueuedTime {
            open: vec![None; jobs],
            ..QueuedTime::default()
        }
    }

    /// Accrues the time since the last round to every VC, behind what its
    /// queue waited for then.
    pub(crate) fn charge(&mut self, t: u64) {
        let dt = t.saturating_sub(self.at);
        for (acc, behind) in self.acc.iter_mut().zip(&self.behind) {
            let slot = &mut acc[behind.index()];
            *slot = slot.saturating_add(dt);
        }
        self.at = t;
    }

    /// After the round at `t` (charged first): what each VC's queue waits
    /// behind until the next round (`vc_head`: the reason of its earliest job
    /// shown waiting for one of its own, `None`: its queue moved), `shown`
    /// the jobs shown with a reason of their own, `vc_of` each job's VC.
    /// Returns the jobs that stopped being queued, each with what it accrued
    /// while it was.
    pub(crate) fn note(
        &mut self,
        sched: &Scheduler,
        vc_head: &[Option<WaitReason>],
        mut shown: Vec<u32>,
        vc_of: impl Fn(u32) -> u32,
    ) -> Vec<(u32, [u64; QueuedBehind::COUNT])> {
        let mut closed = Vec::new();
        let vcs = sched.virtual_clusters().len().max(vc_head.len());
        if self.acc.len() < vcs {
            self.acc.resize(vcs, [0; QueuedBehind::COUNT]);
        }
        self.behind = (0..vcs)
            .map(|v| match vc_head.get(v).copied().flatten() {
                Some(r) => QueuedBehind::Reason(r),
                None => QueuedBehind::Starts,
            })
            .collect();
        shown.sort_unstable();
        let changes = sched.view_changes();
        let logged = self
            .stamp
            .is_some_and(|s| changes.since(s, &mut self.known));
        let mut candidates: Vec<u32> = if logged {
            self.known
                .jobs()
                .filter_map(|id| u32::try_from(id.0).ok())
                .collect()
        } else {
            // The log cannot tell: every job pending or queued.
            let mut all: Vec<u32> = sched
                .pending_jobs()
                .filter_map(|id| u32::try_from(id.0).ok())
                .collect();
            all.extend(
                self.open
                    .iter()
                    .enumerate()
                    .filter(|(_, o)| o.is_some())
                    .filter_map(|(j, _)| u32::try_from(j).ok()),
            );
            all
        };
        candidates.extend(&self.shown);
        candidates.extend(&shown);
        candidates.sort_unstable();
        candidates.dedup();
        for j in candidates {
            let Some(slot) = self.open.get_mut(j as usize) else {
                continue;
            };
            let pending = sched
                .job(JobId(u64::from(j)))
                .is_some_and(|r| matches!(r.state, JobState::Pending { .. }));
            let queued = pending && shown.binary_search(&j).is_err();
            match (*slot, queued) {
                (Some((vc, since)), false) => {
                    let now = self.acc.get(vc as usize).copied().unwrap_or_default();
                    let mut got = [0u64; QueuedBehind::COUNT];
                    for (g, (n, s)) in got.iter_mut().zip(now.iter().zip(&since)) {
                        *g = n.saturating_sub(*s);
                    }
                    closed.push((j, got));
                    *slot = None;
                }
                (None, true) => {
                    let vc = vc_of(j);
                    let now = self.acc.get(vc as usize).copied().unwrap_or_default();
                    *slot = Some((vc, now));
                }
                _ => {}
            }
        }
        self.shown = shown;
        self.stamp = Some(changes.stamp());
        closed
    }

    /// At the end (`t`, charged first): every job still queued, with what
    /// it accrued.
    pub(crate) fn finish(&mut self, t: u64) -> Vec<(u32, [u64; QueuedBehind::COUNT])> {
        let mut closed = Vec::new();
        self.charge(t);
        for (j, slot) in self.open.iter_mut().enumerate() {
            if let Some((vc, since)) = slot.take() {
                let now = self.acc.get(vc as usize).copied().unwrap_or_default();
                let mut got = [0u64; QueuedBehind::COUNT];
                for (g, (n, s)) in got.iter_mut().zip(now.iter().zip(&since)) {
                    *g = n.saturating_sub(*s);
                }
                if let Ok(j) = u32::try_from(j) {
                    closed.push((j, got));
                }
            }
        }
        closed
    }
}
