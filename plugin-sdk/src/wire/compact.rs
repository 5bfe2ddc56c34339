//! Compact replies: decisions as runs over the view they answer, which a
//! module that takes view messages may send instead of the plain decision
//! when they are shorter. A FIFO-like order is then a few runs of view
//! positions, and a uniform answer (every job backfills, every gang keeps
//! its narrowest level) one run, instead of an entry per job encoded in the
//! sandbox and decoded by the host.
//!
//! A decision type says which of its lists travel as runs (see
//! `gangway-wire-derive`); its other fields travel as in the plain
//! decision, in declaration order around them. Each list of runs starts
//! with its number of runs:
//! - runs of equal values (`#[wire(runs)]`: the locality slot's limits, the
//!   gang slot's actions): `count` and the value; the next `count` entries
//!   are that value;
//! - runs of view positions (`#[wire(positions = jobs)]`: the fairness
//!   slot's order): `header` (`count << 1 | flag`) and `from`: the view's
//!   entries `from..from + count`, in that order, each with that flag
//!   (eligible or not).
//!
//! A reply whose runs cover more entries than the view has jobs, or name
//! positions past its end, does not decode; one that covers fewer decodes,
//! and the slot's rules refuse it.

use std::cell::RefCell;

use super::change::Keyed;
use super::codec::{U64, WireError};
use super::postcard::{Reader, Wire, Writer};

/// Replies to views with fewer jobs than this are sent plain: runs would
/// save next to nothing.
pub(crate) const MIN_ENTRIES: usize = 16;

/// Whether `runs` runs over `entries` entries are worth sending.
fn worth(runs: usize, entries: usize) -> bool {
    runs * 2 <= entries
}

/// How many values a run-scanning loop compares per step: without a branch
/// per value, which in the sandbox also means one fuel check per chunk.
const CHUNK: usize = 8;

/// How far from the expected position the position encoder looks for the
/// next entry before it gives up and the plain reply is sent.
const NEARBY: usize = 8;

/// An entry of a list that travels as runs of view positions: the id of a
/// view's entry and a flag (derived from `#[wire(key)]` and
/// `#[wire(flag)]`).
pub trait Positioned: Sized {
    /// The id of the view entry it names.
    fn key(&self) -> u64;
    /// Its flag.
    fn flag(&self) -> bool;
    /// The entry naming the view entry of id `key`, with `flag`.
    fn at(key: u64, flag: bool) -> Self;
}

thread_local! {
    /// The position encoder's runs: (from, count, flag).
    static POSITIONS: RefCell<Vec<(usize, usize, u8)>> = const { RefCell::new(Vec::new()) };
}

/// How many of `values` from `at` on equal `value`, scanned a chunk at a time.
#[inline(always)]
fn equal_from<T: PartialEq>(values: &[T], mut at: usize, value: &T) -> usize {
    let start = at;
    while let Some(chunk) = values.get(at..at + CHUNK) {
        if !chunk.iter().fold(true, |all, v| all & (v == value)) {
            break;
        }
        at += CHUNK;
    }
    while at < values.len() && values[at] == *value {
        at += 1;
    }
    at - start
}

/// How many runs of equal values `values` make, or `None` as soon as they
/// would not be worth sending. One pass, a chunk of comparisons at a time:
/// in the sandbox every pass over the jobs costs.
pub fn value_runs<T: PartialEq>(values: &[T]) -> Option<usize> {
    if values.len() < MIN_ENTRIES {
        return None;
    }
    let most = values.len() / 2;
    let (mut at, mut runs) = (0, 0);
    while let Some(value) = values.get(at) {
        at += 1 + equal_from(values, at + 1, value);
        runs += 1;
        if at < values.len() && runs >= most {
            return None;
        }
    }
    (runs > 0 && worth(runs, values.len())).then_some(runs)
}

/// The most bytes `runs` runs of `values` take.
pub fn value_runs_max<T: Wire>(values: &[T], runs: usize) -> usize {
    let each = match T::MAX_BYTES {
        Some(each) => runs.saturating_mul(each),
        None => values.iter().map(Wire::max_bytes).sum(),
    };
    U64 + runs * U64 + each
}

