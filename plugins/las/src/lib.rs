//! `las`: Tiresias-style least attained service (fairness slot).
//!
//! Jobs that have received less GPU service so far go first, which shortens
//! completion times without knowing job durations (Gu et al., "Tiresias",
//! NSDI 2019). Service is a job's attained GPU-seconds (GPUs x run time of its
//! attempts, [`PendingJob::attained_gpu_s`]). As in Tiresias's discretized
//! 2D-LAS, jobs fall into a few queues by attained service rather than being
//! sorted on it exactly, so jobs of similar service keep arrival order and a
//! small difference never reorders them:
//!
//! * queue `k` holds jobs with `thresholds_gpu_s[k-1] <= attained < thresholds_gpu_s[k]`;
//! * lower queues first; FIFO (submit time, then id) within a queue;
//! * optionally, a job that has waited `promote_after_s` since it last became
//!   pending is promoted to queue 0 (Tiresias's starvation guard);
//! * every job is eligible: `las` does not enforce quotas.
//!
//! Ordering alone only reorders waiting jobs: a long job that started early
//! keeps its GPUs however much service it has received. The same module
//! therefore also exports the reclaim slot, [`LasPreempt`]: as in Tiresias,
//! a running job in a lower-priority queue than a waiting job is suspended
//! (stopped and re-queued; its attained service stays) so the waiting job
//! can run. Use both slots (the `tiresias` preset does) for LAS as its
//! authors meant it.
//!
//! # Options (TOML)
//!
//! | key | type | default | meaning |
//! |---|---|---|---|
//! | `thresholds_gpu_s` | list of GPU-seconds, strictly increasing | `[3600, 36000]` | queue boundaries (n thresholds = n + 1 queues) |
//! | `promote_after_s` | seconds | absent (off) | wait after which a job jumps to queue 0 |
//!
//! Defaults: the median Philly job is 1 GPU for about 20 minutes (about
//! 1,200 GPU-seconds, PHILLY.md §2 and §5.3), so one GPU-hour separates the
//! bulk of short jobs from the rest, and ten GPU-hours (an 8-GPU job after
//! 75 minutes) isolates the heavy tail that holds most GPU time.
//!
//! ```
//! use gangway_plugin_sdk::*;
//! use gangway_policy_las::Las;
//!
//! let job = |id, attained_gpu_s| PendingJob {
//!     id: JobId(id), vc: VcId(0), user: 0, gpus: 1, submitted_s: id, waiting_s: 0,
//!     attempts: 1, attained_gpu_s, min_level: Level(2), min_servers: 1,
//! };
//! let view = FairnessView {
//!     now_s: 100,
//!     cluster: ClusterSummary { total_gpus: 8, free_gpus: 0, server_level: Level(2), levels: vec![] },
//!     vcs: vec![],
//!     jobs: vec![job(1, 50_000), job(2, 100), job(3, 4_000)],
//! };
//! let las = Las::from_config(b"").unwrap();
//! let order: Vec<u64> = las.order(&view).order.iter().map(|r| r.job.0).collect();
//! assert_eq!(order, vec![2, 3, 1]);
//! ```

use gangway_plugin_sdk::sort;
use gangway_plugin_sdk::{
    ConfigError, ConfigForm, Configure, FairnessDecision, FairnessPolicy, FairnessView, PendingJob,
    QueueOrder, Ranked, read_options,
};
use serde::Deserialize;

/// Configuration of [`Las`], parsed from TOML by [`Configure::from_config`].
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LasConfig {
    /// Queue boundaries in attained GPU-seconds, strictly increasing; `n`
    /// thresholds make `n + 1` queues. Default `[3600, 36000]`.
    pub thresholds_gpu_s: Vec<u64>,
    /// If set, a job that has waited this many seconds since it last became
    /// pending is served from the first queue. Default: unset (off).
    pub promote_after_s: Option<u64>,
}

impl Default for LasConfig {
    fn default() -> Self {
        LasConfig {
            thresholds_gpu_s: vec![3_600, 36_000],
            promote_after_s: None,
        }
    }
}

/// Least attained service in discretized queues. See the [crate docs](crate).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Las {
    config: LasConfig,
}

impl Las {
    /// Builds the policy from a checked configuration.
    pub fn new(config: LasConfig) -> Result<Las, ConfigError> {
        if let Some(w) = config.thresholds_gpu_s.windows(2).find(|w| w[0] >= w[1]) {
            return Err(ConfigError(format!(
                "las: thresholds_gpu_s must be strictly increasing, but {} comes before {}",
                w[0], w[1]
            )));
        }
        Ok(Las { config })
    }

    /// The configuration in use.
    pub fn config(&self) -> &LasConfig {
        &self.config
    }

    /// The queue `job` is served from this round (0 = first).
    pub fn queue(&self, job: &PendingJob) -> usize {
        if self
            .config
            .promote_after_s
            .is_some_and(|p| job.waiting_s >= p)
        {
            return 0;
        }
        self.queue_of(job.attained_gpu_s)
    }

    /// The queue of a job that has attained `attained_gpu_s` GPU-seconds.
    pub fn queue_of(&self, attained_gpu_s: u64) -> usize {
        self.config
            .thresholds_gpu_s
            .iter()
            .take_while(|t| attained_gpu_s >= **t)
            .count()
    }
}

impl Configure for Las {
    // The host hands it its TOML as a tree: no parser in its module.
    const CONFIG_FORM: ConfigForm = ConfigForm::Tree;

    fn from_config(config: &[u8]) -> Result<Self, ConfigError> {
        let config: LasConfig = read_options("las", config)?;
        Las::new(config)
    }
}

