//! Contract 2.2's GPU types beside generated views (feature `testing`): a
//! [`TypesView`] consistent with the view it goes with, as a host makes
//! one on a cluster of several types.
//!
//! A [`TypesPlan`] is the few random draws a types view is made of (how
//! many types, whether the host gave speeds, whether VCs have quotas per
//! type, and a seed for the rest); [`types_view`] makes the types view of
//! one view from it, deterministically. So a view shrunk by proptest (or by
//! [`crate::testing::SlotViews::smaller`]) keeps types consistent with it:
//! they are made again from the same plan. The plan shrinks too, towards
//! one type, no speeds and no quotas per type ([`TypesPlan::smaller`]).
//!
//! What is consistent, as the host makes it
//! (`gangway-core`'s round): 1 to 4 types (fewer when the cluster has fewer
//! servers), each with memory, whose GPUs and free GPUs sum to the
//! cluster's; every job of the view once, in id order, its allowed types a
//! non-empty list without repeats (most preferred first), a running job's
//! type one of them; every (VC, type) once, in that order, the VC's held
//! GPUs split over the types and, with quotas per type, its quota split
//! over them (`Some(0)` and a borrowing limit of 0 for a type it does not
//! name); speeds for every class of the jobs, or none.
//!
//! ```
//! use gangway_plugin_sdk::testing::types::{TypesPlan, TypesJob, types_view};
//! use gangway_plugin_sdk::testing::strategy::Shape;
//! use gangway_plugin_sdk::{JobId, VcUsage};
//!
//! let shape = Shape { server_level: 2, server_gpus: 8, servers_per_rack: 4, racks: 2 };
//! let plan = TypesPlan { types: 3, speeds: true, type_quotas: true, seed: 7 };
//! let jobs = [TypesJob { job: JobId(4), running: true }, TypesJob { job: JobId(2), running: false }];
//! let vcs = [VcUsage { quota_gpus: Some(16), held_gpus: 8, ..VcUsage::default() }];
//! let t = types_view(&plan, &shape.summary(20), &vcs, &jobs);
//! assert_eq!(t.types.len(), 3);
//! assert_eq!(t.types.iter().map(|t| t.total_gpus).sum::<u32>(), 64);
//! assert_eq!(t.types.iter().map(|t| t.free_gpus).sum::<u32>(), 20);
//! assert_eq!(t.jobs.iter().map(|j| j.job.0).collect::<Vec<_>>(), [2, 4]);
//! let running = t.job(JobId(4)).unwrap();
//! assert!(running.allowed.contains(&running.running.unwrap()));
//! assert_eq!(t.vcs.iter().filter_map(|u| u.nominal_gpus).sum::<u32>(), 16);
//! assert_eq!(t.vcs.iter().map(|u| u.held_gpus).sum::<u32>(), 8);
//! ```

use proptest::prelude::*;

use crate::gpu_types::{ClassSpeeds, GpuTypeSummary, JobTypes, TypesView, VcTypeUsage};
use crate::ids::{GpuTypeId, JobId};
use crate::view::{ClusterSummary, VcUsage};

use super::rng::Rng;

/// The random draws a [`TypesView`] is made of, for any view
/// ([`types_view`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TypesPlan {
    /// GPU types, 1 to 4 (fewer if the cluster has fewer servers).
    pub types: u8,
    /// Whether the host gave speeds by job class.
    pub speeds: bool,
    /// Whether VCs with a quota have quotas per type.
    pub type_quotas: bool,
    /// The rest: memory, how GPUs split over the types, each job's allowed
    /// types and class, the speeds.
    pub seed: u64,
}

impl TypesPlan {
    /// Plans one step simpler than this one, the largest steps first: one
    /// type fewer, no speeds, no quotas per type, seed 0.
    ///
    /// ```
    /// use gangway_plugin_sdk::testing::types::TypesPlan;
    /// let plan = TypesPlan { types: 2, speeds: true, type_quotas: false, seed: 0 };
    /// assert_eq!(plan.smaller().len(), 2);
    /// assert!(TypesPlan { types: 1, speeds: false, type_quotas: false, seed: 0 }.smaller().is_empty());
    /// ```
    pub fn smaller(&self) -> Vec<TypesPlan> {
        let mut out = Vec::new();
        if self.types > 1 {
            out.push(TypesPlan {
                types: self.types - 1,
                ..*self
            });
        }
        if self.speeds {
            out.push(TypesPlan {
                speeds: false,
                ..*self
            });
        }
        if self.type_quotas {
            out.push(TypesPlan {
                type_quotas: false,
                ..*self
            });
        }
        if self.seed != 0 {
            out.push(TypesPlan { seed: 0, ..*self });
        }
        out
    }
}

