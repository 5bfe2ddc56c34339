//! One scheduling round, as stages over one context ([`Round`]): retry ->
//! fairness view -> placement (fairness, locality, gang) -> reclaim ->
//! defragment -> wait accounting, each stage in its own file.
//!
//! A [`Round`] borrows what the round changes from the scheduler (the
//! allocation state, the job book, the policies) and the scratch it reuses
//! from round to round, and builds the [`RoundReport`] the scheduler hands
//! the host.

// Decisions are policy-given numbers: no unchecked arithmetic in a round.
#![warn(clippy::arithmetic_side_effects, clippy::as_conversions)]

mod borrowing;
mod defragment;
mod place;
mod reclaim;
mod report;
mod retry;
mod typed;
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
    /// Reclaim and defragment views leave out jobs younger than this.
    pub(crate) min_run_s: u64,
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
    /// The GPU type the fairness policy chose for each job it chose one
    /// for this round (contract 2.2).
    chosen: FxHashMap<JobId, gangway_plugin_sdk::GpuTypeId>,
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
            report.slot_events = self.policies.take_events();
            return report;
        }

        let view_at = self.book.changes().now();
        let view = self.fairness_view();
        report.queued = self.book.pending().len().saturating_sub(view.jobs.len());
        let mut placed = self.place(&view, view_at, &mut report);
        // Their views show jobs of `view`: changes are counted from its stamp.
        self.reclaim(&view, view_at, &mut placed, &mut report);
        self.defragment(&view, view_at, &mut placed, &mut report);
        self.held_or_fair_share(&view, &mut placed);
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
        report.slot_events = self.policies.take_events();
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

#[cfg(test)]
mod tests {
    use gangway_plugin_sdk::{Fairness, FairnessDecision, FairnessPolicy, FairnessView, FifoQuota};

    use crate::policy::{Native, PolicySet, SlotEvent};
    use crate::{JobId, JobSpec, Scheduler, Slot, Topology};

    /// Names every job twice: always refused.
    struct Twice;
    impl FairnessPolicy for Twice {
        fn order(&self, view: &FairnessView) -> FairnessDecision {
            let mut d = FifoQuota.order(view);
            d.order.extend(d.order.clone());
            d
        }
    }

    /// Fails every second call (names every job twice), answers well in
    /// between: never three failures in a row.
    struct EverySecond(std::sync::atomic::AtomicU32);
    impl FairnessPolicy for EverySecond {
        fn order(&self, view: &FairnessView) -> FairnessDecision {
            let calls = self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if calls % 2 == 1 {
                Twice.order(view)
            } else {
                FifoQuota.order(view)
            }
        }
    }

    /// Fails every fifth call, answers well in between: one failure in
    /// five calls, never two among any four.
    struct EveryFifth(std::sync::atomic::AtomicU32);
    impl FairnessPolicy for EveryFifth {
        fn order(&self, view: &FairnessView) -> FairnessDecision {
            let calls = self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if calls % 5 == 4 {
                Twice.order(view)
            } else {
                FifoQuota.order(view)
            }
        }
    }

    /// A scheduler running `policy` in the fairness slot on one 8-GPU
    /// server, with more 1-GPU jobs waiting than it ever starts.
    fn one_server_with(policy: impl FairnessPolicy + Send + 'static) -> Scheduler {
        let set = PolicySet::fallbacks().with::<Fairness>(Box::new(Native::new("flaky", policy)));
        let mut sched = Scheduler::with_policies(Topology::uniform(1, 1, 8).unwrap(), set);
        let vc = sched.virtual_cluster("a");
        for i in 0..100 {
            let spec = JobSpec {
                id: JobId(i),
                vc,
                user: 0,
                gpus: 8,
                submitted_s: 0,
            };
            sched.submit(spec).unwrap();
        }
        sched
    }

    /// The round (of `1..=rounds`) in which the scheduler's report first
    /// says a policy was quarantined, if any.
    fn quarantined_within(sched: &mut Scheduler, rounds: u64) -> Option<u64> {
        (1..=rounds).find(|&t| {
            sched
                .round(t)
                .unwrap()
                .slot_events
                .iter()
                .any(|(_, e)| matches!(e, SlotEvent::Quarantined { .. }))
        })
    }

