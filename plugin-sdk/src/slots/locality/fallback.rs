//! The locality slot's built-in policy, `strict`.

use super::{LocalityDecision, LocalityPolicy};
use crate::config::{ConfigError, Configure, no_options};
use crate::slots::QueueView;
use crate::view::SpreadLimit;

/// `strict`: never relax locality. Each job may span only the smallest
/// domain that can hold it (its `min_level`, clamped to the server level),
/// on the fewest servers that can hold it (its `min_servers`): the study's
/// first guideline, "prioritise locality" (a spread gang runs slower for its
/// whole life: 16-GPU jobs average 43.7 % GPU utilisation on 2 servers, 28.6 %
/// on 8). A job that never finds such room waits with *fragmentation delay*;
/// pair it with the `reserve` gang policy so large gangs are not starved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Strict;

impl LocalityPolicy for Strict {
    fn spread(&self, view: &QueueView) -> LocalityDecision {
        let server_level = view.cluster.server_level;
        LocalityDecision {
            limits: view
                .jobs
                .iter()
                .map(|j| SpreadLimit::new(j.min_level.min(server_level), j.min_servers))
                .collect(),
        }
    }
}

impl Configure for Strict {
    fn from_config(config: &[u8]) -> Result<Self, ConfigError> {
        no_options("strict", config)?;
        Ok(Strict)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ClusterSummary, JobId, Level, PendingJob, VcId};

    fn job(id: u64, vc: u32, gpus: u32) -> PendingJob {
        PendingJob {
            id: JobId(id),
            vc: VcId(vc),
            gpus,
            submitted_s: id,
            min_level: Level(2),
            min_servers: 1,
            ..PendingJob::default()
        }
    }

    #[test]
    fn strict_clamps_to_the_server_level_and_bounds_servers() {
        let mut big = job(2, 0, 16);
        big.min_level = Level(1);
        big.min_servers = 2;
        let mut odd = job(3, 0, 1);
        odd.min_level = Level(9);
        let view = QueueView {
            cluster: ClusterSummary {
                server_level: Level(2),
                ..ClusterSummary::default()
            },
            jobs: vec![job(1, 0, 4), big, odd],
            ..QueueView::default()
        };
        assert_eq!(
            Strict.spread(&view).limits,
            vec![
                SpreadLimit::new(Level(2), 1),
                SpreadLimit::new(Level(1), 2),
                SpreadLimit::new(Level(2), 1)
            ]
        );
    }
}
