//! Who borrows, as a reclaim policy that sees only borrowed work
//! ([`RunningScope::Borrowed`], [`RunningScope::GiveBack`]) is shown it:
//! a VC with a pooled quota borrows when it holds more than its quota (or
//! any GPU without one); to a policy that takes the GPU types (contract
//! 2.2), a VC with quotas per type borrows each type on its own, when it
//! holds more of the type than its nominal quota of it. A policy that does
//! not take the types sees the pooled quotas (a VC's nominal quotas summed)
//! and borrowing as before.
//!
//! [`RunningScope::Borrowed`]: gangway_plugin_sdk::RunningScope::Borrowed
//! [`RunningScope::GiveBack`]: gangway_plugin_sdk::RunningScope::GiveBack

use gangway_plugin_sdk::{GpuTypeId, VcId, VcTypeUsage, VcUsage};

/// Who borrows: per VC, and per (VC, type) for VCs with quotas per type
/// when the policy takes the types.
pub(super) struct Borrowing {
    /// Whether each VC (by id) borrows anything.
    vcs: Vec<bool>,
    /// Each (VC, type)'s use, by VC then type, for a policy that takes the
    /// types (empty otherwise: every VC pooled).
    per_type: Vec<VcTypeUsage>,
    /// The number of GPU types (the stride of `per_type`).
    types: usize,
}

/// Whether a VC borrows on its pooled quota: holds more GPUs than its
/// quota, or any without one.
fn borrows(vc: &VcUsage) -> bool {
    match vc.quota_gpus {
        Some(q) => vc.held_gpus > q,
        None => vc.held_gpus > 0,
    }
}

impl Borrowing {
    /// Borrowing on the VCs' pooled quotas.
    pub(super) fn pooled(vcs: &[VcUsage]) -> Borrowing {
        Borrowing {
            vcs: vcs.iter().map(borrows).collect(),
            per_type: Vec::new(),
            types: 0,
        }
    }

    /// Borrowing per type for VCs with quotas per type (`per_type`, every
    /// VC's use of each of `types` types, by VC then type), pooled for the
    /// others.
    pub(super) fn typed(vcs: &[VcUsage], per_type: Vec<VcTypeUsage>, types: usize) -> Borrowing {
        let mut b = Borrowing {
            vcs: Vec::with_capacity(vcs.len()),
            per_type,
            types,
        };
        for v in vcs {
            let borrowing = match b.types_of(v.id) {
                Some(uses) => uses
                    .iter()
                    .any(|u| u.held_gpus > u.nominal_gpus.unwrap_or(0)),
                None => borrows(v),
            };
            b.vcs.push(borrowing);
        }
        b
    }

    /// VC `vc`'s use of each type, if it has quotas per type and the
    /// policy takes the types.
    fn types_of(&self, vc: VcId) -> Option<&[VcTypeUsage]> {
        let at = vc.index().checked_mul(self.types)?;
        let uses = self.per_type.get(at..at.checked_add(self.types)?)?;
        uses.first()
            .is_some_and(|u| u.nominal_gpus.is_some())
            .then_some(uses)
    }

    /// Whether borrowing is counted per type for the VCs with quotas per
    /// type (the policy takes the types).
    pub(super) fn per_type(&self) -> bool {
        !self.per_type.is_empty()
    }

    /// The number of GPU types counted per type (0 when pooled only).
    pub(super) fn types(&self) -> usize {
        self.types
    }

    /// Whether any VC borrows.
    pub(super) fn any(&self) -> bool {
        self.vcs.contains(&true)
    }

    /// Whether VC `vc` borrows anything.
    pub(super) fn vc(&self, vc: VcId) -> bool {
        self.vcs.get(vc.index()).copied().unwrap_or(false)
    }

    /// Whether VC `vc` borrows per type: it has quotas per type and the
    /// policy takes the types.
    pub(super) fn has_type_quotas(&self, vc: VcId) -> bool {
        self.types_of(vc).is_some()
    }

