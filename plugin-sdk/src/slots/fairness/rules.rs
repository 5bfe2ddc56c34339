//! The fairness slot's rules: a permutation of exactly the view's jobs.

// The rules read policy-given numbers: no unchecked arithmetic here.
#![warn(clippy::arithmetic_side_effects, clippy::as_conversions)]

use rustc_hash::FxHashMap;

use super::{FairnessDecision, FairnessView};
use crate::ids::JobId;
use crate::slot_contract::InvalidDecision;

/// Checks `d` against the `view` it answers (the rules above).
pub(super) fn validate(view: &FairnessView, d: &FairnessDecision) -> Result<(), InvalidDecision> {
    let mut seen: FxHashMap<JobId, bool> = view.jobs.iter().map(|j| (j.id, false)).collect();
    for r in &d.order {
        match seen.get_mut(&r.job) {
            None => return Err(InvalidDecision::new(format!("names unknown {}", r.job))),
            Some(true) => return Err(InvalidDecision::new(format!("lists {} twice", r.job))),
            Some(s) => *s = true,
        }
    }
    let missing = seen.values().filter(|s| !**s).count();
    if missing > 0 {
        return Err(InvalidDecision::new(format!(
            "omits {missing} of {} pending jobs",
            view.jobs.len()
        )));
    }
    Ok(())
}
