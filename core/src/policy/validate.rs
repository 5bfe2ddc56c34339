//! Checks every decision against the view it answers before the core uses it.
//! Public so that tools (e.g. `policy-check`) apply exactly the round's rules.

use std::collections::HashMap;

use gangway_plugin_sdk::{
    FairnessDecision, GangDecision, JobId, LocalityDecision, QueueView, RoundView,
};

use super::PolicyErrorKind;

fn invalid(msg: String) -> PolicyErrorKind {
    PolicyErrorKind::InvalidDecision(msg)
}

/// `order` must name every pending job exactly once and nothing else.
pub fn fairness(view: &RoundView, d: &FairnessDecision) -> Result<(), PolicyErrorKind> {
    let mut seen: HashMap<JobId, bool> = view.jobs.iter().map(|j| (j.id, false)).collect();
    for r in &d.order {
        match seen.get_mut(&r.job) {
            None => return Err(invalid(format!("names unknown {}", r.job))),
            Some(true) => return Err(invalid(format!("lists {} twice", r.job))),
            Some(s) => *s = true,
        }
    }
    let missing = seen.values().filter(|s| !**s).count();
    if missing > 0 {
        return Err(invalid(format!(
            "omits {missing} of {} pending jobs",
            view.jobs.len()
        )));
    }
    Ok(())
}

/// One spread limit per job, none deeper than the server level.
pub fn locality(view: &QueueView, d: &LocalityDecision) -> Result<(), PolicyErrorKind> {
    if d.spread.len() != view.jobs.len() {
        return Err(invalid(format!(
            "{} spread limits for {} jobs",
            d.spread.len(),
            view.jobs.len()
        )));
    }
    let deepest = view.cluster.server_level;
    if let Some((i, l)) = d.spread.iter().enumerate().find(|(_, l)| **l > deepest) {
        return Err(invalid(format!(
            "{} for {} is below the server level ({})",
            l, view.jobs[i].id, deepest
        )));
    }
    Ok(())
}

/// One gang action per job.
pub fn gang(view: &QueueView, d: &GangDecision) -> Result<(), PolicyErrorKind> {
    if d.on_blocked.len() != view.jobs.len() {
        return Err(invalid(format!(
            "{} gang actions for {} jobs",
            d.on_blocked.len(),
            view.jobs.len()
        )));
    }
    Ok(())
}
