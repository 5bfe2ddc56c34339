//! The fairness slot's rules: a permutation of exactly the view's jobs.

use gangway_plugin_sdk::builtin::FifoQuota;
use gangway_plugin_sdk::slots::Fairness;
use gangway_plugin_sdk::{FairnessDecision, JobId, RoundView};
use rustc_hash::FxHashMap;

use crate::policy::rules::{SlotCheck, invalid};
use crate::policy::{BoxedBackend, Native, PolicyErrorKind};

impl SlotCheck for Fairness {
    const BUILTIN: &'static str = "fifo-quota";

    fn validate(view: &RoundView, d: &FairnessDecision) -> Result<(), PolicyErrorKind> {
        let mut seen: FxHashMap<JobId, bool> = view.jobs.iter().map(|j| (j.id, false)).collect();
        for r in &d.order {
            match seen.get_mut(&r.job) {
                None => return Err(invalid(format!("names unknown {}", r.job))),
                Some(true) => return Err(invalid(format!("lists {} twice", r.job))),
                Some(s) => *s = true,
            }
        }
        let missing = seen.values().filter(|s| !**s).count();
        if missing > 0 {
            return Err(invalid(format!(
                "omits {missing} of {} pending jobs",
                view.jobs.len()
            )));
        }
        Ok(())
    }

    fn builtin() -> BoxedBackend<Self> {
        Box::new(Native::new(Self::BUILTIN, FifoQuota))
    }
}
