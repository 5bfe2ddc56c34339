//! The round's plan: which pending jobs start and on which type.
//!
//! Admission walks the jobs in priority order and admits each for which
//! one of its allowed types still has free GPUs. A type-blind plan puts
//! each on its most preferred type with room, as a type-blind host would.
//! The aware plan then hands the free GPUs to the admitted jobs by
//! comparative advantage: largest advantage first, each on its fastest
//! allowed type with room (see [`Targets`]), so of two jobs starting
//! together the one a V100 speeds up most gets the V100. If that leaves
//! an admitted job without room (a job allowed fewer types, or larger
//! than what is left of its types), admission's own placement is kept.

use gangway_plugin_sdk::{GpuTypeId, PendingJob, sort};

use crate::speed::{Ranks, Speeds};

/// A round's plan over the view's jobs (by position in the view).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// View positions, most urgent first: the admitted jobs in priority
    /// order, then the others in priority order.
    pub order: Vec<usize>,
    /// How many jobs at the front of `order` are admitted.
    pub admitted: usize,
    /// The type of each admitted job (as `order[..admitted]`).
    pub types: Vec<GpuTypeId>,
}

/// Admits the jobs of `priority` (view positions) in turn on their first
/// allowed type with room in `free`, as a type-blind host would.
#[inline(never)]
pub(crate) fn admit(
    priority: &[usize],
    jobs: &[PendingJob],
    speeds: &Speeds,
    free: &[u32],
) -> Plan {
    let mut room = free.to_vec();
    let mut plan = Plan::default();
    let mut rest = Vec::new();
    for &i in priority {
        let gpus = jobs.get(i).map_or(u32::MAX, |j| j.gpus);
        let fit = speeds
            .of(i)
            .iter()
            .find(|o| room.get(o.gpu_type.index()).is_some_and(|r| *r >= gpus));
        match fit {
            Some(o) => {
                room[o.gpu_type.index()] -= gpus;
                plan.order.push(i);
                plan.types.push(o.gpu_type);
            }
            None => rest.push(i),
        }
    }
    plan.admitted = plan.order.len();
    plan.order.extend(rest);
    plan
}

/// The summed normalised throughput of the admitted jobs of `plan` on
/// `types`.
#[inline(never)]
pub(crate) fn throughput(plan: &Plan, speeds: &Speeds, types: &[GpuTypeId]) -> f64 {
    plan.order
        .iter()
        .zip(types)
        .map(|(i, t)| speeds.on(*i, *t))
        .sum()
}

/// Gives the admitted jobs of `plan` the free GPUs by comparative
/// advantage, largest first, each on its fastest allowed type with room;
/// keeps admission's types if some job would find no room, or if that
/// would not run the jobs at least as fast in sum.
#[inline(never)]
pub(crate) fn by_advantage(
    plan: &mut Plan,
    jobs: &[PendingJob],
    speeds: &Speeds,
    ranks: &Ranks,
    bands: &[u64],
    free: &[u32],
) {
    let admitted = &plan.order[..plan.admitted];
    let mut turn: Vec<usize> = (0..admitted.len()).collect();
    sort::by_key(&mut turn, |k| {
        let i = admitted[*k];
        let a = ranks.advantage_of(i);
        [!bands.get(i).copied().unwrap_or(0), !a.to_bits(), *k as u64]
    });
    let mut room = free.to_vec();
    let mut types = plan.types.clone();
    for k in turn {
        let i = admitted[k];
        let gpus = jobs.get(i).map_or(u32::MAX, |j| j.gpus);
        // Fastest for it first; its preference among equals.
        let best = speeds
            .of(i)
            .iter()
            .enumerate()
            .filter(|(_, o)| room.get(o.gpu_type.index()).is_some_and(|r| *r >= gpus))
            .min_by_key(|(n, o)| (!o.normalised.to_bits(), *n))
            .map(|(_, o)| o.gpu_type);
        let Some(t) = best else { return };
        room[t.index()] -= gpus;
        types[k] = t;
    }
    if throughput(plan, speeds, &types) >= throughput(plan, speeds, &plan.types) {
        plan.types = types;
    }
}
