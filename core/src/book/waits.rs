//! Wait accounting: which reason each pending job of a fairness view waits
//! for, and the time charged to each reason.
//!
//! Waits are charged when a job's reason changes, not every round: a job
//! shown last round with the same reason keeps accruing to it (its state
//! holds the reason and `charged_to_s` where the accrual began), so a round
//! costs the jobs whose reason changed, not the whole view.

use gangway_plugin_sdk::{JobId, WaitReason};
use rustc_hash::FxHashMap;

use super::JobBook;
use crate::job::JobState;

impl JobBook {
    /// Records each viewed job's reason (`reasons`, the jobs of this round's
    /// fairness view that did not start) and charges its wait; a job that
    /// left the view since the last round waits [`WaitReason::Queued`] from
    /// now on. Returns the last round's reasons, whose memory the next round
    /// reuses.
    pub(crate) fn charge_waits(
        &mut self,
        now: u64,
        reasons: FxHashMap<JobId, WaitReason>,
    ) -> FxHashMap<JobId, WaitReason> {
        let previous = std::mem::take(&mut self.last_view);
        let prev_round = self.prev_view_round_s;
        for (id, reason) in &reasons {
            if previous.get(id) == Some(reason) {
                continue;
            }
            let Some(mut job) = self.records.get_mut(id) else {
                continue;
            };
            let JobState::Pending {
                reason: last,
                since_s,
            } = &mut job.state
            else {
                continue;
            };
            let charge_to = match *last {
                Some(r) if previous.contains_key(id) => r,
                // Considered before, then behind the window until now.
                Some(_) => WaitReason::Queued,
                // Pending through an earlier round without being shown.
                None if prev_round.is_some_and(|p| *since_s < p) => WaitReason::Queued,
                None => *reason,
            };
            *last = Some(*reason);
            job.charge(Some(charge_to), now);
        }
        // Jobs shown last round and still pending but not shown now: their
        // interval so far goes to their last reason, the rest to Queued.
        for id in previous.keys().filter(|id| !reasons.contains_key(id)) {
            if let Some(mut job) = self.records.get_mut(id)
                && let JobState::Pending { reason, .. } = &mut job.state
            {
                let last = *reason;
                *reason = Some(WaitReason::Queued);
                job.charge(last, now);
            }
        }
        self.last_view = reasons;
        self.prev_view_round_s = Some(now);
        previous
    }

    /// A round without a fairness view (nothing pending): no job was shown.
    pub(crate) fn clear_last_view(&mut self) {
        self.last_view.clear();
    }
}
