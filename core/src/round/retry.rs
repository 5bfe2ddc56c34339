//! The retry stage: what follows each attempt that failed since the last
//! round.

use gangway_plugin_sdk::{FailedAttempt, Retry, RetryView};

use super::{Round, RoundReport};
use crate::job::JobState;
use crate::policy::ViewChanges;

impl Round<'_> {
    /// Asks the retry slot about every failed attempt awaiting a decision
    /// and applies the answers.
    pub(super) fn retry(&mut self, report: &mut RoundReport) {
        if self.book.awaiting_retry().is_empty() {
            return;
        }
        let ids = self.book.take_awaiting_retry();
        let view_at = self.book.changes().now();
        let mut failures = Vec::with_capacity(ids.len());
        for id in &ids {
            let Some(job) = self.book.get(id) else {
                continue;
            };
            let JobState::AwaitingRetry(f) = job.state else {
                continue;
            };
            failures.push(FailedAttempt {
                job: *id,
                vc: job.spec.vc,
                user: job.spec.user,
                gpus: job.spec.gpus,
                attempt_gpus: f.gpus,
                attempts: job.attempts,
                run_s: f.run_s,
                class: f.class,
                probe: f.probe,
                failed_gpu_s: job.failed_gpu_s,
            });
        }
        let view = RetryView {
            now_s: self.now,
            failures,
        };
        let changes = ViewChanges::new(self.book.changes(), view_at);
        let decided = self
            .policies
            .slot_mut::<Retry>()
            .decide_settled(&view, &changes);
        report.policy_errors.extend(decided.error);
        for (f, action) in view.failures.iter().zip(decided.decision.actions) {
            if self.book.retry(f.job, self.now, action) {
                report.retries.push((f.job, action));
            }
        }
    }
}
