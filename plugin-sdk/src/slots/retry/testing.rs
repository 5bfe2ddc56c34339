//! The retry slot's realistic views for the conformance kit (feature
//! `testing`): 0 to 50 failures of random classes.

use proptest::prelude::*;

use super::{FailedAttempt, FailureClass, Retry, RetryView};
use crate::ids::{JobId, VcId};
use crate::testing::strategy::gang_size;

/// A retry view: 0 to 50 failures of random classes.
pub(crate) fn retry_view() -> impl Strategy<Value = RetryView> {
    (
        0u64..10_000_000,
        prop::collection::vec(
            (
                gang_size(),
                1u32..8,
                0u64..100_000,
                prop::sample::select(FailureClass::ALL.to_vec()),
                any::<bool>(),
            ),
            0..50,
        ),
    )
        .prop_map(|(now, rows)| RetryView {
            now_s: now,
            failures: rows
                .into_iter()
                .enumerate()
                .map(|(i, (gpus, attempts, run_s, class, probe))| {
                    let attempt_gpus = if probe { 1 } else { gpus };
                    FailedAttempt {
                        job: JobId(i as u64 + 1),
                        vc: VcId(0),
                        user: 0,
                        gpus,
                        attempt_gpus,
                        attempts,
                        run_s,
                        class,
                        probe,
                        failed_gpu_s: u64::from(attempt_gpus) * run_s,
                    }
                })
                .collect(),
        })
}

impl crate::testing::SlotViews for Retry {
    fn views() -> proptest::strategy::BoxedStrategy<Self::View> {
        use proptest::strategy::Strategy;
        retry_view().boxed()
    }

    fn smaller(view: &RetryView) -> Vec<RetryView> {
        crate::testing::shrink::smaller_lists(&view.failures)
            .into_iter()
            .map(|failures| RetryView {
                failures,
                ..view.clone()
            })
            .collect()
    }
}
