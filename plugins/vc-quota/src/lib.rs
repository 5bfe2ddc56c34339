//! `vc-quota`: Philly/YARN-style virtual clusters with GPU quotas (fairness slot).
//!
//! Each virtual cluster (VC, a tenant) has a quota in GPUs. Philly gives each
//! production group a VC and a quota and queues jobs per VC (PHILLY.md §3.3);
//! a VC is a quota, not a physical partition. A round is decided in two
//! passes over per-VC FIFO queues:
//!
//! 1. **Within quota.** Repeatedly take the VC using the smallest fraction of
//!    its quota (the most under-served; ties go to the VC whose oldest job is
//!    older) and look at its oldest pending job. If the VC's GPUs in use
//!    (held now plus granted earlier this round) stay within the quota with
//!    it, the job is eligible and counted; otherwise the VC is done for this
//!    pass, and its later jobs cannot overtake that job (FIFO within a VC). A
//!    VC holding nothing may start one job larger than its whole quota, so
//!    such a job is not starved forever.
//! 2. **Lending.** The remaining jobs follow, again most under-served VC
//!    first. With `lend = true` (work-conserving) a job is eligible while the
//!    GPUs free now, less those granted in pass 1, still cover it; otherwise
//!    it is ineligible and waits with *fair-share delay*.
//!
//! So the oldest job of a VC under its quota is ordered ahead of every job of
//! a VC at or over its quota: it is never made to wait for fair share while an
//! over-quota VC is served ahead of it. Each step costs O(log VCs), so a round
//! is O(jobs x log VCs).
//!
//! # Quotas
//!
//! For each VC, the first that applies: the `quota` table of the configuration
//! (by VC index), the quota the host set ([`VcUsage::quota_gpus`]), or the
//! `unquoted` rule. With `unquoted = "demand-share"` the GPUs not covered by
//! explicit quotas are split among the unquoted VCs in proportion to their
//! current demand (GPUs held plus GPUs asked for by pending jobs), rounded
//! down; with `"unlimited"` such VCs are never limited. A quota of 0 means a
//! VC only ever runs on lent GPUs. [`VcQuota::effective_quotas`] reports what
//! a round used.
//!
//! # Options (TOML)
//!
//! | key | type | default | meaning |
//! |---|---|---|---|
//! | `lend` | bool | `true` | lend idle GPUs to VCs at or over quota (work-conserving) |
//! | `unquoted` | `"demand-share"` or `"unlimited"` | `"demand-share"` | quota of a VC with none set |
//! | `[quota]` | table of VC index = GPUs | empty | overrides the host's quotas |
//!
//! ```
//! use gangway_plugin_sdk::*;
//! use gangway_policy_vc_quota::VcQuota;
//!
//! let vc = |id, quota, held_gpus| VcUsage {
//!     id: VcId(id), quota_gpus: Some(quota), weight: 1, held_gpus, pending_gpus: 8, attained_gpu_s: 0,
//! };
//! let job = |id, vc, submitted_s| PendingJob {
//!     id: JobId(id), vc: VcId(vc), user: 0, gpus: 8, submitted_s, waiting_s: 0,
//!     attempts: 0, attained_gpu_s: 0, min_level: Level(2),
//! };
//! let view = RoundView {
//!     now_s: 100,
//!     cluster: ClusterSummary { total_gpus: 64, free_gpus: 8, server_level: Level(2), levels: vec![] },
//!     // VC 0 already uses its whole quota; VC 1 uses none of its own.
//!     vcs: vec![vc(0, 32, 32), vc(1, 32, 0)],
//!     jobs: vec![job(1, 0, 10), job(2, 1, 20)],
//! };
//! let policy = VcQuota::from_config(b"lend = false").unwrap();
//! let d = policy.order(&view);
//! assert_eq!(d.order, vec![
//!     Ranked { job: JobId(2), eligible: true },  // under quota: first
//!     Ranked { job: JobId(1), eligible: false }, // over quota, no lending: fair-share delay
//! ]);
//! ```

use std::collections::BTreeMap;

use gangway_plugin_sdk::{
    ConfigError, Configure, FairnessDecision, FairnessPolicy, RoundView, VcId, VcUsage, config_text,
};
use serde::{Deserialize, Deserializer};

mod two_pass;
use two_pass::{VcLimit, order_by_quotas};

/// How [`VcQuota`] sizes the quota of a VC that has neither a configured nor a
/// host-set quota.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Unquoted {
    /// A share of the GPUs not covered by explicit quotas, in proportion to
    /// the VC's demand (held plus pending GPUs), rounded down.
    #[default]
    DemandShare,
    /// No limit.
    Unlimited,
}

/// Configuration of [`VcQuota`], parsed from TOML by [`Configure::from_config`].
///
/// ```
/// use gangway_plugin_sdk::Configure;
/// use gangway_policy_vc_quota::{Unquoted, VcQuota};
///
/// let p = VcQuota::from_config(b"lend = false\nunquoted = \"unlimited\"\n[quota]\n0 = 64\n3 = 128").unwrap();
/// assert!(!p.config().lend);
/// assert_eq!(p.config().unquoted, Unquoted::Unlimited);
/// assert_eq!(p.config().quota.get(&3), Some(&128));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VcQuotaConfig {
    /// Lend idle GPUs to VCs at or over their quota (work-conserving).
    /// Default `true`.
    pub lend: bool,
    /// Quotas in GPUs by VC index, overriding the host's. Default: empty.
    #[serde(deserialize_with = "by_vc_index")]
    pub quota: BTreeMap<u32, u32>,
    /// The quota of a VC with none configured or set. Default
    /// [`Unquoted::DemandShare`].
    pub unquoted: Unquoted,
}

