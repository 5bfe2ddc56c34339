//! The reclaim slot's realistic views for the conformance kit (feature
//! `testing`): running jobs packed on a random cluster, and the waiting
//! jobs of a fairness view with their reasons.

use proptest::prelude::*;

use super::{Reclaim, ReclaimView};
use crate::slots::fairness::testing::fairness_view_at;
use crate::testing::strategy::{
    Scale, running_count, running_jobs, servers_of, shape_of, wait_reason,
};
use crate::view::{SpreadLimit, WaitingJob};

/// A reclaim view: running jobs, and waiting jobs with their reasons.
pub(crate) fn reclaim_view() -> impl Strategy<Value = ReclaimView> {
    reclaim_view_at(Scale::Realistic)
}

/// A reclaim view at `scale`.
pub(crate) fn reclaim_view_at(scale: Scale) -> impl Strategy<Value = ReclaimView> {
    (fairness_view_at(scale), running_count(scale), any::<u64>())
        .prop_flat_map(|(round, n, seed)| {
            let shape = shape_of(&round.cluster);
            let nvcs = round.vcs.len() as u32;
            (
                Just(round.clone()),
                running_jobs(shape, nvcs, n, round.now_s),
                prop::collection::vec(wait_reason(), round.jobs.len()),
                Just(seed),
            )
        })
        .prop_map(|(round, running, reasons, _)| ReclaimView {
            now_s: round.now_s,
            servers: servers_of(&shape_of(&round.cluster), &running),
            cluster: round.cluster,
            vcs: round.vcs,
            running,
            waiting: round
                .jobs
                .into_iter()
                .zip(reasons)
                .map(|(job, reason)| WaitingJob {
                    limit: SpreadLimit::new(job.min_level, 0),
                    job,
                    reason,
                })
                .collect(),
        })
}

impl crate::testing::SlotViews for Reclaim {
    fn views() -> proptest::strategy::BoxedStrategy<Self::View> {
        use proptest::strategy::Strategy;
        reclaim_view().boxed()
    }

    fn largest() -> proptest::strategy::BoxedStrategy<Self::View> {
        use proptest::strategy::Strategy;
        reclaim_view_at(Scale::Largest).boxed()
    }

    fn smaller(view: &ReclaimView) -> Vec<ReclaimView> {
        use crate::testing::shrink;
        let mut out = Vec::new();
        for (dropped, vcs) in shrink::without_each_vc(&view.vcs, |v| v.id, |v, id| v.id = id) {
            let mut v = view.clone();
            v.vcs = vcs;
            v.running.retain(|j| j.vc != dropped);
            v.waiting.retain(|w| w.job.vc != dropped);
            for j in &mut v.running {
                j.vc = shrink::renumbered(j.vc, dropped);
            }
            for w in &mut v.waiting {
                w.job.vc = shrink::renumbered(w.job.vc, dropped);
            }
            out.push(v);
        }
        for running in shrink::smaller_lists(&view.running) {
            out.push(ReclaimView {
                running,
                ..view.clone()
            });
        }
        for waiting in shrink::smaller_lists(&view.waiting) {
            out.push(ReclaimView {
                waiting,
                ..view.clone()
            });
        }
        for servers in crate::testing::shrink::unused_servers_dropped(&view.servers, &view.running)
        {
            out.push(ReclaimView {
                servers,
                ..view.clone()
            });
        }
        out
    }

    fn types_of(
        view: &ReclaimView,
        plan: &crate::testing::types::TypesPlan,
    ) -> Option<crate::TypesView> {
        use crate::testing::types::{TypesJob, types_view};
        let waiting = view.waiting.iter().map(|w| TypesJob {
            job: w.job.id,
            running: false,
        });
        let running = view.running.iter().map(|j| TypesJob {
            job: j.id,
            running: true,
        });
        let jobs: Vec<TypesJob> = waiting.chain(running).collect();
        let mut types = types_view(plan, &view.cluster, &view.vcs, &jobs);
        // The servers' types, as a host gives them to a module that takes
        // them: that of the first job (by id) running on the server, else
        // one by the server's id.
        let n = types.types.len().max(1);
        types.servers = view
            .servers
            .iter()
            .map(|s| {
                let on = view
                    .running
                    .iter()
                    .filter(|j| j.parts.iter().any(|(id, _)| *id == s.id))
                    .min_by_key(|j| j.id)
                    .and_then(|j| types.job(j.id))
                    .and_then(|t| t.running);
                on.unwrap_or(crate::GpuTypeId(
                    u8::try_from(s.id.index() % n).unwrap_or(u8::MAX),
                ))
            })
            .collect();
        Some(types)
    }
}
