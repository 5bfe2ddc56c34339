//! The generated views of each slot.

use gangway_plugin_sdk::SlotContract;
use gangway_plugin_sdk::testing::strategy;
use gangway_plugin_sdk::{Defragment, Fairness, Gang, Locality, Reclaim, Retry};
use proptest::strategy::{BoxedStrategy, Strategy};

/// A slot whose views the kit can generate, and measure.
pub trait Views: SlotContract {
    /// Realistic views of the slot.
    fn views() -> BoxedStrategy<Self::View>;
    /// How many jobs a view holds (what a call's time is allowed to grow with).
    fn jobs(view: &Self::View) -> usize;
}

impl Views for Fairness {
    fn views() -> BoxedStrategy<Self::View> {
        strategy::fairness_view().boxed()
    }
    fn jobs(view: &Self::View) -> usize {
        view.jobs.len()
    }
}

impl Views for Locality {
    fn views() -> BoxedStrategy<Self::View> {
        strategy::queue_view(false).boxed()
    }
    fn jobs(view: &Self::View) -> usize {
        view.jobs.len()
    }
}

impl Views for Gang {
    fn views() -> BoxedStrategy<Self::View> {
        strategy::queue_view(true).boxed()
    }
    fn jobs(view: &Self::View) -> usize {
        view.jobs.len()
    }
}

impl Views for Reclaim {
    fn views() -> BoxedStrategy<Self::View> {
        strategy::reclaim_view().boxed()
    }
    fn jobs(view: &Self::View) -> usize {
        view.running.len() + view.waiting.len()
    }
}

impl Views for Retry {
    fn views() -> BoxedStrategy<Self::View> {
        strategy::retry_view().boxed()
    }
    fn jobs(view: &Self::View) -> usize {
        view.failures.len()
    }
}

impl Views for Defragment {
    fn views() -> BoxedStrategy<Self::View> {
        strategy::defragment_view().boxed()
    }
    fn jobs(view: &Self::View) -> usize {
        view.running.len() + view.waiting.len() + view.servers.len()
    }
}
