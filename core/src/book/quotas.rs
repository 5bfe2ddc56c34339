//! Quotas per GPU type, in Kueue's shape: a virtual cluster's nominal
//! GPUs of each type and how many more of that type it may borrow while
//! others leave them idle. The core enforces the cap (nominal plus
//! borrowing limit) whenever it starts a job, whatever the policies say:
//! a job starts only on a type its VC may take its gang more of. Which
//! job goes first within the caps, and what is given back, stays the
//! policies' to say.

use std::collections::BTreeMap;

use gangway_plugin_sdk::{GpuTypeId, JobId, VcId};
use serde::{Deserialize, Serialize};

use super::JobBook;
use crate::reach::{Reach, Where};

/// A virtual cluster's quota of one GPU type.
///
/// ```
/// use gangway_core::TypeQuota;
/// assert_eq!(TypeQuota::new(8, Some(4)).cap(), Some(12));
/// assert_eq!(TypeQuota::new(8, None).cap(), None);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TypeQuota {
    /// GPUs of the type the VC is entitled to (its nominal quota).
    pub nominal_gpus: u32,
    /// GPUs of the type it may hold beyond `nominal_gpus` (borrowed from
    /// what other VCs leave idle); `None`: no limit.
    pub borrowing_limit_gpus: Option<u32>,
}

impl TypeQuota {
    /// A quota of `nominal_gpus` with `borrowing_limit_gpus` more at most.
    pub const fn new(nominal_gpus: u32, borrowing_limit_gpus: Option<u32>) -> TypeQuota {
        TypeQuota {
            nominal_gpus,
            borrowing_limit_gpus,
        }
    }

    /// The most GPUs of the type the VC may hold (`None`: no bound).
    pub fn cap(&self) -> Option<u32> {
        self.borrowing_limit_gpus
            .map(|b| self.nominal_gpus.saturating_add(b))
    }
}

/// A VC's quotas by GPU type; a type it does not name it may not use.
pub type TypeQuotas = BTreeMap<GpuTypeId, TypeQuota>;

/// Where a job may start now: where it may run, or that without the GPU
/// types its VC may take no more of.
pub(crate) enum StartReach<'a> {
    /// Where it may run, all of it.
    All(Where<'a>),
    /// Its allowed types its VC's caps leave.
    Capped(Reach),
}

impl StartReach<'_> {
    /// Where a search for it looks.
    pub(crate) fn at(&self) -> Where<'_> {
        match self {
            StartReach::All(at) => *at,
            StartReach::Capped(reach) => Where::Types(reach),
        }
    }
}

impl JobBook {
    /// Gives `vc` quotas per GPU type (empty: none, its pooled quota alone).
    pub(crate) fn set_type_quotas(&mut self, vc: VcId, quotas: TypeQuotas) {
        if quotas.is_empty() {
            self.type_quotas.remove(&vc);
        } else {
            self.type_quotas.insert(vc, quotas);
        }
    }

    /// Whether `vc` may take `gpus` more GPUs of type `t`: it has no
    /// quotas per type, or names `t` and stays within its cap.
    pub(crate) fn may_take(&self, vc: VcId, t: GpuTypeId, gpus: u32) -> bool {
        let Some(quotas) = self.type_quotas.get(&vc) else {
            return true;
        };
        quotas.get(&t).is_some_and(|q| {
            q.cap().is_none_or(|cap| {
                let held = self.records.running_index().held_of_type(vc, t);
                u64::from(held) + u64::from(gpus) <= u64::from(cap)
            })
        })
    }

    /// Where job `id` may start a gang of `gpus` now: its reach without
    /// the types its VC's caps leave no room on; `None` if none is left.
    pub(crate) fn start_reach(&self, id: &JobId, gpus: u32) -> Option<StartReach<'_>> {
        let at = self.reach_of(id);
        if self.type_quotas.is_empty() {
            return Some(StartReach::All(at));
        }
        let Some(vc) = self.records.get(id).map(|j| j.spec.vc) else {
            return Some(StartReach::All(at));
        };
        if !self.type_quotas.contains_key(&vc) {
            return Some(StartReach::All(at));
        }
        match at {
            Where::Types(reach) => {
                let kept = reach.keeping(|t| self.may_take(vc, t, gpus));
                match kept.sets.len() {
                    0 => None,
                    n if n == reach.sets.len() => Some(StartReach::All(at)),
                    _ => Some(StartReach::Capped(kept)),
                }
            }
            // One GPU type: every server's.
            _ => {
                let only = self
                    .topology
                    .servers()
                    .first()
                    .map(|s| s.gpu_type)
                    .unwrap_or_default();
                self.may_take(vc, only, gpus).then_some(StartReach::All(at))
            }
        }
    }
}
