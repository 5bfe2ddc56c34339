//! The fairness slot's wire code: its view and decision byte for byte as
//! postcard writes them, its view as a change from the last one, and its
//! decision as runs over the view (the formats are in `crate::wire`).

use std::cell::RefCell;

use super::{FairnessDecision, FairnessView, Ranked};
use crate::ids::JobId;
use crate::wire::codec::{self, U64, WireError};
use crate::wire::postcard::{JOB_MAX, Reader, VC_MAX, cluster_max, write_sized};
use crate::wire::{change, compact};

/// How far from the expected position the compact encoder looks for the
/// next job before it gives up and the plain reply is sent.
const NEARBY: usize = 8;

thread_local! {
    /// The compact encoder's runs: (from, count, eligible).
    static RUNS: RefCell<Vec<(usize, usize, u8)>> = const { RefCell::new(Vec::new()) };
}

/// Encodes a [`FairnessView`] into `out` (cleared first), as postcard does.
pub(crate) fn encode_view(view: &FairnessView, out: &mut Vec<u8>) {
    let FairnessView {
        now_s,
        cluster,
        vcs,
        jobs,
    } = view;
    let max = U64 + cluster_max(cluster) + U64 + vcs.len() * VC_MAX + U64 + jobs.len() * JOB_MAX;
    let fits = write_sized(out, max, |w| {
        w.varint(*now_s);
        w.cluster_summary(cluster);
        w.vcs(vcs);
        w.pending_jobs(jobs);
    });
    if !fits {
        codec::encode_into(view, out);
    }
}

/// Decodes a [`FairnessView`] into `view`, reusing its vectors' memory (what
/// the guest glue does every round). After an error `view` holds a partial
/// decoding and must not be used.
pub(crate) fn decode_view_into(bytes: &[u8], view: &mut FairnessView) -> Result<(), WireError> {
    let FairnessView {
        now_s,
        cluster,
        vcs,
        jobs,
    } = view;
    let mut r = Reader::new(bytes, "FairnessView");
    *now_s = r.u64()?;
    r.cluster_summary(cluster)?;
    r.vcs(vcs)?;
    r.pending_jobs(jobs)?;
    r.finish()
}

/// Encodes a [`FairnessDecision`] into `out` (cleared first), as postcard does.
pub(crate) fn encode_decision(d: &FairnessDecision, out: &mut Vec<u8>) {
    let FairnessDecision { order } = d;
    let fits = write_sized(out, U64 + order.len() * (U64 + 1), |w| {
        w.varint(order.len() as u64);
        for r in order {
            let Ranked { job, eligible } = r;
            w.varint(job.0);
            w.byte(u8::from(*eligible));
        }
    });
    if !fits {
        codec::encode_into(d, out);
    }
}

/// Decodes a [`FairnessDecision`] of at most `max_jobs` entries; trailing
/// bytes are an error.
pub(crate) fn decode_decision(
    bytes: &[u8],
    max_jobs: usize,
) -> Result<FairnessDecision, WireError> {
    let mut r = Reader::new(bytes, "FairnessDecision");
    let n = r.bounded_len(2, max_jobs)?;
    let mut order = Vec::with_capacity(n);
    for _ in 0..n {
        let job = JobId(r.u64()?);
        let eligible = match r.byte()? {
            0 => false,
            1 => true,
            _ => return Err(r.error("bad bool")),
        };
        order.push(Ranked { job, eligible });
    }
    r.finish()?;
    Ok(FairnessDecision { order })
}

/// Encodes `view` as a change from `base` into `out` (cleared first), or
/// returns `false` (leaving `out` unspecified) when the whole view is
/// about as short (always for fewer than [`MIN_ENTRIES`] VCs and jobs).
pub(crate) fn encode_view_change(
    base: &FairnessView,
    view: &FairnessView,
    known: Option<&crate::wire::KnownChanges>,
    out: &mut Vec<u8>,
) -> bool {
    let FairnessView {
        now_s,
        cluster,
        vcs,
        jobs,
    } = view;
    let entries = vcs.len() + jobs.len();
    if entries < change::MIN_ENTRIES {
        return false;
    }
    let dt = now_s.wrapping_sub(base.now_s);
    change::DIFF.with(|scratch| {
        let scratch = &mut *scratch.borrow_mut();
        scratch.runs.clear();
        let literal = change::diff_list(&base.vcs, vcs, dt, known, scratch);
        let split = scratch.runs.len();
        let literal = literal + change::diff_list(&base.jobs, jobs, dt, known, scratch);
        if !change::worth(literal, entries) {
            return false;
        }
        let (vc_runs, job_runs) = scratch.runs.split_at(split);
        let max = U64
            + cluster_max(cluster)
            + change::runs_max(vc_runs, vcs, 0)
            + change::runs_max(job_runs, jobs, 0);
        write_sized(out, max, |w| {
            w.varint(*now_s);
            w.cluster_summary(cluster);
            w.runs(vc_runs, vcs, None);
            w.runs(job_runs, jobs, None);
        })
    })
}

/// Applies a change to `view`, which holds its base. After an error `view`
/// holds a partial result and must not be used.
pub(crate) fn apply_view_change(bytes: &[u8], view: &mut FairnessView) -> Result<(), WireError> {
    let FairnessView {
        now_s,
        cluster,
        vcs,
        jobs,
    } = view;
    let mut r = Reader::new(bytes, "FairnessView change");
    let now = r.u64()?;
    let dt = now.wrapping_sub(*now_s);
    *now_s = now;
    r.cluster_summary(cluster)?;
    change::apply_runs(&mut r, vcs, None, dt)?;
    change::apply_runs(&mut r, jobs, None, dt)?;
    r.finish()
}

/// Encodes `d` as runs over `view` into `out` (cleared first), or returns
/// `false` (leaving `out` unspecified) when the order does not follow the
/// view closely enough for runs to be shorter.
pub(crate) fn encode_decision_compact(
    d: &FairnessDecision,
    view: &FairnessView,
    out: &mut Vec<u8>,
) -> bool {
    let jobs = &view.jobs;
    let order = &d.order;
    if order.len() < compact::MIN_ENTRIES {
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
            if goes_on(compact::CHUNK) {
                (next, k) = (next + compact::CHUNK, k + compact::CHUNK);
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
        if !compact::worth(runs.len(), order.len()) {
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

/// Decodes a compact fairness reply to `view`; trailing bytes are an error.
pub(crate) fn decode_decision_compact(
    bytes: &[u8],
    view: &FairnessView,
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
