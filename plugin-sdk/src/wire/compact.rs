//! Compact replies: the fairness, locality and gang decisions as runs over
//! the view they answer, which a module that takes view messages may send
//! instead of the plain decision when they are shorter. A FIFO-like order
//! is then a few runs of view positions, and a uniform answer (every job
//! backfills, every gang keeps its narrowest level) one run, instead of an
//! entry per job encoded in the sandbox and decoded by the host.
//!
//! - Fairness: runs of `header` (`count << 1 | eligible`) and `from`: the
//!   view's jobs `from..from + count`, in that order, all eligible or not.
//! - Locality: runs of `count` and a spread limit: the next `count` jobs
//!   get that limit.
//! - Gang: runs of `count` and an action, then `max_reservations`.
//!
//! Each kind starts with its number of runs. A reply whose runs cover more
//! jobs than the view has, or name positions past its end, does not decode;
//! one that covers fewer decodes, and the slot's rules refuse it.

use super::codec::WireError;
use super::postcard::Reader;

/// Replies to views with fewer jobs than this are sent plain: runs would
/// save next to nothing.
pub(crate) const MIN_ENTRIES: usize = 16;

/// Whether `runs` runs over `entries` entries are worth sending.
pub(crate) fn worth(runs: usize, entries: usize) -> bool {
    runs * 2 <= entries
}

/// How many values a run-scanning loop compares per step: without a branch
/// per value, which in the sandbox also means one fuel check per chunk.
pub(crate) const CHUNK: usize = 8;

/// How many of `values` from `at` on equal `value`, scanned a chunk at a time.
#[inline(always)]
pub(crate) fn equal_from<T: Copy + PartialEq>(values: &[T], mut at: usize, value: T) -> usize {
    let start = at;
    while let Some(chunk) = values.get(at..at + CHUNK) {
        if !chunk.iter().fold(true, |all, &v| all & (v == value)) {
            break;
        }
        at += CHUNK;
    }
    while at < values.len() && values[at] == value {
        at += 1;
    }
    at - start
}

/// The runs of equal values of `values`, as (count, value), into `runs`;
/// `false` as soon as they would not be worth sending. One pass, a chunk of
/// comparisons at a time: in the sandbox every pass over the jobs costs.
pub(crate) fn runs_of<T: Copy + PartialEq>(values: &[T], runs: &mut Vec<(usize, T)>) -> bool {
    runs.clear();
    if values.len() < MIN_ENTRIES {
        return false;
    }
    let most = values.len() / 2;
    let mut at = 0;
    while let Some(&value) = values.get(at) {
        let count = 1 + equal_from(values, at + 1, value);
        runs.push((count, value));
        at += count;
        if at < values.len() && runs.len() >= most {
            return false;
        }
    }
    !runs.is_empty() && worth(runs.len(), values.len())
}

