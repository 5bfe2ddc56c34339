//! `fifo-block`: a blocked job blocks the queue (gang slot).
//!
//! When a job cannot be placed this round, no job after it in the fairness
//! order may start (they wait *held by policy*). This is strict head-of-line
//! blocking: no gang is ever overtaken, so large gangs cannot starve, at the
//! price of idle GPUs whenever the head does not fit. With the `fifo`
//! fairness policy it gives plain first-come, first-served scheduling.
//!
//! # Options (TOML)
//!
//! None: the configuration must be empty (any line other than a comment is rejected).
//!
//! ```
//! use gangway_plugin_sdk::*;
//! use gangway_policy_fifo_block::FifoBlock;
//!
//! let job = |id| PendingJob {
//!     id: JobId(id), vc: VcId(0), user: 0, gpus: 8, submitted_s: id, waiting_s: 0,
//!     attempts: 0, attained_gpu_s: 0, min_level: Level(2), min_servers: 1,
//! };
//! let view = QueueView {
//!     now_s: 10,
//!     cluster: ClusterSummary { total_gpus: 64, free_gpus: 4, server_level: Level(2), levels: vec![] },
//!     jobs: vec![job(1), job(2)],
//!     spread: vec![SpreadLimit::level(Level(2)); 2],
//! };
//! let d = FifoBlock::from_config(b"").unwrap().on_blocked(&view);
//! assert_eq!(d.on_blocked, vec![GangAction::Block, GangAction::Block]);
//! ```

use gangway_plugin_sdk::{
    ConfigError, Configure, GangAction, GangDecision, GangPolicy, QueueView, no_options,
};

/// Head-of-line blocking: every blocked job answers [`GangAction::Block`].
/// See the [crate docs](crate).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FifoBlock;

impl Configure for FifoBlock {
    fn from_config(config: &[u8]) -> Result<Self, ConfigError> {
        no_options("fifo-block", config)?;
        Ok(FifoBlock)
    }
}

impl GangPolicy for FifoBlock {
    fn on_blocked(&self, view: &QueueView) -> GangDecision {
        GangDecision {
            on_blocked: vec![GangAction::Block; view.jobs.len()],
            max_reservations: 0,
        }
    }
}

gangway_plugin_sdk::export!(Gang, FifoBlock);

#[cfg(test)]
mod tests {
    use super::*;
    use gangway_plugin_sdk::{ClusterSummary, JobId, Level, PendingJob, SpreadLimit, VcId};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn one_block_per_job_and_no_reservations(
            jobs in proptest::collection::vec((1u32..64, any::<u64>()), 0..30),
        ) {
            let view = QueueView {
                now_s: 0,
                cluster: ClusterSummary { total_gpus: 64, free_gpus: 0, server_level: Level(2), levels: vec![] },
                jobs: jobs.iter().enumerate().map(|(i, (g, w))| PendingJob {
                    id: JobId(i as u64), vc: VcId(0), user: 0, gpus: *g, submitted_s: 0,
                    waiting_s: *w, attempts: 0, attained_gpu_s: 0, min_level: Level(2),
                    min_servers: 1,
                }).collect(),
                spread: vec![SpreadLimit::level(Level(2)); jobs.len()],
            };
            let d = FifoBlock.on_blocked(&view);
            prop_assert_eq!(d.on_blocked.len(), jobs.len());
            prop_assert!(d.on_blocked.iter().all(|a| *a == GangAction::Block));
            prop_assert_eq!(d.max_reservations, 0);
        }
    }

    #[test]
    fn config_must_be_empty() {
        assert_eq!(FifoBlock::from_config(b"").unwrap(), FifoBlock);
        let e = FifoBlock::from_config(b"block = false").unwrap_err();
        assert!(
            e.0.contains("takes no options") && e.0.contains("`block"),
            "{e}"
        );
    }
}
