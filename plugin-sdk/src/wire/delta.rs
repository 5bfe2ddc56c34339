//! Bulk views as changes from the last one: what the host sends a module
//! whose glue asks for it (the manifest's `view_deltas`, which the SDK's
//! export glue sets). A backlog that stands from round to round then costs
//! the jobs that changed, not every job encoded by the host and decoded in
//! the sandbox again.
//!
//! A change of a fairness view ([`RoundView`]) is its `now_s`, `cluster`
//! and `vcs` whole, then its jobs as runs. A change of a locality or gang
//! view ([`QueueView`]) is its `now_s` and `cluster`, a byte saying whether
//! each job's spread limit travels with it (1: both views have one limit
//! per job) or the limits follow whole after the runs (0), then the runs.
//!
//! A run is a varint header `count << 1 | kind`:
//! - kind 0, *keep*: a varint `from`; the base's jobs `from..from + count`
//!   (and their limits, when they travel with the jobs), each one's
//!   `waiting_s` advanced by the time between the two views
//!   (`now_s - base.now_s`, wrapping);
//! - kind 1, *new*: `count` jobs follow in full, each followed by its limit
//!   when limits travel with the jobs.
//!
//! The keep runs together copy at most as many jobs as the base has, and a
//! new run is refused when the bytes left cannot hold it, so a change never
//! makes the guest build more than the base plus what its bytes carry.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::codec::{U32, U64, WireError};
use super::fast::{JOB_MAX, Reader, VC_MAX, Writer, cluster_max, write_sized};
use crate::ids::Level;
use crate::slots::{QueueView, RoundView};
use crate::view::{PendingJob, SpreadLimit};

/// Where the jobs of the new view come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Run {
    /// The base's jobs `from..from + count`.
    Keep { from: usize, count: usize },
    /// The new view's jobs `from..from + count`, sent in full.
    New { from: usize, count: usize },
}

/// How far past the expected base job the diff looks for a job before it
/// asks the index (a few jobs started or left the view there).
const LOOKAHEAD: usize = 16;

/// The fewest bytes a pending job takes on the wire.
const JOB_MIN: usize = 10;

thread_local! {
    /// The diff's scratch: its runs and the base's index by job id (built
    /// only when a job is not where the diff expects it).
    static DIFF: RefCell<Scratch> = RefCell::new(Scratch::default());
    /// The guest's second buffer: the new job list is built here from the
    /// base, then swapped in.
    static SPARE: RefCell<(Vec<PendingJob>, Vec<SpreadLimit>)> =
        const { RefCell::new((Vec::new(), Vec::new())) };
}

/// The diff's scratch: its runs, and the base's positions by job id.
#[derive(Default)]
struct Scratch {
    runs: Vec<Run>,
    index: HashMap<u64, usize, BuildHasherDefault<IdHasher>>,
}

/// One side of a diff: a view's jobs and their spread limits (one per job
/// when limits travel with the jobs; else unused).
#[derive(Clone, Copy)]
struct Side<'a> {
    jobs: &'a [PendingJob],
    spread: &'a [SpreadLimit],
}

/// A multiplicative hash for job ids (the index is rebuilt per view; it
/// needs speed, not resistance to chosen keys: the host builds it from its
/// own views).
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Whether `old`, `dt` seconds later, is `new`.
#[inline(always)]
fn same_job(old: &PendingJob, new: &PendingJob, dt: u64) -> bool {
    let PendingJob {
        id,
        vc,
        user,
        gpus,
        submitted_s,
        waiting_s,
        attempts,
        attained_gpu_s,
        min_level,
        min_servers,
    } = old;
    // Without short-circuits: one branch per job, not one per field.
    (*id == new.id)
        & (waiting_s.wrapping_add(dt) == new.waiting_s)
        & (*vc == new.vc)
        & (*user == new.user)
        & (*gpus == new.gpus)
        & (*submitted_s == new.submitted_s)
        & (*attempts == new.attempts)
        & (*attained_gpu_s == new.attained_gpu_s)
        & (*min_level == new.min_level)
        & (*min_servers == new.min_servers)
}

/// How many jobs at the start of `new` are those of `base`, `dt` seconds
/// later (with the same limits when `paired`).
fn unchanged(base: Side<'_>, new: Side<'_>, paired: bool, dt: u64) -> usize {
    let (old, now) = (base.jobs, new.jobs);
    let n = old.len().min(now.len());
    let mut at = 0;
    while at < n && same_job(&old[at], &now[at], dt) {
        at += 1;
    }
    if paired {
        at = base.spread[..at]
            .iter()
            .zip(&new.spread[..at])
            .take_while(|(a, b)| a == b)
            .count();
    }
    at
}

