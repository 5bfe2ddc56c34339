//! The round's plan: which pending jobs start and on which type.
//!
//! Admission walks the jobs in priority order and admits each whose
//! preferred type (the first of its allowed types with room) still has
//! free GPUs for it, as a type-blind host would place them; the admitted
//! set is therefore the same whether or not speeds count. Only then are
//! the admitted jobs given types: the bottleneck assignment below, then an
//! upgrade pass, kept only if it does at least as well as the blind
//! placement, so the aware plan's minimum never falls below the blind one's.

use gangway_plugin_sdk::{GpuTypeId, PendingJob, sort};

use crate::speed::Speeds;

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
    /// The type a type-blind host would give each admitted job: its most
    /// preferred type with room.
    pub blind: Vec<GpuTypeId>,
}

/// Admits the jobs of `priority` (view positions) in turn on their first
/// allowed type with room in `free`: the plan with `types == blind`.
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
                plan.blind.push(o.gpu_type);
            }
            None => rest.push(i),
        }
    }
    plan.admitted = plan.order.len();
    plan.types = plan.blind.clone();
    plan.order.extend(rest);
    plan
}

/// The lowest and the summed normalised throughput of the admitted jobs
/// of `plan` on `types` (infinity and 0 for none).
pub(crate) fn score(plan: &Plan, speeds: &Speeds, types: &[GpuTypeId]) -> (f64, f64) {
    let (mut low, mut sum) = (f64::INFINITY, 0.0);
    for (i, t) in plan.order.iter().zip(types) {
        let r = speeds.on(*i, *t);
        low = low.min(r);
        sum += r;
    }
    (low, sum)
}

/// Gives the admitted jobs of `plan` types that raise the lowest
/// normalised throughput: the bottleneck assignment, then upgrades, kept
/// if it scores at least as well (lowest, then sum) as the blind types
/// upgraded.
pub(crate) fn aware(plan: &mut Plan, jobs: &[PendingJob], speeds: &Speeds, free: &[u32]) {
    let admitted = &plan.order[..plan.admitted];
    let mut best = plan.blind.clone();
    upgrade(&mut best, admitted, jobs, speeds, free);
    if let Some(mut b) = bottleneck(admitted, jobs, speeds, free) {
        upgrade(&mut b, admitted, jobs, speeds, free);
        if score(plan, speeds, &b) >= score(plan, speeds, &best) {
            best = b;
        }
    }
    plan.types = best;
}

/// The largest threshold (a normalised throughput some admitted job has on
/// some type) at which [`at_least`] places every admitted job, found by
/// binary search, and that placement; `None` if it places them at none.
fn bottleneck(
    admitted: &[usize],
    jobs: &[PendingJob],
    speeds: &Speeds,
    free: &[u32],
) -> Option<Vec<GpuTypeId>> {
    let mut levels: Vec<f64> = admitted
        .iter()
        .flat_map(|i| speeds.of(*i).iter().map(|o| o.normalised))
        .collect();
    // Non-negative and finite: their bits order as the numbers do.
    sort::by_key(&mut levels, |r| [r.to_bits(), 0, 0]);
    levels.dedup();
    let mut found = at_least(*levels.first()?, admitted, jobs, speeds, free)?;
    let (mut lo, mut hi) = (0, levels.len());
    // Invariant: levels[lo] places every job; no level at or above hi was found to.
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match at_least(levels[mid], admitted, jobs, speeds, free) {
            Some(a) => {
                found = a;
                lo = mid;
            }
            None => hi = mid,
        }
    }
    Some(found)
}

/// Places every admitted job on a type where its normalised throughput is
/// at least `level`, or `None` if this greedy cannot: the jobs with the
/// fewest such types first (then the largest), each on the one of its
/// types at or above `level` with room where it is slowest, keeping the
/// faster types for jobs that need them to reach `level`.
fn at_least(
    level: f64,
    admitted: &[usize],
    jobs: &[PendingJob],
    speeds: &Speeds,
    free: &[u32],
) -> Option<Vec<GpuTypeId>> {
    let mut turn: Vec<(u64, u64, usize)> = Vec::with_capacity(admitted.len());
    for (k, i) in admitted.iter().enumerate() {
        let n = speeds
            .of(*i)
            .iter()
            .filter(|o| o.normalised >= level)
            .count();
        if n == 0 {
            return None;
        }
        let gpus = jobs.get(*i).map_or(0, |j| j.gpus);
        turn.push((n as u64, u64::from(gpus), k));
    }
    sort::by_key(&mut turn, |(n, g, k)| [*n, !*g, *k as u64]);
    let mut room = free.to_vec();
    let mut out = vec![GpuTypeId(0); admitted.len()];
    for (_, gpus, k) in turn {
        let i = admitted[k];
        let gpus = gpus as u32;
        let mut pick: Option<(f64, GpuTypeId)> = None;
        for o in speeds.of(i) {
            let fits = room.get(o.gpu_type.index()).is_some_and(|r| *r >= gpus);
            if fits && o.normalised >= level && pick.is_none_or(|(r, _)| o.normalised < r) {
                pick = Some((o.normalised, o.gpu_type));
            }
        }
        let (_, t) = pick?;
        room[t.index()] -= gpus;
        out[k] = t;
    }
    Some(out)
}

/// Moves each admitted job in turn (priority order) to the type with room
/// where it runs fastest, if faster than its own: no job slows down.
fn upgrade(
    types: &mut [GpuTypeId],
    admitted: &[usize],
    jobs: &[PendingJob],
    speeds: &Speeds,
    free: &[u32],
) {
    let mut room = free.to_vec();
    let gpus = |i: usize| jobs.get(i).map_or(0, |j| j.gpus);
    for (i, t) in admitted.iter().zip(types.iter()) {
        if let Some(r) = room.get_mut(t.index()) {
            *r = r.saturating_sub(gpus(*i));
        }
    }
    for (i, t) in admitted.iter().zip(types.iter_mut()) {
        let g = gpus(*i);
        let mut best = (speeds.on(*i, *t), *t);
        for o in speeds.of(*i) {
            let fits = room.get(o.gpu_type.index()).is_some_and(|r| *r >= g);
            if fits && o.normalised > best.0 {
                best = (o.normalised, o.gpu_type);
            }
        }
        if best.1 != *t {
            if let Some(r) = room.get_mut(t.index()) {
                *r = r.saturating_add(g);
            }
            room[best.1.index()] -= g;
            *t = best.1;
        }
    }
}