    #[test]
    fn failures_that_alternate_with_good_calls_are_quarantined() {
        let mut sched = one_server_with(EverySecond(0.into()));
        let quarantined_in = quarantined_within(&mut sched, 40);
        // Five failures among its last twenty calls: the tenth call.
        assert_eq!(quarantined_in, Some(10));
        assert_eq!(sched.policies().slot::<Fairness>().name(), "fifo-quota");
        assert_eq!(sched.slot_health(Slot::Fairness).quarantines, 1);

        let mut kept = one_server_with(EverySecond(0.into()));
        kept.policies_mut()
            .set_guard(crate::policy::GuardSettings::never_quarantine(2));
        for t in 1..=40 {
            kept.round(t).unwrap();
        }
        assert_eq!(kept.policies().slot::<Fairness>().name(), "flaky");
        assert_eq!(kept.slot_health(Slot::Fairness).failures, 20);
    }

    /// Four failures in every twenty calls break neither the run rule nor
    /// five in twenty; the share over the last 64 calls (eight) does.
    #[test]
    fn one_failure_in_five_calls_is_quarantined() {
        let mut sched = one_server_with(EveryFifth(0.into()));
        let quarantined_in = quarantined_within(&mut sched, 200);
        assert_eq!(quarantined_in, Some(40));
        assert_eq!(sched.policies().slot::<Fairness>().name(), "fifo-quota");
    }

    /// Failures that cost much are quarantined however rare: a policy whose
    /// every tenth call fails after 150 ms, with the default bound of a
    /// second of failures among the last 64 calls.
    #[test]
    fn failures_that_take_long_are_quarantined() {
        struct SlowToFail(std::sync::atomic::AtomicU32);
        impl FairnessPolicy for SlowToFail {
            fn order(&self, view: &FairnessView) -> FairnessDecision {
                let calls = self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if calls % 10 == 9 {
                    std::thread::sleep(std::time::Duration::from_millis(150));
                    Twice.order(view)
                } else {
                    FifoQuota.order(view)
                }
            }
        }
        let mut sched = one_server_with(SlowToFail(0.into()));
        let quarantined_in = quarantined_within(&mut sched, 100);
        // The seventh slow failure brings the time past a second.
        assert_eq!(quarantined_in, Some(70));
    }

    #[test]
    fn the_report_hands_hosts_each_slots_events() {
        let set = PolicySet::fallbacks().with::<Fairness>(Box::new(Native::new("twice", Twice)));
        let mut sched = Scheduler::with_policies(Topology::uniform(1, 1, 8).unwrap(), set);
        let vc = sched.virtual_cluster("a");
        for i in 0..4 {
            let spec = JobSpec {
                id: JobId(i),
                vc,
                user: 0,
                gpus: 8,
                submitted_s: 0,
            };
            sched.submit(spec).unwrap();
        }
        // Three failed calls in a row quarantine the module, in the third
        // round; the built-in policy is its baseline from then on.
        let reports: Vec<_> = (1..=3).map(|t| sched.round(t).unwrap()).collect();
        assert!(reports[0].slot_events.is_empty());
        assert!(reports[1].slot_events.is_empty());
        let [
            (
                slot,
                SlotEvent::Quarantined {
                    module, restored, ..
                },
            ),
        ] = &reports[2].slot_events[..]
        else {
            panic!("expected one quarantine: {:?}", reports[2].slot_events);
        };
        assert_eq!(
            (*slot, module.as_str(), restored.as_str()),
            (Slot::Fairness, "twice", "fifo-quota")
        );

        // A staged swap is reported by the round it takes effect in.
        let handle = sched.policies().slot::<Fairness>().handle();
        handle.stage(Box::new(Native::new("next", FifoQuota)));
        let report = sched.round(4).unwrap();
        assert_eq!(report.swapped, [Slot::Fairness]);
        assert!(matches!(
            &report.slot_events[..],
            [(Slot::Fairness, SlotEvent::Swapped { from, to })] if from == "fifo-quota" && to == "next"
        ));
        assert!(sched.round(5).unwrap().slot_events.is_empty());

        // So is a swap made between rounds, by the next round.
        sched.swap::<Fairness>(Box::new(Native::new("direct", FifoQuota)));
        let report = sched.round(6).unwrap();
        assert_eq!(report.swapped, [Slot::Fairness]);
        assert!(matches!(
            &report.slot_events[..],
            [(Slot::Fairness, SlotEvent::Swapped { from, to })] if from == "next" && to == "direct"
        ));
        assert!(sched.round(7).unwrap().swapped.is_empty());
    }
}
