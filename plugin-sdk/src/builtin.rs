//! The built-in policies: FIFO within virtual-cluster quotas, strict locality,
//! backfill. The core uses them when no policy is configured and as the
//! fallback when a configured policy fails. They live in the SDK, not the core,
//! so that the very same types also run as a Wasm component (the
//! `gangway-policy-builtin` plugin) and native and sandboxed runs can be
//! compared decision by decision.

use std::collections::HashMap;

use crate::{
    ConfigError, Configure, FairnessDecision, FairnessPolicy, GangAction, GangDecision, GangPolicy,
    LocalityDecision, LocalityPolicy, QueueView, Ranked, RoundView, VcId,
};

/// FIFO by submit time; a job is eligible while its virtual cluster stays
/// within its quota, counting GPUs held plus earlier eligible jobs. A job
/// larger than its VC's whole quota is eligible when the VC holds nothing, so
/// it is not starved forever. VCs without a quota are unlimited.
#[derive(Clone, Copy, Debug, Default)]
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
        let quota = |vc: VcId| view.vcs.get(vc.0 as usize).and_then(|v| v.quota_gpus);
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

/// Never relax: each job may span only the smallest domain that can hold it.
#[derive(Clone, Copy, Debug, Default)]
pub struct StrictLocality;

impl LocalityPolicy for StrictLocality {
    fn spread(&self, view: &QueueView) -> LocalityDecision {
        LocalityDecision {
            spread: view.jobs.iter().map(|j| j.min_level).collect(),
        }
    }
}

/// A blocked job lets every later job try (backfill).
#[derive(Clone, Copy, Debug, Default)]
pub struct Backfill;

impl GangPolicy for Backfill {
    fn on_blocked(&self, view: &QueueView) -> GangDecision {
        GangDecision {
            on_blocked: vec![GangAction::Backfill; view.jobs.len()],
            max_reservations: 0,
        }
    }
}

/// Builds a policy that takes no configuration: empty (or all-whitespace)
/// bytes are accepted, anything else is refused.
fn no_config<P>(policy: P, config: &[u8]) -> Result<P, ConfigError> {
    if crate::config_text(config)?.trim().is_empty() {
        Ok(policy)
    } else {
        Err(ConfigError(
            "this built-in policy takes no configuration".to_string(),
        ))
    }
}

impl Configure for FifoQuota {
    fn from_config(config: &[u8]) -> Result<Self, ConfigError> {
        no_config(FifoQuota, config)
    }
}

impl Configure for StrictLocality {
    fn from_config(config: &[u8]) -> Result<Self, ConfigError> {
        no_config(StrictLocality, config)
    }
}

impl Configure for Backfill {
    fn from_config(config: &[u8]) -> Result<Self, ConfigError> {
        no_config(Backfill, config)
    }
}