/// Random plans: 1 to 4 types (2 or more most often, as hosts show types
/// only on clusters of several), speeds half the time, quotas per type a
/// third of the time. Shrinks towards one type, no speeds, no quotas.
pub fn types_plan() -> impl Strategy<Value = TypesPlan> {
    (
        prop_oneof![1 => Just(1u8), 6 => 2u8..5],
        any::<bool>(),
        prop::bool::weighted(0.33),
        any::<u64>(),
    )
        .prop_map(|(types, speeds, type_quotas, seed)| TypesPlan {
            types,
            speeds,
            type_quotas,
            seed,
        })
}

/// A job a [`TypesView`] describes: its id, and whether it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TypesJob {
    /// The job.
    pub job: JobId,
    /// Whether it runs (then it has a type it runs on).
    pub running: bool,
}

/// Splitting amounts at random.
trait Split {
    /// `amount` split into `parts` random parts, each at most its `caps`
    /// entry (when `caps` is given) as far as the caps allow; the last
    /// part takes what is left.
    fn split(&mut self, amount: u32, parts: usize, caps: Option<&[u32]>) -> Vec<u32>;
}

impl Split for Rng {
    fn split(&mut self, amount: u32, parts: usize, caps: Option<&[u32]>) -> Vec<u32> {
        let cap = |i: usize| caps.and_then(|c| c.get(i).copied()).unwrap_or(u32::MAX);
        let mut left = amount;
        let mut out = Vec::with_capacity(parts);
        for i in 0..parts {
            let rest_cap: u64 = (i + 1..parts).map(|k| u64::from(cap(k))).sum();
            let least = u64::from(left).saturating_sub(rest_cap);
            let most = u64::from(left.min(cap(i)));
            let take = if i + 1 == parts {
                left
            } else {
                let span = most.saturating_sub(least) + 1;
                u32::try_from(least + self.below(span)).unwrap_or(left)
            };
            let take = take.min(left);
            out.push(take);
            left -= take;
        }
        out
    }
}

/// Memory of one GPU of a type, in GB (0: not known).
const MEMORY_GB: [u32; 7] = [16, 24, 32, 40, 48, 80, 0];

/// The types of a view of `cluster` (as [`crate::testing::strategy::Shape::summary`]
/// makes them), its VCs `vcs` and its jobs `jobs` (any order; one entry per
/// job, a job listed twice counts as running if either entry does), made
/// from `plan`. The same arguments always give the same types view.
pub fn types_view(
    plan: &TypesPlan,
    cluster: &ClusterSummary,
    vcs: &[VcUsage],
    jobs: &[TypesJob],
) -> TypesView {
    let mut rng = Rng(plan.seed);
    let types = gpu_types(plan, cluster, &mut rng);
    let n = types.len();
    let classes = if plan.speeds { 1 + rng.below(3) } else { 1 };
    let mut ids: Vec<TypesJob> = jobs.to_vec();
    ids.sort_by_key(|j| (j.job, !j.running));
    ids.dedup_by_key(|j| j.job);
    let jobs = ids
        .iter()
        .map(|j| job_types(j, n, classes, &mut rng))
        .collect();
    let speeds = if plan.speeds {
        (0..classes)
            .map(|class| ClassSpeeds {
                class: u32::try_from(class).unwrap_or(0),
                per_type: (0..n)
                    .map(|_| match rng.below(8) {
                        0 => 0,
                        _ => 1 + u32::try_from(rng.below(10_000)).unwrap_or(0),
                    })
                    .collect(),
            })
            .collect()
    } else {
        Vec::new()
    };
    TypesView {
        types,
        jobs,
        servers: Vec::new(),
        vcs: vc_types(plan, vcs, n, &mut rng),
        speeds,
    }
}

