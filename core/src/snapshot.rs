//! Snapshots of a scheduler's state, and restore from them, so that a
//! long-lived host (a daemon) survives a restart.
//!
//! A [`Snapshot`] is everything a round reads that the host cannot rebuild
//! by itself: every job record (spec, state, attempts, wait breakdown), the
//! virtual clusters with their quotas, weights and attained service, the
//! health of every server, the placement strategy, the sticky reservation
//! scopes of blocked jobs, the fairness view window and which jobs the last
//! view showed, and the time of the last round. Failed attempts awaiting a
//! retry decision and retries waiting out a delay are job states, so they
//! are in it too; the per-VC queues are rebuilt from the pending jobs in the
//! order the restored fairness policy declares. It records what each slot's
//! policy was ([`PolicyOrigin`]: name, the SHA-256 of its Wasm module,
//! configuration) but holds neither the topology nor the policies
//! themselves: the host passes both to [`Scheduler::restore`] again (with
//! `PolicyEngine::policies_of` rebuilding the set from the record and the
//! modules' bytes), and restore checks that the topology is the one the
//! snapshot was taken on (same servers, same names, same GPU counts, in the
//! same order).
//!
//! # Encoding
//!
//! [`Snapshot::to_bytes`] writes the 6 bytes `GWSNAP`, then the snapshot as
//! postcard (the house wire format). Postcard writes the struct's fields in
//! declaration order, and the first field is [`Snapshot::version`] as a
//! varint, so a reader learns the version before anything else:
//!
//! | bytes | what |
//! |---|---|
//! | 6 | magic `GWSNAP` |
//! | varint | format version ([`SNAPSHOT_VERSION`], now 4) |
//! | varint + (string, varint, enum) each | servers: name, GPU count, health |
//! | enum | placement strategy |
//! | varint + records | virtual clusters in [`VcId`](gangway_plugin_sdk::VcId) order |
//! | varint + records | job records in id order ([`JobRecord`], all fields) |
//! | varint + pairs | reservations: job id and its scope |
//! | varint | the last round's time |
//! | varint | the view window (pending jobs per VC a fairness view shows) |
//! | varint + ids | the jobs of the last round's fairness view |
//! | varint | rounds run |
//! | option of varint | the time of the last round that showed fairness a view |
//! | varint + (enum, record) each | each slot's policy: slot, name, module SHA-256 (option of string), configuration (bytes) |
//! | varint + (varint, varint + strings) each | version 3: each job's allowed GPU types by name, most preferred first |
//! | varint + (string, varint + (string, varint, option of varint) each) each | version 4: each VC's quotas per GPU type, by VC name: type name, nominal GPUs, borrowing limit |
//!
//! A change of any of these fields makes a new version; [`Snapshot::from_bytes`]
//! reads version 3 (the same without the quotas per type: a snapshot with
//! none is still written as version 3), version 2 (without the GPU types
//! too: a snapshot with neither, as on a cluster of one type, is still
//! written as version 2, byte for byte as before), version 1 (without the
//! policies too, which it reads as none recorded) and refuses versions it
//! does not know with [`SnapshotError::UnsupportedVersion`] rather than
//! guessing. The struct is also plain serde, so a host may store it as
//! JSON for people to read.
//!
//! # Restore
//!
//! [`Scheduler::restore`] rebuilds the allocation state from the running
//! jobs' placements and the servers' health, checks every record (ids
//! unique, VCs known, GPU counts possible, placements free and on servers
//! that are not down, reservations held by pending jobs) and then
//! [`Scheduler::check_invariants`]. Any failure is a [`SnapshotError`] naming
//! the job or server. After a successful restore the scheduler decides
//! exactly as the one the snapshot was taken from: the policies are
//! stateless functions of the views the core builds, and everything the
//! views are built from is in the snapshot (a property test checks this).
//!
//! ```
//! use gangway_core::snapshot::Snapshot;
//! use gangway_core::{JobSpec, Scheduler, Topology};
//! use gangway_core::policy::PolicySet;
//! use gangway_plugin_sdk::{JobId, Slot};
//!
//! let mut sched = Scheduler::new(Topology::uniform(2, 2, 8)?);
//! let vc = sched.virtual_cluster("nlp");
//! sched.submit(JobSpec { id: JobId(1), vc, user: 0, gpus: 12, submitted_s: 0 })?;
//! sched.round(5)?;
//! let bytes = sched.snapshot().to_bytes()?;
//!
//! let restored = Scheduler::restore(
//!     Topology::uniform(2, 2, 8)?,
//!     PolicySet::fallbacks(),
//!     Snapshot::from_bytes(&bytes)?,
//! )?;
//! assert_eq!(restored.jobs(), sched.jobs());
//! assert_eq!(restored.state().free_gpus(), 20);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use gangway_plugin_sdk::{JobId, Slot};
use serde::{Deserialize, Serialize};

