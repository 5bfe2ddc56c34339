//! `strict`: never relax locality (locality slot).
//!
//! Every job may span only the smallest domain that can hold it, its
//! [`PendingJob::min_level`](gangway_plugin_sdk::PendingJob::min_level): one
//! server if it fits on one, else one rack, and so on. This is the study's
//! first guideline, "prioritise locality": trade queueing delay for locality,
//! because a spread gang runs slower for its whole (long) life (PHILLY.md
//! §3.5: 16-GPU jobs average 43.7 % GPU utilisation on 2 servers, 28.6 % on 8).
//! A job that never finds such a domain waits with *fragmentation delay*;
//! pair it with the `reserve` gang policy so large gangs are not starved.
//!
//! # Options (TOML)
//!
//! None: the configuration must be empty (any line other than a comment is rejected).
//!
//! ```
//! use gangway_plugin_sdk::*;
//! use gangway_policy_strict::Strict;
//!
//! let job = |min_level| PendingJob {
//!     id: JobId(1), vc: VcId(0), user: 0, gpus: 8, submitted_s: 0, waiting_s: 86_400,
//!     attempts: 0, attained_gpu_s: 0, min_level,
//! };
//! let view = QueueView {
//!     now_s: 86_400,
//!     cluster: ClusterSummary { total_gpus: 64, free_gpus: 0, server_level: Level(2), levels: vec![] },
//!     jobs: vec![job(Level(2)), job(Level(1))],
//!     spread: vec![],
//! };
//! let strict = Strict::from_config(b"").unwrap();
//! assert_eq!(strict.spread(&view).spread, vec![Level(2), Level(1)]);
//! assert!(Strict::from_config(b"widest = 1").is_err());
//! ```

use gangway_plugin_sdk::{
    ConfigError, Configure, LocalityDecision, LocalityPolicy, QueueView, no_options,
};

/// Strict locality: each job's spread limit is its `min_level`, clamped to the
/// server level. See the [crate docs](crate).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Strict;

impl Configure for Strict {
    fn from_config(config: &[u8]) -> Result<Self, ConfigError> {
        no_options("strict", config)?;
        Ok(Strict)
    }
}

impl LocalityPolicy for Strict {
    fn spread(&self, view: &QueueView) -> LocalityDecision {
        let server_level = view.cluster.server_level;
        LocalityDecision {
            spread: view
                .jobs
                .iter()
                .map(|j| j.min_level.min(server_level))
                .collect(),
        }
    }
}

gangway_plugin_sdk::export_locality!(Strict);

#[cfg(test)]
mod tests {
    use super::*;
    use gangway_plugin_sdk::{ClusterSummary, JobId, Level, PendingJob, VcId};
    use proptest::prelude::*;

    fn job(id: u64, min_level: u8, waiting_s: u64) -> PendingJob {
        PendingJob {
            id: JobId(id),
            vc: VcId(0),
            user: 0,
            gpus: 4,
            submitted_s: 0,
            waiting_s,
            attempts: 0,
            attained_gpu_s: 0,
            min_level: Level(min_level),
        }
    }

    fn view(server_level: u8, jobs: Vec<PendingJob>) -> QueueView {
        QueueView {
            now_s: 0,
            cluster: ClusterSummary {
                total_gpus: 16,
                free_gpus: 16,
                server_level: Level(server_level),
                levels: vec![],
            },
            jobs,
            spread: vec![],
        }
    }

    #[test]
    fn clamps_to_the_server_level() {
        let v = view(2, vec![job(1, 3, 0), job(2, 0, 0)]);
        assert_eq!(Strict.spread(&v).spread, vec![Level(2), Level(0)]);
    }

    #[test]
    fn config_must_be_empty() {
        assert_eq!(Strict::from_config(b"").unwrap(), Strict);
        assert_eq!(Strict::from_config(b"# nothing\n").unwrap(), Strict);
        let e = Strict::from_config(b"widest = 0").unwrap_err();
        assert!(
            e.0.contains("takes no options") && e.0.contains("`widest"),
            "{e}"
        );
    }

    proptest! {
        #[test]
        fn never_relaxes(
            server_level in 0u8..4,
            jobs in proptest::collection::vec((0u8..5, any::<u64>()), 0..30),
        ) {
            let v = view(server_level, jobs.iter().enumerate().map(|(i, (l, w))| job(i as u64, *l, *w)).collect());
            let spread = Strict.spread(&v).spread;
            prop_assert_eq!(spread.len(), v.jobs.len());
            for (j, l) in v.jobs.iter().zip(&spread) {
                prop_assert_eq!(*l, j.min_level.min(v.cluster.server_level));
            }
        }
    }
}
