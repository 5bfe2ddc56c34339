//! The retry step: what follows each attempt that failed since the last
//! round.

use gangway_plugin_sdk::Retry;
use gangway_plugin_sdk::{FailedAttempt, RetryAction, RetryView, WaitReason};

use super::RoundReport;
use crate::job::{FinalStatus, JobState};
use crate::scheduler::Scheduler;

impl Scheduler {
    /// Asks the retry slot about every failed attempt awaiting a decision
    /// and applies the answers.
    pub(crate) fn retry_step(&mut self, now: u64, report: &mut RoundReport) {
        if self.awaiting_retry.is_empty() {
            return;
        }
        let ids: Vec<_> = std::mem::take(&mut self.awaiting_retry)
            .into_iter()
            .collect();
        let mut failures = Vec::with_capacity(ids.len());
        for id in &ids {
            let Some(job) = self.jobs.get(id) else {
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
            now_s: now,
            failures,
        };
        let decided = self.policies.slot_mut::<Retry>().decide_settled(&view);
        report.policy_errors.extend(decided.error);
        for (f, action) in view.failures.iter().zip(decided.decision.actions) {
            let Some(job) = self.jobs.get_mut(&f.job) else {
                continue;
            };
            let JobState::AwaitingRetry(failure) = job.state else {
                continue;
            };
            report.retries.push((f.job, action));
            let after_s = match action {
                RetryAction::GiveUp => {
                    job.probe = None;
                    job.state = JobState::Finished {
                        status: FinalStatus::Failed,
                        at_s: now,
                    };
                    continue;
                }
                RetryAction::Retry { after_s } => {
                    job.probe = None;
                    after_s
                }
                RetryAction::Probe {
                    gpus,
                    run_s,
                    after_s,
                } => {
                    job.probe = Some((gpus, run_s));
                    after_s
                }
            };
            // The wait since the failure counts as retry delay.
            let until = now.saturating_add(after_s).max(failure.at_s);
            if until <= now {
                job.charge(Some(WaitReason::RetryDelay), now);
                self.enqueue(f.job, now);
            } else {
                job.state = JobState::Delayed {
                    since_s: failure.at_s,
                    until_s: until,
                };
                self.delayed.insert((until, f.job));
            }
        }
    }
}
