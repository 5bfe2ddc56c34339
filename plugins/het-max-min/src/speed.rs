//! Normalised throughput: a job's speed on a type over the speed an equal
//! share of every type it may use would give it.

use gangway_plugin_sdk::{GpuTypeId, GpuTypeSet, JobId, TypesView, sort};

/// One allowed type of one job, with the job's normalised throughput on it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct TypeOption {
    /// The type.
    pub(crate) gpu_type: GpuTypeId,
    /// Speed on the type over the equal-share speed (1.0 when all types
    /// count as equally fast).
    pub(crate) normalised: f64,
}

/// Every view job's allowed types and normalised throughputs, flat: job
/// `i`'s options are `options[ranges[i].0 .. ranges[i].1]`, in the job's
/// order of preference.
#[derive(Clone, Debug, Default)]
pub(crate) struct Speeds {
    /// All jobs' options, job after job.
    pub(crate) options: Vec<TypeOption>,
    /// Each job's range of `options`.
    pub(crate) ranges: Vec<(u32, u32)>,
}

impl Speeds {
    /// Job `i`'s options (none for a job out of range).
    pub(crate) fn of(&self, i: usize) -> &[TypeOption] {
        match self.ranges.get(i) {
            Some(&(a, b)) => self.options.get(a as usize..b as usize).unwrap_or(&[]),
            None => &[],
        }
    }

    /// Job `i`'s normalised throughput on `t` (0 if `t` is not allowed).
    pub(crate) fn on(&self, i: usize, t: GpuTypeId) -> f64 {
        self.of(i)
            .iter()
            .find(|o| o.gpu_type == t)
            .map_or(0.0, |o| o.normalised)
    }
}

/// The view's GPU types by id: GPUs of each in all (`total`) and free.
#[derive(Clone, Debug, Default)]
pub(crate) struct Capacity {
    /// GPUs of each type on servers that are up, by type index.
    pub(crate) total: Vec<u32>,
    /// GPUs of each type free for new work, by type index.
    pub(crate) free: Vec<u32>,
}

impl Capacity {
    /// The capacity `types` shows (a type listed twice counts once, its
    /// last entry).
    #[inline(never)]
    pub(crate) fn of(types: &TypesView) -> Capacity {
        let n = types
            .types
            .iter()
            .map(|t| t.id.index() + 1)
            .max()
            .unwrap_or(0);
        let mut c = Capacity {
            total: vec![0; n],
            free: vec![0; n],
        };
        for t in &types.types {
            c.total[t.id.index()] = t.total_gpus;
            c.free[t.id.index()] = t.free_gpus.min(t.total_gpus);
        }
        c
    }

    /// Whether the cluster has type `t`.
    pub(crate) fn has(&self, t: GpuTypeId) -> bool {
        self.total.get(t.index()).is_some_and(|n| *n > 0)
    }
}

/// Each of `jobs`' allowed types (of the cluster, each once, in its order
/// of preference; every type of the cluster for a job `types` does not
/// list) with its normalised throughput. `blind`: every type counts as
/// equally fast. A job whose class has no speeds, or no known (non-zero)
/// speed on one of its types, counts its types as equally fast too: a
/// guessed speed-up would move it for nothing.
#[inline(never)]
pub(crate) fn speeds(jobs: &[JobId], types: &TypesView, cap: &Capacity, blind: bool) -> Speeds {
    let mut s = Speeds::default();
    let every: Vec<GpuTypeId> = (0..cap.total.len())
        .filter_map(|i| u8::try_from(i).ok().map(GpuTypeId))
        .filter(|t| cap.has(*t))
        .collect();
    for &id in jobs {
        let start = s.options.len();
        let jt = types.job(id);
        let allowed = jt.map_or(&every[..], |j| &j.allowed[..]);
        let mut seen = GpuTypeSet::default();
        for &t in allowed {
            if cap.has(t) && !seen.contains(t) {
                seen.insert(t);
                s.options.push(TypeOption {
                    gpu_type: t,
                    normalised: 1.0,
                });
            }
        }
        let class = jt.and_then(|j| types.speeds_of(j.class));
        if let (false, Some(class)) = (blind, class) {
            let mine = &mut s.options[start..];
            if mine.iter().all(|o| class.on(o.gpu_type) > 0) {
                // Equal share: each GPU of every allowed type in turn.
                let (mut work, mut gpus) = (0.0f64, 0.0f64);
                for o in mine.iter() {
                    let n = f64::from(cap.total[o.gpu_type.index()]);
                    work += f64::from(class.on(o.gpu_type)) * n;
                    gpus += n;
                }
                if work > 0.0 && gpus > 0.0 {
                    let equal = work / gpus;
                    for o in mine.iter_mut() {
                        o.normalised = f64::from(class.on(o.gpu_type)) / equal;
                    }
                }
            }
        }
        s.ranges.push((start as u32, s.options.len() as u32));
    }
    s
}

