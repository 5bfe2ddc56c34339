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

use std::cell::RefCell;

use super::codec::{U32, U64, WireError};
use super::fast::{Reader, write_sized};
use crate::slots::{
    FairnessDecision, GangAction, GangDecision, LocalityDecision, QueueView, Ranked, RoundView,
};
use crate::view::SpreadLimit;

/// How far from the expected position the fairness encoder looks for the
/// next job before it gives up and the plain reply is sent.
const NEARBY: usize = 8;

thread_local! {
    /// The fairness encoder's runs: (from, count, eligible).
    static RUNS: RefCell<Vec<(usize, usize, u8)>> = const { RefCell::new(Vec::new()) };
}

/// Replies to views with fewer jobs than this are sent plain: runs would
/// save next to nothing.
const MIN_ENTRIES: usize = 16;

/// Whether `runs` runs over `entries` entries are worth sending.
fn worth(runs: usize, entries: usize) -> bool {
    runs * 2 <= entries
}

/// Encodes `d` as runs over `view` into `out` (cleared first), or returns
/// `false` (leaving `out` unspecified) when the order does not follow the
/// view closely enough for runs to be shorter.
pub(crate) fn encode_fairness(d: &FairnessDecision, view: &RoundView, out: &mut Vec<u8>) -> bool {
    let jobs = &view.jobs;
    let order = &d.order;
    if order.len() < MIN_ENTRIES {
        return false;
    }
    RUNS.with(|runs| {
        let runs = &mut *runs.borrow_mut();
        runs.clear();
        let most = order.len() / 2;
        // The current run: the view's jobs from..next, all `eligible`.
        let (mut from, mut next, mut eligible) = (0, 0, true);
        let mut k = 0;
        while let Some(r) = order.get(k) {
            // A chunk of the order that goes on with the run.
            let goes_on = |n: usize| {
                jobs.get(next..next + n)
                    .zip(order.get(k..k + n))
                    .is_some_and(|(jobs, ranked)| {
                        jobs.iter().zip(ranked).fold(true, |all, (j, r)| {
                            all & (j.id == r.job) & (r.eligible == eligible)
                        })
                    })
            };
            if goes_on(CHUNK) {
                (next, k) = (next + CHUNK, k + CHUNK);
                continue;
            }
            if goes_on(1) {
                (next, k) = (next + 1, k + 1);
                continue;
            }
            k += 1;
            let near = next.saturating_sub(NEARBY)..jobs.len().min(next + NEARBY);
            let Some(at) = near.into_iter().find(|&i| jobs[i].id == r.job) else {
                return false;
            };
            if next > from {
                runs.push((from, next - from, u8::from(eligible)));
                if runs.len() >= most {
                    return false;
                }
            }
            (from, next, eligible) = (at, at + 1, r.eligible);
        }
        if next > from {
            runs.push((from, next - from, u8::from(eligible)));
        }
        if !worth(runs.len(), order.len()) {
            return false;
        }
        write_sized(out, U64 + runs.len() * 2 * U64, |w| {
            w.varint(runs.len() as u64);
            for &(from, count, eligible) in runs.iter() {
                w.varint(((count as u64) << 1) | u64::from(eligible));
                w.varint(from as u64);
            }
        })
    })
}

/// How many values a run-scanning loop compares per step: without a branch
/// per value, which in the sandbox also means one fuel check per chunk.
const CHUNK: usize = 8;