impl Default for VcQuotaConfig {
    fn default() -> Self {
        VcQuotaConfig {
            lend: true,
            quota: BTreeMap::new(),
            unquoted: Unquoted::DemandShare,
        }
    }
}

fn by_vc_index<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<u32, u32>, D::Error> {
    let raw = BTreeMap::<String, u32>::deserialize(d)?;
    raw.into_iter()
        .map(|(k, v)| match k.parse::<u32>() {
            Ok(i) => Ok((i, v)),
            Err(_) => Err(serde::de::Error::custom(format!(
                "quota key `{k}` is not a VC index (write e.g. `0 = 64`)"
            ))),
        })
        .collect()
}

/// Where a VC's quota came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuotaSource {
    /// The policy's `quota` table.
    Config,
    /// The host ([`VcUsage::quota_gpus`]).
    Host,
    /// Its share of demand (`unquoted = "demand-share"`).
    DemandShare,
    /// None: `unquoted = "unlimited"`.
    Unlimited,
}

/// The quota one VC had in a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EffectiveQuota {
    /// The VC.
    pub vc: VcId,
    /// Its quota in GPUs; `None` means unlimited.
    pub quota_gpus: Option<u32>,
    /// Where it came from.
    pub source: QuotaSource,
}

/// Virtual clusters with quotas: under-quota VCs first, most under-served
/// first, FIFO within a VC, optional lending. See the [crate docs](crate).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VcQuota {
    config: VcQuotaConfig,
}

impl VcQuota {
    /// Builds the policy (every configuration is valid).
    pub fn new(config: VcQuotaConfig) -> VcQuota {
        VcQuota { config }
    }

    /// The configuration in use.
    pub fn config(&self) -> &VcQuotaConfig {
        &self.config
    }

    /// The quota of every VC of `view` (those listed in `view.vcs` and any
    /// other a pending job names), by VC id.
    pub fn effective_quotas(&self, view: &RoundView) -> Vec<EffectiveQuota> {
        let mut demand: BTreeMap<VcId, u64> = view
            .vcs
            .iter()
            .map(|v| (v.id, u64::from(v.held_gpus)))
            .collect();
        for j in &view.jobs {
            *demand.entry(j.vc).or_insert(0) += u64::from(j.gpus);
        }
        let mut out: Vec<EffectiveQuota> = demand
            .keys()
            .map(|&vc| {
                let (quota_gpus, source) = match self.config.quota.get(&vc.0) {
                    Some(q) => (Some(*q), QuotaSource::Config),
                    None => match usage(view, vc).and_then(|v| v.quota_gpus) {
                        Some(q) => (Some(q), QuotaSource::Host),
                        None => match self.config.unquoted {
                            Unquoted::DemandShare => (None, QuotaSource::DemandShare),
                            Unquoted::Unlimited => (None, QuotaSource::Unlimited),
                        },
                    },
                };
                EffectiveQuota {
                    vc,
                    quota_gpus,
                    source,
                }
            })
            .collect();
        let explicit: u64 = out.iter().filter_map(|e| e.quota_gpus.map(u64::from)).sum();
        let pool = u64::from(view.cluster.total_gpus).saturating_sub(explicit);
        let shared: u64 = out
            .iter()
            .filter(|e| e.source == QuotaSource::DemandShare)
            .map(|e| demand.get(&e.vc).copied().unwrap_or(0))
            .sum();
        for e in out
            .iter_mut()
            .filter(|e| e.source == QuotaSource::DemandShare)
        {
            let d = demand.get(&e.vc).copied().unwrap_or(0);
            let share = if shared == 0 {
                0
            } else {
                u128::from(pool) * u128::from(d) / u128::from(shared)
            };
            e.quota_gpus = Some(u32::try_from(share).unwrap_or(u32::MAX));
        }
        out
    }
}

impl Configure for VcQuota {
    fn from_config(config: &[u8]) -> Result<Self, ConfigError> {
        let text = config_text(config)?;
        let config: VcQuotaConfig =
            toml::from_str(text).map_err(|e| ConfigError(format!("vc-quota: {e}")))?;
        Ok(VcQuota::new(config))
    }
}

impl FairnessPolicy for VcQuota {
    fn order(&self, view: &RoundView) -> FairnessDecision {
        let limits: Vec<VcLimit> = self
            .effective_quotas(view)
            .iter()
            .map(|q| VcLimit {
                vc: q.vc,
                quota_gpus: q.quota_gpus.map(u64::from),
                held_gpus: usage(view, q.vc).map_or(0, |v| u64::from(v.held_gpus)),
            })
            .collect();
        order_by_quotas(view, &limits, self.config.lend)
    }
}

/// The usage record of `vc` (normally at index `vc` of `view.vcs`).
fn usage(view: &RoundView, vc: VcId) -> Option<&VcUsage> {
    match view.vcs.get(vc.0 as usize) {
        Some(v) if v.id == vc => Some(v),
        _ => view.vcs.iter().find(|v| v.id == vc),
    }
}

gangway_plugin_sdk::export_fairness!(VcQuota);

#[cfg(test)]
mod tests;