/// The runs that build `new` from `base` (with their limits when `paired`),
/// `dt` seconds later, into `scratch.runs`; returns how many jobs travel in
/// full.
fn diff(base: Side<'_>, new: Side<'_>, paired: bool, dt: u64, scratch: &mut Scratch) -> usize {
    let Scratch { runs, index } = scratch;
    let (
        Side {
            jobs: base,
            spread: base_spread,
        },
        Side { jobs, spread },
    ) = (base, new);
    runs.clear();
    index.clear();
    let same = |b: usize, n: usize| {
        same_job(&base[b], &jobs[n], dt) && (!paired || base_spread[b] == spread[n])
    };
    let mut next = 0;
    let mut literal = 0;
    let mut n = 0;
    while n < jobs.len() {
        // The common case first: a stretch of jobs unchanged but for time.
        let stretch = unchanged(
            Side {
                jobs: &base[next..],
                spread: if paired { &base_spread[next..] } else { &[] },
            },
            Side {
                jobs: &jobs[n..],
                spread: if paired { &spread[n..] } else { &[] },
            },
            paired,
            dt,
        );
        if stretch > 0 {
            match runs.last_mut() {
                Some(Run::Keep { from, count }) if *from + *count == next => *count += stretch,
                _ => runs.push(Run::Keep {
                    from: next,
                    count: stretch,
                }),
            }
            next += stretch;
            n += stretch;
            continue;
        }
        let job = &jobs[n];
        let found = if next < base.len() && same(next, n) {
            Some(next)
        } else {
            let ahead = (next + 1..base.len().min(next + LOOKAHEAD))
                .find(|&b| base[b].id == job.id)
                .filter(|&b| same(b, n));
            ahead.or_else(|| {
                if index.is_empty() && !base.is_empty() {
                    index.reserve(base.len());
                    for (b, j) in base.iter().enumerate() {
                        index.insert(j.id.0, b);
                    }
                }
                index.get(&job.id.0).copied().filter(|&b| same(b, n))
            })
        };
        match (found, runs.last_mut()) {
            (Some(b), Some(Run::Keep { from, count })) if *from + *count == b => *count += 1,
            (Some(b), _) => runs.push(Run::Keep { from: b, count: 1 }),
            (None, Some(Run::New { count, .. })) => {
                *count += 1;
                literal += 1;
            }
            (None, _) => {
                runs.push(Run::New { from: n, count: 1 });
                literal += 1;
            }
        }
        if let Some(b) = found {
            next = b + 1;
        }
        n += 1;
    }
    literal
}

impl Writer<'_> {
    /// Writes `runs`, the jobs of new runs in full (with their limits when
    /// `spread` travels with them).
    fn runs(&mut self, runs: &[Run], jobs: &[PendingJob], spread: Option<&[SpreadLimit]>) {
        self.varint(runs.len() as u64);
        for run in runs {
            match *run {
                Run::Keep { from, count } => {
                    self.varint((count as u64) << 1);
                    self.varint(from as u64);
                }
                Run::New { from, count } => {
                    self.varint(((count as u64) << 1) | 1);
                    for n in from..from + count {
                        self.pending_job(&jobs[n]);
                        if let Some(spread) = spread {
                            let SpreadLimit { level, max_servers } = spread[n];
                            self.byte(level.0);
                            self.varint(u64::from(max_servers));
                        }
                    }
                }
            }
        }
    }
}

/// Views with fewer jobs than this travel whole: a change would save next
/// to nothing and costs its own bookkeeping on both sides.
const MIN_JOBS: usize = 16;

/// Whether a change with `literal` of `jobs` jobs in full is worth sending
/// rather than the whole view.
fn worth(literal: usize, jobs: usize) -> bool {
    literal * 2 <= jobs
}

/// The most bytes the runs take, but for the jobs in full.
fn runs_max(runs: &[Run]) -> usize {
    U64 + runs.len() * 2 * U64
}

