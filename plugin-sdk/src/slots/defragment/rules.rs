//! The defragment slot's rules: move only running jobs, each once, onto
//! servers of the view with exactly their GPUs, for a waiting job. (That the
//! moves fit and make room is checked when the round applies them.)

use std::collections::{HashMap, HashSet};

use super::{DefragmentDecision, DefragmentView};
use crate::slot_contract::InvalidDecision;

/// Checks `d` against the `view` it answers (the rules above).
pub(super) fn validate(
    view: &DefragmentView,
    d: &DefragmentDecision,
) -> Result<(), InvalidDecision> {
    let running: HashMap<_, _> = view.running.iter().map(|j| (j.id, j.gpus)).collect();
    let servers: HashSet<_> = view.servers.iter().map(|s| s.id).collect();
    let mut moved = HashSet::new();
    for m in &d.moves {
        let Some(&gpus) = running.get(&m.job) else {
            return Err(InvalidDecision::new(format!(
                "moves {}, which is not running",
                m.job
            )));
        };
        if !moved.insert(m.job) {
            return Err(InvalidDecision::new(format!("moves {} twice", m.job)));
        }
        let mut to = HashSet::new();
        let mut total = 0u64;
        for (s, g) in &m.to {
            if !servers.contains(s) {
                return Err(InvalidDecision::new(format!(
                    "moves {} to unknown {s}",
                    m.job
                )));
            }
            if *g == 0 || !to.insert(*s) {
                return Err(InvalidDecision::new(format!(
                    "moves {} with an empty or repeated part on {s}",
                    m.job
                )));
            }
            total += u64::from(*g);
        }
        if total != u64::from(gpus) {
            return Err(InvalidDecision::new(format!(
                "moves {} ({gpus} GPUs) onto {total} GPUs",
                m.job
            )));
        }
    }
    match d.start {
        None if !d.moves.is_empty() => Err(InvalidDecision::new("moves jobs for no waiting job")),
        Some(id) if !view.waiting.iter().any(|w| w.job.id == id) => Err(InvalidDecision::new(
            format!("makes room for {id}, which does not wait with fragmentation delay"),
        )),
        _ => Ok(()),
    }
}
