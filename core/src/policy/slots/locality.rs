//! The locality slot's rules: one spread limit per job, no level below the
//! servers, no server bound below what the gang needs.

use gangway_plugin_sdk::builtin::Strict;
use gangway_plugin_sdk::slots::Locality;
use gangway_plugin_sdk::{LocalityDecision, QueueView};

use crate::policy::rules::{SlotCheck, invalid};
use crate::policy::{BoxedBackend, Native, PolicyErrorKind};

impl SlotCheck for Locality {
    const BUILTIN: &'static str = "strict";

    fn validate(view: &QueueView, d: &LocalityDecision) -> Result<(), PolicyErrorKind> {
        if d.limits.len() != view.jobs.len() {
            return Err(invalid(format!(
                "{} spread limits for {} jobs",
                d.limits.len(),
                view.jobs.len()
            )));
        }
        let deepest = view.cluster.server_level;
        for (job, limit) in view.jobs.iter().zip(&d.limits) {
            if limit.level > deepest {
                return Err(invalid(format!(
                    "{} for {} is below the server level ({deepest})",
                    limit.level, job.id
                )));
            }
            if limit.max_servers != 0 && limit.max_servers < job.min_servers {
                return Err(invalid(format!(
                    "at most {} servers for {}, which needs at least {}",
                    limit.max_servers, job.id, job.min_servers
                )));
            }
        }
        Ok(())
    }

    fn builtin() -> BoxedBackend<Self> {
        Box::new(Native::new(Self::BUILTIN, Strict))
    }
}
