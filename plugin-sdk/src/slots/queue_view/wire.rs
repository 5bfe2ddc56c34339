//! The queue view's wire code: byte for byte as postcard writes it, and as
//! a change from the last one (the formats are in `crate::wire`).

use super::QueueView;
use crate::wire::change;
use crate::wire::codec::{self, U32, U64, WireError};
use crate::wire::postcard::{JOB_MAX, Reader, cluster_max, write_sized};

/// Encodes a [`QueueView`] into `out` (cleared first), as postcard does.
pub(crate) fn encode_view(view: &QueueView, out: &mut Vec<u8>) {
    let QueueView {
        now_s,
        cluster,
        jobs,
        spread,
    } = view;
    let max =
        U64 + cluster_max(cluster) + U64 + jobs.len() * JOB_MAX + U64 + spread.len() * (1 + U32);
    let fits = write_sized(out, max, |w| {
        w.varint(*now_s);
        w.cluster_summary(cluster);
        w.pending_jobs(jobs);
        w.spread_limits(spread);
    });
    if !fits {
        codec::encode_into(view, out);
    }
}

/// Decodes a [`QueueView`] into `view`, reusing its vectors' memory. After
/// an error `view` holds a partial decoding and must not be used.
pub(crate) fn decode_view_into(bytes: &[u8], view: &mut QueueView) -> Result<(), WireError> {
    let QueueView {
        now_s,
        cluster,
        jobs,
        spread,
    } = view;
    let mut r = Reader::new(bytes, "QueueView");
    *now_s = r.u64()?;
    r.cluster_summary(cluster)?;
    r.pending_jobs(jobs)?;
    r.spread_limits(spread, usize::MAX)?;
    r.finish()
}

/// Encodes `view` as a change from `base` into `out` (cleared first), or
/// returns `false` (leaving `out` unspecified) when the whole view is
/// about as short (always for fewer than [`MIN_ENTRIES`] jobs).
pub(crate) fn encode_view_change(
    base: &QueueView,
    view: &QueueView,
    known: Option<&crate::wire::KnownChanges>,
    out: &mut Vec<u8>,
) -> bool {
    let QueueView {
        now_s,
        cluster,
        jobs,
        spread,
    } = view;
    if jobs.len() < change::MIN_ENTRIES {
        return false;
    }
    let dt = now_s.wrapping_sub(base.now_s);
    let paired = spread.len() == jobs.len() && base.spread.len() == base.jobs.len();
    change::DIFF.with(|scratch| {
        let scratch = &mut *scratch.borrow_mut();
        scratch.runs.clear();
        let (old, new) = (
            change::Side {
                list: &base.jobs[..],
                spread: &base.spread,
            },
            change::Side { list: jobs, spread },
        );
        let literal = change::diff(old, new, paired, dt, known, scratch);
        if !change::worth(literal, jobs.len()) {
            return false;
        }
        let runs = &scratch.runs;
        let rest = if paired {
            0
        } else {
            U64 + spread.len() * (1 + U32)
        };
        let max = U64 + cluster_max(cluster) + 1 + change::runs_max(runs, jobs, 1 + U32) + rest;
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
pub(crate) fn apply_view_change(bytes: &[u8], view: &mut QueueView) -> Result<(), WireError> {
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
            change::apply_runs(&mut r, jobs, Some(spread), dt)?;
        }
        0 => {
            change::apply_runs(&mut r, jobs, None, dt)?;
            r.spread_limits(spread, usize::MAX)?;
        }
        _ => return Err(r.error("bad bool")),
    }
    r.finish()
}