/// The cluster's types ranked slowest to fastest for the view's jobs, and
/// each job's comparative advantage.
///
/// A type's rank is its mean normalised throughput over the jobs whose
/// speeds differ (weighted by their GPUs), so "fast" means fast for this
/// workload, not a nominal order. A job's *advantage* is its normalised
/// throughput on its fastest allowed type over that on its slowest: how
/// much it gains from the fast types (1.0 when its types are equally fast
/// for it).
#[derive(Clone, Debug, Default)]
pub(crate) struct Ranks {
    /// Each type's rank (0: slowest), by type index; `u8::MAX` for a
    /// type the cluster does not have.
    pub(crate) rank: Vec<u8>,
    /// Each job's advantage.
    pub(crate) advantage: Vec<f64>,
}

impl Ranks {
    /// The rank of `t` (`u8::MAX` if unknown).
    pub(crate) fn rank_of(&self, t: GpuTypeId) -> u8 {
        self.rank.get(t.index()).copied().unwrap_or(u8::MAX)
    }

    /// Job `i`'s advantage (1.0 if unknown).
    pub(crate) fn advantage_of(&self, i: usize) -> f64 {
        self.advantage.get(i).copied().unwrap_or(1.0)
    }
}

/// Whether job `i`'s allowed types differ in speed for it.
pub(crate) fn differs(speeds: &Speeds, i: usize) -> bool {
    let of = speeds.of(i);
    let (lo, hi) = of.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), o| {
        (lo.min(o.normalised), hi.max(o.normalised))
    });
    of.len() > 1 && hi > lo * (1.0 + 1e-9)
}

/// The types of `cap` ranked and the advantage of each of `speeds`' jobs,
/// which ask for `gpus` (by job): see [`Ranks`]. Types no job tells apart
/// rank by id.
#[inline(never)]
pub(crate) fn ranks(speeds: &Speeds, gpus: &[u32], cap: &Capacity) -> Ranks {
    let n = cap.total.len();
    let (mut sum, mut weight) = (vec![0.0f64; n], vec![0.0f64; n]);
    for (i, g) in gpus.iter().enumerate() {
        if differs(speeds, i) {
            for o in speeds.of(i) {
                sum[o.gpu_type.index()] += f64::from(*g) * o.normalised;
                weight[o.gpu_type.index()] += f64::from(*g);
            }
        }
    }
    let mut chain: Vec<usize> = (0..n)
        .filter(|t| u8::try_from(*t).is_ok_and(|t| cap.has(GpuTypeId(t))))
        .collect();
    let mean = |t: usize| {
        if weight[t] > 0.0 {
            sum[t] / weight[t]
        } else {
            0.0
        }
    };
    sort::by_key(&mut chain, |t| [mean(*t).to_bits(), *t as u64, 0]);
    let mut r = Ranks {
        rank: vec![u8::MAX; n],
        advantage: vec![1.0; gpus.len()],
    };
    for (k, t) in chain.iter().enumerate() {
        r.rank[*t] = u8::try_from(k).unwrap_or(u8::MAX);
    }
    for i in 0..gpus.len() {
        if !differs(speeds, i) {
            continue;
        }
        // Its slowest type (the first of the lowest rank) and its fastest
        // (the last of the highest).
        let mut ends: Option<(&TypeOption, &TypeOption)> = None;
        for o in speeds.of(i) {
            let k = r.rank_of(o.gpu_type);
            ends = Some(match ends {
                None => (o, o),
                Some((slow, fast)) => (
                    if k < r.rank_of(slow.gpu_type) {
                        o
                    } else {
                        slow
                    },
                    if k >= r.rank_of(fast.gpu_type) {
                        o
                    } else {
                        fast
                    },
                ),
            });
        }
        if let Some((slow, fast)) = ends
            && slow.normalised > 0.0
        {
            r.advantage[i] = fast.normalised / slow.normalised;
        }
    }
    r
}
