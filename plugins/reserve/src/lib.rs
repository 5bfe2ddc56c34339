//! `reserve`: bounded reservations for gangs that waited too long (gang slot).
//!
//! A blocked job that has waited at least [`ReserveConfig::after_s`] since it
//! last became pending, and asks for at least [`ReserveConfig::min_gpus`]
//! GPUs, answers [`GangAction::Reserve`]: the core then holds free GPUs of the
//! best domain within the job's spread limit for it, up to its size, so a
//! stream of small jobs cannot keep taking the capacity it needs. Every other
//! blocked job answers [`GangAction::Backfill`], and later jobs may always use
//! the GPUs that are not held.
//!
//! The bound: at most [`ReserveConfig::max_reservations`] jobs hold GPUs in
//! one round (the first blocked ones in the fairness order; the core turns any
//! further `Reserve` answer into `Backfill`), each holds at most its own size,
//! and holds are re-decided every round and dropped as soon as the job starts
//! or stops asking. So reservations can neither deadlock the cluster (holds
//! never span rounds without being re-granted, and only free GPUs are held)
//! nor starve the rest (at most `max_reservations` gangs' worth of GPUs is
//! ever held). This is EASY backfilling's idea (one reservation for the head
//! of the queue) with a wait threshold so that short waits stay cheap.
//!
//! # Options (TOML)
//!
//! | key | type | default | meaning |
//! |---|---|---|---|
//! | `after_s` | seconds | `600` | wait before a blocked job may reserve |
//! | `min_gpus` | GPUs | `2` | smallest gang that may reserve |
//! | `max_reservations` | count | `1` | jobs holding GPUs in one round (0 = plain backfill) |
//!
//! Defaults: 10 minutes is past the 75th percentile of first-attempt waits
//! for 4-GPU jobs and near it for 5–8-GPU jobs in the Philly trace (6.9 and
//! 13.6 min, PHILLY.md §5.4), so only the tail reserves. A 1-GPU job fits in
//! any freed GPU and never needs one. One reservation at a time is the EASY
//! backfilling choice and keeps idle held capacity to a single gang.
//!
//! ```
//! use gangway_plugin_sdk::*;
//! use gangway_policy_reserve::Reserve;
//!
//! let job = |id, gpus, waiting_s| PendingJob {
//!     id: JobId(id), vc: VcId(0), user: 0, gpus, submitted_s: 0, waiting_s,
//!     attempts: 0, attained_gpu_s: 0, min_level: Level(1), min_servers: 1,
//! };
//! let view = QueueView {
//!     now_s: 2_000,
//!     cluster: ClusterSummary { total_gpus: 64, free_gpus: 4, server_level: Level(2), levels: vec![] },
//!     jobs: vec![job(1, 32, 1_200), job(2, 32, 30), job(3, 1, 1_200)],
//!     spread: vec![SpreadLimit::level(Level(1)); 3],
//! };
//! let d = Reserve::from_config(b"after_s = 900").unwrap().on_blocked(&view);
//! assert_eq!(d.on_blocked, vec![GangAction::Reserve, GangAction::Backfill, GangAction::Backfill]);
//! assert_eq!(d.max_reservations, 1);
//! ```

use gangway_plugin_sdk::{
    ConfigError, ConfigForm, Configure, GangAction, GangDecision, GangPolicy, PendingJob,
    QueueView, read_options,
};
use serde::Deserialize;

/// Configuration of [`Reserve`], parsed from TOML by [`Configure::from_config`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReserveConfig {
    /// Seconds a job must have waited (since it last became pending) before it
    /// may reserve. Default `600`.
    pub after_s: u64,
    /// The smallest gang (in GPUs) that may reserve. Default `2`.
    pub min_gpus: u32,
    /// At most this many jobs hold GPUs in one round; `0` turns the policy
    /// into plain backfill. Default `1`.
    pub max_reservations: u32,
}

impl Default for ReserveConfig {
    fn default() -> Self {
        ReserveConfig {
            after_s: 600,
            min_gpus: 2,
            max_reservations: 1,
        }
    }
}

/// Reserve after a wait, backfill otherwise. See the [crate docs](crate).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reserve {
    config: ReserveConfig,
}

impl Reserve {
    /// Builds the policy (every configuration is valid).
    pub fn new(config: ReserveConfig) -> Reserve {
        Reserve { config }
    }

    /// The configuration in use.
    pub fn config(&self) -> &ReserveConfig {
        &self.config
    }

    /// Whether `job` may reserve if it is blocked.
    pub fn may_reserve(&self, job: &PendingJob) -> bool {
        self.config.max_reservations > 0
            && job.waiting_s >= self.config.after_s
            && job.gpus >= self.config.min_gpus
    }
}

