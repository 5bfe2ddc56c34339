//! The daemon: Gangway's queue in front of Slurm.
//!
//! One thread runs cycles and alone owns the state; an async server on
//! another serves clients within per-user and total limits
//! ([`socket`]) and hands their requests to the cycle thread, which
//! answers between cycles (a submission or a cancel runs a round at once);
//! Slurm's commands run on a third, end records are read on a fourth
//! ([`records`]), so no client, Slurm command or filesystem can stall the
//! cycle ([`serve`]). A cycle ([`cycle`]):
//!
//! 1. reads `sinfo --json` and `squeue --json`;
//! 2. for each launched job, reads its Slurm job: running (first time: its
//!    start is recorded), still pending in Slurm (past `launch_timeout_s` it
//!    is cancelled and re-queued), ended (`end_attempt`: completed passes,
//!    a non-zero exit fails, cancelled is killed, node failures and other
//!    Slurm-side ends are retried up to `max_attempts` launches);
//! 3. in native mode, takes the jobs users submitted with sbatch into the
//!    managed partition ([`crate::native`]), each at its own GPUs, its
//!    CPUs and memory kept in per-node books ([`crate::resources`]); a
//!    job requeued in Slurm goes back to Gangway's queue;
//! 4. checks the partition's lock is still its own (else it decides
//!    nothing more and stops), builds the engine's truth (Gangway's running
//!    jobs where Slurm runs them, every other Slurm job holding GPUs as
//!    foreign load, the GPUs of nodes whose CPUs or memory are all held,
//!    every node's health) and reconciles the scheduler with it: a node
//!    gone down interrupts its gangs whole, which are cancelled in Slurm
//!    and re-queued;
//! 5. restricts each pending job to the nodes where its CPUs and memory
//!    fit now ([`fit`]), runs a round, keeps the starts that fit the books
//!    together, saves the state, and launches them ([`launches`]):
//!    `sbatch` as the submitter, or, in native mode, pin and release;
//! 6. forgets finished jobs in the scheduler, keeping the last `history` for
//!    `status`, and saves the state if anything changed.
//!
//! Clients' requests ([`requests`]) are authorized by the caller's uid
//! ([`crate::access`]); what they change is journalled and saved before it
//! is acknowledged ([`state`]). Restarted (even after SIGKILL), the daemon
//! restores the scheduler from the saved snapshot, and its first cycle
//! reconciles it with Slurm before any round: launches Slurm knows are
//! adopted, launches it does not know are re-queued, so no job is lost or
//! started twice.

mod cycle;
mod events;
mod fit;
mod launches;
mod native;
pub mod records;
mod report;
mod requests;
mod serve;
mod socket;
mod state;

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gangway_core::Scheduler;
use gangway_core::snapshot::Snapshot;
use gangway_plugin_sdk::VcId;

pub use launches::{
    CancelHow, CancelOrder, LaunchOrder, LaunchOutcome, LaunchWork, run_cancels, run_launches,
};
pub use serve::serve;

use super::SlurmError;
use super::access::Access;
use super::config::{Config, FOREIGN_VC, Mode, VcConfig};
use super::engine::Slurm;
use super::persist::{self, JobEntry, SlotChange};
use super::policies::{self, Policies};
use super::protocol::DaemonStats;
use super::topology::{self, ClusterMap};

/// Gangway ids of foreign Slurm jobs: this bit plus the Slurm job id.
pub const FOREIGN_BIT: u64 = 1 << 62;

/// Events kept per job.
const MAX_EVENTS: usize = 32;

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// VC `v`'s quotas per GPU type as the scheduler counts them, by type id
/// (types the topology lacks, which the configuration check rules out,
/// are left out).
fn type_quotas(sched: &Scheduler, v: &VcConfig) -> gangway_core::TypeQuotas {
    v.gpu_quota
        .iter()
        .filter_map(|(name, q)| {
            let t = sched.topology().gpu_type_by_name(name)?;
            Some((
                t,
                gangway_core::TypeQuota::new(q.nominal, q.borrowing_limit),
            ))
        })
        .collect()
}

fn push_event(entry: &mut JobEntry, text: String) {
    tracing::info!(job = entry.id, "{text}");
    if entry.events.len() == MAX_EVENTS {
        entry.events.remove(1);
    }
    entry.events.push(text);
}

/// An update of a Slurm job the daemon asks for (`scontrol update`): an
/// admin comment in native mode, the lock's heartbeat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobUpdate {
    /// The Slurm job.
    pub job: u64,
    /// `scontrol update` fields, or a verb (`hold`, `release`) when it is
    /// one word without `=`.
    pub fields: Vec<String>,
}

