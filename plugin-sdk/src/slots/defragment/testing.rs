//! The defragment slot's realistic views for the conformance kit (feature
//! `testing`): a reclaim view's servers and running jobs, and its gangs
//! waiting with fragmentation delay.

use proptest::prelude::*;

use super::{Defragment, DefragmentView};
use crate::WaitReason;
use crate::slots::reclaim::testing::reclaim_view_at;
use crate::testing::strategy::Scale;

/// A defragment view: servers with their free GPUs, the jobs on them, and
/// gangs waiting with fragmentation delay.
pub(crate) fn defragment_view() -> impl Strategy<Value = DefragmentView> {
    defragment_view_at(Scale::Realistic)
}

/// A defragment view at `scale`.
pub(crate) fn defragment_view_at(scale: Scale) -> impl Strategy<Value = DefragmentView> {
    reclaim_view_at(scale).prop_map(|r| DefragmentView {
        now_s: r.now_s,
        cluster: r.cluster,
        servers: r.servers,
        running: r.running,
        waiting: r
            .waiting
            .into_iter()
            .filter(|w| w.reason == WaitReason::Fragmentation)
            .collect(),
    })
}

impl crate::testing::SlotViews for Defragment {
    fn views() -> proptest::strategy::BoxedStrategy<Self::View> {
        use proptest::strategy::Strategy;
        defragment_view().boxed()
    }

    fn largest() -> proptest::strategy::BoxedStrategy<Self::View> {
        use proptest::strategy::Strategy;
        defragment_view_at(Scale::Largest).boxed()
    }

    fn smaller(view: &DefragmentView) -> Vec<DefragmentView> {
        use crate::testing::shrink;
        let mut out = Vec::new();
        for running in shrink::smaller_lists(&view.running) {
            out.push(DefragmentView {
                running,
                ..view.clone()
            });
        }
        for waiting in shrink::smaller_lists(&view.waiting) {
            out.push(DefragmentView {
                waiting,
                ..view.clone()
            });
        }
        for servers in shrink::unused_servers_dropped(&view.servers, &view.running) {
            out.push(DefragmentView {
                servers,
                ..view.clone()
            });
        }
        out
    }
}
