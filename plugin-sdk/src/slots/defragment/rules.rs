//! The defragment slot's rules: move only running jobs, each once, onto
//! servers of the view with exactly their GPUs and somewhere else than they
//! run, for a waiting job. (That the moves fit and make room is checked
//! when the round applies them.)

// The rules read policy-given numbers: no unchecked arithmetic here.
#![warn(clippy::arithmetic_side_effects, clippy::as_conversions)]

use std::collections::{HashMap, HashSet};

use super::{DefragmentDecision, DefragmentView};
use crate::slot_contract::InvalidDecision;

/// Checks `d` against the `view` it answers (the rules above).
pub(super) fn validate(
    view: &DefragmentView,
    d: &DefragmentDecision,
) -> Result<(), InvalidDecision> {
    let running: HashMap<_, _> = view.running.iter().map(|j| (j.id, j)).collect();
    let servers: HashSet<_> = view.servers.iter().map(|s| s.id).collect();
    let mut moved = HashSet::new();
    for m in &d.moves {
        let Some(&job) = running.get(&m.job) else {
            return Err(InvalidDecision::new(format!(
                "moves {}, which is not running",
                m.job
            )));
        };
        if !moved.insert(m.job) {
            return Err(InvalidDecision::new(format!("moves {} twice", m.job)));
        }
        let gpus = job.gpus;
        let mut here: Vec<_> = job.parts.clone();
        let mut there: Vec<_> = m.to.clone();
        here.sort_unstable();
        there.sort_unstable();
        if here == there {
            return Err(InvalidDecision::new(format!(
                "moves {} onto the servers it runs on, with the GPUs it has there",
                m.job
            )));
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
            total = total.saturating_add(u64::from(*g));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{JobId, Move, RunningJob, ServerId, ServerState, SpreadLimit, WaitingJob};

    #[test]
    fn a_move_must_go_somewhere_else() {
        let view = DefragmentView {
            servers: (0..3)
                .map(|i| ServerState {
                    id: ServerId(i),
                    gpus: 8,
                    ..ServerState::default()
                })
                .collect(),
            running: vec![RunningJob {
                id: JobId(1),
                gpus: 4,
                parts: vec![(ServerId(0), 2), (ServerId(1), 2)],
                ..RunningJob::default()
            }],
            waiting: vec![WaitingJob {
                job: crate::PendingJob {
                    id: JobId(9),
                    ..crate::PendingJob::default()
                },
                reason: crate::WaitReason::Fragmentation,
                limit: SpreadLimit::default(),
            }],
            ..DefragmentView::default()
        };
        let plan = |to: Vec<(ServerId, u32)>| DefragmentDecision {
            moves: vec![Move { job: JobId(1), to }],
            start: Some(JobId(9)),
        };
        // Its own servers with its own counts, in any order: no move at all.
        let e = validate(&view, &plan(vec![(ServerId(1), 2), (ServerId(0), 2)])).unwrap_err();
        assert!(e.reason().contains("onto the servers it runs on"), "{e}");
        assert!(validate(&view, &plan(vec![(ServerId(2), 4)])).is_ok());
        assert!(validate(&view, &plan(vec![(ServerId(0), 4)])).is_ok());
    }
}
