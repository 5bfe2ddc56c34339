//! The queue view's realistic views for the conformance kit (feature
//! `testing`), shared by the locality and gang slots: the eligible part of
//! a random fairness view, and its one step smaller views.

use proptest::prelude::*;

use super::QueueView;
use crate::slots::fairness::testing::fairness_view_at;
use crate::testing::strategy::Scale;
use crate::view::{PendingJob, SpreadLimit};

/// A locality or gang view: the eligible part of a random fairness view.
/// `with_limits` fills `spread` (what the gang slot sees).
pub(crate) fn queue_view(with_limits: bool) -> impl Strategy<Value = QueueView> {
    queue_view_at(with_limits, Scale::Realistic)
}

/// [`queue_view`] at `scale`.
pub(crate) fn queue_view_at(with_limits: bool, scale: Scale) -> impl Strategy<Value = QueueView> {
    (fairness_view_at(scale), any::<u64>()).prop_map(move |(round, seed)| {
        let jobs: Vec<PendingJob> = round
            .jobs
            .into_iter()
            .enumerate()
            .filter(|(i, _)| (seed >> (i % 64)) & 1 == 1 || seed.count_ones() > 40)
            .map(|(_, j)| j)
            .collect();
        let spread = if with_limits {
            jobs.iter()
                .map(|j| SpreadLimit::new(j.min_level, j.min_servers * (1 + (seed % 3) as u32)))
                .collect()
        } else {
            Vec::new()
        };
        QueueView {
            now_s: round.now_s,
            cluster: round.cluster,
            jobs,
            spread,
        }
    })
}

/// The locality and gang slots' one step smaller views (see
/// [`crate::testing::SlotViews::smaller`]): halves of the jobs, then each
/// job dropped, with its spread limit when the view has them.
pub(crate) fn smaller(view: &QueueView) -> Vec<QueueView> {
    let with_spread = view.spread.len() == view.jobs.len() && !view.jobs.is_empty();
    let pairs: Vec<(PendingJob, Option<SpreadLimit>)> = view
        .jobs
        .iter()
        .enumerate()
        .map(|(i, j)| {
            (
                *j,
                if with_spread {
                    view.spread.get(i).copied()
                } else {
                    None
                },
            )
        })
        .collect();
    crate::testing::shrink::smaller_lists(&pairs)
        .into_iter()
        .map(|kept| QueueView {
            jobs: kept.iter().map(|(j, _)| *j).collect(),
            spread: if with_spread {
                kept.iter().filter_map(|(_, s)| *s).collect()
            } else {
                view.spread.clone()
            },
            ..view.clone()
        })
        .collect()
}
