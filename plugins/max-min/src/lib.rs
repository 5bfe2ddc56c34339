//! `max-min`: weighted max-min fair shares of GPUs across virtual clusters
//! (fairness slot).
//!
//! Each round, the cluster's GPUs are divided among the virtual clusters
//! (VCs) by weighted water-filling: a VC's demand is the GPUs it holds plus
//! the GPUs its pending jobs ask for; VCs are raised together, in proportion
//! to their weights, until each has its demand or the GPUs run out. No VC can
//! get more without taking from one that has less per unit of weight. For a
//! single resource this is what Dominant Resource Fairness reduces to.
//!
//! The shares then act as quotas, exactly as in `vc-quota`:
//!
//! 1. **Within the share.** Repeatedly take the VC using the smallest fraction
//!    of its fair share (ties: the older oldest job) and its oldest pending
//!    job; the job is eligible if the VC stays within its share with it,
//!    otherwise the VC is done for this pass (FIFO within a VC). A VC holding
//!    nothing may start one job larger than its share, so such a job is not
//!    starved forever.
//! 2. **Lending.** The remaining jobs follow in the same order; with
//!    `lend = true` each is eligible while the free GPUs not granted in pass 1
//!    cover it, otherwise it waits with *fair-share delay*.
//!
//! A weight of 0 gives a VC no share: it only runs on lent GPUs (a scavenger
//! tenant). [`MaxMin::fair_shares`] reports the shares a round used.
//!
//! # Options (TOML)
//!
//! | key | type | default | meaning |
//! |---|---|---|---|
//! | `lend` | bool | `true` | lend idle GPUs beyond the fair shares (work-conserving) |
//! | `[weight]` | table of VC index = weight | empty | overrides the host's weights ([`VcUsage::weight`]) |
//!
//! ```
//! use gangway_plugin_sdk::*;
//! use gangway_policy_max_min::MaxMin;
//!
//! let vc = |id, weight, held_gpus, pending_gpus| VcUsage {
//!     id: VcId(id), quota_gpus: None, weight, held_gpus, pending_gpus, attained_gpu_s: 0, pending_jobs: 1,
//! };
//! let job = |id, vc, gpus| PendingJob {
//!     id: JobId(id), vc: VcId(vc), user: 0, gpus, submitted_s: id, waiting_s: 0,
//!     attempts: 0, attained_gpu_s: 0, min_level: Level(2), min_servers: 1,
//! };
//! let view = FairnessView {
//!     now_s: 100,
//!     cluster: ClusterSummary { total_gpus: 12, free_gpus: 0, server_level: Level(2), levels: vec![] },
//!     // VC 0 (weight 2) wants 16, VC 1 (weight 1) wants 2: VC 1 gets its 2,
//!     // VC 0 the other 10.
//!     vcs: vec![vc(0, 2, 12, 4), vc(1, 1, 0, 2)],
//!     jobs: vec![job(1, 0, 4), job(2, 1, 2)],
//! };
//! let policy = MaxMin::from_config(b"").unwrap();
//! let shares: Vec<u32> = policy.fair_shares(&view).iter().map(|(_, s)| *s).collect();
//! assert_eq!(shares, vec![10, 2]);
//! let order: Vec<(u64, bool)> = policy.order(&view).order.iter().map(|r| (r.job.0, r.eligible)).collect();
//! assert_eq!(order, vec![(2, true), (1, false)]);
//! ```

use std::collections::BTreeMap;

use gangway_plugin_sdk::{
    ConfigError, ConfigForm, Configure, FairnessDecision, FairnessPolicy, FairnessView, QueueOrder,
    VcId, read_options,
};
use serde::{Deserialize, Deserializer};

// The two passes of `vc-quota`, compiled from its source file (a Cargo
// dependency would link vc-quota's Wasm exports into this module too).
#[path = "../../vc-quota/src/two_pass.rs"]
mod two_pass;
use two_pass::{Cover, Queues, with_queues};

/// Configuration of [`MaxMin`], parsed from TOML by [`Configure::from_config`].
///
/// ```
/// use gangway_plugin_sdk::Configure;
/// use gangway_policy_max_min::MaxMin;
///
/// let p = MaxMin::from_config(b"lend = false\n[weight]\n0 = 3").unwrap();
/// assert!(!p.config().lend);
/// assert_eq!(p.config().weight.get(&0), Some(&3));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MaxMinConfig {
    /// Lend idle GPUs beyond the fair shares (work-conserving). Default `true`.
    pub lend: bool,
    /// Weights by VC index, overriding the host's. Default: empty.
    #[serde(deserialize_with = "by_vc_index")]
    pub weight: BTreeMap<u32, u32>,
}

