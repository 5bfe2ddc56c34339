//! The gang slot's wire code: its decision byte for byte as postcard
//! writes it, and as runs of equal actions (its view is the shared
//! [`crate::QueueView`], in `slots/queue_view/`).

use std::cell::RefCell;

use super::{GangAction, GangDecision};
use crate::slots::QueueView;
use crate::wire::codec::{self, U32, U64, WireError};
use crate::wire::compact;
use crate::wire::postcard::{Reader, write_sized};

thread_local! {
    /// The compact encoder's runs: (count, action).
    static ACTION_RUNS: RefCell<Vec<(usize, GangAction)>> = const { RefCell::new(Vec::new()) };
}

/// Encodes a [`GangDecision`] into `out` (cleared first), as postcard does.
pub(crate) fn encode_decision(d: &GangDecision, out: &mut Vec<u8>) {
    let GangDecision {
        on_blocked,
        max_reservations,
    } = d;
    let fits = write_sized(out, U64 + on_blocked.len() + U32, |w| {
        w.varint(on_blocked.len() as u64);
        for a in on_blocked {
            w.byte(match a {
                GangAction::Backfill => 0,
                GangAction::Block => 1,
                GangAction::Reserve => 2,
            });
        }
        w.varint(u64::from(*max_reservations));
    });
    if !fits {
        codec::encode_into(d, out);
    }
}

/// Decodes a [`GangDecision`] of at most `max_jobs` actions; trailing bytes
/// are an error.
pub(crate) fn decode_decision(bytes: &[u8], max_jobs: usize) -> Result<GangDecision, WireError> {
    let mut r = Reader::new(bytes, "GangDecision");
    let n = r.bounded_len(1, max_jobs)?;
    let mut on_blocked = Vec::with_capacity(n);
    for _ in 0..n {
        on_blocked.push(match r.u32()? {
            0 => GangAction::Backfill,
            1 => GangAction::Block,
            2 => GangAction::Reserve,
            _ => return Err(r.error("bad GangAction")),
        });
    }
    let max_reservations = r.u32()?;
    r.finish()?;
    Ok(GangDecision {
        on_blocked,
        max_reservations,
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
pub(crate) fn encode_decision_compact(d: &GangDecision, out: &mut Vec<u8>) -> bool {
    ACTION_RUNS.with(|runs| {
        let runs = &mut *runs.borrow_mut();
        if !compact::runs_of(&d.on_blocked, runs) {
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

/// Decodes a compact gang reply to `view`; trailing bytes are an error.
pub(crate) fn decode_decision_compact(
    bytes: &[u8],
    view: &QueueView,
) -> Result<GangDecision, WireError> {
    let mut r = Reader::new(bytes, "compact GangDecision");
    let n = r.len(2)?;
    let mut on_blocked = Vec::new();
    let mut total = 0usize;
    for _ in 0..n {
        let count = compact::run_count(&mut r, &mut total, view.jobs.len())?;
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
