//! The built-in policies: FIFO within virtual-cluster quotas, strict
//! locality, backfill and retry every failure. (For the reclaim and
//! defragment slots the built-in is to do nothing, which the core knows
//! without asking a policy.) The core uses them when no policy is configured and as
//! the fallback when a configured policy fails. They live here, not in the
//! core, so that the very same types also run as a Wasm component (the
//! `builtin` plugin) and native and sandboxed runs can be compared decision
//! by decision. None takes options.

use std::collections::HashMap;

use crate::config::{ConfigError, Configure, no_options};
use crate::ids::VcId;
use crate::slot::QueueOrder;
use crate::slots::{
    FairnessDecision, FairnessPolicy, GangAction, GangDecision, GangPolicy, LocalityDecision,
    LocalityPolicy, QueueView, Ranked, RetryAction, RetryDecision, RetryPolicy, RetryView,
    RoundView,
};
use crate::view::SpreadLimit;

/// `fifo-quota`: FIFO by submit time; a job is eligible while its virtual
/// cluster stays within its quota, counting GPUs held plus earlier eligible
/// jobs. A job larger than its VC's whole quota is eligible when the VC
/// holds nothing, so it is not starved forever. VCs without a quota are
/// unlimited. Its order within a VC is the submit order, so it needs to see
/// only each VC's oldest jobs ([`QueueOrder::Submit`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FifoQuota;

impl FairnessPolicy for FifoQuota {
    fn order(&self, view: &RoundView) -> FairnessDecision {
        // GPUs each VC holds plus those of its earlier eligible jobs. VCs are
        // dense ids (`vcs[i].id == i`): a vector then, a map for odd views.
        let dense = view
            .vcs
            .iter()
            .enumerate()
            .all(|(i, v)| v.id.0 as usize == i);
        let mut used = if dense {
            Used::Dense(
                view.vcs.iter().map(|v| v.held_gpus).collect(),
                HashMap::new(),
            )
        } else {
            Used::Sparse(view.vcs.iter().map(|v| (v.id, v.held_gpus)).collect())
        };
        let quota = |vc: VcId| {
            let v = if dense {
                view.vcs.get(vc.0 as usize)
            } else {
                view.vcs.iter().find(|v| v.id == vc)
            };
            v.and_then(|v| v.quota_gpus)
        };
        let order = view
            .jobs
            .iter()
            .map(|j| {
                let u = used.get(j.vc);
                let eligible = match quota(j.vc) {
                    None => true,
                    Some(q) => *u + j.gpus <= q || (*u == 0 && j.gpus > q),
                };
                if eligible {
                    *u += j.gpus;
                }
                Ranked {
                    job: j.id,
                    eligible,
                }
            })
            .collect();
        FairnessDecision { order }
    }

    fn queue_order(&self) -> QueueOrder {
        QueueOrder::Submit
    }
}

/// Per-VC GPU counters: by index for the VCs of the view (plus a map for
/// jobs naming an unknown VC), or all in a map.
enum Used {
    Dense(Vec<u32>, HashMap<VcId, u32>),
    Sparse(HashMap<VcId, u32>),
}

impl Used {
    fn get(&mut self, vc: VcId) -> &mut u32 {
        match self {
            Used::Dense(v, extra) => match v.get_mut(vc.0 as usize) {
                Some(u) => u,
                None => extra.entry(vc).or_insert(0),
            },
            Used::Sparse(m) => m.entry(vc).or_insert(0),
        }
    }
}

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

/// `backfill`: a blocked job lets every later job try.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Backfill;

impl GangPolicy for Backfill {
    fn on_blocked(&self, view: &QueueView) -> GangDecision {
        GangDecision {
            on_blocked: vec![GangAction::Backfill; view.jobs.len()],
            max_reservations: 0,
        }
    }
}

/// `fixed`: retry every failed attempt at once, as often as the host lets a
/// job run (Philly retried failed jobs a fixed number of times; that limit
/// is the host's, which marks a job's last allowed attempt as final). The
/// `fixed` plugin adds options (a lower limit, a delay) to this rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fixed {
    /// Give up once a job has had this many attempts (0: never).
    pub max_attempts: u32,
    /// Seconds to wait before a retry is pending.
    pub after_s: u64,
}

impl RetryPolicy for Fixed {
    fn retry(&self, view: &RetryView) -> RetryDecision {
        RetryDecision {
            actions: view
                .failures
                .iter()
                .map(|f| {
                    if self.max_attempts > 0 && f.attempts >= self.max_attempts {
                        RetryAction::GiveUp
                    } else {
                        RetryAction::Retry {
                            after_s: self.after_s,
                        }
                    }
                })
                .collect(),
        }
    }
}

macro_rules! no_option_policies {
    ($($ty:ident = $name:literal),* $(,)?) => {$(
        impl Configure for $ty {
            fn from_config(config: &[u8]) -> Result<Self, ConfigError> {
                no_options($name, config)?;
                Ok($ty::default())
            }
        }
    )*};
}

no_option_policies!(
    FifoQuota = "fifo-quota",
    Strict = "strict",
    Backfill = "backfill",
    Fixed = "fixed",
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ClusterSummary, FailedAttempt, JobId, Level, PendingJob, VcUsage};

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
    fn fifo_quota_stops_a_vc_at_its_quota_but_lets_an_oversized_job_through() {
        let vc = |id, quota, held| VcUsage {
            id: VcId(id),
            quota_gpus: quota,
            weight: 1,
            held_gpus: held,
            ..VcUsage::default()
        };
        let view = RoundView {
            vcs: vec![vc(0, Some(8), 4), vc(1, Some(4), 0), vc(2, None, 100)],
            jobs: vec![job(1, 0, 4), job(2, 0, 1), job(3, 1, 16), job(4, 2, 64)],
            ..RoundView::default()
        };
        let d = FifoQuota.order(&view);
        let eligible: Vec<bool> = d.order.iter().map(|r| r.eligible).collect();
        assert_eq!(eligible, [true, false, true, true]);
        assert_eq!(FifoQuota.queue_order(), QueueOrder::Submit);
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

    #[test]
    fn fixed_retries_up_to_its_limit() {
        let failure = |attempts| FailedAttempt {
            attempts,
            ..FailedAttempt::default()
        };
        let view = RetryView {
            now_s: 0,
            failures: vec![failure(1), failure(3)],
        };
        let limited = Fixed {
            max_attempts: 3,
            after_s: 60,
        };
        assert_eq!(
            limited.retry(&view).actions,
            [RetryAction::Retry { after_s: 60 }, RetryAction::GiveUp]
        );
        assert_eq!(
            Fixed::default().retry(&view).actions,
            [RetryAction::Retry { after_s: 0 }; 2]
        );
    }

    #[test]
    fn none_of_them_takes_options() {
        assert!(Backfill::from_config(b"# defaults\n").is_ok());
        let e = Fixed::from_config(b"max_attempts = 2").unwrap_err();
        assert!(e.0.starts_with("fixed: takes no options"), "{e}");
    }
}
