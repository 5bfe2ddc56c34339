//! The fairness slot's realistic views for the conformance kit (feature
//! `testing`): a random cluster, 1 to 15 VCs, a random queue, and the one
//! step smaller views a failing view shrinks through.

use proptest::prelude::*;

use super::{Fairness, FairnessView};
use crate::testing::strategy::{Scale, pending_jobs_at, shape_at, vc_count, vcs};

/// A fairness view: a random cluster, 1 to 15 VCs, a random queue.
pub(crate) fn fairness_view() -> impl Strategy<Value = FairnessView> {
    fairness_view_at(Scale::Realistic)
}

/// A fairness view at `scale`.
pub(crate) fn fairness_view_at(scale: Scale) -> impl Strategy<Value = FairnessView> {
    (shape_at(scale), vc_count(scale), 0u64..10_000_000)
        .prop_flat_map(move |(shape, nvcs, now)| {
            let total = shape.total_gpus();
            (
                Just(shape.clone()),
                0..=total,
                vcs(nvcs, total),
                pending_jobs_at(scale, shape, nvcs as u32, now),
                Just(now),
            )
        })
        .prop_map(|(shape, free, mut vcs, jobs, now)| {
            for j in &jobs {
                if let Some(v) = vcs.get_mut(j.vc.0 as usize) {
                    v.pending_gpus += j.gpus;
                    v.pending_jobs += 1;
                }
            }
            FairnessView {
                now_s: now,
                cluster: shape.summary(free),
                vcs,
                jobs,
            }
        })
}

impl crate::testing::SlotViews for Fairness {
    fn views() -> proptest::strategy::BoxedStrategy<Self::View> {
        use proptest::strategy::Strategy;
        fairness_view().boxed()
    }

    fn largest() -> proptest::strategy::BoxedStrategy<Self::View> {
        use proptest::strategy::Strategy;
        fairness_view_at(Scale::Largest).boxed()
    }

    fn smaller(view: &FairnessView) -> Vec<FairnessView> {
        use crate::testing::shrink;
        let mut out = Vec::new();
        for (dropped, vcs) in shrink::without_each_vc(&view.vcs, |v| v.id, |v, id| v.id = id) {
            let mut v = view.clone();
            v.vcs = vcs;
            v.jobs.retain(|j| j.vc != dropped);
            for j in &mut v.jobs {
                j.vc = shrink::renumbered(j.vc, dropped);
            }
            out.push(v);
        }
        for jobs in shrink::smaller_lists(&view.jobs) {
            out.push(FairnessView {
                jobs,
                ..view.clone()
            });
        }
        out
    }

    fn types_of(
        view: &FairnessView,
        plan: &crate::testing::types::TypesPlan,
    ) -> Option<crate::TypesView> {
        use crate::testing::types::{TypesJob, types_view};
        let jobs: Vec<TypesJob> = view
            .jobs
            .iter()
            .map(|j| TypesJob {
                job: j.id,
                running: false,
            })
            .collect();
        Some(types_view(plan, &view.cluster, &view.vcs, &jobs))
    }
}
