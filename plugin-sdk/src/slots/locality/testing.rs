//! The locality slot's realistic views for the conformance kit (feature
//! `testing`): the shared queue view's (`slots/queue_view/testing.rs`), without spread limits.

use super::Locality;
use crate::slots::QueueView;

impl crate::testing::SlotViews for Locality {
    fn views() -> proptest::strategy::BoxedStrategy<Self::View> {
        use proptest::strategy::Strategy;
        crate::slots::queue_view::testing::queue_view(false).boxed()
    }

    fn largest() -> proptest::strategy::BoxedStrategy<Self::View> {
        use proptest::strategy::Strategy;
        let largest = crate::testing::strategy::Scale::Largest;
        crate::slots::queue_view::testing::queue_view_at(false, largest).boxed()
    }

    fn smaller(view: &QueueView) -> Vec<QueueView> {
        crate::slots::queue_view::testing::smaller(view)
    }
}
