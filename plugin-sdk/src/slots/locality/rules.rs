//! The locality slot's rules: one spread limit per job, no level below the
//! servers, no server bound below what the gang needs.

// The rules read policy-given numbers: no unchecked arithmetic here.
#![warn(clippy::arithmetic_side_effects, clippy::as_conversions)]

use super::LocalityDecision;
use crate::slot_contract::InvalidDecision;
use crate::slots::QueueView;

/// Checks `d` against the `view` it answers (the rules above).
pub(super) fn validate(view: &QueueView, d: &LocalityDecision) -> Result<(), InvalidDecision> {
    if d.limits.len() != view.jobs.len() {
        return Err(InvalidDecision::new(format!(
            "{} spread limits for {} jobs",
            d.limits.len(),
            view.jobs.len()
        )));
    }
    let deepest = view.cluster.server_level;
    for (job, limit) in view.jobs.iter().zip(&d.limits) {
        if limit.level > deepest {
            return Err(InvalidDecision::new(format!(
                "{} for {} is below the server level ({deepest})",
                limit.level, job.id
            )));
        }
        if limit.max_servers != 0 && limit.max_servers < job.min_servers {
            return Err(InvalidDecision::new(format!(
                "at most {} servers for {}, which needs at least {}",
                limit.max_servers, job.id, job.min_servers
            )));
        }
    }
    Ok(())
}
