//! The first implementation of [`QuotaReclaim::reclaim`] (every running
//! job sorted, every VC's candidates filtered for each waiting job), kept
//! as the oracle the faster one must agree with.

use rustc_hash::{FxHashMap, FxHashSet};

use gangway_plugin_sdk::room::Room;
use gangway_plugin_sdk::{
    JobId, ReclaimDecision, ReclaimView, RunningJob, SpreadLimit, VcId, WaitReason, WaitingJob,
};

use crate::QuotaReclaim;

/// What the first implementation decides for `view`.
pub(crate) fn reclaim_reference(policy: &QuotaReclaim, view: &ReclaimView) -> ReclaimDecision {
    let mut held: FxHashMap<VcId, u64> = view
        .vcs
        .iter()
        .map(|v| (v.id, u64::from(v.held_gpus)))
        .collect();
    // Nothing is borrowed (every VC within its quota, none without one
    // holding GPUs): nothing is reclaimable, so stop here (the common
    // case under binding quotas; a round then costs O(VCs) here).
    let borrowing = view.vcs.iter().any(|v| match v.quota_gpus {
        Some(q) => v.held_gpus > q,
        None => v.held_gpus > 0,
    });
    if !borrowing {
        return ReclaimDecision::default();
    }
    let entitled = entitled(view, &held);
    if entitled.is_empty() {
        return ReclaimDecision::default();
    }
    // Newest first: they lose the least work.
    let mut running: Vec<&RunningJob> = view
        .running
        .iter()
        .filter(|j| view.now_s.saturating_sub(j.started_s) >= policy.config.min_run_s)
        .collect();
    // (Ids are unique, so the order is total and an unstable sort gives it.)
    running.sort_unstable_by_key(|j| (std::cmp::Reverse(j.started_s), std::cmp::Reverse(j.id)));
    let mut room = Room::new(&view.servers, view.cluster.server_level);
    let mut taken: FxHashSet<JobId> = FxHashSet::default();
    let mut d = ReclaimDecision::default();
    let mut all = reclaimable(view, &running, &held, &taken);
    // (VC, limit, GPUs) of gangs that found no room: a gang of that VC
    // and limit needing as many GPUs or more finds none either, until a
    // stop frees GPUs (the model only loses free GPUs otherwise).
    let mut no_room: Vec<(VcId, SpreadLimit, u32)> = Vec::new();
    for w in entitled.into_iter().take(64) {
        if d.start.len() >= policy.config.max_starts as usize || all.is_empty() {
            break;
        }
        let Some(candidates) = candidates_for(view, w, &held, &no_room, &all) else {
            continue;
        };
        match room.make_room(w.job.gpus, w.limit, &candidates) {
            Some(stop) if stop.is_empty() => {}
            Some(stop) => {
                for id in &stop {
                    if let Some(j) = view.running.iter().find(|j| j.id == *id) {
                        let h = held.entry(j.vc).or_insert(0);
                        *h = h.saturating_sub(u64::from(j.gpus));
                    }
                }
                *held.entry(w.job.vc).or_insert(0) += u64::from(w.job.gpus);
                taken.extend(stop.iter().copied());
                d.stop.extend(stop);
                d.start.push(w.job.id);
                all = reclaimable(view, &running, &held, &taken);
                no_room.clear();
            }
            None => no_room.push((w.job.vc, w.limit, w.job.gpus)),
        }
    }
    d
}

/// VC `vc`'s quota in `view`.
fn quota(view: &ReclaimView, vc: VcId) -> Option<u32> {
    view.vcs.get(vc.0 as usize).and_then(|v| v.quota_gpus)
}

/// VC `vc`'s (used, quota), compared as fractions by cross-multiplying.
fn share(view: &ReclaimView, vc: VcId, held: &FxHashMap<VcId, u64>) -> (u64, u64) {
    (
        held.get(&vc).copied().unwrap_or(0),
        u64::from(quota(view, vc).unwrap_or(0)).max(1),
    )
}

/// The waiting jobs entitled to GPUs taken back: waiting for GPUs and
/// within their VC's quota with the job, the VCs least served first, then
/// by submit time and id.
fn entitled<'v>(view: &'v ReclaimView, held: &FxHashMap<VcId, u64>) -> Vec<&'v WaitingJob> {
    let mut entitled: Vec<&WaitingJob> = view
        .waiting
        .iter()
        .filter(|w| {
            matches!(
                w.reason,
                WaitReason::NoCapacity | WaitReason::Fragmentation | WaitReason::Reserved
            ) && quota(view, w.job.vc).is_some_and(|q| {
                // Within its quota with the job. (A VC's holding only
                // grows below its quota this round, and one over it is
                // never taken below it, so this cannot change later.)
                held.get(&w.job.vc).copied().unwrap_or(0) + u64::from(w.job.gpus) <= u64::from(q)
            })
        })
        .collect();
    entitled.sort_by(|a, b| {
        let (ua, qa) = share(view, a.job.vc, held);
        let (ub, qb) = share(view, b.job.vc, held);
        (ua * qb)
            .cmp(&(ub * qa))
            .then(a.job.submitted_s.cmp(&b.job.submitted_s))
            .then(a.job.id.cmp(&b.job.id))
    });
    entitled
}

/// Jobs of `running` (newest first) that stay at or above their VC's quota
/// without them, counting what this round already takes back (`held`,
/// `taken`). A VC with entitled work is within its quota, so none of its
/// own jobs is ever among them; the list changes only when a job starts.
fn reclaimable<'v>(
    view: &ReclaimView,
    running: &[&'v RunningJob],
    held: &FxHashMap<VcId, u64>,
    taken: &FxHashSet<JobId>,
) -> Vec<&'v RunningJob> {
    let mut over = held.clone();
    running
        .iter()
        .filter(|j| !taken.contains(&j.id))
        .filter(|j| {
            let h = over.get(&j.vc).copied().unwrap_or(0);
            let floor = u64::from(quota(view, j.vc).unwrap_or(0));
            if h >= floor + u64::from(j.gpus) {
                over.insert(j.vc, h - u64::from(j.gpus));
                true
            } else {
                false
            }
        })
        .copied()
        .collect()
}

/// The jobs of `all` (reclaimable) that may be stopped for `w`: none if
/// its VC is now at its quota, a gang like it found `no_room`, or all are
/// of its own VC.
fn candidates_for<'v>(
    view: &ReclaimView,
    w: &WaitingJob,
    held: &FxHashMap<VcId, u64>,
    no_room: &[(VcId, SpreadLimit, u32)],
    all: &[&'v RunningJob],
) -> Option<Vec<&'v RunningJob>> {
    let vc = w.job.vc;
    let q = quota(view, vc)?;
    let have = held.get(&vc).copied().unwrap_or(0);
    if have + u64::from(w.job.gpus) > u64::from(q) {
        return None;
    }
    let known_none = no_room
        .iter()
        .any(|(v, l, g)| *v == vc && *l == w.limit && *g <= w.job.gpus);
    if known_none {
        return None;
    }
    let candidates: Vec<&RunningJob> = all.iter().filter(|j| j.vc != vc).copied().collect();
    (!candidates.is_empty()).then_some(candidates)
}