/// The running daemon.
pub struct Daemon {
    cfg: Config,
    slurm: Slurm,
    map: ClusterMap,
    sched: Scheduler,
    policies: Policies,
    access: Access,
    vcs: BTreeMap<String, VcId>,
    foreign_vc: VcId,
    jobs: BTreeMap<u64, JobEntry>,
    history: VecDeque<JobEntry>,
    users: Vec<String>,
    next_id: u64,
    /// Per live job, launches Slurm took that do not count against
    /// `max_attempts`.
    uncounted: BTreeMap<u64, u32>,
    stats: DaemonStats,
    started: Instant,
    last_error: Option<String>,
    /// Since when (Unix ms) Slurm has not answered, and its last error.
    outage: Option<(u64, String)>,
    /// Since when (Unix ms) launches are held for a configuration refusal.
    hold: Option<(u64, String)>,
    /// How the state was recovered, when not from its newest file.
    state_note: Option<String>,
    /// What an operator should know (shown by `status`).
    warnings: Vec<String>,
    /// Slurm jobs to cancel (or, in native mode, to hold again).
    cancels: Vec<CancelOrder>,
    /// Slurm jobs to update.
    updates: Vec<JobUpdate>,
    dirty: bool,
    last_now: u64,
    /// This daemon's identity (its tags and its lock carry it).
    id: String,
    /// The journal lines the saved state covers, and those the state before
    /// it covered.
    seq: u64,
    prev_seq: u64,
    /// Swaps and rollbacks since the configured policies.
    slot_changes: Vec<(String, SlotChange)>,
    /// Whether the state came from version 2 or older (launches tagged
    /// without the daemon's identity).
    legacy_tags: bool,
    /// Our lock: its Slurm job and when its heartbeat was last renewed.
    lock: Option<(crate::lock::Lock, Instant)>,
    /// Why this daemon lost its lock, once it has: it then decides nothing.
    lost_lock: Option<String>,
    /// Whether a read of Slurm has been applied since the daemon started
    /// (rounds wait for it: the saved state is reconciled first).
    synced: bool,
    /// The partition served, as Slurm resolves it (the lock's key).
    served: crate::lock::Resolved,
    /// The served partition's nodes: the only ones in the topology, and
    /// the only ones a cycle reads (`sinfo` lists every partition's).
    served_nodes: std::collections::BTreeSet<String>,
    /// End records read and not yet used, by job and launch.
    records: BTreeMap<(u64, u32), records::RecordRead>,
    /// End records asked of the reader, and when.
    records_asked: BTreeMap<(u64, u32), Instant>,
    /// Per node, the CPUs and memory left ([`crate::resources`]).
    books: crate::resources::Books,
    /// Native jobs' CPUs and memory, by Gangway id (others: one CPU per
    /// node).
    needs: BTreeMap<u64, crate::resources::Needs>,
    /// Jobs waiting for CPUs or memory, and what their events say of it.
    fit_waits: BTreeMap<u64, String>,
    /// Whether Slurm tracks memory (`SelectTypeParameters=CR_*_Memory`).
    memory_tracked: bool,
    /// The record reader (`None`: records are read on the cycle's thread).
    record_reader: Option<std::sync::mpsc::Sender<records::RecordWork>>,
    /// Native mode: Slurm job to Gangway id of every job taken, and the
    /// admin comment last written on each held one.
    native: native::NativeBook,
}

impl std::fmt::Debug for Daemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Daemon")
            .field("jobs", &self.jobs.len())
            .finish_non_exhaustive()
    }
}

/// The nodes of `sinfo` that are in the served partition (`served`, its
/// node names): a daemon places on its partition's nodes only. Jobs of
/// other partitions on those nodes are still counted there (as foreign
/// load); the other nodes are not Gangway's to place on.
fn served_nodes(
    nodes: Vec<crate::engine::NodeInfo>,
    served: &std::collections::BTreeSet<String>,
) -> Vec<crate::engine::NodeInfo> {
    nodes
        .into_iter()
        .filter(|n| served.contains(&n.name))
        .collect()
}

