//! Unit tests of the daemon's pure parts: how Slurm's job states end an
//! attempt.

use gangway_core::AttemptEnd;
use gangway_plugin_sdk::FailureClass;

use super::cycle::{GroupState, attempt_end, group_state};
use crate::engine::SlurmJob;

fn job(state: &str) -> SlurmJob {
    SlurmJob {
        job_id: 1,
        group: 1,
        state: state.into(),
        reason: "None".into(),
        ..SlurmJob::default()
    }
}

#[test]
fn group_states_and_ends() {
    let (a, b) = (job("RUNNING"), job("COMPLETED"));
    assert_eq!(group_state(&[&a, &b]), GroupState::Active);
    let (c, d) = (job("NODE_FAIL"), job("CANCELLED"));
    assert_eq!(
        group_state(&[&d, &c]),
        GroupState::Ended {
            state: "NODE_FAIL".into(),
            exit: 0
        }
    );
    let p = job("PENDING");
    assert!(matches!(group_state(&[&p]), GroupState::Pending(_)));
    assert_eq!(attempt_end("COMPLETED", 0, false).0, AttemptEnd::Passed);
    let (end, why) = attempt_end("FAILED", 3 << 8, false);
    assert_eq!(
        end,
        AttemptEnd::Failed {
            class: FailureClass::Unknown,
            last: false
        }
    );
    assert_eq!(why, "failed (exit code 3); the retry policy decides");
    assert_eq!(
        attempt_end("NODE_FAIL", 0, true).0,
        AttemptEnd::Failed {
            class: FailureClass::JobPreempted,
            last: true
        }
    );
    assert_eq!(attempt_end("CANCELLED", 0, false).0, AttemptEnd::Killed);
}
