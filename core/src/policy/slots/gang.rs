//! The gang slot's rules: one action per job.

use gangway_plugin_sdk::builtin::Backfill;
use gangway_plugin_sdk::slots::Gang;
use gangway_plugin_sdk::{GangDecision, QueueView};

use crate::policy::rules::{SlotCheck, invalid};
use crate::policy::{BoxedBackend, Native, PolicyErrorKind};

impl SlotCheck for Gang {
    const BUILTIN: &'static str = "backfill";

    fn validate(view: &QueueView, d: &GangDecision) -> Result<(), PolicyErrorKind> {
        if d.on_blocked.len() != view.jobs.len() {
            return Err(invalid(format!(
                "{} gang actions for {} jobs",
                d.on_blocked.len(),
                view.jobs.len()
            )));
        }
        Ok(())
    }

    fn builtin() -> BoxedBackend<Self> {
        Box::new(Native::new(Self::BUILTIN, Backfill))
    }
}
