//! Allocation state: who holds which GPU, per-server free masks, health, and
//! the indexes that make placement search cheap.
//!
//! The ground truth is the owner of every GPU. Everything else (free masks,
//! per-domain free totals, servers bucketed by free count) is an index kept in
//! step with it and verified by [`ClusterState::check_invariants`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use gangway_plugin_sdk::{ClusterSummary, GpuTypeId, JobId, LevelSummary};
use serde::{Deserialize, Serialize};

use crate::placement_strategy::PlacementStrategy;
use crate::topology::{DomainId, ServerId, Topology};

/// A bitmask of GPUs on one server (bit `i` = GPU `i`).
pub type GpuMask = u64;

/// The GPUs a gang holds on one server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerGpus {
    /// The server.
    pub server: ServerId,
    /// Its GPUs held, as a bitmask.
    pub gpus: GpuMask,
}

/// A whole gang's GPUs, one entry per server, ordered by server id.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// The per-server parts.
    pub parts: Vec<ServerGpus>,
}

impl Placement {
    /// Total GPUs.
    pub fn gpu_count(&self) -> u32 {
        self.parts.iter().map(|p| p.gpus.count_ones()).sum()
    }

    /// Servers spanned.
    pub fn server_count(&self) -> u32 {
        u32::try_from(self.parts.len()).unwrap_or(u32::MAX)
    }

    /// The servers, in order.
    pub fn servers(&self) -> Vec<ServerId> {
        self.parts.iter().map(|p| p.server).collect()
    }

    /// The GPU type it runs on in `topo` (a gang runs on one type: its
    /// first server's; the default type for an empty placement).
    pub fn gpu_type(&self, topo: &Topology) -> GpuTypeId {
        self.parts
            .first()
            .and_then(|p| topo.server(p.server))
            .map(|s| s.gpu_type)
            .unwrap_or_default()
    }
}

/// A server's health.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Health {
    /// Takes new work.
    Up,
    /// Keeps running jobs, takes no new work.
    Draining,
    /// Off: holds nothing; its jobs were interrupted.
    Down,
}

/// Why an allocation or a health change was refused. State is unchanged.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// The job already holds GPUs.
    #[error("{0} already holds GPUs")]
    AlreadyAllocated(JobId),
    /// The job holds nothing.
    #[error("{0} holds no GPUs")]
    NotAllocated(JobId),
    /// The placement names a server that does not exist.
    #[error("{0} does not exist")]
    UnknownServer(ServerId),
    /// The placement is empty, names a server twice, or has an empty part.
    #[error("malformed placement for {job}: {why}")]
    Malformed {
        /// The job.
        job: JobId,
        /// What is wrong.
        why: &'static str,
    },
    /// A GPU of the placement is taken, held, or does not exist on the server.
    #[error("{job}: GPUs {} of server {name} are not free", gpu_list(*.gpus))]
    NotFree {
        /// The job.
        job: JobId,
        /// The server.
        server: ServerId,
        /// The server's name.
        name: String,
        /// The offending GPUs.
        gpus: GpuMask,
    },
    /// The server is draining or down.
    #[error("server {name} is not taking new work")]
    NotSchedulable {
        /// The server.
        server: ServerId,
        /// Its name.
        name: String,
    },
}

