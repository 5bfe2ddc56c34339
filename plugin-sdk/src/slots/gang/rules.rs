//! The gang slot's rules: one action per job.

// The rules read policy-given numbers: no unchecked arithmetic here.
#![warn(clippy::arithmetic_side_effects, clippy::as_conversions)]

use super::GangDecision;
use crate::slot_contract::InvalidDecision;
use crate::slots::QueueView;

/// Checks `d` against the `view` it answers (the rules above).
pub(super) fn validate(view: &QueueView, d: &GangDecision) -> Result<(), InvalidDecision> {
    if d.on_blocked.len() != view.jobs.len() {
        return Err(InvalidDecision::new(format!(
            "{} gang actions for {} jobs",
            d.on_blocked.len(),
            view.jobs.len()
        )));
    }
    Ok(())
}
