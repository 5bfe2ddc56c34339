//! Contract 2.2: the GPU type a job takes when its VC has quotas per type,
//! and its preferred type would make the VC borrow (Kueue's
//! `flavorFungibility.whenCanBorrow`).

use gangway_plugin_sdk::{
    FairnessDecision, FairnessView, GpuTypeId, JobId, TypeChoice, TypeChoices, TypesView, VcId,
};
use serde::Deserialize;

/// What a job of a VC with quotas per GPU type does when its most preferred
/// type with room would take the VC past its nominal quota of that type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WhenCanBorrow {
    /// It borrows: the host places it on its most preferred type with room
    /// (the core still holds the VC within each type's borrowing limit).
    #[default]
    Borrow,
    /// It takes the first of its types, in its order of preference, that
    /// has room and keeps the VC within its nominal quota of it; it borrows
    /// only when none does.
    TryNextType,
}

/// GPUs granted this round, by (VC, type): few, so a list.
#[derive(Default)]
struct Granted(Vec<(VcId, GpuTypeId, u32)>);

impl Granted {
    fn of(&self, vc: VcId, t: GpuTypeId) -> u32 {
        self.0
            .iter()
            .find(|(v, g, _)| *v == vc && *g == t)
            .map_or(0, |e| e.2)
    }

    fn add(&mut self, vc: VcId, t: GpuTypeId, gpus: u32) {
        match self.0.iter_mut().find(|(v, g, _)| *v == vc && *g == t) {
            Some(e) => e.2 = e.2.saturating_add(gpus),
            None => self.0.push((vc, t, gpus)),
        }
    }
}

/// The type choices of [`WhenCanBorrow::TryNextType`] for the jobs
/// `decision` makes eligible, in its order: each job of a VC with quotas
/// per type takes the first of its allowed types with room for it (the
/// types' free GPUs, less what earlier jobs took) where the VC's GPUs of
/// the type (held, plus granted this round) stay within its nominal quota
/// with it. A job no such type is left for gets no choice (the host places
/// it, borrowing), and what it will take is counted against its preferred
/// type with room.
pub(crate) fn within_nominal(
    view: &FairnessView,
    types: &TypesView,
    decision: &FairnessDecision,
) -> TypeChoices {
    let mut free: Vec<(GpuTypeId, u32)> = types
        .types
        .iter()
        .map(|t| (t.id, t.free_gpus.min(t.total_gpus)))
        .collect();
    let mut jobs: Vec<(JobId, VcId, u32)> =
        view.jobs.iter().map(|j| (j.id, j.vc, j.gpus)).collect();
    gangway_plugin_sdk::sort::by_key(&mut jobs, |(id, _, _)| [id.0, 0, 0]);
    let mut granted = Granted::default();
    let mut choices = Vec::new();
    for r in decision.order.iter().filter(|r| r.eligible) {
        let Ok(at) = jobs.binary_search_by_key(&r.job, |j| j.0) else {
            continue;
        };
        let (id, vc, gpus) = jobs[at];
        let Some(jt) = types.job(id) else { continue };
        let room = |free: &[(GpuTypeId, u32)], t: GpuTypeId| {
            free.iter().any(|(g, n)| *g == t && *n >= gpus)
        };
        let within = |t: GpuTypeId| {
            types.vc_type(vc, t).is_some_and(|u| {
                u.nominal_gpus.is_some_and(|nominal| {
                    let used = u64::from(u.held_gpus) + u64::from(granted.of(vc, t));
                    used + u64::from(gpus) <= u64::from(nominal)
                })
            })
        };
        let pick = jt
            .allowed
            .iter()
            .copied()
            .find(|t| room(&free, *t) && within(*t));
        if let Some(t) = pick {
            choices.push(TypeChoice {
                job: id,
                gpu_type: t,
            });
        }
        let Some(t) = pick.or_else(|| jt.allowed.iter().copied().find(|t| room(&free, *t))) else {
            continue;
        };
        if let Some(f) = free.iter_mut().find(|(g, _)| *g == t) {
            f.1 -= gpus;
        }
        granted.add(vc, t, gpus);
    }
    TypeChoices { choices }
}
