//! The fairness slot's built-in policy, `fifo-quota`.

use std::collections::HashMap;

use super::{FairnessDecision, FairnessPolicy, FairnessView, Ranked};
use crate::config::{ConfigError, Configure, no_options};
use crate::ids::VcId;
use crate::manifest::QueueOrder;

/// `fifo-quota`: FIFO by submit time; a job is eligible while its virtual
/// cluster stays within its quota, counting GPUs held plus earlier eligible
/// jobs. A job larger than its VC's whole quota is eligible when the VC
/// holds nothing, so it is not starved forever. VCs without a quota are
/// unlimited. Its order within a VC is the submit order, so it needs to see
/// only each VC's oldest jobs ([`QueueOrder::Submit`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FifoQuota;

impl FairnessPolicy for FifoQuota {
    fn order(&self, view: &FairnessView) -> FairnessDecision {
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

impl Configure for FifoQuota {
    fn from_config(config: &[u8]) -> Result<Self, ConfigError> {
        no_options("fifo-quota", config)?;
        Ok(FifoQuota)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{JobId, Level, PendingJob, VcUsage};

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
        let view = FairnessView {
            vcs: vec![vc(0, Some(8), 4), vc(1, Some(4), 0), vc(2, None, 100)],
            jobs: vec![job(1, 0, 4), job(2, 0, 1), job(3, 1, 16), job(4, 2, 64)],
            ..FairnessView::default()
        };
        let d = FifoQuota.order(&view);
        let eligible: Vec<bool> = d.order.iter().map(|r| r.eligible).collect();
        assert_eq!(eligible, [true, false, true, true]);
        assert_eq!(FifoQuota.queue_order(), QueueOrder::Submit);
    }
}
