//! The retry slot's rules: one action per failure; a probe smaller than the
//! gang, of at least one GPU, for a positive time.

use gangway_plugin_sdk::builtin::Fixed;
use gangway_plugin_sdk::slots::Retry;
use gangway_plugin_sdk::{RetryAction, RetryDecision, RetryView};

use crate::policy::rules::{SlotCheck, invalid};
use crate::policy::{BoxedBackend, Native, PolicyErrorKind};

impl SlotCheck for Retry {
    const BUILTIN: &'static str = "fixed";

    fn validate(view: &RetryView, d: &RetryDecision) -> Result<(), PolicyErrorKind> {
        if d.actions.len() != view.failures.len() {
            return Err(invalid(format!(
                "{} retry actions for {} failures",
                d.actions.len(),
                view.failures.len()
            )));
        }
        for (f, a) in view.failures.iter().zip(&d.actions) {
            if let RetryAction::Probe { gpus, run_s, .. } = *a {
                if gpus == 0 || gpus >= f.gpus {
                    return Err(invalid(format!(
                        "a probe of {gpus} GPUs for {}, a gang of {} (a probe has 1 to {})",
                        f.job,
                        f.gpus,
                        f.gpus.saturating_sub(1)
                    )));
                }
                if run_s == 0 {
                    return Err(invalid(format!("a probe of 0 s for {}", f.job)));
                }
            }
        }
        Ok(())
    }

    fn builtin() -> BoxedBackend<Self> {
        Box::new(Native::new(Self::BUILTIN, Fixed::default()))
    }
}