/// GPU indices of a mask, as `0, 1, 5`.
fn gpu_list(gpus: GpuMask) -> String {
    (0..64)
        .filter(|g| gpus & (1 << g) != 0)
        .map(|g: u32| g.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// An index found out of step with the ground truth.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invariant violated: {0}")]
pub struct InvariantViolation(pub String);

/// Allocation state of a cluster.
///
/// ```
/// use gangway_core::{ClusterState, JobId, Level, SpreadLimit, Topology};
/// use std::sync::Arc;
///
/// let mut state = ClusterState::new(Arc::new(Topology::uniform(2, 2, 8).unwrap()));
/// let found = state.find_placement(12, SpreadLimit::level(Level::ANY)).unwrap();
/// assert_eq!(found.placement.server_count(), 2); // 8 + 4 inside one rack
/// state.allocate(JobId(1), &found.placement).unwrap();
/// assert_eq!(state.free_gpus(), 20);
/// state.release(JobId(1)).unwrap();
/// state.check_invariants().unwrap();
/// ```
#[derive(Clone, Debug)]
pub struct ClusterState {
    pub(crate) topo: Arc<Topology>,
    /// Unowned GPUs per server (whatever the health).
    free: Vec<GpuMask>,
    /// GPUs held for a reservation during a round.
    held: Vec<GpuMask>,
    health: Vec<Health>,
    /// Owner of every GPU; `gpu_base[s] + i` is GPU `i` of server `s`.
    owners: Vec<Option<JobId>>,
    gpu_base: Vec<u32>,
    /// Schedulable free GPUs per domain.
    pub(crate) domain_avail: Vec<u32>,
    /// Per domain, per available count `c` (1..=max), the servers with exactly `c`.
    pub(crate) buckets: Vec<Vec<BTreeSet<ServerId>>>,
    allocations: BTreeMap<JobId, Placement>,
    pub(crate) strategy: PlacementStrategy,
    /// GPUs on servers that are not down (kept in step with `health`).
    online: u32,
    /// GPUs held by jobs (kept in step with `owners`).
    allocated: u32,
    /// GPUs held for reservations (kept in step with `held`).
    held_count: u32,
}

fn full_mask(gpus: u32) -> GpuMask {
    if gpus >= 64 {
        u64::MAX
    } else {
        (1u64 << gpus) - 1
    }
}

impl ClusterState {
    /// An empty cluster: every server up, every GPU free.
    pub fn new(topo: Arc<Topology>) -> ClusterState {
        let n = topo.servers().len();
        let max = topo.max_server_gpus() as usize;
        let mut gpu_base = Vec::with_capacity(n);
        let mut total = 0u32;
        for s in topo.servers() {
            gpu_base.push(total);
            total += s.gpus;
        }
        let mut state = ClusterState {
            free: topo.servers().iter().map(|s| full_mask(s.gpus)).collect(),
            held: vec![0; n],
            health: vec![Health::Up; n],
            owners: vec![None; total as usize],
            gpu_base,
            domain_avail: vec![0; topo.domains().len()],
            buckets: vec![vec![BTreeSet::new(); max + 1]; topo.domains().len()],
            allocations: BTreeMap::new(),
            strategy: PlacementStrategy::default(),
            online: total,
            allocated: 0,
            held_count: 0,
            topo,
        };
        for s in 0..n {
            let id = ServerId(u32::try_from(s).unwrap_or(u32::MAX));
            state.reindex(id, 0);
        }
        state
    }

    /// How placement search breaks ties (best fit by default).
    pub fn strategy(&self) -> PlacementStrategy {
        self.strategy
    }

    /// Sets how placement search breaks ties.
    pub fn set_strategy(&mut self, strategy: PlacementStrategy) {
        self.strategy = strategy;
    }

    /// The topology.
    pub fn topology(&self) -> &Arc<Topology> {
        &self.topo
    }

    /// GPUs available to new work on server `s` (0 unless it is up).
    pub fn avail(&self, s: ServerId) -> u32 {
        let i = s.0 as usize;
        if self.health[i] == Health::Up {
            (self.free[i] & !self.held[i]).count_ones()
        } else {
            0
        }
    }

    /// Mask of GPUs available to new work on server `s`.
    pub(crate) fn avail_mask(&self, s: ServerId) -> GpuMask {
        let i = s.0 as usize;
        if self.health[i] == Health::Up {
            self.free[i] & !self.held[i]
        } else {
            0
        }
    }

    /// Moves `s` from bucket `before` to its current bucket in every ancestor.
    fn reindex(&mut self, s: ServerId, before: u32) {
        let after = self.avail(s);
        if after == before {
            return;
        }
        let topo = Arc::clone(&self.topo);
        for &d in &topo.servers()[s.0 as usize].ancestors {
            let d = d.0 as usize;
            if before > 0 {
                self.buckets[d][before as usize].remove(&s);
            }
            if after > 0 {
                self.buckets[d][after as usize].insert(s);
            }
            self.domain_avail[d] = self.domain_avail[d] - before + after;
        }
    }

    /// GPUs available to new work in the whole cluster.
    pub fn free_gpus(&self) -> u32 {
        self.domain_avail[0]
    }

    /// GPUs available to new work in a domain.
    pub fn domain_free(&self, d: DomainId) -> u32 {
        self.domain_avail.get(d.0 as usize).copied().unwrap_or(0)
    }

    /// A server's health.
    pub fn health(&self, s: ServerId) -> Option<Health> {
        self.health.get(s.0 as usize).copied()
    }

    /// The placement a job holds.
    pub fn allocation(&self, job: JobId) -> Option<&Placement> {
        self.allocations.get(&job)
    }

    /// The GPU type job `job` runs on, if it holds GPUs.
    pub fn running_type(&self, job: JobId) -> Option<GpuTypeId> {
        self.allocation(job).map(|p| p.gpu_type(self.topology()))
    }

    /// Every allocation, by job.
    pub fn allocations(&self) -> &BTreeMap<JobId, Placement> {
        &self.allocations
    }

    /// The job holding GPU `gpu` of server `s`.
    pub fn owner(&self, s: ServerId, gpu: u32) -> Option<JobId> {
        let base = *self.gpu_base.get(s.0 as usize)?;
        self.owners.get((base + gpu) as usize).copied().flatten()
    }

    /// Whether any GPU of `placement` is held by some job now.
    pub(crate) fn any_owned(&self, placement: &Placement) -> bool {
        placement.parts.iter().any(|part| {
            (0..64u32).any(|g| part.gpus >> g & 1 == 1 && self.owner(part.server, g).is_some())
        })
    }

    /// Whether any GPU of `placement` is held now by a job other than `job`.
    pub(crate) fn owned_by_other(&self, placement: &Placement, job: JobId) -> bool {
        placement.parts.iter().any(|part| {
            (0..64u32).any(|g| {
                part.gpus >> g & 1 == 1
                    && self.owner(part.server, g).is_some_and(|owner| owner != job)
            })
        })
    }

    fn check_server(&self, s: ServerId) -> Result<usize, StateError> {
        if (s.0 as usize) < self.free.len() {
            Ok(s.0 as usize)
        } else {
            Err(StateError::UnknownServer(s))
        }
    }

    /// `server`'s name in the topology (its number if it has none).
    fn server_name(&self, server: ServerId) -> String {
        self.topology()
            .server(server)
            .map_or_else(|| server.0.to_string(), |s| s.name.clone())
    }

    /// Gives `job` exactly the GPUs of `placement`, all or nothing.
    pub fn allocate(&mut self, job: JobId, placement: &Placement) -> Result<(), StateError> {
        if self.allocations.contains_key(&job) {
            return Err(StateError::AlreadyAllocated(job));
        }
        if placement.parts.is_empty() {
            return Err(StateError::Malformed {
                job,
                why: "no GPUs",
            });
        }
        for (k, part) in placement.parts.iter().enumerate() {
            let i = self.check_server(part.server)?;
            if part.gpus == 0 {
                return Err(StateError::Malformed {
                    job,
                    why: "a server part holds no GPUs",
                });
            }
            if placement.parts[..k].iter().any(|p| p.server == part.server) {
                return Err(StateError::Malformed {
                    job,
                    why: "a server appears twice",
                });
            }
            if self.health[i] != Health::Up {
                return Err(StateError::NotSchedulable {
                    server: part.server,
                    name: self.server_name(part.server),
                });
            }
            let bad = part.gpus & !(self.free[i] & !self.held[i]);
            if bad != 0 {
                return Err(StateError::NotFree {
                    job,
                    server: part.server,
                    name: self.server_name(part.server),
                    gpus: bad,
                });
            }
        }
        let mut sorted = placement.clone();
        sorted.parts.sort_by_key(|p| p.server);
        for part in &sorted.parts {
            let before = self.avail(part.server);
            let i = part.server.0 as usize;
            self.free[i] &= !part.gpus;
            self.set_owners(part.server, part.gpus, Some(job));
            self.reindex(part.server, before);
        }
        self.allocated += sorted.gpu_count();
        self.allocations.insert(job, sorted);
        Ok(())
    }

    /// Gives `job` back the GPUs it was just [`ClusterState::release`]d
    /// from, whatever the servers' health now (a tentative reclaim or
    /// migration rolled back; a draining server keeps its jobs). The GPUs
    /// must still be free: the caller released everything it allocated
    /// since.
    pub(crate) fn restore(&mut self, job: JobId, placement: &Placement) -> Result<(), StateError> {
        if self.allocations.contains_key(&job) {
            return Err(StateError::AlreadyAllocated(job));
        }
        for part in &placement.parts {
            let i = self.check_server(part.server)?;
            let bad = part.gpus & !self.free[i];
            if bad != 0 {
                return Err(StateError::NotFree {
                    job,
                    server: part.server,
                    name: self.server_name(part.server),
                    gpus: bad,
                });
            }
        }
        for part in &placement.parts {
            let before = self.avail(part.server);
            let i = part.server.0 as usize;
            self.free[i] &= !part.gpus;
            self.held_count -= (self.held[i] & part.gpus).count_ones();
            self.held[i] &= !part.gpus;
            self.set_owners(part.server, part.gpus, Some(job));
            self.reindex(part.server, before);
        }
        self.allocated += placement.gpu_count();
        self.allocations.insert(job, placement.clone());
        Ok(())
    }

    fn set_owners(&mut self, s: ServerId, mask: GpuMask, owner: Option<JobId>) {
        let base = self.gpu_base[s.0 as usize] as usize;
        let mut m = mask;
        while m != 0 {
            let g = m.trailing_zeros() as usize;
            self.owners[base + g] = owner;
            m &= m - 1;
        }
    }

    /// Frees every GPU `job` holds and returns its placement.
    pub fn release(&mut self, job: JobId) -> Result<Placement, StateError> {
        let placement = self
            .allocations
            .remove(&job)
            .ok_or(StateError::NotAllocated(job))?;
        self.allocated -= placement.gpu_count();
        for part in &placement.parts {
            let before = self.avail(part.server);
            self.free[part.server.0 as usize] |= part.gpus;
            self.set_owners(part.server, part.gpus, None);
            self.reindex(part.server, before);
        }
        Ok(placement)
    }

    /// Frees the GPUs of `job` that `keep` leaves out (a member of its gang
    /// ended while the rest run) and returns how many were freed. `keep`
    /// must be a part of what `job` holds, sorted by server, and hold at
    /// least one GPU; nothing changes otherwise.
    pub(crate) fn shrink(&mut self, job: JobId, keep: &Placement) -> Result<u32, StateError> {
        let held = self
            .allocations
            .get(&job)
            .ok_or(StateError::NotAllocated(job))?;
        let kept = |s: ServerId| {
            keep.parts
                .iter()
                .find(|p| p.server == s)
                .map_or(0, |p| p.gpus)
        };
        let within = keep.parts.iter().all(|k| {
            k.gpus != 0
                && held
                    .parts
                    .iter()
                    .any(|h| h.server == k.server && k.gpus & !h.gpus == 0)
        });
        let sorted = keep.parts.windows(2).all(|w| w[0].server < w[1].server);
        if keep.parts.is_empty() || !within || !sorted {
            return Err(StateError::Malformed {
                job,
                why: "what a shrunk job keeps must be a part of what it holds",
            });
        }
        let freed: Vec<ServerGpus> = held
            .parts
            .iter()
            .map(|h| ServerGpus {
                server: h.server,
                gpus: h.gpus & !kept(h.server),
            })
            .filter(|p| p.gpus != 0)
            .collect();
        let count: u32 = freed.iter().map(|p| p.gpus.count_ones()).sum();
        for part in &freed {
            let before = self.avail(part.server);
            self.free[part.server.0 as usize] |= part.gpus;
            self.set_owners(part.server, part.gpus, None);
            self.reindex(part.server, before);
        }
        self.allocated -= count;
        self.allocations.insert(job, keep.clone());
        Ok(count)
    }

    /// Changes a server's health. Taking a server down releases every job
    /// with a GPU on it (whole gangs) and returns those jobs, in id order.
    pub fn set_health(&mut self, s: ServerId, health: Health) -> Result<Vec<JobId>, StateError> {
        let i = self.check_server(s)?;
        let mut interrupted = Vec::new();
        if health == Health::Down {
            let base = self.gpu_base[i] as usize;
            let gpus = self.topo.servers()[i].gpus as usize;
            let mut jobs: BTreeSet<JobId> = BTreeSet::new();
            jobs.extend(self.owners[base..base + gpus].iter().flatten().copied());
            for job in jobs {
                self.release(job)?;
                interrupted.push(job);
            }
        }
        let before = self.avail(s);
        let gpus = self.topo.servers()[i].gpus;
        match (self.health[i] == Health::Down, health == Health::Down) {
            (false, true) => self.online -= gpus,
            (true, false) => self.online += gpus,
            _ => {}
        }
        self.health[i] = health;
        self.reindex(s, before);
        Ok(interrupted)
    }

    /// Holds GPUs of one server for a reservation until [`ClusterState::clear_holds`].
    pub(crate) fn hold(&mut self, s: ServerId, mask: GpuMask) {
        let before = self.avail(s);
        let i = s.0 as usize;
        let added = mask & self.free[i] & !self.held[i];
        self.held[i] |= added;
        self.held_count += added.count_ones();
        self.reindex(s, before);
    }

    /// GPUs held for reservations.
    pub fn held_gpus(&self) -> u32 {
        self.held_count
    }

    /// Releases every reservation hold.
    pub(crate) fn clear_holds(&mut self) {
        if self.held_count == 0 {
            return;
        }
        self.held_count = 0;
        for i in 0..self.held.len() {
            if self.held[i] != 0 {
                let s = ServerId(u32::try_from(i).unwrap_or(u32::MAX));
                let before = self.avail(s);
                self.held[i] = 0;
                self.reindex(s, before);
            }
        }
    }

    /// GPUs on servers that are up or draining.
    pub fn online_gpus(&self) -> u32 {
        self.online
    }

    /// GPUs held by running jobs.
    pub fn allocated_gpus(&self) -> u32 {
        self.allocated
    }

    /// The capacity summary policies see.
    pub fn summary(&self) -> ClusterSummary {
        let topo = &self.topo;
        let server_level = topo.server_level();
        let mut levels = Vec::with_capacity(server_level.0 as usize + 1);
        for l in 0..server_level.0 {
            let ids = topo.domains_at(gangway_plugin_sdk::Level(l));
            levels.push(LevelSummary {
                domains: u32::try_from(ids.len()).unwrap_or(u32::MAX),
                max_domain_gpus: topo.max_domain_gpus(gangway_plugin_sdk::Level(l)),
                max_free_gpus: ids
                    .iter()
                    .map(|d| self.domain_avail[d.0 as usize])
                    .max()
                    .unwrap_or(0),
            });
        }
        let root = &self.buckets[0];
        levels.push(LevelSummary {
            domains: u32::try_from(topo.servers().len()).unwrap_or(u32::MAX),
            max_domain_gpus: topo.max_server_gpus(),
            max_free_gpus: (1..root.len())
                .rev()
                .find(|&c| !root[c].is_empty())
                .map_or(0, |c| c as u32),
        });
        ClusterSummary {
            total_gpus: self.online_gpus(),
            free_gpus: self.free_gpus(),
            server_level,
            levels,
        }
    }

    /// Verifies every index against the ground truth (GPU owners, health):
    /// free masks, per-domain totals, buckets, and that each allocation holds
    /// exactly the GPUs owned by its job.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        let mut owned: BTreeMap<JobId, BTreeMap<ServerId, GpuMask>> = BTreeMap::new();
        let mut domain_avail = vec![0u32; self.topo.domains().len()];
        for i in 0..self.topo.servers().len() {
            self.check_server_indexes(i, &mut owned, &mut domain_avail)?;
        }
        self.check_totals(&domain_avail)?;
        self.check_allocations(&owned)
    }

    /// Checks server `i`'s free and held masks, health and buckets against
    /// its GPUs' owners, adding the GPUs each job owns there to `owned` and
    /// its free GPUs to its domains' `domain_avail`.
    fn check_server_indexes(
        &self,
        i: usize,
        owned: &mut BTreeMap<JobId, BTreeMap<ServerId, GpuMask>>,
        domain_avail: &mut [u32],
    ) -> Result<(), InvariantViolation> {
        let topo = &self.topo;
        let server = &topo.servers()[i];
        let s = ServerId(i as u32);
        let base = self.gpu_base[i] as usize;
        let mut free = 0u64;
        for g in 0..server.gpus as usize {
            match self.owners[base + g] {
                None => free |= 1 << g,
                Some(job) => *owned.entry(job).or_default().entry(s).or_default() |= 1 << g,
            }
        }
        if free != self.free[i] {
            return broken(format!(
                "server {}: free mask {:#x} but owners say {free:#x}",
                server.name, self.free[i]
            ));
        }
        if self.held[i] & !free != 0 {
            return broken(format!("server {}: a held GPU is not free", server.name));
        }
        if self.health[i] == Health::Down && free != full_mask(server.gpus) {
            return broken(format!("server {} is down but holds jobs", server.name));
        }
        let avail = self.avail(s);
        for &d in &server.ancestors {
            domain_avail[d.0 as usize] += avail;
            for (c, bucket) in self.buckets[d.0 as usize].iter().enumerate() {
                if bucket.contains(&s) != (c as u32 == avail && avail > 0) {
                    return broken(format!(
                        "server {} misfiled in bucket {c} of domain {}",
                        server.name,
                        topo.domains()[d.0 as usize].name
                    ));
                }
            }
        }
        Ok(())
    }

    /// Checks the booked totals (online, allocated, held GPUs; per-domain
    /// free GPUs, counted as `domain_avail`; bucket entries) against the
    /// masks.
    fn check_totals(&self, domain_avail: &[u32]) -> Result<(), InvariantViolation> {
        let topo = &self.topo;
        let online: u32 = topo
            .servers()
            .iter()
            .zip(&self.health)
            .filter(|(_, h)| **h != Health::Down)
            .map(|(s, _)| s.gpus)
            .sum();
        if online != self.online {
            return broken(format!("{} GPUs booked online, {online} are", self.online));
        }
        let allocated = self.owners.iter().filter(|o| o.is_some()).count() as u32;
        if allocated != self.allocated {
            return broken(format!(
                "{} GPUs booked allocated, {allocated} are owned",
                self.allocated
            ));
        }
        let held: u32 = self.held.iter().map(|m| m.count_ones()).sum();
        if held != self.held_count {
            return broken(format!("{} GPUs booked held, {held} are", self.held_count));
        }
        if domain_avail != self.domain_avail {
            return broken("per-domain free totals differ from the masks".into());
        }
        let bucketed: usize = self.buckets.iter().flatten().map(BTreeSet::len).sum();
        let expected: usize = topo
            .servers()
            .iter()
            .enumerate()
            .filter(|(i, _)| self.avail(ServerId(*i as u32)) > 0)
            .map(|(_, s)| s.ancestors.len())
            .sum();
        if bucketed != expected {
            return broken(format!("{bucketed} bucket entries, expected {expected}"));
        }
        Ok(())
    }

    /// Checks that each allocation holds exactly the GPUs its job `owned`.
    fn check_allocations(
        &self,
        owned: &BTreeMap<JobId, BTreeMap<ServerId, GpuMask>>,
    ) -> Result<(), InvariantViolation> {
        if owned.len() != self.allocations.len() {
            return broken(format!(
                "{} jobs own GPUs but {} allocations are recorded",
                owned.len(),
                self.allocations.len()
            ));
        }
        for (job, placement) in &self.allocations {
            let Some(parts) = owned.get(job) else {
                return broken(format!("{job} is allocated but owns no GPU"));
            };
            let recorded: BTreeMap<ServerId, GpuMask> =
                placement.parts.iter().map(|p| (p.server, p.gpus)).collect();
            if &recorded != parts {
                return broken(format!("{job}: recorded placement differs from GPU owners"));
            }
        }
        Ok(())
    }
}

/// A broken invariant, described.
fn broken(message: String) -> Result<(), InvariantViolation> {
    Err(InvariantViolation(message))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> ClusterState {
        ClusterState::new(Arc::new(Topology::uniform(2, 2, 8).unwrap()))
    }

    fn part(server: u32, gpus: GpuMask) -> ServerGpus {
        ServerGpus {
            server: ServerId(server),
            gpus,
        }
    }

    #[test]
    fn allocation_is_all_or_nothing() {
        let mut st = state();
        st.allocate(
            JobId(1),
            &Placement {
                parts: vec![part(0, 0b11)],
            },
        )
        .unwrap();
        // Second part collides: nothing of job 2 may be applied.
        let clash = Placement {
            parts: vec![part(1, 0xff), part(0, 0b10)],
        };
        assert_eq!(
            st.allocate(JobId(2), &clash),
            Err(StateError::NotFree {
                job: JobId(2),
                server: ServerId(0),
                name: st.topology().servers()[0].name.clone(),
                gpus: 0b10
            })
        );
        assert_eq!(st.free_gpus(), 30);
        assert_eq!(st.owner(ServerId(1), 0), None);
        st.check_invariants().unwrap();
        assert_eq!(
            st.allocate(
                JobId(1),
                &Placement {
                    parts: vec![part(2, 1)]
                }
            ),
            Err(StateError::AlreadyAllocated(JobId(1)))
        );
        assert!(matches!(
            st.allocate(
                JobId(3),
                &Placement {
                    parts: vec![part(2, 1), part(2, 2)]
                }
            ),
            Err(StateError::Malformed { .. })
        ));
        assert!(matches!(
            st.allocate(
                JobId(3),
                &Placement {
                    parts: vec![part(9, 1)]
                }
            ),
            Err(StateError::UnknownServer(_))
        ));
        assert!(matches!(
            st.allocate(
                JobId(3),
                &Placement {
                    parts: vec![part(2, 1 << 9)]
                }
            ),
            Err(StateError::NotFree { .. })
        ));
    }

    #[test]
    fn server_down_interrupts_whole_gangs() {
        let mut st = state();
        st.allocate(
            JobId(7),
            &Placement {
                parts: vec![part(0, 0xff), part(1, 0x0f)],
            },
        )
        .unwrap();
        st.allocate(
            JobId(8),
            &Placement {
                parts: vec![part(1, 0xf0)],
            },
        )
        .unwrap();
        let hit = st.set_health(ServerId(0), Health::Down).unwrap();
        assert_eq!(hit, vec![JobId(7)]);
        assert!(st.allocation(JobId(7)).is_none());
        assert_eq!(st.free_gpus(), 32 - 8 - 4); // server 0 is gone, job 8 holds 4
        st.check_invariants().unwrap();
        st.set_health(ServerId(1), Health::Draining).unwrap();
        assert_eq!(st.free_gpus(), 16);
        assert!(matches!(
            st.allocate(
                JobId(9),
                &Placement {
                    parts: vec![part(1, 0x01)]
                }
            ),
            Err(StateError::NotSchedulable { .. })
        ));
        st.set_health(ServerId(0), Health::Up).unwrap();
        st.set_health(ServerId(1), Health::Up).unwrap();
        assert_eq!(st.free_gpus(), 28);
        st.check_invariants().unwrap();
    }

    #[test]
    fn holds_hide_gpus_until_cleared() {
        let mut st = state();
        st.hold(ServerId(0), 0x0f);
        assert_eq!(st.free_gpus(), 28);
        assert_eq!(st.held_gpus(), 4);
        st.check_invariants().unwrap();
        st.clear_holds();
        assert_eq!(st.free_gpus(), 32);
        st.check_invariants().unwrap();
    }
}
