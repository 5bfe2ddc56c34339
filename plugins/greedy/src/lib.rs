//! `greedy`: any placement at once (locality slot).
//!
//! Every job may span the whole cluster from its first round
//! ([`Level::ANY`], no bound on servers). The placement search still prefers the fewest servers
//! inside one domain, so a job lands locally when it can; it just never
//! waits for locality. This is the opposite extreme of `strict`, for
//! comparison: lowest queueing delay, worst locality under load.
//!
//! # Options (TOML)
//!
//! None: the configuration must be empty (any line other than a comment is rejected).
//!
//! ```
//! use gangway_plugin_sdk::*;
//! use gangway_policy_greedy::Greedy;
//!
//! let job = PendingJob {
//!     id: JobId(1), vc: VcId(0), user: 0, gpus: 8, submitted_s: 0, waiting_s: 0,
//!     attempts: 0, attained_gpu_s: 0, min_level: Level(2), min_servers: 1,
//! };
//! let view = QueueView {
//!     now_s: 0,
//!     cluster: ClusterSummary { total_gpus: 64, free_gpus: 8, server_level: Level(2), levels: vec![] },
//!     jobs: vec![job],
//!     spread: vec![],
//! };
//! assert_eq!(Greedy::from_config(b"").unwrap().spread(&view).limits, vec![SpreadLimit::level(Level::ANY)]);
//! ```

use gangway_plugin_sdk::{
    ConfigError, Configure, Level, LocalityDecision, LocalityPolicy, QueueView, SpreadLimit,
    no_options,
};

/// Greedy locality: every job may span the whole cluster. See the
/// [crate docs](crate).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Greedy;

impl Configure for Greedy {
    fn from_config(config: &[u8]) -> Result<Self, ConfigError> {
        no_options("greedy", config)?;
        Ok(Greedy)
    }
}

impl LocalityPolicy for Greedy {
    fn spread(&self, view: &QueueView) -> LocalityDecision {
        LocalityDecision {
            limits: vec![SpreadLimit::level(Level::ANY); view.jobs.len()],
        }
    }
}

gangway_plugin_sdk::export!(Locality, Greedy);

#[cfg(test)]
mod tests {
    use super::*;
    use gangway_plugin_sdk::{ClusterSummary, JobId, PendingJob, VcId};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn always_any_one_per_job(levels in proptest::collection::vec(0u8..4, 0..30)) {
            let view = QueueView {
                now_s: 0,
                cluster: ClusterSummary { total_gpus: 8, free_gpus: 8, server_level: Level(2), levels: vec![] },
                jobs: levels.iter().enumerate().map(|(i, l)| PendingJob {
                    id: JobId(i as u64), vc: VcId(0), user: 0, gpus: 1, submitted_s: 0,
                    waiting_s: 0, attempts: 0, attained_gpu_s: 0, min_level: Level(*l),
                    min_servers: 1,
                }).collect(),
                spread: vec![],
            };
            let limits = Greedy.spread(&view).limits;
            prop_assert_eq!(limits.len(), levels.len());
            prop_assert!(limits.iter().all(|l| *l == SpreadLimit::level(Level::ANY)));
        }
    }

    #[test]
    fn config_must_be_empty() {
        assert_eq!(Greedy::from_config(b"").unwrap(), Greedy);
        let e = Greedy::from_config(b"x = 1").unwrap_err();
        assert!(
            e.0.contains("takes no options") && e.0.contains("`x"),
            "{e}"
        );
    }
}
