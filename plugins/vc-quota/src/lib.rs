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
//! (by VC index), the quota the host set ([`VcUsage::quota_gpus`](gangway_plugin_sdk::VcUsage::quota_gpus)), or the
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
//! | `when_can_borrow` | `"borrow"` or `"try-next-type"` | `"borrow"` | with quotas per GPU type: a job whose preferred type would make its VC borrow borrows, or first takes another of its types within the VC's nominal quota ([`WhenCanBorrow`]) |
//!
//! ```
//! use gangway_plugin_sdk::*;
//! use gangway_policy_vc_quota::VcQuota;
//!
//! let vc = |id, quota, held_gpus| VcUsage {
//!     id: VcId(id), quota_gpus: Some(quota), weight: 1, held_gpus, pending_gpus: 8, attained_gpu_s: 0, pending_jobs: 1,
//! };
//! let job = |id, vc, submitted_s| PendingJob {
//!     id: JobId(id), vc: VcId(vc), user: 0, gpus: 8, submitted_s, waiting_s: 0,
//!     attempts: 0, attained_gpu_s: 0, min_level: Level(2), min_servers: 1,
//! };
//! let view = FairnessView {
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
    ConfigError, ConfigForm, Configure, FairnessDecision, FairnessPolicy, FairnessView, QueueOrder,
    TypeChoices, TypesView, VcId, read_options,
};
use serde::{Deserialize, Deserializer};

mod two_pass;
mod typed;
use two_pass::{Cover, VcQueue, usage_of, with_queues};
pub use typed::WhenCanBorrow;

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
    /// With quotas per GPU type (contract 2.2): whether a job borrows on
    /// its preferred type or first tries its other types within the VC's
    /// nominal quotas. Default [`WhenCanBorrow::Borrow`].
    pub when_can_borrow: WhenCanBorrow,
}