impl Default for MaxMinConfig {
    fn default() -> Self {
        MaxMinConfig {
            lend: true,
            weight: BTreeMap::new(),
        }
    }
}

fn by_vc_index<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<u32, u32>, D::Error> {
    let raw = BTreeMap::<String, u32>::deserialize(d)?;
    raw.into_iter()
        .map(|(k, v)| match k.parse::<u32>() {
            Ok(i) => Ok((i, v)),
            Err(_) => Err(serde::de::Error::custom(format!(
                "weight key `{k}` is not a VC index (write e.g. `0 = 2`)"
            ))),
        })
        .collect()
}

/// Weighted max-min fair shares used as quotas. See the [crate docs](crate).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MaxMin {
    config: MaxMinConfig,
}

/// One VC's input to water-filling.
struct Claim {
    vc: VcId,
    weight: u64,
    demand: u64,
}

impl MaxMin {
    /// Builds the policy (every configuration is valid).
    pub fn new(config: MaxMinConfig) -> MaxMin {
        MaxMin { config }
    }

    /// The configuration in use.
    pub fn config(&self) -> &MaxMinConfig {
        &self.config
    }

    fn claims(&self, view: &FairnessView, queues: &Queues<'_>) -> Vec<Claim> {
        queues
            .vcs()
            .iter()
            .map(|q| {
                let weight = match self.config.weight.get(&q.id.0) {
                    Some(&w) => w,
                    None => q.usage(view).map_or(1, |u| u.weight),
                };
                Claim {
                    vc: q.id,
                    weight: u64::from(weight),
                    demand: q.held_gpus + q.asked_gpus,
                }
            })
            .collect()
    }

    /// Each VC's weighted max-min fair share of the cluster's GPUs this round,
    /// by VC id (VCs of `view.vcs` and any other a pending job names).
    pub fn fair_shares(&self, view: &FairnessView) -> Vec<(VcId, u32)> {
        let claims = with_queues(view, Cover::All, |queues| self.claims(view, queues));
        water_fill(&claims, u64::from(view.cluster.total_gpus))
            .into_iter()
            .zip(&claims)
            .map(|(s, c)| (c.vc, u32::try_from(s).unwrap_or(u32::MAX)))
            .collect()
    }
}

/// Weighted water-filling of `capacity` over `claims`, rounded down.
fn water_fill(claims: &[Claim], capacity: u64) -> Vec<u64> {
    let mut share = vec![0u64; claims.len()];
    let mut left = capacity;
    let mut active: Vec<usize> = (0..claims.len())
        .filter(|&i| claims[i].demand > 0 && claims[i].weight > 0)
        .collect();
    while !active.is_empty() {
        let weights: u128 = active.iter().map(|&i| u128::from(claims[i].weight)).sum();
        // Demand within the water level `left / weights` per unit of weight.
        let (met, unmet): (Vec<usize>, Vec<usize>) = active.iter().partition(|&&i| {
            u128::from(claims[i].demand) * weights
                <= u128::from(left) * u128::from(claims[i].weight)
        });
        if met.is_empty() {
            for i in unmet {
                let s = u128::from(left) * u128::from(claims[i].weight) / weights;
                share[i] = u64::try_from(s).unwrap_or(u64::MAX);
            }
            break;
        }
        for i in met {
            share[i] = claims[i].demand;
            left = left.saturating_sub(claims[i].demand);
        }
        active = unmet;
    }
    share
}

impl Configure for MaxMin {
    // The host hands it its TOML as a tree: no parser in its module.
    const CONFIG_FORM: ConfigForm = ConfigForm::Tree;

    fn from_config(config: &[u8]) -> Result<Self, ConfigError> {
        let config: MaxMinConfig = read_options("max-min", config)?;
        Ok(MaxMin::new(config))
    }
}

impl FairnessPolicy for MaxMin {
    /// FIFO within each VC: each VC's oldest jobs are all it needs to see
    /// (its demand comes from the host's per-VC totals).
    fn queue_order(&self) -> QueueOrder {
        QueueOrder::Submit
    }

    fn order(&self, view: &FairnessView) -> FairnessDecision {
        with_queues(view, Cover::All, |queues| {
            let claims = self.claims(view, queues);
            let shares = water_fill(&claims, u64::from(view.cluster.total_gpus));
            for (q, share) in queues.vcs_mut().iter_mut().zip(shares) {
                q.quota_gpus = Some(share);
            }
            queues.order_with(self.config.lend, true)
        })
    }
}

gangway_plugin_sdk::export!(Fairness, MaxMin);

#[cfg(test)]
mod tests;
