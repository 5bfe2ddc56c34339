//! The locality slot's wire code: its decision byte for byte as postcard
//! writes it, and as runs of equal limits (its view is the shared
//! [`crate::QueueView`], in `slots/queue_view/`).

use std::cell::RefCell;

use super::LocalityDecision;
use crate::slots::QueueView;
use crate::view::SpreadLimit;
use crate::wire::codec::{self, U32, U64, WireError};
use crate::wire::compact;
use crate::wire::postcard::{Reader, write_sized};

thread_local! {
    /// The compact encoder's runs: (count, limit).
    static LIMIT_RUNS: RefCell<Vec<(usize, SpreadLimit)>> = const { RefCell::new(Vec::new()) };
}

/// Encodes a [`LocalityDecision`] into `out` (cleared first), as postcard does.
pub(crate) fn encode_decision(d: &LocalityDecision, out: &mut Vec<u8>) {
    let LocalityDecision { limits } = d;
    let fits = write_sized(out, U64 + limits.len() * (1 + U32), |w| {
        w.spread_limits(limits);
    });
    if !fits {
        codec::encode_into(d, out);
    }
}

/// Decodes a [`LocalityDecision`] of at most `max_jobs` limits; trailing
/// bytes are an error.
pub(crate) fn decode_decision(
    bytes: &[u8],
    max_jobs: usize,
) -> Result<LocalityDecision, WireError> {
    let mut r = Reader::new(bytes, "LocalityDecision");
    let mut limits = Vec::new();
    r.spread_limits(&mut limits, max_jobs)?;
    r.finish()?;
    Ok(LocalityDecision { limits })
}

/// Encodes `d` as runs of equal limits into `out` (cleared first), or
/// returns `false` when they would not be shorter.
pub(crate) fn encode_decision_compact(d: &LocalityDecision, out: &mut Vec<u8>) -> bool {
    LIMIT_RUNS.with(|runs| {
        let runs = &mut *runs.borrow_mut();
        if !compact::runs_of(&d.limits, runs) {
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

/// Decodes a compact locality reply to `view`; trailing bytes are an error.
pub(crate) fn decode_decision_compact(
    bytes: &[u8],
    view: &QueueView,
) -> Result<LocalityDecision, WireError> {
    let mut r = Reader::new(bytes, "compact LocalityDecision");
    let n = r.len(3)?;
    let mut limits = Vec::new();
    let mut total = 0usize;
    for _ in 0..n {
        let count = compact::run_count(&mut r, &mut total, view.jobs.len())?;
        let limit = r.spread_limit()?;
        limits.extend(std::iter::repeat_n(limit, count));
    }
    r.finish()?;
    Ok(LocalityDecision { limits })
}
