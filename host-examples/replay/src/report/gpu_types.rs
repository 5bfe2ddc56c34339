//! What a run on a cluster of several GPU types did on each type: jobs,
//! completion times and waits by the type each job finished on, GPU time
//! and utilisation per type, and the makespan. Absent from a run on a
//! cluster of one type, whose report stays as it was.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Delay, Jct, delay, jct, round4};
use crate::sim::RunResult;

/// A run's use of its cluster's GPU types.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GpuTypeStats {
    /// Seconds from the first submission to the last job's end.
    pub makespan_s: u64,
    /// Every job's total wait (over all its attempts), whatever its type.
    pub total_wait_s: Delay,
    /// Per type, by name (in the topology's order of types).
    pub types: Vec<TypeStats>,
}

/// One GPU type's share of a run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TypeStats {
    /// The type's name.
    pub name: String,
    /// Its GPUs.
    pub gpus: u32,
    /// Jobs whose last attempt ran on it.
    pub jobs: usize,
    /// Completion time of the finished ones among them.
    pub jct_s: Jct,
    /// Their total waits (over all attempts).
    pub total_wait_s: Delay,
    /// GPU-seconds every attempt on it used.
    pub used_gpu_s: u64,
    /// `used_gpu_s` over its GPUs times the makespan.
    pub utilisation: f64,
}

/// The per-type statistics of `r` (`None` on a cluster of one type).
pub(super) fn of(r: &RunResult) -> Option<GpuTypeStats> {
    if r.gpu_types.is_empty() {
        return None;
    }
    let own = &r.jobs[r.warm.min(r.jobs.len())..];
    let first = own.iter().map(|j| j.submit_s).min().unwrap_or(0);
    let last = own.iter().filter_map(|j| j.finish_s).max().unwrap_or(first);
    let makespan_s = last.saturating_sub(first);
    let mut jcts: BTreeMap<u8, Vec<f64>> = BTreeMap::new();
    let mut waits: BTreeMap<u8, Vec<f64>> = BTreeMap::new();
    let mut jobs: BTreeMap<u8, usize> = BTreeMap::new();
    let all_waits: Vec<f64> = own.iter().map(|j| j.waited_s as f64).collect();
    for j in own {
        let Some(t) = j.gpu_type else { continue };
        *jobs.entry(t).or_default() += 1;
        waits.entry(t).or_default().push(j.waited_s as f64);
        if let Some(f) = j.finish_s {
            jcts.entry(t)
                .or_default()
                .push(f.saturating_sub(j.submit_s) as f64);
        }
    }
    let types = r
        .gpu_types
        .iter()
        .enumerate()
        .map(|(i, u)| {
            let t = u8::try_from(i).unwrap_or(u8::MAX);
            let capacity = f64::from(u.gpus) * makespan_s as f64;
            TypeStats {
                name: u.name.clone(),
                gpus: u.gpus,
                jobs: jobs.get(&t).copied().unwrap_or(0),
                jct_s: jct(jcts.remove(&t).unwrap_or_default()),
                total_wait_s: delay(waits.remove(&t).unwrap_or_default()),
                used_gpu_s: u.used_gpu_s,
                utilisation: if capacity > 0.0 {
                    round4(u.used_gpu_s as f64 / capacity)
                } else {
                    0.0
                },
            }
        })
        .collect();
    Some(GpuTypeStats {
        makespan_s,
        total_wait_s: delay(all_waits),
        types,
    })
}