/// Checks the setup before serving: `slurm.conf` readable, Slurm's
/// commands runnable, the configured partition known to Slurm (its own
/// words when it is not), and in native mode that job_submit.lua holds
/// jobs. Each problem is an error naming the file, command or partition.
pub fn check_setup(cfg: &Config, slurm: &Slurm) -> Result<(), SlurmError> {
    let conf = cfg
        .slurm
        .conf
        .clone()
        .or_else(|| std::env::var_os("SLURM_CONF").map(std::path::PathBuf::from));
    if let Some(conf) = conf
        && let Err(e) = std::fs::File::open(&conf)
    {
        return Err(SlurmError::Config {
            file: cfg.file.clone(),
            message: format!("slurm.conf {} cannot be read: {e}", conf.display()),
        });
    }
    for command in ["sinfo", "squeue", "sbatch", "scancel", "scontrol"] {
        slurm.version(command)?;
    }
    if let Some(partition) = &cfg.slurm.partition {
        slurm
            .partition_exists(partition)
            .map_err(|e| SlurmError::Config {
                file: cfg.file.clone(),
                message: format!("partition {partition:?}: {e}"),
            })?;
    }
    if cfg.mode == Mode::Native {
        native::check_setup(cfg, slurm)?;
    }
    Ok(())
}

impl Daemon {
    /// Checks the state folder, reads the cluster from Slurm, builds the
    /// policies, restores the saved state if there is one, and takes the
    /// partition's lock.
    pub fn start(cfg: Config) -> Result<Daemon, SlurmError> {
        let mut warnings = persist::prepare_folder(&cfg.state_dir)?;
        warnings.extend(state::prepare_ends_dir(&cfg)?);
        let slurm = Slurm::new(cfg.slurm.bin_dir.clone(), cfg.slurm.conf.clone())
            .with_timeout(Duration::from_secs(cfg.slurm.timeout_s.max(1)));
        check_setup(&cfg, &slurm)?;
        let served = crate::lock::resolve_partition(&slurm, cfg.slurm.partition.as_deref())
            .map_err(|e| SlurmError::Config {
                file: cfg.file.clone(),
                message: e.to_string(),
            })?;
        let access = Access::new(&cfg)?;
        let memory_tracked = slurm
            .config()?
            .iter()
            .any(|(k, v)| k == "SelectTypeParameters" && v.to_ascii_uppercase().contains("MEMORY"));
        let nodes = served_nodes(slurm.nodes()?, &crate::lock::node_set(&served.nodes));
        if !nodes.iter().any(|n| n.gpus > 0) {
            return Err(SlurmError::Topology(format!(
                "partition {} has no node with GPUs (its nodes: {:?})",
                served.partition, served.nodes
            )));
        }
        let racks = match &cfg.slurm.topology_conf {
            Some(p) => topology::racks_from_topology_conf(p)?,
            None => topology::racks_from_table(&cfg.racks, &cfg.file)?,
        };
        let map = topology::build(&nodes, &racks, &cfg.gpu_types)?;
        let (set, strategy, policies) = policies::build(&cfg)?;
        warnings.extend(policies.cache_refused());
        let recovered = state::recover(&cfg.state_dir)?;
        let restored = match &recovered.state {
            Some(st) => Snapshot::from_bytes(&st.scheduler)
                .and_then(|snap| Scheduler::restore(map.topology.clone(), set, snap))
                .map_err(|e| SlurmError::State {
                    file: persist::state_file(&cfg.state_dir).display().to_string(),
                    message: e.to_string(),
                })?,
            None => Scheduler::with_policies(map.topology.clone(), set),
        };
        let mut daemon = Daemon::assemble(cfg, slurm, map, restored, policies, access, recovered)?;
        daemon.served_nodes = crate::lock::node_set(&served.nodes);
        daemon.served = served;
        daemon.books = crate::resources::Books::of(&nodes, memory_tracked);
        daemon.memory_tracked = memory_tracked;
        daemon.sched.set_placement_strategy(strategy);
        daemon.rebuild_native_book();
        for w in &warnings {
            tracing::warn!("{w}");
        }
        daemon.warnings.extend(warnings);
        daemon.replay_slot_changes();
        // The daemon's identity is on disk before its lock carries it: a
        // daemon killed now finds its own lock when it comes back.
        daemon.save()?;
        daemon.take_lock()?;
        daemon.apply_saved_cancels();
        Ok(daemon)
    }

