//! Shared fixtures for Gangway's criterion benchmarks (see `benches/`).

mod backlog;

pub use backlog::{
    fallback_wasm_policies, fallbacks_module, philly_backlog, philly_backlog_all_in_view,
};

use gangway_core::policy::PolicySet;
use gangway_core::{JobId, JobSpec, RackGrouping, Scheduler, Topology, TopologyError};

/// The official Philly machine list's shape: 552 servers, 321 with 2 GPUs and
/// 231 with 8 (2,490 GPUs), in same-SKU racks of 32.
pub fn philly_official() -> Result<Topology, TopologyError> {
    let mut text = String::from("machineId,number of GPUs\n");
    for m in 0..552 {
        let gpus = if m < 321 { 2 } else { 8 };
        text.push_str(&format!("m{m},{gpus}\n"));
    }
    Topology::from_machine_list_str("philly-official", &text, RackGrouping::default())
}

/// 100,000 GPUs: 12,500 servers of 8 GPUs in racks of 32 (the last rack partial).
pub fn hundred_thousand_gpus() -> Result<Topology, TopologyError> {
    let mut b = gangway_core::TopologyBuilder::new();
    let root = b.root();
    for server in 0..12_500u32 {
        if server % 32 == 0 {
            b.add_domain(root, format!("r{}", server / 32))?;
        }
        let rack = gangway_core::DomainId(1 + server / 32);
        b.add_server(rack, format!("s{server}"), 8)?;
    }
    b.build()
}

/// A deterministic job-size stream with the Philly mix (mostly 1 GPU, some
/// 2/4/8, a few 16 and 32).
pub fn philly_sizes(n: usize, seed: u64) -> Vec<u32> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            size_of_draw(x)
        })
        .collect()
}

/// A scheduler whose cluster is about `fill` full of running jobs, with
/// `pending` more jobs submitted and not yet considered by a round.
pub fn loaded_scheduler(
    topology: Topology,
    fill: f64,
    pending: usize,
    policies: PolicySet,
) -> Scheduler {
    let total = topology.total_gpus();
    let mut sched = Scheduler::with_policies(topology, policies);
    let vcs: Vec<_> = (0..8)
        .map(|i| sched.virtual_cluster(&format!("vc{i}")))
        .collect();
    let target = (f64::from(total) * fill) as u32;
    let mut id = 0u64;
    let mut asked = 0u32;
    for gpus in philly_sizes(total as usize, 7) {
        if asked + gpus > target {
            break;
        }
        let spec = JobSpec {
            id: JobId(id),
            vc: vcs[(id % 8) as usize],
            user: 0,
            gpus,
            submitted_s: 0,
        };
        id += 1;
        if sched.submit(spec).is_ok() {
            asked += gpus;
        }
    }
    // One bulk round starts the fill jobs; what does not fit is killed so
    // that exactly `pending` jobs wait afterwards.
    let _ = sched.round(0);
    let waiting: Vec<JobId> = sched
        .jobs()
        .values()
        .filter(|j| j.is_pending())
        .map(|j| j.spec.id)
        .collect();
    for job in waiting {
        let _ = sched.kill(job, 0);
    }
    // Gangs leave holes they cannot use; 1-GPU jobs top the fill up.
    let keep_free = total - target;
    let top_up = sched.state().free_gpus().saturating_sub(keep_free);
    for _ in 0..top_up {
        let spec = JobSpec {
            id: JobId(id),
            vc: vcs[(id % 8) as usize],
            user: 0,
            gpus: 1,
            submitted_s: 0,
        };
        id += 1;
        let _ = sched.submit(spec);
    }
    let _ = sched.round(0);
    for (k, gpus) in philly_sizes(pending, 11).into_iter().enumerate() {
        let spec = JobSpec {
            id: JobId(id),
            vc: vcs[k % 8],
            user: 0,
            gpus,
            submitted_s: 1 + k as u64,
        };
        id += 1;
        let _ = sched.submit(spec);
    }
    sched
}

/// The gang size a pseudo-random draw `x` stands for, in the Philly mix
/// (86.7 % one GPU; then 2, 4, 8, 16 and 32).
pub(crate) fn size_of_draw(x: u64) -> u32 {
    match (x >> 33) % 1000 {
        0..=866 => 1,
        867..=889 => 2,
        890..=938 => 4,
        939..=989 => 8,
        990..=997 => 16,
        _ => 32,
    }
}