use crate::book::{TypeQuota, VirtualCluster};
use crate::job::{JobRecord, JobState};
use crate::placement::Scope;
use crate::placement_strategy::PlacementStrategy;
use crate::policy::{PolicyOrigin, PolicySet};
use crate::scheduler::Scheduler;
use crate::state::{Health, InvariantViolation};
use crate::topology::{ServerId, Topology};

/// The snapshot format this build writes and reads.
pub const SNAPSHOT_VERSION: u32 = 4;

/// The format without quotas per GPU type: what a snapshot with none is
/// written as (if some job has GPU types).
const TYPED_VERSION: u32 = 3;

/// The format without GPU types: what a snapshot with no job's types and
/// no quota per type is written as.
const UNTYPED_VERSION: u32 = 2;

/// The oldest snapshot format this build reads (without policies).
const OLDEST_VERSION: u32 = 1;

/// The first bytes of an encoded snapshot.
pub const SNAPSHOT_MAGIC: [u8; 6] = *b"GWSNAP";

/// One server as the snapshot saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerRecord {
    /// Its name in the topology.
    pub name: String,
    /// Its GPU count.
    pub gpus: u32,
    /// Its health.
    pub health: Health,
}

/// A scheduler's state at one moment (see the [module docs](self) for what
/// it holds and how it is encoded).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    version: u32,
    servers: Vec<ServerRecord>,
    strategy: PlacementStrategy,
    vcs: Vec<VirtualCluster>,
    jobs: Vec<JobRecord>,
    reservations: Vec<(JobId, Scope)>,
    last_round_s: u64,
    view_window: u64,
    last_view: Vec<JobId>,
    rounds: u64,
    prev_view_round_s: Option<u64>,
    policies: Vec<(Slot, PolicyOrigin)>,
    gpu_types: Vec<(JobId, Vec<String>)>,
    type_quotas: Vec<(String, Vec<(String, TypeQuota)>)>,
}

