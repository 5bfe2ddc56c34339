//! The running jobs reclaim may stop, found account by account.

use rustc_hash::FxHashSet;

use gangway_plugin_sdk::sort;
use gangway_plugin_sdk::{GpuTypeId, JobId, RunningJob, VcId};

use crate::newest_first::NewestFirst;

/// What a quota is counted on: a VC's pooled quota (`None`), or its
/// nominal quota of one GPU type (a VC with quotas per type, to a policy
/// shown the types).
pub(crate) type Account = (VcId, Option<GpuTypeId>);

/// The running jobs of each account, read newest first and only as far as
/// the account can still give a job back: a round usually reads each
/// borrowing account's newest jobs, not every running job.
pub(crate) struct Borrowed<'v> {
    /// One entry per account with running jobs, by VC id, then type.
    vcs: Vec<VcJobs<'v>>,
}

/// One account's running jobs.
struct VcJobs<'v> {
    vc: Account,
    jobs: NewestFirst<'v>,
    /// How many of its jobs hold each GPU count, smallest count first.
    sizes: Vec<(u64, usize)>,
}

impl<'v> Borrowed<'v> {
    /// The running jobs `jobs`, filed by `account`.
    pub(crate) fn new(
        jobs: impl Iterator<Item = &'v RunningJob>,
        account: impl Fn(&RunningJob) -> Account,
    ) -> Borrowed<'v> {
        // Sorted by account (VC, then pooled before each type), then cut
        // into runs: no map of accounts (a module carries one hash table's
        // code less).
        let key = |a: Account| [u64::from(a.0.0), a.1.map_or(0, |t| u64::from(t.0) + 1), 0];
        let mut filed: Vec<(Account, &'v RunningJob)> = jobs.map(|j| (account(j), j)).collect();
        sort::by_key(&mut filed, |(a, j)| {
            let [vc, t, _] = key(*a);
            [vc, t, j.id.0]
        });
        let mut vcs: Vec<VcJobs<'v>> = Vec::new();
        let mut rest = &filed[..];
        while let Some(&(vc, _)) = rest.first() {
            let n = rest.iter().take_while(|(a, _)| *a == vc).count();
            let (run, tail) = rest.split_at(n);
            rest = tail;
            let jobs: Vec<&'v RunningJob> = run.iter().map(|(_, j)| *j).collect();
            let mut sizes: Vec<(u64, usize)> = Vec::new();
            for j in &jobs {
                let g = u64::from(j.gpus);
                match sizes.iter_mut().find(|(s, _)| *s == g) {
                    Some((_, n)) => *n += 1,
                    None => sizes.push((g, 1)),
                }
            }
            sort::by_key(&mut sizes, |(g, n)| [*g, *n as u64, 0]);
            vcs.push(VcJobs {
                vc,
                jobs: NewestFirst::new(jobs),
                sizes,
            });
        }
        Borrowed { vcs }
    }

    /// The jobs not in `taken` that leave their account at or above
    /// `floor(account)` GPUs when stopped, counting each account's `held`
    /// GPUs down as jobs are chosen newest first: every job
    /// [`QuotaReclaim`](crate::QuotaReclaim) may stop, newest first.
    pub(crate) fn reclaimable(
        &mut self,
        held: impl Fn(Account) -> u64,
        taken: &FxHashSet<JobId>,
        floor: impl Fn(Account) -> u64,
    ) -> Vec<&'v RunningJob> {
        let mut out: Vec<&'v RunningJob> = Vec::new();
        for v in &mut self.vcs {
            let floor = floor(v.vc);
            let mut h = held(v.vc);
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
