//! The gang slot's realistic views for the conformance kit (feature
//! `testing`): the shared queue view's (`slots/queue_view/testing.rs`) with the spread limits the locality slot chose.

use super::Gang;
use crate::slots::QueueView;

impl crate::testing::SlotViews for Gang {
    fn views() -> proptest::strategy::BoxedStrategy<Self::View> {
        use proptest::strategy::Strategy;
        crate::slots::queue_view::testing::queue_view(true).boxed()
    }

    fn largest() -> proptest::strategy::BoxedStrategy<Self::View> {
        use proptest::strategy::Strategy;
        let largest = crate::testing::strategy::Scale::Largest;
        crate::slots::queue_view::testing::queue_view_at(true, largest).boxed()
    }

    fn smaller(view: &QueueView) -> Vec<QueueView> {
        crate::slots::queue_view::testing::smaller(view)
    }
}
