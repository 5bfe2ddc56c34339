//! `fifo`: global arrival order (fairness slot).
//!
//! Every pending job is eligible; jobs are tried oldest first, by submit time
//! and then job id. Virtual clusters and quotas are ignored. It takes no
//! configuration: empty (or all-whitespace) bytes only.
//!
//! ```
//! use gangway_plugin_sdk::{Configure, FairnessPolicy};
//! use gangway_policy_fifo::Fifo;
//!
//! assert!(Fifo::from_config(b"").is_ok());
//! assert!(Fifo::from_config(b"quota = 3").is_err());
//! ```

use gangway_plugin_sdk::{
    ConfigError, Configure, FairnessDecision, FairnessPolicy, Ranked, RoundView, config_text,
};

/// Global FIFO: oldest submit first, ties by job id, everyone eligible.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fifo;

impl FairnessPolicy for Fifo {
    fn order(&self, view: &RoundView) -> FairnessDecision {
        let mut jobs: Vec<_> = view.jobs.iter().map(|j| (j.submitted_s, j.id)).collect();
        jobs.sort_unstable();
        FairnessDecision {
            order: jobs
                .into_iter()
                .map(|(_, job)| Ranked {
                    job,
                    eligible: true,
                })
                .collect(),
        }
    }
}

impl Configure for Fifo {
    fn from_config(config: &[u8]) -> Result<Self, ConfigError> {
        if config_text(config)?.trim().is_empty() {
            Ok(Fifo)
        } else {
            Err(ConfigError("fifo takes no configuration".to_string()))
        }
    }
}

gangway_plugin_sdk::export_fairness!(Fifo);