    /// The daemon of a restored (or new) scheduler and its saved state.
    fn assemble(
        cfg: Config,
        slurm: Slurm,
        map: ClusterMap,
        mut sched: Scheduler,
        policies: Policies,
        access: Access,
        recovered: state::Recovered,
    ) -> Result<Daemon, SlurmError> {
        let mut vcs = BTreeMap::new();
        for v in &cfg.vc {
            let id = sched.virtual_cluster(&v.name);
            sched.set_quota(id, v.quota_gpus);
            sched.set_weight(id, v.weight);
            sched.set_type_quotas(id, type_quotas(&sched, v));
            vcs.insert(v.name.clone(), id);
        }
        let foreign_vc = sched.virtual_cluster(FOREIGN_VC);
        let last_now = sched.snapshot().last_round_s();
        let loaded = recovered.state.is_some();
        let legacy_tags = recovered
            .state
            .as_ref()
            .is_some_and(|s| s.daemon_id.is_empty());
        let st = recovered.state.unwrap_or_default();
        let id = if st.daemon_id.is_empty() {
            persist::random_hex(8)?
        } else {
            st.daemon_id.clone()
        };
        Ok(Daemon {
            slurm,
            map,
            sched,
            policies,
            access,
            vcs,
            foreign_vc,
            jobs: st.jobs.into_iter().map(|j| (j.id, j)).collect(),
            history: st.history.into(),
            users: st.users,
            next_id: st.next_id.max(recovered.next_id_floor).max(1),
            uncounted: st.uncounted,
            stats: DaemonStats {
                recovered: loaded,
                ..DaemonStats::default()
            },
            started: Instant::now(),
            last_error: None,
            outage: None,
            hold: None,
            state_note: recovered.note,
            warnings: Vec::new(),
            cancels: Vec::new(),
            updates: Vec::new(),
            dirty: false,
            last_now,
            id,
            seq: st.seq,
            prev_seq: st.seq,
            slot_changes: st.slot_changes,
            legacy_tags,
            lock: None,
            lost_lock: None,
            synced: false,
            served: crate::lock::Resolved::default(),
            served_nodes: std::collections::BTreeSet::new(),
            records: BTreeMap::new(),
            records_asked: BTreeMap::new(),
            record_reader: None,
            books: crate::resources::Books::default(),
            needs: BTreeMap::new(),
            fit_waits: BTreeMap::new(),
            memory_tracked: false,
            native: native::NativeBook::default(),
            cfg,
        })
    }

    /// This daemon's identity.
    pub fn id(&self) -> &str {
        &self.id
    }

    fn now_s(&mut self) -> u64 {
        let now = unix_ms() / 1000;
        self.last_now = self.last_now.max(now);
        self.last_now
    }

    /// The Slurm commands of this daemon.
    pub fn slurm(&self) -> &Slurm {
        &self.slurm
    }

    /// Whether this daemon serves the native mode.
    fn native_mode(&self) -> bool {
        self.cfg.mode == Mode::Native
    }

    /// Takes the partition's lock in Slurm, or refuses to start.
    fn take_lock(&mut self) -> Result<(), SlurmError> {
        let now = unix_ms() / 1000;
        let trusted = [0, self.access.daemon_uid];
        let taken = crate::lock::take(
            &self.slurm,
            &self.served,
            &self.id,
            self.cfg.lock_stale_s,
            now,
            &trusted,
        )?;
        self.warnings.extend(taken.notes);
        self.lock = Some((taken.lock, Instant::now()));
        Ok(())
    }

    /// Renews the lock's heartbeat when it is due (an update for the Slurm
    /// thread).
    fn heartbeat(&mut self) {
        let due = crate::lock::heartbeat_every(self.cfg.lock_stale_s);
        let Some((lock, at)) = self.lock.as_mut() else {
            return;
        };
        if at.elapsed() < due {
            return;
        }
        lock.beat_s = unix_ms() / 1000;
        *at = Instant::now();
        self.updates.push(JobUpdate {
            job: lock.job,
            fields: vec![format!("Comment={}", lock.comment())],
        });
    }

    /// The Slurm jobs to cancel since the last call.
    pub fn take_cancels(&mut self) -> Vec<CancelOrder> {
        std::mem::take(&mut self.cancels)
    }

    /// Cancels that Slurm did not take (it did not answer): tried again.
    pub fn retry_cancels(&mut self, failed: Vec<CancelOrder>) {
        self.cancels.extend(failed);
    }

    /// The Slurm job updates since the last call.
    pub fn take_updates(&mut self) -> Vec<JobUpdate> {
        self.heartbeat();
        std::mem::take(&mut self.updates)
    }

    /// Why this daemon lost its partition's lock, if it has.
    pub fn lost_lock(&self) -> Option<&str> {
        self.lost_lock.as_deref()
    }

    /// The partition's lock, while this daemon holds it.
    pub fn lock(&self) -> Option<&crate::lock::Lock> {
        self.lock.as_ref().map(|(l, _)| l)
    }
}

#[cfg(test)]
mod tests;
