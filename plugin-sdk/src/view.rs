//! The parts every view is made of: jobs, virtual clusters, capacity.
//!
//! Views carry ids and counts, never object graphs, so one view serializes to
//! a few tens of kilobytes even for a thousand jobs and crosses into a Wasm
//! sandbox in one copy. Each slot's own view (and decision) is in
//! [`crate::slots`].

use serde::{Deserialize, Serialize};

use crate::ids::{JobId, Level, VcId};
use crate::wire::Wire;

/// A pending job as policies see it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, Wire)]
#[wire(entry, tracked = jobs)]
pub struct PendingJob {
    /// The job.
    #[wire(key)]
    pub id: JobId,
    /// Its virtual cluster (tenant).
    pub vc: VcId,
    /// Its user, as a host-assigned number.
    pub user: u32,
    /// GPUs the gang needs, all at once (a retry policy's probe may ask
    /// fewer for one attempt: this is what the next attempt needs).
    pub gpus: u32,
    /// When the job was submitted (seconds on the host's clock).
    pub submitted_s: u64,
    /// Seconds since the job last became pending (its submit, or the end of its
    /// last attempt): the wait that delay scheduling and reservations measure.
    #[wire(clock)]
    pub waiting_s: u64,
    /// Attempts already started (0 for a new job; a retry has at least 1).
    pub attempts: u32,
    /// GPU-seconds this job has already received (GPUs x run time of its attempts).
    pub attained_gpu_s: u64,
    /// The narrowest level with at least one domain big enough to hold the gang
    /// when empty: the smallest spread limit that can ever succeed.
    pub min_level: Level,
    /// The fewest servers that can ever hold the gang (1 if one server is
    /// big enough; else the gang divided by the largest servers, rounded up).
    pub min_servers: u32,
}

/// A virtual cluster's configuration and current use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, Wire)]
#[wire(entry, tracked = vcs)]
pub struct VcUsage {
    /// The virtual cluster.
    #[wire(key)]
    pub id: VcId,
    /// Its quota in GPUs, if the host configured one.
    pub quota_gpus: Option<u32>,
    /// Its weight for weighted fair shares (1 unless configured).
    pub weight: u32,
    /// GPUs its running jobs hold now.
    pub held_gpus: u32,
    /// GPUs all its pending jobs ask for (also those a bounded view leaves out).
    pub pending_gpus: u32,
    /// GPU-seconds its jobs have received so far.
    pub attained_gpu_s: u64,
    /// How many jobs it has pending (also those a bounded view leaves out).
    pub pending_jobs: u32,
}

/// Per-level capacity of the topology.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, Wire)]
pub struct LevelSummary {
    /// Domains at this level.
    pub domains: u32,
    /// GPUs of the largest domain at this level (healthy or not).
    pub max_domain_gpus: u32,
    /// Free GPUs of the domain with the most free GPUs at this level.
    pub max_free_gpus: u32,
}

/// Capacity of the whole cluster.
#[derive(Debug, Default, PartialEq, Eq, Serialize, Deserialize, Wire)]
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

impl Clone for ClusterSummary {
    fn clone(&self) -> Self {
        ClusterSummary {
            levels: self.levels.clone(),
            ..*self
        }
    }

    /// Field by field, reusing `levels`' memory (a Wasm host keeps a copy
    /// of each view it sent).
    fn clone_from(&mut self, source: &Self) {
        let ClusterSummary {
            total_gpus,
            free_gpus,
            server_level,
            levels,
        } = source;
        (self.total_gpus, self.free_gpus, self.server_level) =
            (*total_gpus, *free_gpus, *server_level);
        self.levels.clone_from(levels);
    }
}

/// How widely a gang may spread this round: the locality slot's answer for
/// one job.
///
/// The gang must fit in one domain of `level`, and on at most `max_servers`
/// servers (0: as many as the level allows). `SpreadLimit::new(Level(1), 4)`
/// is "one rack, at most 4 servers".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, Wire)]
pub struct SpreadLimit {
    /// The widest level whose single domain must hold the gang.
    pub level: Level,
    /// The most servers the gang may span; 0 means no bound beyond `level`.
    pub max_servers: u32,
}

impl SpreadLimit {
    /// A limit of `level` and at most `max_servers` servers (0: unbounded).
    ///
    /// ```
    /// use gangway_plugin_sdk::{Level, SpreadLimit};
    /// let l = SpreadLimit::new(Level(1), 2);
    /// assert!(l.allows(2) && !l.allows(3));
    /// assert!(SpreadLimit::level(Level(1)).allows(1_000));
    /// ```
    pub const fn new(level: Level, max_servers: u32) -> SpreadLimit {
        SpreadLimit { level, max_servers }
    }

    /// A limit of `level` alone, with no bound on servers.
    pub const fn level(level: Level) -> SpreadLimit {
        SpreadLimit::new(level, 0)
    }

    /// Whether a placement on `servers` servers respects the server bound.
    pub const fn allows(self, servers: u32) -> bool {
        self.max_servers == 0 || servers <= self.max_servers
    }
}

impl std::fmt::Display for SpreadLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.max_servers {
            0 => write!(f, "{}", self.level),
            n => write!(f, "{} on at most {n} servers", self.level),
        }
    }
}

