//! The reclaim slot's rules: stop only running jobs, each once, start only
//! waiting jobs, each once, and stop nothing without starting something.
//! (That the stops make room for the starts, and that every stopped job's
//! GPUs are used, is checked when the round applies the decision.)

// The rules read policy-given numbers: no unchecked arithmetic here.
#![warn(clippy::arithmetic_side_effects, clippy::as_conversions)]

use rustc_hash::FxHashSet as HashSet;

use super::{ReclaimDecision, ReclaimView};
use crate::slot_contract::InvalidDecision;

/// Checks `d` against the `view` it answers (the rules above).
pub(super) fn validate(view: &ReclaimView, d: &ReclaimDecision) -> Result<(), InvalidDecision> {
    if d.stop.is_empty() && d.start.is_empty() {
        return Ok(());
    }
    // Ids of the host's own view (a decision's ids are looked up before
    // they are stored): a fast hash needs no resistance to chosen keys.
    let running: HashSet<_> = view.running.iter().map(|j| j.id).collect();
    let waiting: HashSet<_> = view.waiting.iter().map(|w| w.job.id).collect();
    let mut seen = HashSet::default();
    for id in &d.stop {
        if !running.contains(id) {
            return Err(InvalidDecision::new(format!(
                "stops {id}, which is not running"
            )));
        }
        if !seen.insert(*id) {
            return Err(InvalidDecision::new(format!("stops {id} twice")));
        }
    }
    for id in &d.start {
        if !waiting.contains(id) {
            return Err(InvalidDecision::new(format!(
                "starts {id}, which is not waiting"
            )));
        }
        if !seen.insert(*id) {
            return Err(InvalidDecision::new(format!("starts {id} twice")));
        }
    }
    if !d.stop.is_empty() && d.start.is_empty() {
        return Err(InvalidDecision::new(format!(
            "stops {} jobs for no waiting job",
            d.stop.len()
        )));
    }
    Ok(())
}
