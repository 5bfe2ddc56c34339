//! What a policy sees: a compact, read-only snapshot of one scheduling round.
//!
//! Views carry ids and counts, never object graphs, so one view serializes to a
//! few tens of kilobytes even for a thousand pending jobs and crosses into a
//! Wasm sandbox in one copy.

use serde::{Deserialize, Serialize};

use crate::ids::{JobId, Level, VcId};

/// A pending job as policies see it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingJob {
    /// The job.
    pub id: JobId,
    /// Its virtual cluster (tenant).
    pub vc: VcId,
    /// Its user, as a host-assigned number.
    pub user: u32,
    /// GPUs the gang needs, all at once.
    pub gpus: u32,
    /// When the job was submitted (seconds on the host's clock).
    pub submitted_s: u64,
    /// Seconds since the job last became pending (its submit, or the end of its
    /// last attempt): the wait that delay scheduling and reservations measure.
    pub waiting_s: u64,
    /// Attempts already started (0 for a new job; a retry has at least 1).
    pub attempts: u32,
    /// GPU-seconds this job has already received (GPUs x run time of its attempts).
    pub attained_gpu_s: u64,
    /// The narrowest level with at least one domain big enough to hold the gang
    /// when empty: the smallest spread limit that can ever succeed.
    pub min_level: Level,
}

/// A virtual cluster's configuration and current use.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VcUsage {
    /// The virtual cluster.
    pub id: VcId,
    /// Its quota in GPUs, if the host configured one.
    pub quota_gpus: Option<u32>,
    /// Its weight for weighted fair shares (1 unless configured).
    pub weight: u32,
    /// GPUs its running jobs hold now.
    pub held_gpus: u32,
    /// GPUs its pending jobs ask for.
    pub pending_gpus: u32,
    /// GPU-seconds its jobs have received so far.
    pub attained_gpu_s: u64,
}

/// Per-level capacity of the topology.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LevelSummary {
    /// Domains at this level.
    pub domains: u32,
    /// GPUs of the largest domain at this level (healthy or not).
    pub max_domain_gpus: u32,
    /// Free GPUs of the domain with the most free GPUs at this level.
    pub max_free_gpus: u32,
}

/// Capacity of the whole cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterSummary {
    /// GPUs on servers that are up (including draining ones).
    pub total_gpus: u32,
    /// GPUs free for new work on servers that are up and not draining.
    pub free_gpus: u32,
    /// The level of servers; deeper levels do not exist.
    pub server_level: Level,
    /// One entry per level, from the root (`Level(0)`) to the servers.
    pub levels: Vec<LevelSummary>,
}

/// Everything the fairness slot sees: all pending jobs, in submit order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundView {
    /// The host's clock for this round (seconds).
    pub now_s: u64,
    /// Cluster capacity.
    pub cluster: ClusterSummary,
    /// Every virtual cluster known to the scheduler, indexed by [`VcId`].
    pub vcs: Vec<VcUsage>,
    /// Every pending job, ordered by (submit time, id).
    pub jobs: Vec<PendingJob>,
}

/// What the locality and gang slots see: the jobs fairness made eligible, in
/// fairness order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueView {
    /// The host's clock for this round (seconds).
    pub now_s: u64,
    /// Cluster capacity.
    pub cluster: ClusterSummary,
    /// The eligible jobs, in the order they will be placed.
    pub jobs: Vec<PendingJob>,
    /// For the gang slot: the spread limit the locality slot chose for each job
    /// (same order as `jobs`); empty when the locality slot is being asked.
    pub spread: Vec<Level>,
}