/// Why a pending job did not start in a round.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Wire,
)]
pub enum WaitReason {
    /// Fairness made it ineligible and its VC is at its quota with it (or
    /// has no quota, so fairness shares decide): *fair-share delay*.
    #[default]
    FairShare,
    /// Enough GPUs are free, but not within its spread limit: *fragmentation delay*.
    Fragmentation,
    /// The GPUs it could use are held for another job's reservation.
    Reserved,
    /// A blocked job ahead of it holds the queue (gang policy `Block`).
    HeldByPolicy,
    /// Fewer GPUs are free in the whole cluster than it needs.
    NoCapacity,
    /// It waits behind earlier jobs of its own VC: beyond the jobs a round
    /// shows (the view's window) in the fairness policy's declared queue
    /// order, or made ineligible by fairness while its VC would stay within
    /// its quota with it (an earlier job of the VC holds the VC's turn).
    Queued,
    /// It failed and waits out the delay its retry policy chose.
    RetryDelay,
}

impl WaitReason {
    /// All reasons, in the order of [`WaitReason::index`].
    pub const ALL: [WaitReason; 7] = [
        WaitReason::FairShare,
        WaitReason::Fragmentation,
        WaitReason::Reserved,
        WaitReason::HeldByPolicy,
        WaitReason::NoCapacity,
        WaitReason::Queued,
        WaitReason::RetryDelay,
    ];

    /// A short name (`fair-share`, `fragmentation`, ...).
    ///
    /// ```
    /// use gangway_plugin_sdk::WaitReason;
    /// assert_eq!(WaitReason::HeldByPolicy.as_str(), "held-by-policy");
    /// assert_eq!(WaitReason::ALL.map(|r| r.index()), [0, 1, 2, 3, 4, 5, 6]);
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            WaitReason::FairShare => "fair-share",
            WaitReason::Fragmentation => "fragmentation",
            WaitReason::Reserved => "reserved",
            WaitReason::HeldByPolicy => "held-by-policy",
            WaitReason::NoCapacity => "no-capacity",
            WaitReason::Queued => "queued",
            WaitReason::RetryDelay => "retry-delay",
        }
    }

    /// Its position in [`WaitReason::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Whether a job waiting for this reason waits for GPUs: none free
    /// ([`WaitReason::NoCapacity`]), none free together
    /// ([`WaitReason::Fragmentation`]) or held for another gang
    /// ([`WaitReason::Reserved`]), rather than for its turn or a policy.
    ///
    /// ```
    /// use gangway_plugin_sdk::WaitReason;
    /// assert!(WaitReason::Fragmentation.waits_for_gpus());
    /// assert!(!WaitReason::FairShare.waits_for_gpus());
    /// ```
    pub fn waits_for_gpus(self) -> bool {
        matches!(
            self,
            WaitReason::NoCapacity | WaitReason::Fragmentation | WaitReason::Reserved
        )
    }
}

impl std::fmt::Display for WaitReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A job that did not start this round, with why, as the reclaim and
/// defragment slots see it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, Wire)]
#[wire(entry)]
pub struct WaitingJob {
    /// The job (its entry in the host's change log; the reason and limit
    /// are the round's).
    #[wire(entry)]
    pub job: PendingJob,
    /// Why it waits after this round's placement.
    pub reason: WaitReason,
    /// The spread limit it was placed with this round (its `min_level`
    /// with no server bound if the locality slot was not asked for it).
    pub limit: SpreadLimit,
}

/// One server's capacity, as the reclaim and defragment slots see it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, Wire)]
#[wire(entry)]
pub struct ServerState {
    /// The server.
    #[wire(key)]
    pub id: crate::ServerId,
    /// The domain just above it (its rack, in the usual shape), as an index
    /// shared by the servers of that domain.
    pub domain: u32,
    /// Its GPUs.
    pub gpus: u32,
    /// Its GPUs free for new work (0 unless it is up and not draining).
    pub free: u32,
}

/// A running job as the reclaim and defragment slots see it.
#[derive(Debug, Default, PartialEq, Eq, Serialize, Deserialize, Wire)]
#[wire(entry, tracked = jobs)]
pub struct RunningJob {
    /// The job.
    #[wire(key)]
    pub id: JobId,
    /// Its virtual cluster.
    pub vc: VcId,
    /// Its user.
    pub user: u32,
    /// GPUs it holds.
    pub gpus: u32,
    /// When it was submitted.
    pub submitted_s: u64,
    /// When its current attempt started.
    pub started_s: u64,
    /// Attempts started, this one included.
    pub attempts: u32,
    /// GPU-seconds received, the current attempt up to now included.
    #[wire(clock = gpus)]
    pub attained_gpu_s: u64,
    /// Its GPUs per server, by server id.
    pub parts: Vec<(crate::ServerId, u32)>,
}

impl Clone for RunningJob {
    fn clone(&self) -> Self {
        RunningJob {
            parts: self.parts.clone(),
            ..*self
        }
    }

    /// Field by field, reusing `parts`' memory (a Wasm host keeps a copy of
    /// each reclaim view it sent).
    fn clone_from(&mut self, source: &Self) {
        let RunningJob {
            id,
            vc,
            user,
            gpus,
            submitted_s,
            started_s,
            attempts,
            attained_gpu_s,
            parts,
        } = source;
        (self.id, self.vc, self.user, self.gpus) = (*id, *vc, *user, *gpus);
        (self.submitted_s, self.started_s) = (*submitted_s, *started_s);
        (self.attempts, self.attained_gpu_s) = (*attempts, *attained_gpu_s);
        self.parts.clone_from(parts);
    }
}
