//! A worked example of a Gangway policy: **smallest gang first**, with an age
//! limit so large gangs are not starved. Read it top to bottom; it is the
//! whole pattern (see `plugins/README.md` for the guide).
//!
//! # Options (TOML)
//!
//! | key | type | default | meaning |
//! |---|---|---|---|
//! | `starve_after_s` | seconds | `3600` | a job that waited this long goes first, oldest first |
//!
//! ```
//! use gangway_plugin_sdk::*;
//! use gangway_policy_example_smallest_first::SmallestFirst;
//!
//! let job = |id, gpus, waiting_s| PendingJob {
//!     id: JobId(id), vc: VcId(0), user: 0, gpus, submitted_s: id, waiting_s,
//!     attempts: 0, attained_gpu_s: 0, min_level: Level(2), min_servers: 1,
//! };
//! let view = FairnessView {
//!     now_s: 5_000,
//!     cluster: ClusterSummary { total_gpus: 16, free_gpus: 4, server_level: Level(2), levels: vec![] },
//!     vcs: vec![],
//!     jobs: vec![job(1, 8, 4_000), job(2, 4, 60), job(3, 1, 30)],
//! };
//! let policy = SmallestFirst::from_config(b"starve_after_s = 3600").unwrap();
//! let order: Vec<u64> = policy.order(&view).order.iter().map(|r| r.job.0).collect();
//! assert_eq!(order, vec![1, 3, 2]); // job 1 is starving; then 1 GPU before 4
//! ```

use gangway_plugin_sdk::sort;
use gangway_plugin_sdk::{
    ConfigError, ConfigForm, Configure, FairnessDecision, FairnessPolicy, FairnessView, Ranked,
    read_options,
};
use serde::Deserialize;

/// The options, read from TOML. `deny_unknown_fields` turns a typo into an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SmallestFirstConfig {
    /// A job that has waited this many seconds is served before all
    /// non-starving jobs, oldest first. Default `3600`.
    pub starve_after_s: u64,
}

impl Default for SmallestFirstConfig {
    fn default() -> Self {
        SmallestFirstConfig {
            starve_after_s: 3_600,
        }
    }
}

/// Fewest GPUs first (ties: submit time, then id); starving jobs before all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SmallestFirst {
    config: SmallestFirstConfig,
}

/// Load-time construction: empty bytes give the defaults.
impl Configure for SmallestFirst {
    // The host hands it its TOML as a tree: no parser in its module.
    const CONFIG_FORM: ConfigForm = ConfigForm::Tree;

    fn from_config(config: &[u8]) -> Result<Self, ConfigError> {
        let config = read_options("example-smallest-first", config)?;
        Ok(SmallestFirst { config })
    }
}

/// The rule: a pure function of the view, so native and Wasm runs agree.
impl FairnessPolicy for SmallestFirst {
    fn order(&self, view: &FairnessView) -> FairnessDecision {
        let mut jobs: Vec<_> = view.jobs.iter().collect();
        sort::by_key(&mut jobs, |j| {
            let starving = j.waiting_s >= self.config.starve_after_s;
            // Starving jobs first (size 0), by age; then the others by
            // size (GPUs + 1), then by age; ids break the last ties.
            let size = if starving { 0 } else { u64::from(j.gpus) + 1 };
            [size, j.submitted_s, j.id.0]
        });
        FairnessDecision {
            order: jobs
                .iter()
                .map(|j| Ranked {
                    job: j.id,
                    eligible: true,
                })
                .collect(),
        }
    }
}

// One line makes the same type a Wasm component for the `fairness` slot.
gangway_plugin_sdk::export!(Fairness, SmallestFirst);

#[cfg(test)]
mod tests {
    use super::*;
    use gangway_plugin_sdk::{ClusterSummary, JobId, Level, PendingJob, VcId};
    use proptest::prelude::*;

    fn view(jobs: &[(u32, u64)]) -> FairnessView {
        FairnessView {
            now_s: 0,
            cluster: ClusterSummary {
                total_gpus: 64,
                free_gpus: 0,
                server_level: Level(2),
                levels: vec![],
            },
            vcs: vec![],
            jobs: jobs
                .iter()
                .enumerate()
                .map(|(i, (gpus, waiting_s))| PendingJob {
                    id: JobId(i as u64),
                    vc: VcId(0),
                    user: 0,
                    gpus: *gpus,
                    submitted_s: i as u64,
                    waiting_s: *waiting_s,
                    attempts: 0,
                    attained_gpu_s: 0,
                    min_level: Level(2),
                    min_servers: 1,
                })
                .collect(),
        }
    }

    #[test]
    fn smallest_first_then_submit_order() {
        let d = SmallestFirst::default().order(&view(&[(8, 0), (1, 0), (8, 0), (2, 0)]));
        let ids: Vec<u64> = d.order.iter().map(|r| r.job.0).collect();
        assert_eq!(ids, vec![1, 3, 0, 2]);
    }

    #[test]
    fn typo_in_config_is_an_error() {
        let e = SmallestFirst::from_config(b"starve_after = 10").unwrap_err();
        assert!(e.0.contains("unknown field `starve_after`"), "{e}");
    }

    proptest! {
        #[test]
        fn returns_a_permutation(jobs in proptest::collection::vec((1u32..64, 0u64..7_200), 0..40)) {
            let d = SmallestFirst::default().order(&view(&jobs));
            let mut ids: Vec<u64> = d.order.iter().map(|r| r.job.0).collect();
            ids.sort_unstable();
            prop_assert_eq!(ids, (0..jobs.len() as u64).collect::<Vec<_>>());
        }
    }
}