/// Encodes `view` as a change from `base` into `out` (cleared first), or
/// returns `false` (leaving `out` unspecified) when the whole view is
/// about as short (always for fewer than [`MIN_JOBS`] jobs).
pub(crate) fn encode_round_view_delta(
    base: &RoundView,
    view: &RoundView,
    out: &mut Vec<u8>,
) -> bool {
    let RoundView {
        now_s,
        cluster,
        vcs,
        jobs,
    } = view;
    if jobs.len() < MIN_JOBS {
        return false;
    }
    let dt = now_s.wrapping_sub(base.now_s);
    DIFF.with(|scratch| {
        let scratch = &mut *scratch.borrow_mut();
        let (base, new) = (
            Side {
                jobs: &base.jobs,
                spread: &[],
            },
            Side { jobs, spread: &[] },
        );
        let literal = diff(base, new, false, dt, scratch);
        let runs = &scratch.runs;
        if !worth(literal, jobs.len()) {
            return false;
        }
        let max = U64
            + cluster_max(cluster)
            + U64
            + vcs.len() * VC_MAX
            + runs_max(runs)
            + literal * JOB_MAX;
        write_sized(out, max, |w| {
            w.varint(*now_s);
            w.cluster_summary(cluster);
            w.vcs(vcs);
            w.runs(runs, jobs, None);
        })
    })
}

/// Encodes `view` as a change from `base` into `out` (cleared first), or
/// returns `false` (leaving `out` unspecified) when the whole view is
/// about as short (always for fewer than [`MIN_JOBS`] jobs).
pub(crate) fn encode_queue_view_delta(
    base: &QueueView,
    view: &QueueView,
    out: &mut Vec<u8>,
) -> bool {
    let QueueView {
        now_s,
        cluster,
        jobs,
        spread,
    } = view;
    if jobs.len() < MIN_JOBS {
        return false;
    }
    let dt = now_s.wrapping_sub(base.now_s);
    let paired = spread.len() == jobs.len() && base.spread.len() == base.jobs.len();
    DIFF.with(|scratch| {
        let scratch = &mut *scratch.borrow_mut();
        let (base, new) = (
            Side {
                jobs: &base.jobs,
                spread: &base.spread,
            },
            Side { jobs, spread },
        );
        let literal = diff(base, new, paired, dt, scratch);
        let runs = &scratch.runs;
        if !worth(literal, jobs.len()) {
            return false;
        }
        let rest = if paired {
            0
        } else {
            U64 + spread.len() * (1 + U32)
        };
        let max =
            U64 + cluster_max(cluster) + 1 + runs_max(runs) + literal * (JOB_MAX + 1 + U32) + rest;
        write_sized(out, max, |w| {
            w.varint(*now_s);
            w.cluster_summary(cluster);
            w.byte(u8::from(paired));
            if paired {
                w.runs(runs, jobs, Some(spread));
            } else {
                w.runs(runs, jobs, None);
                w.spread_limits(spread);
            }
        })
    })
}

/// Applies a change to `view`, which holds its base. After an error `view`
/// holds a partial result and must not be used.
pub(crate) fn apply_round_view_delta(bytes: &[u8], view: &mut RoundView) -> Result<(), WireError> {
    let RoundView {
        now_s,
        cluster,
        vcs,
        jobs,
    } = view;
    let mut r = Reader::new(bytes, "RoundView change");
    let now = r.u64()?;
    let dt = now.wrapping_sub(*now_s);
    *now_s = now;
    r.cluster_summary(cluster)?;
    r.vcs(vcs)?;
    apply_runs(&mut r, jobs, None, dt)?;
    r.finish()
}

/// Applies a change to `view`, which holds its base. After an error `view`
/// holds a partial result and must not be used.
pub(crate) fn apply_queue_view_delta(bytes: &[u8], view: &mut QueueView) -> Result<(), WireError> {
    let QueueView {
        now_s,
        cluster,
        jobs,
        spread,
    } = view;
    let mut r = Reader::new(bytes, "QueueView change");
    let now = r.u64()?;
    let dt = now.wrapping_sub(*now_s);
    *now_s = now;
    r.cluster_summary(cluster)?;
    match r.byte()? {
        1 => {
            if spread.len() != jobs.len() {
                return Err(r.error("limits travel with jobs the base has no limits for"));
            }
            apply_runs(&mut r, jobs, Some(spread), dt)?;
        }
        0 => {
            apply_runs(&mut r, jobs, None, dt)?;
            r.spread_limits(spread, usize::MAX)?;
        }
        _ => return Err(r.error("bad bool")),
    }
    r.finish()
}

