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
//!     id: VcId(id), quota_gpus: None, weight, held_gpus, pending_gpus, attained_gpu_s: 0,
//! };
//! let job = |id, vc, gpus| PendingJob {
//!     id: JobId(id), vc: VcId(vc), user: 0, gpus, submitted_s: id, waiting_s: 0,
//!     attempts: 0, attained_gpu_s: 0, min_level: Level(2),
//! };
//! let view = RoundView {
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

use std::cmp::{Ordering, Reverse};
use std::collections::binary_heap::PeekMut;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

use gangway_plugin_sdk::{
    ConfigError, Configure, FairnessDecision, FairnessPolicy, JobId, PendingJob, Ranked, RoundView,
    VcId, config_text,
};
use serde::{Deserialize, Deserializer};

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
    held: u64,
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

    fn claims(&self, view: &RoundView) -> Vec<Claim> {
        let mut claims: BTreeMap<VcId, Claim> = BTreeMap::new();
        for v in &view.vcs {
            let weight = self.config.weight.get(&v.id.0).copied().unwrap_or(v.weight);
            claims.insert(
                v.id,
                Claim {
                    vc: v.id,
                    weight: u64::from(weight),
                    held: u64::from(v.held_gpus),
                    demand: u64::from(v.held_gpus),
                },
            );
        }
        for j in &view.jobs {
            let c = claims.entry(j.vc).or_insert_with(|| Claim {
                vc: j.vc,
                weight: u64::from(self.config.weight.get(&j.vc.0).copied().unwrap_or(1)),
                held: 0,
                demand: 0,
            });
            c.demand += u64::from(j.gpus);
        }
        claims.into_values().collect()
    }

    /// Each VC's weighted max-min fair share of the cluster's GPUs this round,
    /// by VC id (VCs of `view.vcs` and any other a pending job names).
    pub fn fair_shares(&self, view: &RoundView) -> Vec<(VcId, u32)> {
        let claims = self.claims(view);
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
    fn from_config(config: &[u8]) -> Result<Self, ConfigError> {
        let text = config_text(config)?;
        let config: MaxMinConfig =
            toml::from_str(text).map_err(|e| ConfigError(format!("max-min: {e}")))?;
        Ok(MaxMin::new(config))
    }
}

/// One VC during a round: its limit (its fair share here; the same engine as
/// `vc-quota`), GPUs counted so far, and its FIFO queue.
struct Tenant<'a> {
    quota: Option<u64>,
    used: u64,
    queue: VecDeque<&'a PendingJob>,
}

impl Tenant<'_> {
    /// The fraction of the quota in use as (numerator, denominator); an
    /// unlimited VC is at 0, a zero quota is infinitely full.
    fn load(&self) -> (u64, u64) {
        match self.quota {
            None => (0, 1),
            Some(0) => (1, 0),
            Some(q) => (self.used, q),
        }
    }

    /// Whether its oldest job stays within quota (or is the one oversized job
    /// a VC holding nothing may start).
    fn head_fits(&self, gpus: u64) -> bool {
        match self.quota {
            None => true,
            Some(q) => (self.used < q && self.used + gpus <= q) || (q > 0 && self.used == 0),
        }
    }

    /// Its place in the serving order, if it has jobs left.
    fn turn(&self, index: usize) -> Option<Turn> {
        let head = self.queue.front()?;
        Some(Turn {
            load: self.load(),
            head: (head.submitted_s, head.id),
            index,
        })
    }
}

/// A VC's place in the serving order: lowest load first, then the older
/// oldest job (job ids are unique, so this is total).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Turn {
    load: (u64, u64),
    head: (u64, JobId),
    index: usize,
}

impl Ord for Turn {
    fn cmp(&self, other: &Self) -> Ordering {
        let (a, b) = (self.load, other.load);
        (u128::from(a.0) * u128::from(b.1))
            .cmp(&(u128::from(b.0) * u128::from(a.1)))
            .then(self.head.cmp(&other.head))
            .then(self.index.cmp(&other.index))
    }
}