/// Writes the `runs` runs of equal values of `values`.
pub fn write_value_runs<T: Wire + PartialEq>(w: &mut Writer<'_>, values: &[T], runs: usize) {
    w.varint(runs as u64);
    let mut at = 0;
    while let Some(value) = values.get(at) {
        let count = 1 + equal_from(values, at + 1, value);
        w.varint(count as u64);
        value.write(w);
        at += count;
    }
}

/// Reads runs of equal values into `out` (cleared first), covering at most
/// `max` entries (the view's jobs).
pub fn read_value_runs<T: Wire + Clone>(
    r: &mut Reader<'_>,
    out: &mut Vec<T>,
    max: usize,
) -> Result<(), WireError> {
    let n = r.len(1 + T::MIN_BYTES)?;
    out.clear();
    let mut total = 0usize;
    for _ in 0..n {
        let count = run_count(r, &mut total, max)?;
        let mut value = T::default();
        value.read_into(r)?;
        out.extend(std::iter::repeat_n(value, count));
    }
    Ok(())
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

/// Runs `then` with the runs of view positions `order` makes over `view`
/// (from, count, flag), or returns `false` when the order does not follow
/// the view closely enough for runs to be worth sending.
pub fn with_position_runs<E: Positioned, V: Keyed>(
    order: &[E],
    view: &[V],
    then: impl FnOnce(&[(usize, usize, u8)]) -> bool,
) -> bool {
    if order.len() < MIN_ENTRIES {
        return false;
    }
    POSITIONS.with(|runs| {
        let runs = &mut *runs.borrow_mut();
        position_runs(order, view, runs) && then(runs)
    })
}

/// The runs of [`with_position_runs`] into `runs`; `false` as soon as they
/// would not be worth sending.
fn position_runs<E: Positioned, V: Keyed>(
    order: &[E],
    view: &[V],
    runs: &mut Vec<(usize, usize, u8)>,
) -> bool {
    runs.clear();
    let most = order.len() / 2;
    // The current run: the view's entries from..next, all with `flag`.
    let (mut from, mut next, mut flag) = (0, 0, true);
    let mut k = 0;
    while let Some(e) = order.get(k) {
        // A chunk of the order that goes on with the run.
        let goes_on = |n: usize| {
            view.get(next..next + n)
                .zip(order.get(k..k + n))
                .is_some_and(|(view, order)| {
                    view.iter().zip(order).fold(true, |all, (v, e)| {
                        all & (v.key() == e.key()) & (e.flag() == flag)
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
        let near = next.saturating_sub(NEARBY)..view.len().min(next + NEARBY);
        let Some(at) = near.into_iter().find(|&i| view[i].key() == e.key()) else {
            return false;
        };
        if next > from {
            runs.push((from, next - from, u8::from(flag)));
            if runs.len() >= most {
                return false;
            }
        }
        (from, next, flag) = (at, at + 1, e.flag());
    }
    if next > from {
        runs.push((from, next - from, u8::from(flag)));
    }
    worth(runs.len(), order.len())
}

/// The most bytes `runs` of view positions take.
pub fn position_runs_max(runs: &[(usize, usize, u8)]) -> usize {
    U64 + runs.len() * 2 * U64
}

/// Writes runs of view positions.
pub fn write_position_runs(w: &mut Writer<'_>, runs: &[(usize, usize, u8)]) {
    w.varint(runs.len() as u64);
    for &(from, count, flag) in runs {
        w.varint(((count as u64) << 1) | u64::from(flag));
        w.varint(from as u64);
    }
}

/// Reads runs of positions of `view` into `out` (cleared first).
pub fn read_position_runs<E: Positioned, V: Keyed>(
    r: &mut Reader<'_>,
    out: &mut Vec<E>,
    view: &[V],
) -> Result<(), WireError> {
    let n = r.len(2)?;
    out.clear();
    let mut total = 0usize;
    for _ in 0..n {
        let header = r.u64()?;
        let count = usize::try_from(header >> 1).unwrap_or(usize::MAX);
        total = total.saturating_add(count);
        if total > view.len() {
            return Err(r.error("runs cover more entries than the view has jobs"));
        }
        let from = usize::try_from(r.u64()?).unwrap_or(usize::MAX);
        let Some(run) = from.checked_add(count).and_then(|end| view.get(from..end)) else {
            return Err(r.error("a run past the view's jobs"));
        };
        let flag = header & 1 == 1;
        out.extend(run.iter().map(|v| E::at(v.key(), flag)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use crate::Fairness;
    use crate::ids::{JobId, Level};
    use crate::slots::{
        FairnessDecision, FairnessView, GangAction, GangDecision, LocalityDecision, QueueView,
        Ranked,
    };
    use crate::testing::SlotViews;
    use crate::view::SpreadLimit;
    use crate::wire::WireDecision;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        /// Whatever the decision, a compact reply decodes to it.
        #[test]
        fn compact_replies_decode_to_the_decision(
            view in Fairness::views(),
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
            if d.encode_compact(&view, &mut out) {
                prop_assert_eq!(FairnessDecision::decode_compact(&out, &view).unwrap(), d.clone());
                prop_assert!(out.len() <= crate::wire::codec::encode(&d).len());
            }
            let queue = QueueView { jobs: view.jobs.clone(), ..QueueView::default() };
            let l = LocalityDecision {
                limits: view.jobs.iter().enumerate().map(|(i, _)| {
                    let (level, s) = limits[i * limits.len() / n];
                    SpreadLimit::new(Level(level), s)
                }).collect(),
            };
            if l.encode_compact(&queue, &mut out) {
                prop_assert_eq!(LocalityDecision::decode_compact(&out, &queue).unwrap(), l);
            }
            let g = GangDecision {
                on_blocked: view.jobs.iter().enumerate().map(|(i, _)| {
                    [GangAction::Backfill, GangAction::Block, GangAction::Reserve][actions[i * actions.len() / n] as usize]
                }).collect(),
                max_reservations: 3,
            };
            if g.encode_compact(&queue, &mut out) {
                prop_assert_eq!(GangDecision::decode_compact(&out, &queue).unwrap(), g);
            }
        }

        /// On arbitrary bytes the host's decoders never panic and never
        /// produce more entries than the view has jobs.
        #[test]
        fn garbage_compact_replies_are_refused_or_bounded(
            view in Fairness::views(),
            bytes in prop::collection::vec(any::<u8>(), 0..64),
        ) {
            let queue = QueueView { jobs: view.jobs.clone(), ..QueueView::default() };
            if let Ok(d) = FairnessDecision::decode_compact(&bytes, &view) {
                prop_assert!(d.order.len() <= view.jobs.len());
            }
            if let Ok(d) = LocalityDecision::decode_compact(&bytes, &queue) {
                prop_assert!(d.limits.len() <= view.jobs.len());
            }
            if let Ok(d) = GangDecision::decode_compact(&bytes, &queue) {
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
        assert!(fifo.encode_compact(&view, &mut out));
        assert_eq!(out, [1, 0xe9, 0x07, 0]);
        let mut reversed = fifo.clone();
        reversed.order.reverse();
        assert!(!reversed.encode_compact(&view, &mut out));
        let gang = GangDecision {
            on_blocked: vec![GangAction::Backfill; 500],
            max_reservations: 1,
        };
        assert!(gang.encode_compact(&QueueView::default(), &mut out));
        assert_eq!(out, [1, 0xf4, 0x03, 0, 1]);
        // Runs past the view, or covering more jobs than it has, do not decode.
        let err = FairnessDecision::decode_compact(&[1, 0xe9, 0x07, 1], &view).unwrap_err();
        assert!(err.to_string().contains("past the view"), "{err}");
        let err = FairnessDecision::decode_compact(&[2, 0xe9, 0x07, 0, 2, 0], &view).unwrap_err();
        assert!(err.to_string().contains("more entries"), "{err}");
    }
}