/// Why a snapshot could not be encoded, decoded or restored.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// The bytes do not start with [`SNAPSHOT_MAGIC`].
    #[error("not a Gangway scheduler snapshot (it does not start with \"GWSNAP\")")]
    NotASnapshot,
    /// A format version this build does not read.
    #[error(
        "snapshot format version {found} is not supported (this build reads version {supported})"
    )]
    UnsupportedVersion {
        /// The version in the snapshot.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// The body does not decode (truncated or corrupt).
    #[error("snapshot does not decode: {0}")]
    Decode(String),
    /// The snapshot could not be encoded.
    #[error("snapshot does not encode: {0}")]
    Encode(String),
    /// The topology given to restore is not the snapshot's.
    #[error("snapshot was taken on another topology: {0}")]
    TopologyMismatch(String),
    /// A job record is inconsistent.
    #[error("snapshot: {job}: {why}")]
    InvalidJob {
        /// The job.
        job: JobId,
        /// What is wrong.
        why: String,
    },
    /// A virtual cluster, server or reservation entry is inconsistent.
    #[error("snapshot: {0}")]
    Invalid(String),
    /// A slot's recorded policy cannot be built again.
    #[error("snapshot: cannot rebuild the {slot} policy: {why}")]
    Policy {
        /// The slot.
        slot: Slot,
        /// What is wrong.
        why: String,
    },
    /// The restored scheduler failed its invariant check.
    #[error("snapshot restores to an inconsistent scheduler: {0}")]
    Invariant(#[from] InvariantViolation),
}

impl Snapshot {
    /// The format version: [`SNAPSHOT_VERSION`] for snapshots this build
    /// made with quotas per GPU type, 3 for those with GPU types but no
    /// such quota, 2 for those with neither.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Every job record, in id order.
    pub fn jobs(&self) -> &[JobRecord] {
        &self.jobs
    }

    /// The time of the last round before the snapshot.
    pub fn last_round_s(&self) -> u64 {
        self.last_round_s
    }

    /// The servers, in [`ServerId`] order, with their health.
    pub fn servers(&self) -> &[ServerRecord] {
        &self.servers
    }

    /// What each slot's policy was when the snapshot was taken, in round
    /// order (empty for a version-1 snapshot, which did not record them).
    pub fn policies(&self) -> &[(Slot, PolicyOrigin)] {
        &self.policies
    }

    /// Encodes the snapshot: magic, then postcard. It is written in the
    /// oldest version that holds it (each version adds a last field, left
    /// out when it is empty), so a snapshot of a cluster of one GPU type is
    /// version 2, byte for byte as before GPU types.
    pub fn to_bytes(&self) -> Result<Vec<u8>, SnapshotError> {
        let version = self.least_version();
        let mut body = postcard::to_allocvec(&Snapshot {
            version,
            ..self.clone()
        })
        .map_err(|e| SnapshotError::Encode(e.to_string()))?;
        // Each field a later version added is empty: one byte, 0.
        body.truncate(body.len() - (SNAPSHOT_VERSION - version) as usize);
        let mut out = SNAPSHOT_MAGIC.to_vec();
        out.extend_from_slice(&body);
        Ok(out)
    }

    /// The oldest version that holds this snapshot.
    fn least_version(&self) -> u32 {
        if !self.type_quotas.is_empty() {
            SNAPSHOT_VERSION
        } else if !self.gpu_types.is_empty() {
            TYPED_VERSION
        } else {
            UNTYPED_VERSION
        }
    }

    /// Decodes bytes written by [`Snapshot::to_bytes`], refusing other
    /// formats and versions.
    pub fn from_bytes(bytes: &[u8]) -> Result<Snapshot, SnapshotError> {
        let body = bytes
            .strip_prefix(&SNAPSHOT_MAGIC[..])
            .ok_or(SnapshotError::NotASnapshot)?;
        let (version, _) = postcard::take_from_bytes::<u32>(body)
            .map_err(|e| SnapshotError::Decode(format!("format version: {e}")))?;
        let old_body;
        let body = match version {
            SNAPSHOT_VERSION => body,
            // Version 3 is version 4 without its last field, the quotas per
            // GPU type; version 2 also without the GPU types; version 1
            // also without the policies. An empty list is the one byte 0.
            TYPED_VERSION | UNTYPED_VERSION | OLDEST_VERSION => {
                old_body = [body, &[0; 3][..(SNAPSHOT_VERSION - version) as usize]].concat();
                &old_body[..]
            }
            _ => {
                return Err(SnapshotError::UnsupportedVersion {
                    found: version,
                    supported: SNAPSHOT_VERSION,
                });
            }
        };
        let (snapshot, rest) = postcard::take_from_bytes::<Snapshot>(body)
            .map_err(|e| SnapshotError::Decode(e.to_string()))?;
        if !rest.is_empty() {
            return Err(SnapshotError::Decode(format!(
                "{} bytes after the end of the snapshot",
                rest.len()
            )));
        }
        Ok(snapshot)
    }
}

fn invalid_job(job: JobId, why: impl Into<String>) -> SnapshotError {
    SnapshotError::InvalidJob {
        job,
        why: why.into(),
    }
}

impl Scheduler {
    /// The scheduler's state now, for [`Scheduler::restore`].
    pub fn snapshot(&self) -> Snapshot {
        let topo = self.state.topology();
        let servers = topo
            .servers()
            .iter()
            .enumerate()
            .map(|(i, s)| ServerRecord {
                name: s.name.clone(),
                gpus: s.gpus,
                health: self
                    .state
                    .health(ServerId(u32::try_from(i).unwrap_or(u32::MAX)))
                    .unwrap_or(Health::Up),
            })
            .collect();
        let gpu_types = self.gpu_type_names();
        let mut snapshot = Snapshot {
            version: SNAPSHOT_VERSION,
            servers,
            strategy: self.state.strategy(),
            vcs: self.book.vcs.list().to_vec(),
            jobs: self.book.records().values().cloned().collect(),
            reservations: self
                .book
                .reservations
                .iter()
                .map(|(j, s)| (*j, *s))
                .collect(),
            last_round_s: self.last_round_s,
            view_window: self.view_window as u64,
            last_view: self.book.last_view_ids(),
            rounds: self.rounds,
            prev_view_round_s: self.book.prev_view_round_s(),
            policies: self.policies.origins(),
            gpu_types,
            type_quotas: self.type_quota_names(),
        };
        snapshot.version = snapshot.least_version();
        snapshot
    }

    /// Each VC's quotas per GPU type, by VC and type name, in VC order.
    fn type_quota_names(&self) -> Vec<(String, Vec<(String, TypeQuota)>)> {
        let topo = self.state.topology();
        let vcs = self.book.vcs.list();
        self.book
            .type_quotas
            .iter()
            .filter_map(|(vc, quotas)| {
                let name = vcs.get(vc.index())?.name.clone();
                let by_type = quotas
                    .iter()
                    .filter_map(|(t, q)| Some((topo.gpu_types().get(t.index())?.name.clone(), *q)))
                    .collect();
                Some((name, by_type))
            })
            .collect()
    }

    /// Restores each VC's quotas per GPU type, by VC and type name.
    fn restore_type_quotas(
        &mut self,
        quotas: &[(String, Vec<(String, TypeQuota)>)],
    ) -> Result<(), SnapshotError> {
        for (vc_name, by_type) in quotas {
            let vc = self.find_virtual_cluster(vc_name).ok_or_else(|| {
                SnapshotError::Invalid(format!("quotas per GPU type of unknown VC {vc_name:?}"))
            })?;
            let mut map = crate::TypeQuotas::new();
            for (type_name, q) in by_type {
                let t = self.topology().gpu_type_by_name(type_name).ok_or_else(|| {
                    SnapshotError::Invalid(format!(
                        "VC {vc_name:?} has a quota of GPU type {type_name:?}, which the topology does not have"
                    ))
                })?;
                map.insert(t, *q);
            }
            self.book.set_type_quotas(vc, map);
        }
        Ok(())
    }

    /// A scheduler over `topology` with `policies`, in the state `snapshot`
    /// recorded. Refuses a snapshot of another topology, an inconsistent
    /// record, or one that fails [`Scheduler::check_invariants`], naming
    /// what is wrong.
    pub fn restore(
        topology: Topology,
        policies: PolicySet,
        snapshot: Snapshot,
    ) -> Result<Scheduler, SnapshotError> {
        if !(OLDEST_VERSION..=SNAPSHOT_VERSION).contains(&snapshot.version) {
            return Err(SnapshotError::UnsupportedVersion {
                found: snapshot.version,
                supported: SNAPSHOT_VERSION,
            });
        }
        check_topology(&topology, &snapshot.servers)?;
        let domains = topology.domains().len();
        let mut sched = Scheduler::with_policies(topology, policies);
        sched.set_placement_strategy(snapshot.strategy);
        sched.restore_vcs(snapshot.vcs)?;
        for record in snapshot.jobs {
            sched.restore_job(record)?;
        }
        sched
            .restore_gpu_types(&snapshot.gpu_types)
            .map_err(|(job, why)| invalid_job(job, why))?;
        sched.restore_type_quotas(&snapshot.type_quotas)?;
        sched.restore_health(&snapshot.servers)?;
        let scopes = (snapshot.servers.len(), domains);
        sched.restore_reservations(snapshot.reservations, scopes)?;
        sched.last_round_s = snapshot.last_round_s;
        sched.view_window = usize::try_from(snapshot.view_window).unwrap_or(usize::MAX);
        if let Some(id) = snapshot
            .last_view
            .iter()
            .find(|id| sched.book.get(id).is_none())
        {
            return Err(invalid_job(
                *id,
                "was in the last round's view but is unknown",
            ));
        }
        // The reason each was shown with is the one its state holds.
        sched
            .book
            .restore_last_view(&snapshot.last_view, snapshot.prev_view_round_s);
        sched.rounds = snapshot.rounds;
        sched.check_invariants()?;
        Ok(sched)
    }

    /// Restores the virtual clusters `vcs`, in order (their pending counts
    /// are rebuilt from the pending jobs later).
    fn restore_vcs(&mut self, vcs: Vec<VirtualCluster>) -> Result<(), SnapshotError> {
        for v in vcs {
            if v.name.is_empty() {
                return Err(SnapshotError::Invalid(
                    "a virtual cluster has no name".into(),
                ));
            }
            let id = self.virtual_cluster(&v.name);
            if id.0 as usize != self.book.vcs.len() - 1 {
                return Err(SnapshotError::Invalid(format!(
                    "virtual cluster {:?} appears twice",
                    v.name
                )));
            }
            self.book.change_vc(id, |slot| {
                *slot = VirtualCluster {
                    pending_gpus: 0,
                    pending_jobs: 0,
                    ..v
                }
            });
        }
        Ok(())
    }

    /// Restores one job's `record`, allocating its GPUs if it runs.
    fn restore_job(&mut self, record: JobRecord) -> Result<(), SnapshotError> {
        let id = record.spec.id;
        let total = self.topology().total_gpus();
        if self.book.get(&id).is_some() {
            return Err(invalid_job(id, "appears twice"));
        }
        if record.spec.gpus == 0 || record.spec.gpus > total {
            return Err(invalid_job(
                id,
                format!("asks for {} GPUs on a cluster of {total}", record.spec.gpus),
            ));
        }
        if record.spec.vc.0 as usize >= self.book.vcs.len() {
            return Err(invalid_job(
                id,
                format!("unknown virtual cluster {:?}", record.spec.vc),
            ));
        }
        if let JobState::Running { choice, .. } = &record.state {
            let p = &choice.placement;
            // A shrunk gang ([`Scheduler::shrink`]) holds fewer than it
            // needs, never more.
            if p.gpu_count() > record.next_gpus() || choice.servers != p.server_count() {
                return Err(invalid_job(
                    id,
                    format!(
                        "needs {} GPUs but its placement holds {} on {} servers (recorded {})",
                        record.next_gpus(),
                        p.gpu_count(),
                        p.server_count(),
                        choice.servers
                    ),
                ));
            }
            self.state
                .allocate(id, p)
                .map_err(|e| invalid_job(id, e.to_string()))?;
        }
        // Files it in the indexes of its state.
        self.book.insert_record(record);
        Ok(())
    }

    /// Restores the health of the `servers` that are not up; refuses a job
    /// running on one that is down.
    fn restore_health(&mut self, servers: &[ServerRecord]) -> Result<(), SnapshotError> {
        for (i, server) in servers.iter().enumerate() {
            let s = ServerId(u32::try_from(i).unwrap_or(u32::MAX));
            if server.health == Health::Up {
                continue;
            }
            let hit = self
                .state
                .set_health(s, server.health)
                .map_err(|e| SnapshotError::Invalid(e.to_string()))?;
            if let Some(job) = hit.first() {
                return Err(invalid_job(
                    *job,
                    format!("runs on server {} which is down", server.name),
                ));
            }
        }
        Ok(())
    }

    /// Restores the `reservations`, each of a pending job and within the
    /// topology's `(servers, domains)`.
    fn restore_reservations(
        &mut self,
        reservations: Vec<(JobId, Scope)>,
        (servers, domains): (usize, usize),
    ) -> Result<(), SnapshotError> {
        for (job, scope) in reservations {
            if !self.book.get(&job).is_some_and(JobRecord::is_pending) {
                return Err(invalid_job(job, "holds a reservation but is not pending"));
            }
            let valid = match scope {
                Scope::Server(s) => (s.0 as usize) < servers,
                Scope::Domain(d) => (d.0 as usize) < domains,
            };
            if !valid {
                return Err(invalid_job(
                    job,
                    format!("reservation scope {scope:?} does not exist"),
                ));
            }
            self.book.reservations.insert(job, scope);
        }
        Ok(())
    }
}

fn check_topology(topo: &Topology, servers: &[ServerRecord]) -> Result<(), SnapshotError> {
    let ours = topo.servers();
    if ours.len() != servers.len() {
        return Err(SnapshotError::TopologyMismatch(format!(
            "the snapshot has {} servers, the topology {}",
            servers.len(),
            ours.len()
        )));
    }
    for (i, (a, b)) in ours.iter().zip(servers).enumerate() {
        if a.name != b.name || a.gpus != b.gpus {
            return Err(SnapshotError::TopologyMismatch(format!(
                "server {i} is {} with {} GPUs in the snapshot but {} with {} GPUs in the topology",
                b.name, b.gpus, a.name, a.gpus
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::JobSpec;

    fn busy() -> Scheduler {
        let mut sched = Scheduler::new(Topology::uniform(2, 2, 8).unwrap());
        let vc = sched.virtual_cluster("a");
        sched.set_quota(vc, Some(24));
        for (i, gpus) in [8u32, 4, 16, 2].into_iter().enumerate() {
            let spec = JobSpec {
                id: JobId(i as u64),
                vc,
                user: 0,
                gpus,
                submitted_s: i as u64,
            };
            sched.submit(spec).unwrap();
        }
        sched.round(10).unwrap();
        sched.drain(ServerId(3)).unwrap();
        sched
    }

    #[test]
    fn round_trip_is_identical() {
        let sched = busy();
        let snap = sched.snapshot();
        let bytes = snap.to_bytes().unwrap();
        assert_eq!(&bytes[..6], b"GWSNAP");
        let back = Snapshot::from_bytes(&bytes).unwrap();
        assert_eq!(back, snap);
        let restored = Scheduler::restore(
            Topology::uniform(2, 2, 8).unwrap(),
            PolicySet::fallbacks(),
            back,
        )
        .unwrap();
        assert_eq!(restored.snapshot().to_bytes().unwrap(), bytes);
        assert_eq!(restored.state().health(ServerId(3)), Some(Health::Draining));
    }

    #[test]
    fn bad_bytes_and_versions_are_refused() {
        let bytes = busy().snapshot().to_bytes().unwrap();
        assert!(matches!(
            Snapshot::from_bytes(b"hello"),
            Err(SnapshotError::NotASnapshot)
        ));
        assert!(matches!(
            Snapshot::from_bytes(&bytes[..bytes.len() - 3]),
            Err(SnapshotError::Decode(_))
        ));
        let mut v5 = bytes.clone();
        v5[6] = 5;
        let e = Snapshot::from_bytes(&v5).unwrap_err();
        assert_eq!(
            e.to_string(),
            "snapshot format version 5 is not supported (this build reads version 4)"
        );
        let mut long = bytes;
        long.push(0);
        assert!(matches!(
            Snapshot::from_bytes(&long),
            Err(SnapshotError::Decode(_))
        ));
    }

    #[test]
    fn restore_refuses_another_topology_and_bad_records() {
        let snap = busy().snapshot();
        let e = Scheduler::restore(
            Topology::uniform(2, 3, 8).unwrap(),
            PolicySet::fallbacks(),
            snap.clone(),
        )
        .unwrap_err();
        assert!(matches!(e, SnapshotError::TopologyMismatch(_)), "{e}");

        // Two running jobs on the same GPUs.
        let mut clash = snap.clone();
        let running: Vec<usize> = (0..clash.jobs.len())
            .filter(|&i| clash.jobs[i].is_running())
            .collect();
        let first = clash.jobs[running[0]].state.clone();
        let gpus = clash.jobs[running[0]].spec.gpus;
        let victim = running[1];
        clash.jobs[victim].state = first;
        clash.jobs[victim].spec.gpus = gpus;
        let e = Scheduler::restore(
            Topology::uniform(2, 2, 8).unwrap(),
            PolicySet::fallbacks(),
            clash,
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                SnapshotError::InvalidJob { .. } | SnapshotError::Invariant(_)
            ),
            "{e}"
        );

        // A running job on a server recorded down.
        let mut down = snap.clone();
        let server = match &down.jobs[running[0]].state {
            JobState::Running { choice, .. } => choice.placement.parts[0].server,
            _ => unreachable!(),
        };
        down.servers[server.0 as usize].health = Health::Down;
        let e = Scheduler::restore(
            Topology::uniform(2, 2, 8).unwrap(),
            PolicySet::fallbacks(),
            down,
        )
        .unwrap_err();
        assert!(e.to_string().contains("which is down"), "{e}");

        // VC bookkeeping that does not match the running jobs.
        let mut held = snap;
        held.vcs[0].held_gpus += 1;
        let e = Scheduler::restore(
            Topology::uniform(2, 2, 8).unwrap(),
            PolicySet::fallbacks(),
            held,
        )
        .unwrap_err();
        assert!(matches!(e, SnapshotError::Invariant(_)), "{e}");
    }
}
