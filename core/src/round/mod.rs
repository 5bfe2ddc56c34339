//! One scheduling round, as stages over one context ([`Round`]): retry ->
//! fairness view -> placement (fairness, locality, gang) -> reclaim ->
//! defragment -> wait accounting, each stage in its own file.
//!
//! A [`Round`] borrows what the round changes from the scheduler (the
//! allocation state, the job book, the policies) and the scratch it reuses
//! from round to round, and builds the [`RoundReport`] the scheduler hands
//! the host.

mod defragment;
mod place;
mod reclaim;
mod report;
mod retry;
mod views;

use std::collections::BTreeSet;

use gangway_plugin_sdk::{JobId, RunningJob, Slot, SpreadLimit, WaitReason};
use rustc_hash::FxHashMap;

use crate::book::JobBook;
use crate::placement::PlacementChoice;
use crate::policy::PolicySet;
use crate::state::ClusterState;

pub use report::{Migration, Preemption, Reservation, RoundReport, Start};

/// One round in progress: what it borrows from the scheduler.
pub(crate) struct Round<'a> {
    /// The round's time.
    pub(crate) now: u64,
    /// Jobs per VC a fairness view shows (0: all).
    pub(crate) view_window: usize,
    pub(crate) state: &'a mut ClusterState,
    pub(crate) book: &'a mut JobBook,
    pub(crate) policies: &'a mut PolicySet,
    pub(crate) scratch: &'a mut RoundScratch,
}

/// What a round keeps for the next one to reuse (memory, not state).
#[derive(Default)]
pub(crate) struct RoundScratch {
    /// The running jobs of the last reclaim or defragment view (see
    /// `running_jobs_into`).
    running: Vec<RunningJob>,
    /// The maps of the last round's placement.
    placed: Placed,
}

impl Round<'_> {
    /// Runs the round's stages; `swapped` are the slots whose policy changed
    /// at its start.
    pub(crate) fn run(mut self, swapped: Vec<Slot>) -> RoundReport {
        let mut report = RoundReport {
            now_s: self.now,
            swapped,
            ..RoundReport::default()
        };
        self.retry(&mut report);
        self.book.release_delayed(self.now);
        if self.book.pending().is_empty() {
            self.book.clear_last_view();
            return report;
        }

        let view = self.fairness_view();
        report.queued = self.book.pending().len() - view.jobs.len();
        let mut placed = self.place(&view, &mut report);
        self.reclaim(&view, &mut placed, &mut report);
        self.defragment(&view, &mut placed, &mut report);
        self.state.clear_holds();
        self.book
            .reservations
            .retain(|id, _| placed.reserved.contains(id));
        report.waiting = view
            .jobs
            .iter()
            .filter_map(|j| placed.reasons.get(&j.id).map(|r| (j.id, *r)))
            .collect();
        // Ids mostly follow submit order: the stable sort is near-linear then.
        report.waiting.sort_by_key(|(id, _)| *id);
        // The last round's reasons come back to be reused (emptied by the
        // next round's placement).
        placed.reasons = self.book.charge_waits(self.now, placed.reasons);
        self.scratch.placed = placed;
        report
    }

    /// Starts `id` on `choice` (whose GPUs are allocated): books it.
    fn start(&mut self, id: JobId, choice: &PlacementChoice) -> Start {
        let probe_s = self.book.start(id, self.now, choice);
        Start {
            job: id,
            choice: choice.clone(),
            probe_s,
        }
    }

    /// Rolls a tentative reclaim or migration back: releases what was
    /// allocated to `started` (jobs started or moved), gives the `released`
    /// jobs their old GPUs again.
    fn undo(
        &mut self,
        released: &[(JobId, crate::state::Placement)],
        started: &[(JobId, PlacementChoice)],
    ) {
        for (id, _) in started {
            let _ = self.state.release(*id);
        }
        for (id, p) in released {
            if let Err(e) = self.state.restore(*id, p) {
                // Cannot happen: everything allocated since was released.
                tracing::error!(%id, %e, "a rolled-back job could not get its GPUs back");
            }
        }
    }
}

/// What placement left for the later steps.
#[derive(Default)]
pub(crate) struct Placed {
    /// Every job of the view that did not start, with its reason.
    pub(crate) reasons: FxHashMap<JobId, WaitReason>,
    /// The spread limit each eligible job was placed with.
    pub(crate) limits: FxHashMap<JobId, SpreadLimit>,
    /// Jobs holding a reservation this round.
    pub(crate) reserved: BTreeSet<JobId>,
    /// The fairness order of the view's jobs.
    pub(crate) order: Vec<JobId>,
    /// Each job's position in the round's view.
    pub(crate) index: FxHashMap<JobId, usize>,
}

impl Placed {
    /// Empties it, keeping its memory for the next round.
    fn clear(&mut self) {
        let Placed {
            reasons,
            limits,
            reserved,
            order,
            index,
        } = self;
        reasons.clear();
        limits.clear();
        reserved.clear();
        order.clear();
        index.clear();
    }
}