/// How many of `values` from `at` on equal `value`, scanned a chunk at a time.
#[inline(always)]
fn equal_from<T: Copy + PartialEq>(values: &[T], mut at: usize, value: T) -> usize {
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
fn runs_of<T: Copy + PartialEq>(values: &[T], runs: &mut Vec<(usize, T)>) -> bool {
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

thread_local! {
    static LIMIT_RUNS: RefCell<Vec<(usize, SpreadLimit)>> = const { RefCell::new(Vec::new()) };
    static ACTION_RUNS: RefCell<Vec<(usize, GangAction)>> = const { RefCell::new(Vec::new()) };
}

/// Encodes `d` as runs of equal limits into `out` (cleared first), or
/// returns `false` when they would not be shorter.
pub(crate) fn encode_locality(d: &LocalityDecision, out: &mut Vec<u8>) -> bool {
    LIMIT_RUNS.with(|runs| {
        let runs = &mut *runs.borrow_mut();
        if !runs_of(&d.limits, runs) {
            return false;
        }
        write_sized(out, U64 + runs.len() * (U64 + 1 + U32), |w| {
            w.varint(runs.len() as u64);
            for &(count, limit) in runs.iter() {
                w.varint(count as u64);
                w.spread_limit(limit);
            }
        })
    })
}

/// The wire value of a gang action (its variant index).
fn action_index(a: GangAction) -> u8 {
    match a {
        GangAction::Backfill => 0,
        GangAction::Block => 1,
        GangAction::Reserve => 2,
    }
}

/// Encodes `d` as runs of equal actions into `out` (cleared first), or
/// returns `false` when they would not be shorter.
pub(crate) fn encode_gang(d: &GangDecision, out: &mut Vec<u8>) -> bool {
    ACTION_RUNS.with(|runs| {
        let runs = &mut *runs.borrow_mut();
        if !runs_of(&d.on_blocked, runs) {
            return false;
        }
        write_sized(out, U64 + runs.len() * (U64 + 1) + U32, |w| {
            w.varint(runs.len() as u64);
            for &(count, action) in runs.iter() {
                w.varint(count as u64);
                w.byte(action_index(action));
            }
            w.varint(u64::from(d.max_reservations));
        })
    })
}

/// Reads a run's count and adds it to `total`, refusing a total above
/// `max` (the view's jobs).
fn run_count(r: &mut Reader<'_>, total: &mut usize, max: usize) -> Result<usize, WireError> {
    let count = usize::try_from(r.u64()?).unwrap_or(usize::MAX);
    *total = total.saturating_add(count);
    if *total > max {
        return Err(r.error("runs cover more entries than the view has jobs"));
    }
    Ok(count)
}

/// Decodes a compact fairness reply to `view`; trailing bytes are an error.
pub(crate) fn decode_fairness(
    bytes: &[u8],
    view: &RoundView,
) -> Result<FairnessDecision, WireError> {
    let jobs = &view.jobs;
    let mut r = Reader::new(bytes, "compact FairnessDecision");
    let n = r.len(2)?;
    let mut order = Vec::new();
    let mut total = 0usize;
    for _ in 0..n {
        let header = r.u64()?;
        let count = usize::try_from(header >> 1).unwrap_or(usize::MAX);
        total = total.saturating_add(count);
        if total > jobs.len() {
            return Err(r.error("runs cover more entries than the view has jobs"));
        }
        let from = usize::try_from(r.u64()?).unwrap_or(usize::MAX);
        let Some(run) = from.checked_add(count).and_then(|end| jobs.get(from..end)) else {
            return Err(r.error("a run past the view's jobs"));
        };
        let eligible = header & 1 == 1;
        order.extend(run.iter().map(|j| Ranked {
            job: j.id,
            eligible,
        }));
    }
    r.finish()?;
    Ok(FairnessDecision { order })
}

/// Decodes a compact locality reply to `view`; trailing bytes are an error.
pub(crate) fn decode_locality(
    bytes: &[u8],
    view: &QueueView,
) -> Result<LocalityDecision, WireError> {
    let mut r = Reader::new(bytes, "compact LocalityDecision");
    let n = r.len(3)?;
    let mut limits = Vec::new();
    let mut total = 0usize;
    for _ in 0..n {
        let count = run_count(&mut r, &mut total, view.jobs.len())?;
        let limit = r.spread_limit()?;
        limits.extend(std::iter::repeat_n(limit, count));
    }
    r.finish()?;
    Ok(LocalityDecision { limits })
}

/// Decodes a compact gang reply to `view`; trailing bytes are an error.
pub(crate) fn decode_gang(bytes: &[u8], view: &QueueView) -> Result<GangDecision, WireError> {
    let mut r = Reader::new(bytes, "compact GangDecision");
    let n = r.len(2)?;
    let mut on_blocked = Vec::new();
    let mut total = 0usize;
    for _ in 0..n {
        let count = run_count(&mut r, &mut total, view.jobs.len())?;
        let action = match r.byte()? {
            0 => GangAction::Backfill,
            1 => GangAction::Block,
            2 => GangAction::Reserve,
            _ => return Err(r.error("bad GangAction")),
        };
        on_blocked.extend(std::iter::repeat_n(action, count));
    }
    let max_reservations = r.u32()?;
    r.finish()?;
    Ok(GangDecision {
        on_blocked,
        max_reservations,
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::ids::{JobId, Level};
    use crate::testing::strategy;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        /// Whatever the decision, a compact reply decodes to it.
        #[test]
        fn compact_replies_decode_to_the_decision(
            view in strategy::round_view(),
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
            if encode_fairness(&d, &view, &mut out) {
                prop_assert_eq!(decode_fairness(&out, &view).unwrap(), d.clone());
                prop_assert!(out.len() <= crate::wire::codec::encode(&d).len());
            }
            let queue = QueueView { jobs: view.jobs.clone(), ..QueueView::default() };
            let l = LocalityDecision {
                limits: view.jobs.iter().enumerate().map(|(i, _)| {
                    let (level, s) = limits[i * limits.len() / n];
                    SpreadLimit::new(Level(level), s)
                }).collect(),
            };
            if encode_locality(&l, &mut out) {
                prop_assert_eq!(decode_locality(&out, &queue).unwrap(), l);
            }
            let g = GangDecision {
                on_blocked: view.jobs.iter().enumerate().map(|(i, _)| {
                    [GangAction::Backfill, GangAction::Block, GangAction::Reserve][actions[i * actions.len() / n] as usize]
                }).collect(),
                max_reservations: 3,
            };
            if encode_gang(&g, &mut out) {
                prop_assert_eq!(decode_gang(&out, &queue).unwrap(), g);
            }
        }

        /// On arbitrary bytes the host's decoders never panic and never
        /// produce more entries than the view has jobs.
        #[test]
        fn garbage_compact_replies_are_refused_or_bounded(
            view in strategy::round_view(),
            bytes in prop::collection::vec(any::<u8>(), 0..64),
        ) {
            let queue = QueueView { jobs: view.jobs.clone(), ..QueueView::default() };
            if let Ok(d) = decode_fairness(&bytes, &view) {
                prop_assert!(d.order.len() <= view.jobs.len());
            }
            if let Ok(d) = decode_locality(&bytes, &queue) {
                prop_assert!(d.limits.len() <= view.jobs.len());
            }
            if let Ok(d) = decode_gang(&bytes, &queue) {
                prop_assert!(d.on_blocked.len() <= view.jobs.len());
            }
        }
    }

    /// The view's own order, all eligible, is one run; a uniform gang
    /// answer is one run; an order unrelated to the view is sent plain.
    #[test]
    fn uniform_answers_are_one_run() {
        let view = RoundView {
            jobs: (0..500)
                .map(|i| crate::PendingJob {
                    id: JobId(1_000 + i),
                    ..crate::PendingJob::default()
                })
                .collect(),
            ..RoundView::default()
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
        assert!(encode_fairness(&fifo, &view, &mut out));
        assert_eq!(out, [1, 0xe9, 0x07, 0]);
        let mut reversed = fifo.clone();
        reversed.order.reverse();
        assert!(!encode_fairness(&reversed, &view, &mut out));
        let gang = GangDecision {
            on_blocked: vec![GangAction::Backfill; 500],
            max_reservations: 1,
        };
        assert!(encode_gang(&gang, &mut out));
        assert_eq!(out, [1, 0xf4, 0x03, 0, 1]);
        // Runs past the view, or covering more jobs than it has, do not decode.
        let err = decode_fairness(&[1, 0xe9, 0x07, 1], &view).unwrap_err();
        assert!(err.to_string().contains("past the view"), "{err}");
        let err = decode_fairness(&[2, 0xe9, 0x07, 0, 2, 0], &view).unwrap_err();
        assert!(err.to_string().contains("more entries"), "{err}");
    }
}