/// Reads a run's count and adds it to `total`, refusing a total above
/// `max` (the view's jobs).
pub(crate) fn run_count(
    r: &mut Reader<'_>,
    total: &mut usize,
    max: usize,
) -> Result<usize, WireError> {
    let count = usize::try_from(r.u64()?).unwrap_or(usize::MAX);
    *total = total.saturating_add(count);
    if *total > max {
        return Err(r.error("runs cover more entries than the view has jobs"));
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use crate::ids::{JobId, Level};
    use crate::slots::{
        FairnessDecision, FairnessView, GangAction, GangDecision, LocalityDecision, QueueView,
        Ranked,
    };
    use crate::testing::strategy;
    use crate::view::SpreadLimit;
    use crate::{Fairness, Gang, Locality, SlotContract};

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        /// Whatever the decision, a compact reply decodes to it.
        #[test]
        fn compact_replies_decode_to_the_decision(
            view in strategy::fairness_view(),
            swaps in prop::collection::vec((any::<usize>(), any::<usize>()), 0..4),
            flips in prop::collection::vec(any::<usize>(), 0..3),
            limits in prop::collection::vec((0u8..3, 0u32..3), 1..4),
            actions in prop::collection::vec(0u8..3, 1..3),
        ) {
            let mut order: Vec<Ranked> = view.jobs.iter().map(|j| Ranked { job: j.id, eligible: true }).collect();
            let n = order.len().max(1);
            for (a, b) in swaps {
                if !order.is_empty() {
                    order.swap(a % n, b % n);
                }
            }
            for f in flips {
                if let Some(r) = order.get_mut(f % n) {
                    r.eligible = false;
                }
            }
            let d = FairnessDecision { order };
            let mut out = Vec::new();
            if Fairness::encode_decision_compact(&d, &view, &mut out) {
                prop_assert_eq!(Fairness::decode_decision_compact(&out, &view).unwrap(), d.clone());
                prop_assert!(out.len() <= crate::wire::codec::encode(&d).len());
            }
            let queue = QueueView { jobs: view.jobs.clone(), ..QueueView::default() };
            let l = LocalityDecision {
                limits: view.jobs.iter().enumerate().map(|(i, _)| {
                    let (level, s) = limits[i * limits.len() / n];
                    SpreadLimit::new(Level(level), s)
                }).collect(),
            };
            if Locality::encode_decision_compact(&l, &queue, &mut out) {
                prop_assert_eq!(Locality::decode_decision_compact(&out, &queue).unwrap(), l);
            }
            let g = GangDecision {
                on_blocked: view.jobs.iter().enumerate().map(|(i, _)| {
                    [GangAction::Backfill, GangAction::Block, GangAction::Reserve][actions[i * actions.len() / n] as usize]
                }).collect(),
                max_reservations: 3,
            };
            if Gang::encode_decision_compact(&g, &queue, &mut out) {
                prop_assert_eq!(Gang::decode_decision_compact(&out, &queue).unwrap(), g);
            }
        }

        /// On arbitrary bytes the host's decoders never panic and never
        /// produce more entries than the view has jobs.
        #[test]
        fn garbage_compact_replies_are_refused_or_bounded(
            view in strategy::fairness_view(),
            bytes in prop::collection::vec(any::<u8>(), 0..64),
        ) {
            let queue = QueueView { jobs: view.jobs.clone(), ..QueueView::default() };
            if let Ok(d) = Fairness::decode_decision_compact(&bytes, &view) {
                prop_assert!(d.order.len() <= view.jobs.len());
            }
            if let Ok(d) = Locality::decode_decision_compact(&bytes, &queue) {
                prop_assert!(d.limits.len() <= view.jobs.len());
            }
            if let Ok(d) = Gang::decode_decision_compact(&bytes, &queue) {
                prop_assert!(d.on_blocked.len() <= view.jobs.len());
            }
        }
    }

    /// The view's own order, all eligible, is one run; a uniform gang
    /// answer is one run; an order unrelated to the view is sent plain.
    #[test]
    fn uniform_answers_are_one_run() {
        let view = FairnessView {
            jobs: (0..500)
                .map(|i| crate::PendingJob {
                    id: JobId(1_000 + i),
                    ..crate::PendingJob::default()
                })
                .collect(),
            ..FairnessView::default()
        };
        let fifo = FairnessDecision {
            order: view
                .jobs
                .iter()
                .map(|j| Ranked {
                    job: j.id,
                    eligible: true,
                })
                .collect(),
        };
        let mut out = Vec::new();
        assert!(Fairness::encode_decision_compact(&fifo, &view, &mut out));
        assert_eq!(out, [1, 0xe9, 0x07, 0]);
        let mut reversed = fifo.clone();
        reversed.order.reverse();
        assert!(!Fairness::encode_decision_compact(
            &reversed, &view, &mut out
        ));
        let gang = GangDecision {
            on_blocked: vec![GangAction::Backfill; 500],
            max_reservations: 1,
        };
        assert!(Gang::encode_decision_compact(
            &gang,
            &QueueView::default(),
            &mut out
        ));
        assert_eq!(out, [1, 0xf4, 0x03, 0, 1]);
        // Runs past the view, or covering more jobs than it has, do not decode.
        let err = Fairness::decode_decision_compact(&[1, 0xe9, 0x07, 1], &view).unwrap_err();
        assert!(err.to_string().contains("past the view"), "{err}");
        let err = Fairness::decode_decision_compact(&[2, 0xe9, 0x07, 0, 2, 0], &view).unwrap_err();
        assert!(err.to_string().contains("more entries"), "{err}");
    }
}