/// Rebuilds `jobs` (and `spread`, when limits travel with the jobs) from
/// the runs `r` holds.
fn apply_runs(
    r: &mut Reader<'_>,
    jobs: &mut Vec<PendingJob>,
    spread: Option<&mut Vec<SpreadLimit>>,
    dt: u64,
) -> Result<(), WireError> {
    let n = r.len(2)?;
    SPARE.with(|scratch| {
        let (next, next_spread) = &mut *scratch.borrow_mut();
        next.clear();
        next_spread.clear();
        let mut kept = 0usize;
        for _ in 0..n {
            let header = r.u64()?;
            let count = usize::try_from(header >> 1).unwrap_or(usize::MAX);
            if header & 1 == 0 {
                let from = usize::try_from(r.u64()?).unwrap_or(usize::MAX);
                kept = kept.saturating_add(count);
                let end = match from.checked_add(count) {
                    Some(end) if end <= jobs.len() && kept <= jobs.len() => end,
                    _ => return Err(r.error("keep run past the base view")),
                };
                if n == 1 && from == 0 && end == jobs.len() {
                    // Only time passed: advance the base in place.
                    for j in jobs.iter_mut() {
                        j.waiting_s = j.waiting_s.wrapping_add(dt);
                    }
                    return Ok(());
                }
                let start = next.len();
                next.extend_from_slice(&jobs[from..end]);
                for j in &mut next[start..] {
                    j.waiting_s = j.waiting_s.wrapping_add(dt);
                }
                if let Some(spread) = &spread {
                    next_spread.extend_from_slice(&spread[from..end]);
                }
            } else {
                let each = if spread.is_some() {
                    JOB_MIN + 2
                } else {
                    JOB_MIN
                };
                r.room_for(count, each)?;
                for _ in 0..count {
                    next.push(PendingJob::default());
                    if let Some(j) = next.last_mut() {
                        r.pending_job_into(j)?;
                    }
                    if spread.is_some() {
                        next_spread.push(SpreadLimit {
                            level: Level(r.byte()?),
                            max_servers: r.u32()?,
                        });
                    }
                }
            }
        }
        std::mem::swap(jobs, next);
        if let Some(spread) = spread {
            std::mem::swap(spread, next_spread);
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::ids::JobId;
    use crate::testing::strategy;

    /// How a view changes between two rounds: jobs leave, arrive, change,
    /// move, and time passes.
    #[derive(Clone, Debug)]
    enum Edit {
        Remove(usize),
        Insert(usize, PendingJob),
        Change(usize, u32),
        Move(usize, usize),
        Limit(usize, u8),
    }

    fn edits() -> impl Strategy<Value = Vec<Edit>> {
        let edit = prop_oneof![
            3 => any::<usize>().prop_map(Edit::Remove),
            2 => (any::<usize>(), any::<u64>(), any::<u32>(), any::<u64>()).prop_map(|(at, id, gpus, waiting_s)| {
                Edit::Insert(at, PendingJob { id: JobId(id % 64), gpus, waiting_s, ..PendingJob::default() })
            }),
            2 => (any::<usize>(), any::<u32>()).prop_map(|(at, g)| Edit::Change(at, g)),
            1 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::Move(a, b)),
            1 => (any::<usize>(), any::<u8>()).prop_map(|(a, l)| Edit::Limit(a, l)),
        ];
        prop::collection::vec(edit, 0..40)
    }

    /// `jobs` and `spread` (one limit per job, or none) after `edits`, `dt`
    /// seconds later.
    fn edited(
        jobs: &[PendingJob],
        spread: &[SpreadLimit],
        edits: &[Edit],
        dt: u64,
    ) -> (Vec<PendingJob>, Vec<SpreadLimit>) {
        let paired = spread.len() == jobs.len();
        let mut pairs: Vec<(PendingJob, SpreadLimit)> = jobs
            .iter()
            .enumerate()
            .map(|(i, j)| {
                let mut j = *j;
                j.waiting_s = j.waiting_s.wrapping_add(dt);
                (j, spread.get(i).copied().unwrap_or_default())
            })
            .collect();
        for e in edits {
            let len = pairs.len();
            match e {
                Edit::Remove(at) if len > 0 => {
                    pairs.remove(at % len);
                }
                Edit::Insert(at, j) => pairs.insert(at % (len + 1), (*j, SpreadLimit::default())),
                Edit::Change(at, g) if len > 0 => pairs[at % len].0.gpus = *g,
                Edit::Move(a, b) if len > 0 => {
                    let p = pairs.remove(a % len);
                    pairs.insert(b % len, p);
                }
                Edit::Limit(at, l) if len > 0 => pairs[at % len].1.level = Level(*l),
                _ => {}
            }
        }
        let spread = if paired {
            pairs.iter().map(|p| p.1).collect()
        } else {
            spread.to_vec()
        };
        (pairs.into_iter().map(|p| p.0).collect(), spread)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        /// Whatever changed, the base plus the change is the new view.
        #[test]
        fn a_change_rebuilds_the_round_view(
            base in strategy::round_view(),
            edits in edits(),
            dt in prop_oneof![Just(0u64), 1u64..100_000, Just(u64::MAX)],
        ) {
            let (jobs, _) = edited(&base.jobs, &[], &edits, dt);
            let view = RoundView { now_s: base.now_s.wrapping_add(dt), jobs, ..base.clone() };
            let mut bytes = vec![0xAA; 5];
            if encode_round_view_delta(&base, &view, &mut bytes) {
                let mut held = base.clone();
                apply_round_view_delta(&bytes, &mut held).unwrap();
                prop_assert_eq!(held, view);
            } else {
                // Only a small view travels whole when nothing but time passed.
                prop_assert!(!edits.is_empty() || view.jobs.len() < MIN_JOBS);
            }
        }

        /// The same for locality and gang views, with limits that travel
        /// with the jobs or whole.
        #[test]
        fn a_change_rebuilds_the_queue_view(
            base in strategy::queue_view(true),
            edits in edits(),
            dt in prop_oneof![Just(0u64), 1u64..100_000],
        ) {
            let (jobs, spread) = edited(&base.jobs, &base.spread, &edits, dt);
            let view = QueueView { now_s: base.now_s.wrapping_add(dt), jobs, spread, ..base.clone() };
            let mut bytes = Vec::new();
            if encode_queue_view_delta(&base, &view, &mut bytes) {
                let mut held = base.clone();
                apply_queue_view_delta(&bytes, &mut held).unwrap();
                prop_assert_eq!(held, view);
            }
        }

        /// On arbitrary bytes over any base the guest's side never panics,
        /// and never builds more jobs than the base and the bytes hold.
        #[test]
        fn garbage_changes_are_refused_or_bounded(
            base in strategy::queue_view(true),
            bytes in prop::collection::vec(any::<u8>(), 0..200),
        ) {
            let mut held = base.clone();
            if apply_queue_view_delta(&bytes, &mut held).is_ok() {
                prop_assert!(held.jobs.len() <= base.jobs.len() + bytes.len() / JOB_MIN);
            }
            let mut round = RoundView { jobs: base.jobs.clone(), ..RoundView::default() };
            if apply_round_view_delta(&bytes, &mut round).is_ok() {
                prop_assert!(round.jobs.len() <= base.jobs.len() + bytes.len() / JOB_MIN);
            }
        }
    }

    /// A standing backlog a second later costs a few bytes, and jobs that
    /// started leave a gap that the next keep run jumps.
    #[test]
    fn a_standing_backlog_costs_a_few_bytes() {
        let base = RoundView {
            now_s: 100,
            jobs: (0..1_000)
                .map(|i| PendingJob {
                    id: JobId(i),
                    gpus: 1,
                    waiting_s: i,
                    ..PendingJob::default()
                })
                .collect(),
            ..RoundView::default()
        };
        let mut view = base.clone();
        view.now_s = 101;
        for j in &mut view.jobs {
            j.waiting_s += 1;
        }
        let mut bytes = Vec::new();
        assert!(encode_round_view_delta(&base, &view, &mut bytes));
        assert!(bytes.len() < 16, "{} bytes", bytes.len());
        view.jobs.drain(100..140);
        assert!(encode_round_view_delta(&base, &view, &mut bytes));
        assert!(bytes.len() < 20, "{} bytes", bytes.len());
        let mut held = base.clone();
        apply_round_view_delta(&bytes, &mut held).unwrap();
        assert_eq!(held, view);
        // A change whose keep runs copy more than the base holds is refused.
        // (now, cluster, vcs, then two runs that each keep job 0.)
        let bad = [0, 0, 0, 0, 0, 0, 2, 2, 0, 2, 0];
        let mut small = RoundView {
            jobs: vec![PendingJob::default()],
            ..RoundView::default()
        };
        let err = apply_round_view_delta(&bad, &mut small).unwrap_err();
        assert!(err.to_string().contains("past the base view"), "{err}");
        // One keep run copies it once.
        let mut small = RoundView {
            jobs: vec![PendingJob::default()],
            ..RoundView::default()
        };
        apply_round_view_delta(&[0, 0, 0, 0, 0, 0, 1, 2, 0], &mut small).unwrap();
    }
}