/// The cluster's types: whole servers of each (at least one each), their
/// GPUs and free GPUs summing to the cluster's.
fn gpu_types(plan: &TypesPlan, cluster: &ClusterSummary, rng: &mut Rng) -> Vec<GpuTypeSummary> {
    let server = cluster.levels.last().map_or(0, |l| l.max_domain_gpus);
    let servers = cluster.total_gpus.checked_div(server).unwrap_or(1).max(1);
    let n = usize::from(plan.types.clamp(1, 4)).min(servers as usize);
    let mut counts = vec![1u32; n];
    for (c, extra) in counts
        .iter_mut()
        .zip(rng.split(servers - n as u32, n, None))
    {
        *c += extra;
    }
    let mut totals: Vec<u32> = counts.iter().map(|c| c * server).collect();
    // Whatever whole servers do not account for goes to the last type.
    let counted: u32 = totals.iter().sum();
    if let Some(last) = totals.last_mut() {
        *last = last.saturating_add(cluster.total_gpus.saturating_sub(counted));
    }
    let free = rng.split(cluster.free_gpus, n, Some(&totals));
    (0..n)
        .map(|i| GpuTypeSummary {
            id: GpuTypeId(u8::try_from(i).unwrap_or(u8::MAX)),
            memory_gb: MEMORY_GB[rng.below(MEMORY_GB.len() as u64) as usize],
            total_gpus: totals[i],
            free_gpus: free[i],
        })
        .collect()
}

/// One job's types among `n`: every type in id order (a job that named
/// none) a third of the time, else a random non-empty list in a random
/// order; a running job runs on one of them.
fn job_types(j: &TypesJob, n: usize, classes: u64, rng: &mut Rng) -> JobTypes {
    let mut all: Vec<GpuTypeId> = (0..n)
        .map(|i| GpuTypeId(u8::try_from(i).unwrap_or(u8::MAX)))
        .collect();
    let allowed = if rng.below(3) == 0 {
        all
    } else {
        for i in (1..all.len()).rev() {
            all.swap(i, rng.below(i as u64 + 1) as usize);
        }
        all.truncate(1 + rng.below(n as u64) as usize);
        all
    };
    let running = j
        .running
        .then(|| allowed[rng.below(allowed.len() as u64) as usize]);
    JobTypes {
        job: j.job,
        running,
        class: u32::try_from(rng.below(classes)).unwrap_or(0),
        allowed,
    }
}

/// Every VC's use of each of the `n` types, by (VC, type): its held GPUs
/// split over the types; with quotas per type, its quota split over some of
/// them (the others `Some(0)`, not to be used).
fn vc_types(plan: &TypesPlan, vcs: &[VcUsage], n: usize, rng: &mut Rng) -> Vec<VcTypeUsage> {
    let mut sorted: Vec<&VcUsage> = vcs.iter().collect();
    sorted.sort_by_key(|v| v.id);
    let mut out = Vec::with_capacity(vcs.len() * n);
    for v in sorted {
        let held = rng.split(v.held_gpus, n, None);
        let quotas = v.quota_gpus.filter(|_| plan.type_quotas).map(|q| {
            // The types it names: all but a random few (at least one).
            let named: Vec<bool> = (0..n).map(|i| i == 0 || rng.below(3) != 0).collect();
            let caps: Vec<u32> = named.iter().map(|&b| if b { q } else { 0 }).collect();
            (named, rng.split(q, n, Some(&caps)))
        });
        for t in 0..n {
            let (nominal, limit) = match &quotas {
                Some((named, _)) if !named[t] => (Some(0), Some(0)),
                Some((_, split)) => (
                    Some(split[t]),
                    (rng.below(2) == 0)
                        .then(|| u32::try_from(rng.below(u64::from(split[t]) + 2)).unwrap_or(0)),
                ),
                None => (None, None),
            };
            out.push(VcTypeUsage {
                vc: v.id,
                gpu_type: GpuTypeId(u8::try_from(t).unwrap_or(u8::MAX)),
                held_gpus: held[t],
                nominal_gpus: nominal,
                borrowing_limit_gpus: limit,
            });
        }
    }
    out
}