impl Default for VcQuotaConfig {
    fn default() -> Self {
        VcQuotaConfig {
            lend: true,
            quota: BTreeMap::new(),
            unquoted: Unquoted::DemandShare,
            when_can_borrow: WhenCanBorrow::Borrow,
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
    /// The host ([`VcUsage::quota_gpus`](gangway_plugin_sdk::VcUsage::quota_gpus)).
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
    pub fn effective_quotas(&self, view: &FairnessView) -> Vec<EffectiveQuota> {
        with_queues(view, Cover::All, |queues| {
            let mut out = Vec::with_capacity(queues.vcs().len());
            self.each_quota(view, queues.vcs_mut(), true, |q, quota_gpus, source| {
                out.push(EffectiveQuota {
                    vc: q.id,
                    quota_gpus,
                    source,
                })
            });
            out
        })
    }

    /// The two passes over queues holding the VCs `cover` says.
    fn order_covering(&self, view: &FairnessView, cover: Cover) -> FairnessDecision {
        self.order_covering_with(view, cover, true)
    }

    /// [`VcQuota::order_covering`], with or without the queues' shortcut
    /// for a second pass in which no load can change.
    fn order_covering_with(
        &self,
        view: &FairnessView,
        cover: Cover,
        shortcut: bool,
    ) -> FairnessDecision {
        with_queues(view, cover, |queues| {
            // VCs without pending jobs never get a turn: no quota needed.
            self.each_quota(view, queues.vcs_mut(), false, |q, quota, _| {
                q.quota_gpus = quota.map(u64::from);
            });
            queues.order_with(self.config.lend, shortcut)
        })
    }

    /// Whether some VC of `view` may get a demand share (it has neither a
    /// configured nor a host-set quota, and `unquoted` is demand-share).
    fn may_share(&self, view: &FairnessView) -> bool {
        let unquoted =
            |vc: VcId, host: Option<u32>| host.is_none() && !self.config.quota.contains_key(&vc.0);
        self.config.unquoted == Unquoted::DemandShare
            && (view.vcs.iter().any(|v| unquoted(v.id, v.quota_gpus))
                || view
                    .jobs
                    .iter()
                    .any(|j| unquoted(j.vc, usage_of(view, j.vc).and_then(|v| v.quota_gpus))))
    }

    /// A VC's configured or host-set quota, or which rule sizes it.
    fn source(&self, view: &FairnessView, q: &VcQueue) -> (Option<u32>, QuotaSource) {
        if let Some(&n) = self.config.quota.get(&q.id.0) {
            return (Some(n), QuotaSource::Config);
        }
        if let Some(n) = q.usage(view).and_then(|u| u.quota_gpus) {
            return (Some(n), QuotaSource::Host);
        }
        match self.config.unquoted {
            Unquoted::DemandShare => (None, QuotaSource::DemandShare),
            Unquoted::Unlimited => (None, QuotaSource::Unlimited),
        }
    }

    /// Calls `each` with every VC (or, unless `all`, every VC with pending
    /// jobs), its quota and the quota's source, in id order. Demand shares
    /// split the GPUs not covered by explicit quotas in proportion to demand
    /// (GPUs held plus asked for), rounded down.
    fn each_quota(
        &self,
        view: &FairnessView,
        vcs: &mut [VcQueue],
        all: bool,
        mut each: impl FnMut(&mut VcQueue, Option<u32>, QuotaSource),
    ) {
        let demand = |q: &VcQueue| q.held_gpus + q.asked_gpus;
        let (mut explicit, mut shared) = (0u64, 0u64);
        for q in vcs.iter() {
            match self.source(view, q) {
                (Some(n), _) => explicit += u64::from(n),
                (None, QuotaSource::DemandShare) => shared += demand(q),
                (None, _) => {}
            }
        }
        let pool = u64::from(view.cluster.total_gpus).saturating_sub(explicit);
        for q in vcs.iter_mut().filter(|q| all || q.has_jobs()) {
            let (quota, source) = match self.source(view, q) {
                (None, QuotaSource::DemandShare) => {
                    let share = if shared == 0 {
                        0
                    } else {
                        u128::from(pool) * u128::from(demand(q)) / u128::from(shared)
                    };
                    (
                        Some(u32::try_from(share).unwrap_or(u32::MAX)),
                        QuotaSource::DemandShare,
                    )
                }
                other => other,
            };
            each(q, quota, source);
        }
    }
}

impl Configure for VcQuota {
    // The host hands it its TOML as a tree: no parser in its module.
    const CONFIG_FORM: ConfigForm = ConfigForm::Tree;

    fn from_config(config: &[u8]) -> Result<Self, ConfigError> {
        let config: VcQuotaConfig = read_options("vc-quota", config)?;
        Ok(VcQuota::new(config))
    }
}

impl FairnessPolicy for VcQuota {
    /// FIFO within each VC: each VC's oldest jobs are all it needs to see
    /// (its demand comes from the host's per-VC totals).
    fn queue_order(&self) -> QueueOrder {
        QueueOrder::Submit
    }

    fn order(&self, view: &FairnessView) -> FairnessDecision {
        // Demand shares split what explicit quotas leave over all VCs; only
        // then must every VC be looked at.
        let cover = if self.may_share(view) {
            Cover::All
        } else {
            Cover::WithJobs
        };
        self.order_covering(view, cover)
    }

    const GPU_TYPES: bool = true;

    /// The same order; with `when_can_borrow = "try-next-type"`, each
    /// eligible job of a VC with quotas per type on the first of its types
    /// that keeps the VC within its nominal quota (see [`WhenCanBorrow`]).
    fn order_typed(
        &self,
        view: &FairnessView,
        types: &TypesView,
    ) -> (FairnessDecision, TypeChoices) {
        let decision = self.order(view);
        let choices = match self.config.when_can_borrow {
            WhenCanBorrow::Borrow => TypeChoices::default(),
            WhenCanBorrow::TryNextType => typed::within_nominal(view, types, &decision),
        };
        (decision, choices)
    }
}

gangway_plugin_sdk::export!(Fairness, VcQuota);

#[cfg(test)]
mod tests;