impl PartialOrd for Turn {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl FairnessPolicy for MaxMin {
    fn order(&self, view: &RoundView) -> FairnessDecision {
        let claims = self.claims(view);
        let shares = water_fill(&claims, u64::from(view.cluster.total_gpus));
        let index: BTreeMap<VcId, usize> =
            claims.iter().enumerate().map(|(i, c)| (c.vc, i)).collect();
        let mut tenants: Vec<Tenant<'_>> = claims
            .iter()
            .zip(shares)
            .map(|(c, share)| Tenant {
                quota: Some(share),
                used: c.held,
                queue: VecDeque::new(),
            })
            .collect();
        let mut jobs: Vec<&PendingJob> = view.jobs.iter().collect();
        jobs.sort_by_key(|j| (j.submitted_s, j.id));
        for j in jobs {
            if let Some(&i) = index.get(&j.vc) {
                tenants[i].queue.push_back(j);
            }
        }
        let lend = self.config.lend;
        FairnessDecision {
            order: serve(&mut tenants, u64::from(view.cluster.free_gpus), lend),
        }
    }
}

/// The two passes over the VCs' queues (see the crate docs).
fn serve(tenants: &mut [Tenant<'_>], free_gpus: u64, lend: bool) -> Vec<Ranked> {
    let mut order = Vec::with_capacity(tenants.iter().map(|t| t.queue.len()).sum());
    // Pass 1: within quota. A VC whose oldest job does not fit leaves the
    // pass, so its later jobs cannot overtake that job.
    let mut turns = Turns::new(tenants);
    let mut granted = 0u64;
    while let Some(i) = turns.current {
        let t = &mut tenants[i];
        let next = match t.queue.front().copied() {
            Some(job) if t.head_fits(u64::from(job.gpus)) => {
                t.queue.pop_front();
                t.used += u64::from(job.gpus);
                granted += u64::from(job.gpus);
                order.push(Ranked {
                    job: job.id,
                    eligible: true,
                });
                t.turn(i)
            }
            _ => None,
        };
        turns.advance(next);
    }
    // Pass 2: the rest, on lent GPUs if allowed.
    let mut turns = Turns::new(tenants);
    let mut lendable = free_gpus.saturating_sub(granted);
    while let Some(i) = turns.current {
        let t = &mut tenants[i];
        if let Some(job) = t.queue.pop_front() {
            let gpus = u64::from(job.gpus);
            let eligible = lend && gpus <= lendable;
            if eligible {
                lendable -= gpus;
                t.used += gpus;
            }
            order.push(Ranked {
                job: job.id,
                eligible,
            });
        }
        turns.advance(t.turn(i));
    }
    order
}

/// The serving order of the VCs: the one being served and a min-heap of the
/// others' turns.
struct Turns {
    current: Option<usize>,
    waiting: BinaryHeap<Reverse<Turn>>,
}

impl Turns {
    fn new(tenants: &[Tenant<'_>]) -> Turns {
        let mut waiting: BinaryHeap<Reverse<Turn>> = tenants
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.turn(i).map(Reverse))
            .collect();
        let current = waiting.pop().map(|Reverse(t)| t.index);
        Turns { current, waiting }
    }

    /// Moves on after the current VC was served; `next` is its new turn, if
    /// it still takes part. It keeps going while it stays first.
    fn advance(&mut self, next: Option<Turn>) {
        self.current = match (next, self.waiting.peek_mut()) {
            (Some(mine), Some(mut top)) if top.0 < mine => {
                Some(std::mem::replace(&mut top.0, mine).index)
            }
            (Some(mine), _) => Some(mine.index),
            (None, Some(top)) => Some(PeekMut::pop(top).0.index),
            (None, None) => None,
        };
    }
}

gangway_plugin_sdk::export_fairness!(MaxMin);

#[cfg(test)]
mod tests;