impl Configure for Reserve {
    // The host hands it its TOML as a tree: no parser in its module.
    const CONFIG_FORM: ConfigForm = ConfigForm::Tree;

    fn from_config(config: &[u8]) -> Result<Self, ConfigError> {
        let config: ReserveConfig = read_options("reserve", config)?;
        Ok(Reserve::new(config))
    }
}

impl GangPolicy for Reserve {
    fn on_blocked(&self, view: &QueueView) -> GangDecision {
        GangDecision {
            on_blocked: view
                .jobs
                .iter()
                .map(|j| {
                    if self.may_reserve(j) {
                        GangAction::Reserve
                    } else {
                        GangAction::Backfill
                    }
                })
                .collect(),
            max_reservations: self.config.max_reservations,
        }
    }
}

gangway_plugin_sdk::export!(Gang, Reserve);

#[cfg(test)]
mod tests {
    use super::*;
    use gangway_plugin_sdk::{ClusterSummary, JobId, Level, SpreadLimit, VcId};
    use proptest::prelude::*;

    fn job(id: u64, gpus: u32, waiting_s: u64) -> PendingJob {
        PendingJob {
            id: JobId(id),
            vc: VcId(0),
            user: 0,
            gpus,
            submitted_s: 0,
            waiting_s,
            attempts: 0,
            attained_gpu_s: 0,
            min_level: Level(2),
            min_servers: 1,
        }
    }

    fn view(jobs: Vec<PendingJob>) -> QueueView {
        let n = jobs.len();
        QueueView {
            now_s: 0,
            cluster: ClusterSummary {
                total_gpus: 64,
                free_gpus: 0,
                server_level: Level(2),
                levels: vec![],
            },
            jobs,
            spread: vec![SpreadLimit::level(Level(2)); n],
        }
    }

    #[test]
    fn thresholds_are_inclusive() {
        let r = Reserve::default();
        let v = view(vec![
            job(1, 8, 599),
            job(2, 8, 600),
            job(3, 1, 10_000),
            job(4, 2, 600),
        ]);
        assert_eq!(
            r.on_blocked(&v).on_blocked,
            vec![
                GangAction::Backfill,
                GangAction::Reserve,
                GangAction::Backfill,
                GangAction::Reserve
            ]
        );
    }

    #[test]
    fn zero_reservations_is_plain_backfill() {
        let r = Reserve::from_config(b"max_reservations = 0").unwrap();
        let d = r.on_blocked(&view(vec![job(1, 64, u64::MAX)]));
        assert_eq!(d.on_blocked, vec![GangAction::Backfill]);
        assert_eq!(d.max_reservations, 0);
    }

    #[test]
    fn config_parses_and_rejects_unknown_keys() {
        assert_eq!(Reserve::from_config(b"").unwrap(), Reserve::default());
        let r = Reserve::from_config(b"after_s = 0\nmin_gpus = 1\nmax_reservations = 3").unwrap();
        assert_eq!(
            *r.config(),
            ReserveConfig {
                after_s: 0,
                min_gpus: 1,
                max_reservations: 3
            }
        );
        let e = Reserve::from_config(b"max_reservation = 3").unwrap_err();
        assert!(e.0.contains("unknown field `max_reservation`"), "{e}");
        let e = Reserve::from_config(b"after_s = \"10m\"").unwrap_err();
        assert!(e.0.starts_with("reserve:"), "{e}");
    }

    proptest! {
        #[test]
        fn never_asks_for_more_than_allowed(
            after_s in 0u64..2_000,
            min_gpus in 0u32..16,
            max_reservations in 0u32..4,
            jobs in proptest::collection::vec((1u32..64, 0u64..4_000), 0..30),
        ) {
            let r = Reserve::new(ReserveConfig { after_s, min_gpus, max_reservations });
            let v = view(jobs.iter().enumerate().map(|(i, (g, w))| job(i as u64, *g, *w)).collect());
            let d = r.on_blocked(&v);
            prop_assert_eq!(d.on_blocked.len(), v.jobs.len());
            prop_assert_eq!(d.max_reservations, max_reservations);
            for (j, a) in v.jobs.iter().zip(&d.on_blocked) {
                prop_assert_ne!(*a, GangAction::Block);
                if *a == GangAction::Reserve {
                    prop_assert!(max_reservations > 0);
                    prop_assert!(j.waiting_s >= after_s);
                    prop_assert!(j.gpus >= min_gpus);
                } else {
                    prop_assert!(!(max_reservations > 0 && j.waiting_s >= after_s && j.gpus >= min_gpus));
                }
            }
        }
    }
}