impl FairnessPolicy for Las {
    /// Its queues, FIFO within each: each VC's first jobs in that order are
    /// all it needs to see. Promotion after a wait reorders by waiting time,
    /// which no fixed order follows: then it sees every pending job.
    fn queue_order(&self) -> QueueOrder {
        match self.config.promote_after_s {
            None => QueueOrder::AttainedBands(self.config.thresholds_gpu_s.clone()),
            Some(_) => QueueOrder::All,
        }
    }

    fn order(&self, view: &FairnessView) -> FairnessDecision {
        let mut jobs: Vec<(usize, &PendingJob)> =
            view.jobs.iter().map(|j| (self.queue(j), j)).collect();
        sort::by_key(&mut jobs, |(q, j)| [*q as u64, j.submitted_s, j.id.0]);
        FairnessDecision {
            order: jobs
                .into_iter()
                .map(|(_, j)| Ranked {
                    job: j.id,
                    eligible: true,
                })
                .collect(),
        }
    }
}

gangway_plugin_sdk::export!(Fairness, Las);
gangway_plugin_sdk::export!(Reclaim, LasPreempt);

mod preempt;
pub use preempt::LasPreempt;

#[cfg(test)]
mod tests {
    use super::*;
    use gangway_plugin_sdk::{ClusterSummary, JobId, Level, VcId};
    use proptest::prelude::*;

    fn job(id: u64, submitted_s: u64, attained_gpu_s: u64, waiting_s: u64) -> PendingJob {
        PendingJob {
            id: JobId(id),
            vc: VcId(0),
            user: 0,
            gpus: 1,
            submitted_s,
            waiting_s,
            attempts: u32::from(attained_gpu_s > 0),
            attained_gpu_s,
            min_level: Level(2),
            min_servers: 1,
        }
    }

    fn view(jobs: Vec<PendingJob>) -> FairnessView {
        FairnessView {
            now_s: 1_000_000,
            cluster: ClusterSummary {
                total_gpus: 8,
                free_gpus: 0,
                server_level: Level(2),
                levels: vec![],
            },
            vcs: vec![],
            jobs,
        }
    }

    fn ids(d: &FairnessDecision) -> Vec<u64> {
        d.order.iter().map(|r| r.job.0).collect()
    }

    #[test]
    fn same_queue_keeps_arrival_order() {
        let las = Las::default();
        // Both under one GPU-hour: the later, less-served job does not jump ahead.
        let v = view(vec![job(1, 0, 3_000, 0), job(2, 5, 10, 0)]);
        assert_eq!(ids(&las.order(&v)), vec![1, 2]);
    }

    #[test]
    fn boundaries_are_inclusive_on_the_lower_side() {
        let las = Las::default();
        assert_eq!(las.queue(&job(1, 0, 3_599, 0)), 0);
        assert_eq!(las.queue(&job(1, 0, 3_600, 0)), 1);
        assert_eq!(las.queue(&job(1, 0, 36_000, 0)), 2);
        assert_eq!(las.queue(&job(1, 0, u64::MAX, 0)), 2);
    }

    #[test]
    fn promotion_after_a_long_wait() {
        let las = Las::from_config(b"promote_after_s = 7200").unwrap();
        let v = view(vec![
            job(1, 0, 0, 10),
            job(2, 1, 100_000, 7_200),
            job(3, 2, 100_000, 7_199),
        ]);
        assert_eq!(ids(&las.order(&v)), vec![1, 2, 3]);
        let plain = Las::default();
        assert_eq!(ids(&plain.order(&v)), vec![1, 2, 3]);
        let v = view(vec![job(2, 1, 100_000, 7_200), job(1, 5, 0, 10)]);
        assert_eq!(ids(&las.order(&v)), vec![2, 1]);
        assert_eq!(ids(&plain.order(&v)), vec![1, 2]);
    }

    #[test]
    fn config_errors_are_clear() {
        assert_eq!(Las::from_config(b"").unwrap(), Las::default());
        let e = Las::from_config(b"thresholds = [1]").unwrap_err();
        assert!(e.0.contains("unknown field `thresholds`"), "{e}");
        let e = Las::from_config(b"thresholds_gpu_s = [10, 10]").unwrap_err();
        assert!(e.0.contains("strictly increasing"), "{e}");
        let single = Las::from_config(b"thresholds_gpu_s = []").unwrap();
        assert_eq!(single.queue(&job(1, 0, u64::MAX, 0)), 0);
    }

    proptest! {
        #[test]
        fn permutation_sorted_by_queue_then_arrival(
            jobs in proptest::collection::vec((0u64..1_000, 0u64..100_000, 0u64..10_000), 0..40),
            promote in proptest::option::of(0u64..10_000),
        ) {
            let las = Las::new(LasConfig { thresholds_gpu_s: vec![3_600, 36_000], promote_after_s: promote }).unwrap();
            let v = view(jobs.iter().enumerate().map(|(i, (s, a, w))| job(i as u64, *s, *a, *w)).collect());
            let d = las.order(&v);
            let mut got = ids(&d);
            got.sort_unstable();
            let want: Vec<u64> = (0..jobs.len() as u64).collect();
            prop_assert_eq!(got, want);
            prop_assert!(d.order.iter().all(|r| r.eligible));
            let key = |id: JobId| {
                let j = &v.jobs[id.0 as usize];
                (las.queue(j), j.submitted_s, j.id)
            };
            for pair in d.order.windows(2) {
                prop_assert!(key(pair[0].job) < key(pair[1].job));
            }
        }
    }
}
