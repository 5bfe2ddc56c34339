//! The retry slot's rules: one action per failure; a probe smaller than the
//! gang, of at least one GPU, for a positive time; no delay longer than
//! [`RetryAction::MAX_DELAY_S`], no probe longer than
//! [`RetryAction::MAX_PROBE_S`] (so a host's clock cannot wrap).

// The rules read policy-given numbers: no unchecked arithmetic here.
#![warn(clippy::arithmetic_side_effects, clippy::as_conversions)]

use super::{RetryAction, RetryDecision, RetryView};
use crate::slot_contract::InvalidDecision;

/// Checks `d` against the `view` it answers (the rules above).
pub(super) fn validate(view: &RetryView, d: &RetryDecision) -> Result<(), InvalidDecision> {
    if d.actions.len() != view.failures.len() {
        return Err(InvalidDecision::new(format!(
            "{} retry actions for {} failures",
            d.actions.len(),
            view.failures.len()
        )));
    }
    for (f, a) in view.failures.iter().zip(&d.actions) {
        let after_s = match *a {
            RetryAction::Retry { after_s } | RetryAction::Probe { after_s, .. } => after_s,
            RetryAction::GiveUp => 0,
        };
        if after_s > RetryAction::MAX_DELAY_S {
            return Err(InvalidDecision::new(format!(
                "a retry delay of {after_s} s for {}, over the {} s (366 days) a delay may be (give up instead)",
                f.job,
                RetryAction::MAX_DELAY_S
            )));
        }
        if let RetryAction::Probe { gpus, run_s, .. } = *a {
            if run_s > RetryAction::MAX_PROBE_S {
                return Err(InvalidDecision::new(format!(
                    "a probe of {run_s} s for {}, over the {} s (366 days) a probe may run",
                    f.job,
                    RetryAction::MAX_PROBE_S
                )));
            }
            if gpus == 0 || gpus >= f.gpus {
                return Err(InvalidDecision::new(format!(
                    "a probe of {gpus} GPUs for {}, a gang of {} (a probe has 1 to {})",
                    f.job,
                    f.gpus,
                    f.gpus.saturating_sub(1)
                )));
            }
            if run_s == 0 {
                return Err(InvalidDecision::new(format!(
                    "a probe of 0 s for {}",
                    f.job
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FailedAttempt, JobId};

    fn view() -> RetryView {
        RetryView {
            now_s: 5,
            failures: vec![FailedAttempt {
                job: JobId(1),
                gpus: 8,
                ..FailedAttempt::default()
            }],
        }
    }

    fn one(a: RetryAction) -> Result<(), InvalidDecision> {
        validate(&view(), &RetryDecision { actions: vec![a] })
    }

    #[test]
    fn delays_and_probes_are_bounded_so_clocks_cannot_wrap() {
        let max = RetryAction::MAX_DELAY_S;
        assert!(one(RetryAction::Retry { after_s: max }).is_ok());
        let e = one(RetryAction::Retry { after_s: u64::MAX }).unwrap_err();
        assert!(e.reason().contains("366 days"), "{e}");
        assert!(one(RetryAction::Retry { after_s: max + 1 }).is_err());
        let probe = |run_s, after_s| RetryAction::Probe {
            gpus: 1,
            run_s,
            after_s,
        };
        assert!(one(probe(RetryAction::MAX_PROBE_S, max)).is_ok());
        assert!(one(probe(u64::MAX, 0)).is_err());
        assert!(one(probe(60, u64::MAX)).is_err());
        assert!(one(RetryAction::GiveUp).is_ok());
    }
}
