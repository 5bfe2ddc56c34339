//! The running jobs reclaim may stop, found VC by VC.

use rustc_hash::{FxHashMap, FxHashSet};

use gangway_plugin_sdk::sort;
use gangway_plugin_sdk::{JobId, RunningJob, VcId};

use crate::newest_first::NewestFirst;

/// The running jobs of each VC, read newest first and only as far as the
/// VC can still give a job back: a round usually reads each borrowing VC's
/// newest jobs, not every running job.
pub(crate) struct Borrowed<'v> {
    /// One entry per VC with running jobs, by VC id.
    vcs: Vec<VcJobs<'v>>,
}

/// One VC's running jobs.
struct VcJobs<'v> {
    vc: VcId,
    jobs: NewestFirst<'v>,
    /// How many of its jobs hold each GPU count, smallest count first.
    sizes: Vec<(u64, usize)>,
}

impl<'v> Borrowed<'v> {
    /// The running jobs `jobs`, filed by VC.
    pub(crate) fn new(jobs: impl Iterator<Item = &'v RunningJob>) -> Borrowed<'v> {
        let mut by_vc: FxHashMap<VcId, Vec<&'v RunningJob>> = FxHashMap::default();
        for j in jobs {
            by_vc.entry(j.vc).or_default().push(j);
        }
        let mut vcs: Vec<VcJobs<'v>> = by_vc
            .into_iter()
            .map(|(vc, jobs)| {
                let mut sizes: Vec<(u64, usize)> = Vec::new();
                for j in &jobs {
                    let g = u64::from(j.gpus);
                    match sizes.iter_mut().find(|(s, _)| *s == g) {
                        Some((_, n)) => *n += 1,
                        None => sizes.push((g, 1)),
                    }
                }
                sort::by_key(&mut sizes, |(g, n)| [*g, *n as u64, 0]);
                VcJobs {
                    vc,
                    jobs: NewestFirst::new(jobs),
                    sizes,
                }
            })
            .collect();
        sort::by_key(&mut vcs, |v| [u64::from(v.vc.0), 0, 0]);
        Borrowed { vcs }
    }

    /// The jobs not in `taken` that leave their VC at or above `floor(vc)`
    /// GPUs when stopped, counting each VC's `held` GPUs down as jobs are
    /// chosen newest first: every job [`QuotaReclaim`](crate::QuotaReclaim)
    /// may stop, newest first.
    pub(crate) fn reclaimable(
        &mut self,
        held: &FxHashMap<VcId, u64>,
        taken: &FxHashSet<JobId>,
        floor: impl Fn(VcId) -> u64,
    ) -> Vec<&'v RunningJob> {
        let mut out: Vec<&'v RunningJob> = Vec::new();
        for v in &mut self.vcs {
            let floor = floor(v.vc);
            let mut h = held.get(&v.vc).copied().unwrap_or(0);
            let mut sizes = v.sizes.clone();
            // Whether a job not yet read could still be chosen.
            let can_give = |sizes: &[(u64, usize)], h: u64| {
                sizes
                    .iter()
                    .find(|(_, n)| *n > 0)
                    .is_some_and(|(g, _)| h >= floor.saturating_add(*g))
            };
            let mut i = 0;
            while can_give(&sizes, h) {
                let Some(j) = v.jobs.get(i) else { break };
                i += 1;
                let g = u64::from(j.gpus);
                if let Some((_, n)) = sizes.iter_mut().find(|(s, _)| *s == g) {
                    *n -= 1;
                }
                if taken.contains(&j.id) {
                    continue;
                }
                if h >= floor + g {
                    h -= g;
                    out.push(j);
                }
            }
        }
        // (Ids are unique, so the order is total.)
        sort::by_key(&mut out, |j| [!j.started_s, !j.id.0, 0]);
        out
    }
}