    /// VC `vc`'s use of type `t`, if it has quotas per type (and the
    /// policy takes the types): what a give-back of its work on `t` counts.
    pub(super) fn type_use(&self, vc: VcId, t: GpuTypeId) -> Option<&VcTypeUsage> {
        self.types_of(vc)?.get(t.index())
    }

    /// Whether a job of VC `vc` running on type `t` is borrowed work: its
    /// VC borrows type `t` (quotas per type), or borrows (pooled).
    pub(super) fn runs_borrowed(&self, vc: VcId, t: GpuTypeId) -> bool {
        match self.type_use(vc, t) {
            Some(u) => u.held_gpus > u.nominal_gpus.unwrap_or(0),
            None => self.vc(vc),
        }
    }

    /// Whether VC `v`'s quota covers a waiting job of `gpus` GPUs that may
    /// run on `allowed` (every type if empty): with quotas per type, its
    /// nominal quota of one of them holds the job beside what it holds of
    /// it; pooled, its quota holds it beside all it holds.
    pub(super) fn covers(&self, v: &VcUsage, gpus: u32, allowed: &[GpuTypeId]) -> bool {
        let fits = |held: u32, quota: u32| {
            u64::from(held).saturating_add(u64::from(gpus)) <= u64::from(quota)
        };
        match self.types_of(v.id) {
            Some(uses) => uses.iter().any(|u| {
                (allowed.is_empty() || allowed.contains(&u.gpu_type))
                    && fits(u.held_gpus, u.nominal_gpus.unwrap_or(0))
            }),
            None => v.quota_gpus.is_some_and(|q| fits(v.held_gpus, q)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vc(id: u32, quota: u32, held: u32) -> VcUsage {
        VcUsage {
            id: VcId(id),
            quota_gpus: Some(quota),
            held_gpus: held,
            ..VcUsage::default()
        }
    }

    fn uses(vc: u32, per_type: &[(u32, Option<u32>)]) -> Vec<VcTypeUsage> {
        per_type
            .iter()
            .enumerate()
            .map(|(t, (held, nominal))| VcTypeUsage {
                vc: VcId(vc),
                gpu_type: GpuTypeId(u8::try_from(t).unwrap()),
                held_gpus: *held,
                nominal_gpus: *nominal,
                borrowing_limit_gpus: None,
            })
            .collect()
    }

    #[test]
    fn a_vc_over_one_types_quota_borrows_it_even_if_under_in_sum() {
        // VC 0: 12 of type 0 against 8, 4 of type 1 against 8 (16 of 16
        // pooled). VC 1: pooled, 4 of 8.
        let vcs = [vc(0, 16, 16), vc(1, 8, 4)];
        let mut per_type = uses(0, &[(12, Some(8)), (4, Some(8))]);
        per_type.extend(uses(1, &[(4, None), (0, None)]));
        let pooled = Borrowing::pooled(&vcs);
        assert!(!pooled.any());
        let typed = Borrowing::typed(&vcs, per_type, 2);
        assert!(typed.any() && typed.vc(VcId(0)) && !typed.vc(VcId(1)));
        assert!(typed.runs_borrowed(VcId(0), GpuTypeId(0)));
        assert!(!typed.runs_borrowed(VcId(0), GpuTypeId(1)));
        // A 4-GPU job fits VC 0's type-1 quota, not its type-0 quota.
        let t0 = [GpuTypeId(0)];
        assert!(typed.covers(&vcs[0], 4, &[]));
        assert!(!typed.covers(&vcs[0], 4, &t0));
        assert!(!pooled.covers(&vcs[0], 4, &[]));
        // VC 1 is pooled either way.
        assert!(typed.covers(&vcs[1], 4, &t0) && !typed.covers(&vcs[1], 5, &t0));
    }
}