/// Views of slot `S` with their GPU types, for a policy that takes them
/// (contract 2.2: the fairness and reclaim slots; for a slot that is not
/// shown types, [`crate::testing::SlotViews::types_of`] gives none and
/// every case is rejected).
///
/// ```
/// use gangway_plugin_sdk::{Fairness, testing::types::typed_views};
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
///
/// let mut runner = TestRunner::deterministic();
/// let (view, types) = typed_views::<Fairness>().new_tree(&mut runner).unwrap().current();
/// assert_eq!(types.jobs.len(), view.jobs.len());
/// assert_eq!(types.types.iter().map(|t| t.total_gpus).sum::<u32>(), view.cluster.total_gpus);
/// ```
pub fn typed_views<S: crate::testing::SlotViews>() -> impl Strategy<Value = (S::View, TypesView)> {
    (S::views(), types_plan()).prop_filter_map("a slot shown no GPU types", |(view, plan)| {
        S::types_of(&view, &plan).map(|types| (view, types))
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::typed_views;
    use crate::{Fairness, Reclaim, TypesView};

    /// Whether `t` is consistent the way the host makes a types view for a
    /// view of `total` GPUs, `free` free, `vcs` VCs and jobs `ids` (running
    /// ones in `running`).
    fn consistent(t: &TypesView, total: u32, free: u32, vcs: usize, ids: &[u64], running: &[u64]) {
        let n = t.types.len();
        assert!((1..=4).contains(&n), "{n} types");
        assert!(t.types.iter().enumerate().all(|(i, s)| s.id.index() == i));
        assert!(t.types.iter().all(|s| s.free_gpus <= s.total_gpus));
        assert_eq!(t.types.iter().map(|s| s.total_gpus).sum::<u32>(), total);
        assert_eq!(t.types.iter().map(|s| s.free_gpus).sum::<u32>(), free);
        let mut want: Vec<u64> = ids.to_vec();
        want.sort_unstable();
        want.dedup();
        assert_eq!(t.jobs.iter().map(|j| j.job.0).collect::<Vec<_>>(), want);
        for j in &t.jobs {
            assert!(!j.allowed.is_empty() && j.allowed.iter().all(|a| a.index() < n));
            let mut once = j.allowed.clone();
            once.sort_unstable();
            once.dedup();
            assert_eq!(once.len(), j.allowed.len(), "{j:?}");
            assert_eq!(j.running.is_some(), running.contains(&j.job.0), "{j:?}");
            assert!(j.running.is_none_or(|r| j.allowed.contains(&r)), "{j:?}");
            assert!(
                t.speeds.is_empty() || t.speeds_of(j.class).is_some(),
                "{j:?}"
            );
        }
        assert_eq!(t.vcs.len(), vcs * n);
        assert!(
            t.vcs
                .windows(2)
                .all(|w| (w[0].vc, w[0].gpu_type) < (w[1].vc, w[1].gpu_type))
        );
        assert!(t.speeds.iter().all(|s| s.per_type.len() == n));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn fairness_types_are_consistent_with_their_view((view, t) in typed_views::<Fairness>()) {
            let ids: Vec<u64> = view.jobs.iter().map(|j| j.id.0).collect();
            consistent(&t, view.cluster.total_gpus, view.cluster.free_gpus, view.vcs.len(), &ids, &[]);
            for v in &view.vcs {
                let of_vc = t.vcs.iter().filter(|u| u.vc == v.id);
                prop_assert_eq!(of_vc.clone().map(|u| u.held_gpus).sum::<u32>(), v.held_gpus);
                if of_vc.clone().any(|u| u.nominal_gpus.is_some()) {
                    prop_assert_eq!(of_vc.filter_map(|u| u.nominal_gpus).sum::<u32>(), v.quota_gpus.unwrap_or(0));
                }
            }
        }

        #[test]
        fn reclaim_types_are_consistent_with_their_view((view, t) in typed_views::<Reclaim>()) {
            let running: Vec<u64> = view.running.iter().map(|j| j.id.0).collect();
            let ids: Vec<u64> = view.waiting.iter().map(|w| w.job.id.0).chain(running.iter().copied()).collect();
            consistent(&t, view.cluster.total_gpus, view.cluster.free_gpus, view.vcs.len(), &ids, &running);
        }
    }
}
