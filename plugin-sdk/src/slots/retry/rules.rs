//! The retry slot's rules: one action per failure; a probe smaller than the
//! gang, of at least one GPU, for a positive time.

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
        if let RetryAction::Probe { gpus, run_s, .. } = *a {
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
