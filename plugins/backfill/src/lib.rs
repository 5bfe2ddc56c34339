//! `backfill`: a blocked job lets the jobs behind it start (gang slot).
//!
//! When a job cannot be placed this round, every later job in the fairness
//! order still gets its chance; in practice the ones that fit are the smaller
//! gangs or those with a wider spread limit. No GPUs are ever held. This is
//! what Philly's YARN-based scheduler does (PHILLY.md §3.3) and the core's
//! built-in default; it maximises utilisation but can starve a large gang
//! behind a stream of small ones (see `reserve` for the bounded remedy).
//!
//! # Options (TOML)
//!
//! None: the configuration must be empty (any line other than a comment is rejected).
//!
//! ```
//! use gangway_plugin_sdk::*;
//! use gangway_policy_backfill::Backfill;
//!
//! let job = PendingJob {
//!     id: JobId(1), vc: VcId(0), user: 0, gpus: 32, submitted_s: 0, waiting_s: 3_600,
//!     attempts: 0, attained_gpu_s: 0, min_level: Level(1),
//! };
//! let view = QueueView {
//!     now_s: 3_600,
//!     cluster: ClusterSummary { total_gpus: 64, free_gpus: 8, server_level: Level(2), levels: vec![] },
//!     jobs: vec![job],
//!     spread: vec![Level(1)],
//! };
//! let d = Backfill::from_config(b"").unwrap().on_blocked(&view);
//! assert_eq!(d.on_blocked, vec![GangAction::Backfill]);
//! assert_eq!(d.max_reservations, 0);
//! ```

use gangway_plugin_sdk::{
    ConfigError, Configure, GangAction, GangDecision, GangPolicy, QueueView, no_options,
};

/// Backfill: every blocked job answers [`GangAction::Backfill`]; no
/// reservations. See the [crate docs](crate).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Backfill;

impl Configure for Backfill {
    fn from_config(config: &[u8]) -> Result<Self, ConfigError> {
        no_options("backfill", config)?;
        Ok(Backfill)
    }
}

impl GangPolicy for Backfill {
    fn on_blocked(&self, view: &QueueView) -> GangDecision {
        GangDecision {
            on_blocked: vec![GangAction::Backfill; view.jobs.len()],
            max_reservations: 0,
        }
    }
}

gangway_plugin_sdk::export_gang!(Backfill);

#[cfg(test)]
mod tests {
    use super::*;
    use gangway_plugin_sdk::{ClusterSummary, JobId, Level, PendingJob, VcId};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn one_backfill_per_job_and_no_reservations(
            jobs in proptest::collection::vec((1u32..64, any::<u64>()), 0..30),
        ) {
            let view = QueueView {
                now_s: 0,
                cluster: ClusterSummary { total_gpus: 64, free_gpus: 0, server_level: Level(2), levels: vec![] },
                jobs: jobs.iter().enumerate().map(|(i, (g, w))| PendingJob {
                    id: JobId(i as u64), vc: VcId(0), user: 0, gpus: *g, submitted_s: 0,
                    waiting_s: *w, attempts: 0, attained_gpu_s: 0, min_level: Level(2),
                }).collect(),
                spread: vec![Level(2); jobs.len()],
            };
            let d = Backfill.on_blocked(&view);
            prop_assert_eq!(d.on_blocked.len(), jobs.len());
            prop_assert!(d.on_blocked.iter().all(|a| *a == GangAction::Backfill));
            prop_assert_eq!(d.max_reservations, 0);
        }
    }

    #[test]
    fn config_must_be_empty() {
        assert_eq!(Backfill::from_config(b"").unwrap(), Backfill);
        let e = Backfill::from_config(b"window = 4").unwrap_err();
        assert!(
            e.0.contains("takes no options") && e.0.contains("`window"),
            "{e}"
        );
    }
}
