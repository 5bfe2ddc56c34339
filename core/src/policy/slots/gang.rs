//! The gang slot's rules: one action per job.

use gangway_plugin_sdk::builtin::Backfill;
use gangway_plugin_sdk::slots::Gang;
use gangway_plugin_sdk::{GangDecision, QueueView};

use crate::policy::rules::{SlotRules, invalid};
use crate::policy::{BoxedBackend, Guarded, Native, PolicyErrorKind, PolicySet};

impl SlotRules for Gang {
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

    fn entry(set: &PolicySet) -> &Guarded<Self> {
        &set.gang
    }

    fn entry_mut(set: &mut PolicySet) -> &mut Guarded<Self> {
        &mut set.gang
    }
}
