//! Normalised throughput: a job's speed on a type over the speed an equal
//! share of every type it may use would give it.

use gangway_plugin_sdk::{GpuTypeId, GpuTypeSet, JobId, TypesView};

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
pub(crate) fn speeds(
    jobs: impl Iterator<Item = JobId>,
    types: &TypesView,
    cap: &Capacity,
    blind: bool,
) -> Speeds {
    let mut s = Speeds::default();
    let every: Vec<GpuTypeId> = (0..cap.total.len())
        .filter_map(|i| u8::try_from(i).ok().map(GpuTypeId))
        .filter(|t| cap.has(*t))
        .collect();
    for id in jobs {
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
