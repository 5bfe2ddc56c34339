//! `fifo`: global arrival order (fairness slot).
//!
//! Every pending job is eligible; jobs are tried oldest first, by submit time
//! and then job id. Virtual clusters and quotas are ignored, so with the
//! `fifo-block` gang policy this is plain first-come, first-served, the
//! baseline the other fairness policies are compared against.
//!
//! # Options (TOML)
//!
//! None: the configuration must be empty, blank or comments only. (It parses
//! no TOML, which keeps its Wasm module the smallest of the library.)
//!
//! ```
//! use gangway_plugin_sdk::*;
//! use gangway_policy_fifo::Fifo;
//!
//! let job = |id, submitted_s| PendingJob {
//!     id: JobId(id), vc: VcId(0), user: 0, gpus: 1, submitted_s, waiting_s: 0,
//!     attempts: 0, attained_gpu_s: 0, min_level: Level(2), min_servers: 1,
//! };
//! let view = FairnessView {
//!     now_s: 100,
//!     cluster: ClusterSummary { total_gpus: 8, free_gpus: 8, server_level: Level(2), levels: vec![] },
//!     vcs: vec![],
//!     jobs: vec![job(7, 50), job(3, 10), job(5, 10)],
//! };
//! let fifo = Fifo::from_config(b"# no options\n").unwrap();
//! let order: Vec<u64> = fifo.order(&view).order.iter().map(|r| r.job.0).collect();
//! assert_eq!(order, vec![3, 5, 7]);
//! assert!(Fifo::from_config(b"quota = 3").is_err());
//! ```

use gangway_plugin_sdk::{
    ConfigError, Configure, FairnessDecision, FairnessPolicy, FairnessView, QueueOrder, Ranked,
    no_options,
};

/// Global FIFO: oldest submit first, ties by job id, everyone eligible.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fifo;

impl FairnessPolicy for Fifo {
    /// Oldest first within every VC (and across them): each VC's oldest
    /// jobs are all it needs to see.
    fn queue_order(&self) -> QueueOrder {
        QueueOrder::Submit
    }

    fn order(&self, view: &FairnessView) -> FairnessDecision {
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
        no_options("fifo", config)?;
        Ok(Fifo)
    }
}

gangway_plugin_sdk::export!(Fairness, Fifo);

#[cfg(test)]
mod tests {
    use super::*;
    use gangway_plugin_sdk::{ClusterSummary, JobId, Level, PendingJob, VcId};
    use proptest::prelude::*;

    fn view(jobs: &[(u32, u64)]) -> FairnessView {
        FairnessView {
            now_s: 0,
            cluster: ClusterSummary {
                total_gpus: 8,
                free_gpus: 0,
                server_level: Level(2),
                levels: vec![],
            },
            vcs: vec![],
            jobs: jobs
                .iter()
                .enumerate()
                .map(|(i, (vc, submitted_s))| PendingJob {
                    id: JobId(i as u64),
                    vc: VcId(*vc),
                    user: 0,
                    gpus: 1,
                    submitted_s: *submitted_s,
                    waiting_s: 0,
                    attempts: 0,
                    attained_gpu_s: 0,
                    min_level: Level(2),
                    min_servers: 1,
                })
                .collect(),
        }
    }

    #[test]
    fn config_is_empty_or_comments() {
        assert_eq!(Fifo::from_config(b"").unwrap(), Fifo);
        assert_eq!(Fifo::from_config(b"\n  # none\n").unwrap(), Fifo);
        let e = Fifo::from_config(b"# ok\nquota = 3").unwrap_err();
        assert!(e.0.contains("`quota = 3`"), "{e}");
        assert!(Fifo::from_config(&[0xff]).is_err());
    }

    proptest! {
        #[test]
        fn permutation_in_arrival_order_all_eligible(
            jobs in proptest::collection::vec((0u32..4, 0u64..50), 0..40),
        ) {
            let v = view(&jobs);
            let d = Fifo.order(&v);
            prop_assert_eq!(d.order.len(), jobs.len());
            prop_assert!(d.order.iter().all(|r| r.eligible));
            let key = |id: JobId| (jobs[id.0 as usize].1, id);
            for pair in d.order.windows(2) {
                prop_assert!(key(pair[0].job) < key(pair[1].job));
            }
        }
    }
}
