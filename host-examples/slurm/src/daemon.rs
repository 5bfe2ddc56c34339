//! The daemon: Gangway's queue in front of Slurm.
//!
//! One thread runs cycles; another accepts clients on the Unix socket and
//! hands their requests to the cycle thread, which answers between cycles
//! (a submission or a cancel triggers a cycle at once). A cycle:
//!
//! 1. reads `sinfo --json` and `squeue --json`;
//! 2. for each launched job, reads its Slurm job: running (first time: its
//!    start is recorded), still pending in Slurm (past `launch_timeout_s` it
//!    is cancelled and re-queued), ended (`end_attempt`: completed passes,
//!    a non-zero exit fails, cancelled is killed, node failures and other
//!    Slurm-side ends are retried up to `max_attempts` launches);
//! 3. builds the engine's truth (Gangway's running jobs where Slurm runs
//!    them, every other Slurm job holding GPUs as foreign load, every node's
//!    health) and reconciles the scheduler with it: a node gone down
//!    interrupts its gangs whole, which are cancelled in Slurm and re-queued;
//! 4. runs a round, saves the state, and launches the starts with `sbatch`
//!    (a refused launch is re-queued or failed with Slurm's message);
//! 5. forgets finished jobs in the scheduler, keeping the last `history` for
//!    `status`, and saves the state if anything changed.
//!
//! Restarted (even after SIGKILL), the daemon restores the scheduler from
//! the saved snapshot, and its first cycle reconciles it with Slurm before
//! any round: launches Slurm knows are adopted, launches it does not know
//! are re-queued, so no job is lost or started twice.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::Write;
use std::os::unix::net::UnixListener;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gangway_core::reconcile::{Difference, EngineTruth};
use gangway_core::snapshot::Snapshot;
use gangway_core::{
    AttemptEnd, JobSpec, JobState, Placement, Scheduler, ServerGpus, ServerId, WaitReason,
};
use gangway_plugin_sdk::{FailureClass, JobId, VcId};

use super::SlurmError;
use super::config::{Config, FOREIGN_VC};
use super::engine::{NodeGpus, NodeInfo, Slurm, SlurmJob};
use super::launch::{self, LaunchSpec, Part};
use super::persist::{self, JobEntry, Launch, STATE_VERSION, State};
use super::policies::{self, Policies};
use super::protocol::{
    DaemonStats, JobReport, NodeReport, Request, Response, SlotReport, StatusReport, read_message,
    write_message,
};
use super::topology::{self, ClusterMap};

/// Gangway ids of foreign Slurm jobs: this bit plus the Slurm job id.
pub const FOREIGN_BIT: u64 = 1 << 62;

/// Milliseconds a launch may stay unconfirmed (its `sbatch` was running
/// when the daemon died) before it is taken as never submitted.
const UNCONFIRMED_MS: u64 = 5_000;

/// Events kept per job.
const MAX_EVENTS: usize = 32;

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn push_event(entry: &mut JobEntry, text: String) {
    tracing::info!(job = entry.id, "{text}");
    if entry.events.len() == MAX_EVENTS {
        entry.events.remove(1);
    }
    entry.events.push(text);
}

/// What a Slurm job (all its components) is doing.
#[derive(Clone, Debug, PartialEq, Eq)]
enum GroupState {
    /// Holding its nodes (running, completing, ...).
    Active,
    /// Still in Slurm's queue, with Slurm's reason.
    Pending(String),
    /// Ended: the most telling state of its components and exit code.
    Ended { state: String, exit: i64 },
}

fn group_state(comps: &[&SlurmJob]) -> GroupState {
    const ACTIVE: [&str; 8] = [
        "RUNNING",
        "COMPLETING",
        "CONFIGURING",
        "SUSPENDED",
        "RESIZING",
        "STAGE_OUT",
        "SIGNALING",
        "STOPPED",
    ];
    const ENDS: [&str; 9] = [
        "NODE_FAIL",
        "BOOT_FAIL",
        "FAILED",
        "OUT_OF_MEMORY",
        "TIMEOUT",
        "DEADLINE",
        "PREEMPTED",
        "CANCELLED",
        "COMPLETED",
    ];
    if comps.iter().any(|j| ACTIVE.contains(&j.state.as_str())) {
        return GroupState::Active;
    }
    if let Some(p) = comps
        .iter()
        .find(|j| j.state == "PENDING" || j.state.starts_with("REQUEUE"))
    {
        return GroupState::Pending(p.reason.clone());
    }
    let state = ENDS
        .iter()
        .find(|s| comps.iter().any(|j| j.state == **s))
        .map_or_else(
            || comps.first().map_or(String::new(), |j| j.state.clone()),
            |s| (*s).to_string(),
        );
    let exit = comps.iter().map(|j| j.exit_code).max().unwrap_or(0);
    GroupState::Ended { state, exit }
}

/// How an ended Slurm job ends Gangway's attempt, and a sentence for users.
/// A failure is the retry slot's to decide unless it was the `last` attempt
/// the daemon allows; a program's own failure is of unknown class (out of
/// memory aside), anything else Slurm ended (a node failure, preemption)
/// took the job away from a healthy program.
fn attempt_end(state: &str, exit: i64, last: bool) -> (AttemptEnd, String) {
    let code = if exit > 255 { exit >> 8 } else { exit };
    let then = if last {
        "; no attempts left"
    } else {
        "; the retry policy decides"
    };
    match state {
        "COMPLETED" => (AttemptEnd::Passed, "completed".into()),
        "CANCELLED" => (AttemptEnd::Killed, "cancelled in Slurm".into()),
        "FAILED" | "OUT_OF_MEMORY" | "TIMEOUT" | "DEADLINE" => {
            let class = if state == "OUT_OF_MEMORY" {
                FailureClass::CpuOutOfMemory
            } else {
                FailureClass::Unknown
            };
            (
                AttemptEnd::Failed { class, last },
                format!("{} (exit code {code}){then}", state.to_ascii_lowercase()),
            )
        }
        other => (
            AttemptEnd::Failed {
                class: FailureClass::JobPreempted,
                last,
            },
            format!("ended in Slurm as {other}{then}"),
        ),
    }
}

/// The running daemon.
pub struct Daemon {
    cfg: Config,
    slurm: Slurm,
    map: ClusterMap,
    sched: Scheduler,
    policies: Policies,
    vcs: BTreeMap<String, VcId>,
    foreign_vc: VcId,
    jobs: BTreeMap<u64, JobEntry>,
    history: VecDeque<JobEntry>,
    users: Vec<String>,
    next_id: u64,
    /// Per live job, launches that do not count against `max_attempts`.
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
    /// Slurm jobs to cancel: (Gangway id, Slurm job id).
    cancels: Vec<(u64, u64)>,
    dirty: bool,
    last_now: u64,
}

/// One launch to run with `sbatch`: made by a cycle, run on the Slurm I/O
/// side, its outcome handed back ([`Daemon::on_launched`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchOrder {
    /// Gangway's job id.
    pub id: u64,
    /// The attempt (launch) number.
    pub attempt: u32,
    /// `sbatch`'s arguments.
    pub args: Vec<String>,
    /// The batch script.
    pub script: String,
    /// Where it goes.
    pub parts: Vec<Part>,
}

/// How a launch went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LaunchOutcome {
    /// Slurm took it as this job.
    Launched(u64),
    /// Slurm did not answer (this launch, or one before it in its batch).
    Unreachable(String),
    /// Slurm refused it for a reason of its own configuration.
    Misconfigured(String),
    /// Slurm refused it (the job's own problem, as far as can be told).
    Refused(String),
}

/// Runs `orders` one by one; once Slurm does not answer or refuses for its
/// configuration, the rest are not tried and get the same outcome.
pub fn run_launches(slurm: &Slurm, orders: Vec<LaunchOrder>) -> Vec<(LaunchOrder, LaunchOutcome)> {
    let mut stop: Option<LaunchOutcome> = None;
    orders
        .into_iter()
        .map(|order| {
            if let Some(outcome) = &stop {
                return (order, outcome.clone());
            }
            let outcome = match slurm.sbatch(&order.args, &order.script) {
                Ok(gid) => LaunchOutcome::Launched(gid),
                Err(e @ (SlurmError::Unreachable { .. } | SlurmError::CommandMissing { .. })) => {
                    LaunchOutcome::Unreachable(e.to_string())
                }
                Err(e @ SlurmError::Misconfigured { .. }) => {
                    LaunchOutcome::Misconfigured(e.to_string())
                }
                Err(e) => LaunchOutcome::Refused(e.to_string()),
            };
            if matches!(
                outcome,
                LaunchOutcome::Unreachable(_) | LaunchOutcome::Misconfigured(_)
            ) {
                stop = Some(outcome.clone());
            }
            (order, outcome)
        })
        .collect()
}

/// Runs `scancel` for each (Gangway id, Slurm id); returns those Slurm did
/// not answer for (to try again). Other refusals (the job is gone) are
/// logged.
pub fn run_cancels(slurm: &Slurm, cancels: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    let mut failed = Vec::new();
    for (id, gid) in cancels {
        match slurm.scancel(gid) {
            Ok(()) => {}
            Err(e @ SlurmError::Unreachable { .. }) => {
                tracing::warn!(job = id, slurm_job = gid, "scancel: {e}; tried again");
                failed.push((id, gid));
            }
            Err(e) => tracing::warn!(job = id, slurm_job = gid, "scancel: {e}"),
        }
    }
    failed
}

/// Checks the setup before serving: `slurm.conf` readable, Slurm's
/// commands runnable, the configured partition known to Slurm. Each
/// problem is an error naming the file, command or partition.
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
    Ok(())
}

/// Seconds the queue stays held after a configuration refusal before a
/// launch tries again.
const HOLD_RETRY_S: u64 = 30;

/// What Slurm says a launch waits for when it waits for resources Gangway
/// does not see (load started in Slurm directly): not the job's fault.
const WAITING_FOR_RESOURCES: [&str; 2] = ["Resources", "Priority"];

impl std::fmt::Debug for Daemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Daemon")
            .field("jobs", &self.jobs.len())
            .finish_non_exhaustive()
    }
}

impl Daemon {
    /// Reads the cluster from Slurm, builds the policies, and restores the
    /// saved state if there is one.
    pub fn start(cfg: Config) -> Result<Daemon, SlurmError> {
        std::fs::create_dir_all(&cfg.state_dir).map_err(|e| {
            SlurmError::io(
                format!("creating state folder {}", cfg.state_dir.display()),
                e,
            )
        })?;
        let slurm = Slurm::new(cfg.slurm.bin_dir.clone(), cfg.slurm.conf.clone())
            .with_timeout(Duration::from_secs(cfg.slurm.timeout_s.max(1)));
        check_setup(&cfg, &slurm)?;
        let nodes = slurm.nodes()?;
        let racks = match &cfg.slurm.topology_conf {
            Some(p) => topology::racks_from_topology_conf(p)?,
            None => topology::racks_from_table(&cfg.racks, &cfg.file)?,
        };
        let map = topology::build(&nodes, &racks)?;
        let (set, strategy, policies) = policies::build(&cfg)?;
        let saved = persist::load(&cfg.state_dir)?;
        let file = persist::state_file(&cfg.state_dir).display().to_string();
        let state_err = |message: String| SlurmError::State {
            file: file.clone(),
            message,
        };
        let state_note = saved.as_ref().and_then(|l| l.fell_back.clone());
        if let Some(note) = &state_note {
            tracing::warn!("{note}");
        }
        let saved = saved.map(|l| l.state);
        let mut sched = match &saved {
            Some(st) => {
                let snap =
                    Snapshot::from_bytes(&st.scheduler).map_err(|e| state_err(e.to_string()))?;
                Scheduler::restore(map.topology.clone(), set, snap)
                    .map_err(|e| state_err(e.to_string()))?
            }
            None => Scheduler::with_policies(map.topology.clone(), set),
        };
        sched.set_placement_strategy(strategy);
        let mut vcs = BTreeMap::new();
        for v in &cfg.vc {
            let id = sched.virtual_cluster(&v.name);
            sched.set_quota(id, v.quota_gpus);
            sched.set_weight(id, v.weight);
            vcs.insert(v.name.clone(), id);
        }
        let foreign_vc = sched.virtual_cluster(FOREIGN_VC);
        let recovered = saved.is_some();
        let st = saved.unwrap_or_default();
        let last_now = sched.snapshot().last_round_s();
        Ok(Daemon {
            slurm,
            map,
            sched,
            policies,
            vcs,
            foreign_vc,
            jobs: st.jobs.into_iter().map(|j| (j.id, j)).collect(),
            history: st.history.into(),
            users: st.users,
            // The previous state is one save behind, and a save covers at
            // most one new submission: one id more is never one given out.
            next_id: st.next_id.max(1) + u64::from(state_note.is_some()),
            uncounted: st.uncounted,
            stats: DaemonStats {
                recovered,
                ..DaemonStats::default()
            },
            started: Instant::now(),
            last_error: None,
            outage: None,
            hold: None,
            state_note,
            cancels: Vec::new(),
            dirty: false,
            last_now,
            cfg,
        })
    }

    fn now_s(&mut self) -> u64 {
        let now = unix_ms() / 1000;
        self.last_now = self.last_now.max(now);
        self.last_now
    }

    fn save(&mut self) -> Result<(), SlurmError> {
        let scheduler = self
            .sched
            .snapshot()
            .to_bytes()
            .map_err(|e| SlurmError::State {
                file: persist::state_file(&self.cfg.state_dir)
                    .display()
                    .to_string(),
                message: e.to_string(),
            })?;
        let state = State {
            version: STATE_VERSION,
            scheduler,
            next_id: self.next_id,
            users: self.users.clone(),
            jobs: self.jobs.values().cloned().collect(),
            history: self.history.iter().cloned().collect(),
            uncounted: self.uncounted.clone(),
        };
        persist::save(&self.cfg.state_dir, &state)?;
        self.dirty = false;
        Ok(())
    }

    /// A Gangway placement as Slurm parts: node names, indices, GRES types.
    fn parts(&self, placement: &Placement) -> Vec<Part> {
        placement
            .parts
            .iter()
            .map(|p| {
                let types = &self.map.gpu_types[p.server.0 as usize];
                let gpus: Vec<u32> = (0..64u32).filter(|g| p.gpus & (1 << g) != 0).collect();
                Part {
                    node: self.map.node(p.server).to_string(),
                    types: gpus
                        .iter()
                        .map(|g| types.get(*g as usize).cloned().unwrap_or_default())
                        .collect(),
                    gpus,
                }
            })
            .collect()
    }

    /// Slurm's nodes and GPU indices as a Gangway placement (`None` when
    /// they name nothing this cluster map knows).
    fn placement_of(&self, gpus: &NodeGpus) -> Option<Placement> {
        let mut parts: Vec<ServerGpus> = Vec::new();
        for (node, idx) in gpus {
            let Some(server) = self.map.server(node) else {
                continue;
            };
            let n = self.map.topology.server(server).map_or(0, |s| s.gpus);
            let mask = idx
                .iter()
                .filter(|g| **g < n)
                .fold(0u64, |m, g| m | (1 << g));
            if mask == 0 {
                continue;
            }
            match parts.iter_mut().find(|p| p.server == server) {
                Some(p) => p.gpus |= mask,
                None => parts.push(ServerGpus { server, gpus: mask }),
            }
        }
        parts.sort_by_key(|p| p.server);
        (!parts.is_empty()).then_some(Placement { parts })
    }

    /// A placement in Slurm's words: `n2:0,1 n3:5`.
    fn gpus_text(&self, placement: &Placement) -> String {
        launch::placement_text(&self.parts(placement))
    }

    fn placement_of_launch(&self, launch: &Launch) -> Option<Placement> {
        self.placement_of(&launch.placement)
    }

    /// Ends a job's current attempt in the scheduler, with an event.
    fn end(&mut self, id: u64, now: u64, end: AttemptEnd, why: String) {
        if let Some(entry) = self.jobs.get_mut(&id) {
            entry.launch = None;
            push_event(entry, why);
        }
        if let Err(e) = self.sched.end_attempt(JobId(id), now, end) {
            tracing::warn!(job = id, "end_attempt refused: {e}");
        }
        self.dirty = true;
    }

    /// Forgets a job's launch and cancels its Slurm job (on the Slurm I/O
    /// side: see [`Daemon::take_cancels`]).
    fn cancel_launch(&mut self, id: u64) {
        let Some(launch) = self.jobs.get_mut(&id).and_then(|e| e.launch.take()) else {
            return;
        };
        if let Some(gid) = launch.slurm_id {
            self.cancels.push((id, gid));
        }
        self.dirty = true;
    }

    /// The Slurm jobs to cancel since the last call: (Gangway id, Slurm id).
    pub fn take_cancels(&mut self) -> Vec<(u64, u64)> {
        std::mem::take(&mut self.cancels)
    }

    /// Cancels that Slurm did not take (it did not answer): tried again.
    pub fn retry_cancels(&mut self, failed: Vec<(u64, u64)>) {
        self.cancels.extend(failed);
    }

    /// Launches of job `id` that count against `max_attempts`.
    fn counted(&self, id: u64) -> u32 {
        let attempts = self.jobs.get(&id).map_or(0, |e| e.attempts);
        attempts.saturating_sub(self.uncounted.get(&id).copied().unwrap_or(0))
    }

    /// Puts job `id`, whose launch went nowhere through no fault of its
    /// own, back in the queue: its launch does not count.
    fn requeue_uncounted(&mut self, id: u64, now: u64, why: String) {
        if let Some(e) = self.jobs.get_mut(&id) {
            e.launch = None;
            push_event(e, why);
        }
        *self.uncounted.entry(id).or_insert(0) += 1;
        if let Err(e) = self.sched.requeue(JobId(id), now) {
            tracing::warn!(job = id, "requeue refused: {e}");
        }
        self.dirty = true;
    }

    /// Ends job `id`, whose Slurm job `gid` (launch `attempt`) is gone from
    /// `squeue`, from its end record; without one it is not run again.
    fn vanished(&mut self, id: u64, gid: Option<u64>, attempt: u32, last: bool, now: u64) {
        let slurm_job =
            gid.map_or_else(|| "its Slurm job".to_string(), |g| format!("Slurm job {g}"));
        match self.recorded_end(id, attempt) {
            Some(0) => self.end(
                id,
                now,
                AttemptEnd::Passed,
                format!("{slurm_job} completed (exit code 0, from its end record)"),
            ),
            Some(code) => self.end(
                id,
                now,
                AttemptEnd::Failed {
                    class: FailureClass::Unknown,
                    last,
                },
                format!(
                    "{slurm_job} failed (exit code {code}, from its end record){}",
                    if last {
                        "; no attempts left"
                    } else {
                        "; the retry policy decides"
                    }
                ),
            ),
            None => self.end(
                id,
                now,
                AttemptEnd::Failed {
                    class: FailureClass::Unknown,
                    last: true,
                },
                format!(
                    "{slurm_job} is gone from squeue and left no end record in {} (is it \
                     shared with the nodes?): how it ended is unknown, so it is not run again",
                    self.cfg.ends_dir().display()
                ),
            ),
        }
    }

    /// What the batch script of job `id`'s `attempt` recorded on ending:
    /// its exit status, if the record exists.
    fn recorded_end(&self, id: u64, attempt: u32) -> Option<i64> {
        let path = self.cfg.ends_dir().join(launch::end_record(id, attempt));
        std::fs::read_to_string(path).ok()?.trim().parse().ok()
    }

    /// Steps 2 and 3 of a cycle: Slurm's view into the scheduler.
    fn apply_slurm(&mut self, nodes: &[NodeInfo], sjobs: &[SlurmJob], now: u64) {
        let now_ms = unix_ms();
        let mut groups: BTreeMap<u64, Vec<&SlurmJob>> = BTreeMap::new();
        for j in sjobs {
            groups.entry(j.group).or_default().push(j);
        }
        let mut ours: BTreeMap<(u64, u32), u64> = BTreeMap::new();
        for (gid, comps) in &groups {
            if let Some(tag) = comps.iter().find_map(|j| launch::parse_comment(&j.comment)) {
                ours.insert(tag, *gid);
            }
        }
        let gpus_of = |comps: &[&SlurmJob]| -> NodeGpus {
            comps.iter().flat_map(|j| j.gpus.iter().cloned()).collect()
        };
        let mut truth = EngineTruth::default();
        let mut claimed: BTreeSet<u64> = BTreeSet::new();
        let max = self.cfg.max_attempts;
        let timeout_ms = self.cfg.launch_timeout_s.saturating_mul(1000);
        let replace_ms = self.cfg.replace_pending_s.saturating_mul(1000);
        let ids: Vec<u64> = self.jobs.keys().copied().collect();
        for id in ids {
            let Some(launch) = self.jobs.get(&id).and_then(|e| e.launch.clone()) else {
                continue;
            };
            let counted = self.counted(id);
            let ours_place = self.placement_of_launch(&launch);
            let gid = match launch.slurm_id {
                Some(g) => g,
                None => match ours.get(&(id, launch.attempt)) {
                    Some(g) => {
                        if let Some(e) = self.jobs.get_mut(&id) {
                            if let Some(l) = e.launch.as_mut() {
                                l.slurm_id = Some(*g);
                            }
                            push_event(e, format!("launch confirmed as Slurm job {g}"));
                        }
                        self.log_launch(id, launch.attempt, *g, &launch.placement);
                        self.dirty = true;
                        *g
                    }
                    None if now_ms.saturating_sub(launch.launched_ms) > UNCONFIRMED_MS => {
                        if self.recorded_end(id, launch.attempt).is_some() {
                            // It ran and ended while the daemon was away.
                            self.vanished(id, None, launch.attempt, counted >= max, now);
                        } else {
                            self.requeue_uncounted(
                                id,
                                now,
                                "launch never reached Slurm (the daemon stopped during sbatch); \
                                 placed again (not counted)"
                                    .into(),
                            );
                        }
                        continue;
                    }
                    None => {
                        if let Some(p) = ours_place {
                            truth.running.insert(JobId(id), p);
                        }
                        continue;
                    }
                },
            };
            claimed.insert(gid);
            let Some(comps) = groups.get(&gid) else {
                // Gone from squeue: it ended and Slurm forgot it (the daemon
                // was away longer than MinJobAge). Never run again on
                // absence alone.
                self.vanished(id, Some(gid), launch.attempt, counted >= max, now);
                continue;
            };
            match group_state(comps) {
                GroupState::Active => {
                    let place = self.placement_of(&gpus_of(comps)).or(ours_place);
                    if let Some(e) = self.jobs.get_mut(&id)
                        && let Some(l) = e.launch.as_mut()
                        && !l.running
                    {
                        l.running = true;
                        e.first_running_ms.get_or_insert(now_ms);
                        let after = now_ms.saturating_sub(l.launched_ms);
                        push_event(
                            e,
                            format!("running as Slurm job {gid} ({after} ms after launch)"),
                        );
                        self.dirty = true;
                    }
                    if let Some(p) = place {
                        truth.running.insert(JobId(id), p);
                    }
                }
                GroupState::Pending(reason) => {
                    let waited = now_ms.saturating_sub(launch.launched_ms);
                    if WAITING_FOR_RESOURCES.contains(&reason.as_str()) && waited > replace_ms {
                        // Load Gangway does not see holds the GPUs it
                        // chose: placed again, elsewhere if it can.
                        self.cancel_launch(id);
                        self.requeue_uncounted(
                            id,
                            now,
                            format!(
                                "Slurm kept job {gid} pending ({reason}) over {} s; cancelled and placed again (not counted)",
                                self.cfg.replace_pending_s
                            ),
                        );
                    } else if waited > timeout_ms {
                        self.cancel_launch(id);
                        self.end(
                            id,
                            now,
                            AttemptEnd::Failed {
                                class: FailureClass::JobPreempted,
                                last: counted >= max,
                            },
                            format!(
                                "Slurm kept job {gid} pending ({reason}) over {} s; cancelled{}",
                                self.cfg.launch_timeout_s,
                                if counted < max {
                                    " and re-queued"
                                } else {
                                    "; no launches left"
                                }
                            ),
                        );
                    } else if let Some(p) = ours_place {
                        truth.running.insert(JobId(id), p);
                    }
                }
                GroupState::Ended { state, exit } => {
                    let (end, why) = attempt_end(&state, exit, counted >= max);
                    self.end(id, now, end, format!("Slurm job {gid} {why}"));
                }
            }
        }
        // Launched before a crash, not saved: adopt what Slurm runs.
        for (&(id, attempt), &gid) in &ours {
            if claimed.contains(&gid) {
                continue;
            }
            let Some(comps) = groups.get(&gid) else {
                continue;
            };
            let fresh = self
                .jobs
                .get(&id)
                .is_some_and(|e| e.launch.is_none() && attempt > e.attempts);
            if !fresh || group_state(comps) != GroupState::Active {
                continue;
            }
            let gpus = gpus_of(comps);
            let Some(p) = self.placement_of(&gpus) else {
                continue;
            };
            if let Some(e) = self.jobs.get_mut(&id) {
                e.attempts = attempt;
                e.launch = Some(Launch {
                    slurm_id: Some(gid),
                    attempt,
                    launched_ms: now_ms,
                    placement: gpus.clone(),
                    running: true,
                });
                e.last_placement = gpus;
                e.first_running_ms.get_or_insert(now_ms);
            }
            claimed.insert(gid);
            truth.running.insert(JobId(id), p);
        }
        // Everything else that holds GPUs is foreign load.
        for (gid, comps) in &groups {
            if claimed.contains(gid) || group_state(comps) != GroupState::Active {
                continue;
            }
            if let Some(p) = self.placement_of(&gpus_of(comps)) {
                truth.running.insert(JobId(FOREIGN_BIT | gid), p);
            }
        }
        for node in nodes {
            if let Some(s) = self.map.server(&node.name) {
                truth.health.insert(s, node.health);
            }
        }
        let diffs = self.sched.reconcile(&truth, Some(self.foreign_vc), now);
        for d in diffs {
            self.on_difference(d);
        }
    }

    fn on_difference(&mut self, d: Difference) {
        let ours = |job: JobId| (job.0 & FOREIGN_BIT == 0).then_some(job.0);
        match &d {
            Difference::Health {
                server,
                now,
                interrupted,
                ..
            } => {
                let node = self.map.node(*server).to_string();
                tracing::warn!(node, health = ?now, "node health changed in Slurm");
                for job in interrupted {
                    if let Some(id) = ours(*job) {
                        self.cancel_launch(id);
                        if let Some(e) = self.jobs.get_mut(&id) {
                            push_event(
                                e,
                                format!("interrupted: node {node} is {now:?}; re-queued"),
                            );
                        }
                    }
                }
            }
            Difference::NotRunning { job } => {
                if let Some(id) = ours(*job)
                    && let Some(e) = self.jobs.get_mut(&id)
                {
                    e.launch = None;
                    push_event(e, "its Slurm job is gone from squeue; re-queued".into());
                }
            }
            Difference::Started { job, .. } => {
                if let Some(id) = ours(*job)
                    && let Some(e) = self.jobs.get_mut(&id)
                {
                    push_event(e, "found running in Slurm after a restart; adopted".into());
                }
            }
            Difference::Moved { job, .. } => {
                if let Some(id) = ours(*job)
                    && let Some(e) = self.jobs.get_mut(&id)
                {
                    push_event(e, "Slurm runs it on other GPUs than chosen; adopted".into());
                }
            }
            Difference::Unresolved { job, why } => match ours(*job) {
                Some(id) => {
                    self.cancel_launch(id);
                    if let Some(e) = self.jobs.get_mut(&id) {
                        push_event(e, format!("cancelled: {why}; re-queued"));
                    }
                }
                None => tracing::warn!("foreign Slurm job {}: {why}", job.0 & !FOREIGN_BIT),
            },
            Difference::Foreign { job, placement } => tracing::info!(
                "foreign Slurm job {} holds GPUs {}",
                job.0 & !FOREIGN_BIT,
                self.gpus_text(placement)
            ),
            Difference::ForeignEnded { job } => {
                let _ = self.sched.forget(*job);
            }
            Difference::UnknownServer { server } => {
                tracing::warn!("Slurm reports a node Gangway does not know ({server})")
            }
            other => tracing::warn!("{other}"),
        }
        self.dirty = true;
    }

    /// Step 4: a round, and the launches of its starts, saved as intents
    /// before any `sbatch` runs (see persist); returns them to be run. If
    /// the intents cannot be saved, nothing is launched: the started jobs
    /// go back to the queue, not counted.
    fn round_and_plan(&mut self, now: u64) -> Result<Vec<LaunchOrder>, SlurmError> {
        let t = Instant::now();
        let report = self
            .sched
            .round(now)
            .map_err(|e| SlurmError::Refused(format!("round: {e}")))?;
        self.stats.rounds += 1;
        self.stats.round_us += u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
        // The reclaim slot stopped these: they are pending again in Gangway,
        // so their Slurm jobs are cancelled before anything new launches.
        for p in &report.preempted {
            self.cancel_launch(p.job.0);
            if let Some(e) = self.jobs.get_mut(&p.job.0) {
                push_event(
                    e,
                    format!(
                        "preempted by the reclaim policy after {} s; re-queued",
                        p.ran_s
                    ),
                );
            }
            self.dirty = true;
        }
        // The defragment slot moved these: cancelled where they ran and
        // launched again (from their checkpoint) where they run now.
        let mut moved = Vec::with_capacity(report.migrations.len());
        for m in &report.migrations {
            self.cancel_launch(m.job.0);
            if let Some(e) = self.jobs.get_mut(&m.job.0) {
                push_event(e, "migrated by the defragment policy".into());
            }
            moved.push((m.job, &m.to));
        }
        let launches: Vec<_> = report
            .starts
            .iter()
            .map(|s| (s.job, &s.choice))
            .chain(moved)
            .collect();
        if launches.is_empty() {
            return Ok(Vec::new());
        }
        let now_ms = unix_ms();
        let mut batch = Vec::with_capacity(launches.len());
        for (job, choice) in launches {
            let parts = self.parts(&choice.placement);
            let id = job.0;
            if let Some(e) = self.jobs.get_mut(&id) {
                e.attempts += 1;
                e.launch = Some(Launch {
                    slurm_id: None,
                    attempt: e.attempts,
                    launched_ms: now_ms,
                    placement: launch::node_gpus(&parts),
                    running: false,
                });
                e.last_placement = launch::node_gpus(&parts);
                batch.push((id, e.attempts, parts));
            }
        }
        // The intent is saved before any sbatch runs (see persist).
        if let Err(e) = self.save() {
            for (id, _, _) in &batch {
                self.requeue_uncounted(
                    *id,
                    now,
                    format!("not launched: the launch could not be saved first ({e}); pending again (not counted)"),
                );
            }
            return Err(e);
        }
        let ends = self.cfg.ends_dir();
        let mut orders = Vec::with_capacity(batch.len());
        for (id, attempt, parts) in batch {
            let Some(entry) = self.jobs.get(&id) else {
                continue;
            };
            let spec = LaunchSpec {
                id,
                attempt,
                cmd: &entry.cmd,
                cwd: &entry.cwd,
                partition: self.cfg.slurm.partition.as_deref(),
                ends_dir: &ends,
            };
            orders.push(LaunchOrder {
                id,
                attempt,
                args: launch::sbatch_args(&spec, &parts),
                script: launch::script(&spec, &parts),
                parts,
            });
        }
        Ok(orders)
    }

    /// What `sbatch` said of each launch of a cycle.
    pub fn on_launched(&mut self, results: Vec<(LaunchOrder, LaunchOutcome)>) {
        let now = self.now_s();
        for (order, outcome) in results {
            let LaunchOrder {
                id, attempt, parts, ..
            } = order;
            let current = self
                .jobs
                .get(&id)
                .and_then(|e| e.launch.as_ref())
                .is_some_and(|l| l.attempt == attempt && l.slurm_id.is_none());
            match outcome {
                LaunchOutcome::Launched(gid) if !current => {
                    // Cancelled (or re-queued) while its sbatch ran.
                    self.cancels.push((id, gid));
                }
                LaunchOutcome::Launched(gid) => {
                    self.stats.launches += 1;
                    let text = launch::placement_text(&parts);
                    if let Some(e) = self.jobs.get_mut(&id) {
                        if let Some(l) = e.launch.as_mut() {
                            l.slurm_id = Some(gid);
                        }
                        push_event(e, format!("launched as Slurm job {gid} on {text}"));
                    }
                    self.log_launch(id, attempt, gid, &launch::node_gpus(&parts));
                }
                _ if !current => {}
                LaunchOutcome::Unreachable(why) => {
                    self.note_unreachable(why.clone());
                    self.requeue_uncounted(
                        id,
                        now,
                        format!("not launched: {why}; pending again (not counted)"),
                    );
                }
                LaunchOutcome::Misconfigured(why) => {
                    if self.hold.is_none() {
                        tracing::error!(
                            "{why}: holding the queue; launches are tried again every {HOLD_RETRY_S} s"
                        );
                    }
                    self.hold = Some((unix_ms(), why.clone()));
                    self.requeue_uncounted(
                        id,
                        now,
                        format!("not launched: {why}; the queue is held (not counted)"),
                    );
                }
                LaunchOutcome::Refused(why) => {
                    self.stats.refusals += 1;
                    let last = self.counted(id) >= self.cfg.max_attempts;
                    self.end(
                        id,
                        now,
                        AttemptEnd::Failed {
                            class: FailureClass::Unknown,
                            last,
                        },
                        format!(
                            "Slurm refused the launch: {why}{}",
                            if last {
                                "; no launches left"
                            } else {
                                "; re-queued"
                            }
                        ),
                    );
                }
            }
        }
        self.dirty = true;
        if let Err(e) = self.save() {
            self.last_error = Some(e.to_string());
        }
    }

    /// Slurm did not answer: noted (since when, and why) for `status`.
    fn note_unreachable(&mut self, why: String) {
        match &mut self.outage {
            Some((_, last)) => *last = why,
            None => {
                tracing::error!(
                    "{why}: holding every decision that depends on Slurm until it answers"
                );
                self.outage = Some((unix_ms(), why));
            }
        }
    }

    /// Appends one line to `<state_dir>/launches.jsonl`: what was launched
    /// where, for operators and the end-to-end test. Every attempt Slurm
    /// ran has its line: one whose `sbatch` answered after the daemon
    /// stopped is logged when the restarted daemon finds it in Slurm.
    fn log_launch(&self, id: u64, attempt: u32, gid: u64, placement: &NodeGpus) {
        let line = serde_json::json!({
            "job": id,
            "attempt": attempt,
            "slurm_job": gid,
            "placement": placement,
            "at_ms": unix_ms(),
        });
        let path = self.cfg.state_dir.join("launches.jsonl");
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| writeln!(f, "{line}"));
        if let Err(e) = written {
            tracing::warn!("{}: {e}", path.display());
        }
    }

    /// Step 5: finished jobs leave the scheduler and go to the history.
    fn retire(&mut self) {
        let done: Vec<u64> = self
            .jobs
            .keys()
            .copied()
            .filter(|id| {
                self.sched
                    .job(JobId(*id))
                    .is_none_or(|j| j.final_status().is_some())
            })
            .collect();
        for id in done {
            let Some(mut entry) = self.jobs.remove(&id) else {
                continue;
            };
            if let Ok(record) = self.sched.forget(JobId(id)) {
                if let JobState::Finished { status, .. } = record.state {
                    entry.final_state = Some(status.as_str().to_string());
                }
                entry.wait_s = wait_list(&record.wait.seconds);
            }
            entry.ended_ms = Some(unix_ms());
            self.uncounted.remove(&id);
            for attempt in 1..=entry.attempts {
                let _ =
                    std::fs::remove_file(self.cfg.ends_dir().join(launch::end_record(id, attempt)));
            }
            let state = entry.final_state.clone().unwrap_or_else(|| "gone".into());
            push_event(&mut entry, format!("finished: {state}"));
            self.history.push_back(entry);
            while self.history.len() > self.cfg.history {
                self.history.pop_front();
            }
            self.dirty = true;
        }
    }

    /// A cycle, given what Slurm said (`nodes` and `squeue`, or why it did
    /// not answer, and how long it took): Slurm's view into the scheduler,
    /// a round, the launches to run (see [`run_launches`]), finished jobs
    /// retired, the state saved. While Slurm does not answer nothing is
    /// decided: no job is re-queued, failed or launched.
    pub fn on_read(
        &mut self,
        read: Result<(Vec<NodeInfo>, Vec<SlurmJob>), SlurmError>,
        took: Duration,
    ) -> Vec<LaunchOrder> {
        let t = Instant::now();
        self.stats.cycles += 1;
        self.stats.slurm_read_us += u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let (nodes, sjobs) = match read {
            Ok(read) => read,
            Err(e) => {
                self.note_unreachable(e.to_string());
                self.last_error = Some(e.to_string());
                return Vec::new();
            }
        };
        if let Some((since, _)) = self.outage.take() {
            tracing::warn!(
                "Slurm answers again after {} s",
                unix_ms().saturating_sub(since) / 1000
            );
        }
        self.last_error = None;
        let now = self.now_s();
        self.apply_slurm(&nodes, &sjobs, now);
        let held = self
            .hold
            .as_ref()
            .is_some_and(|(since, _)| unix_ms().saturating_sub(*since) < HOLD_RETRY_S * 1000);
        let orders = if held {
            Vec::new()
        } else {
            match self.round_and_plan(now) {
                Ok(orders) => orders,
                Err(e) => {
                    self.last_error = Some(e.to_string());
                    Vec::new()
                }
            }
        };
        self.retire();
        if self.dirty
            && let Err(e) = self.save()
        {
            self.last_error = Some(e.to_string());
        }
        self.stats.cycle_us += u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
        orders
    }

    /// One whole cycle on this thread: read Slurm, decide, launch, cancel.
    /// (`serve` runs the same steps with Slurm's commands on a thread of
    /// their own, so clients are answered while Slurm is slow.)
    pub fn cycle(&mut self) -> Result<(), SlurmError> {
        let t = Instant::now();
        let read = self.slurm.nodes().and_then(|n| Ok((n, self.slurm.jobs()?)));
        let orders = self.on_read(read, t.elapsed());
        let results = run_launches(&self.slurm, orders);
        if !results.is_empty() {
            self.on_launched(results);
        }
        let cancels = self.take_cancels();
        let failed = run_cancels(&self.slurm, cancels);
        self.retry_cancels(failed);
        match &self.last_error {
            Some(e) => Err(SlurmError::Refused(e.clone())),
            None => Ok(()),
        }
    }

    fn user_number(&mut self, user: &str) -> u32 {
        let i = match self.users.iter().position(|u| u == user) {
            Some(i) => i,
            None => {
                self.users.push(user.to_string());
                self.users.len() - 1
            }
        };
        u32::try_from(i).unwrap_or(u32::MAX)
    }

    /// Answers one client request; `true` when a cycle should run at once.
    pub fn handle(&mut self, request: Request) -> (Response, bool) {
        match request {
            Request::Submit {
                gpus,
                vc,
                user,
                cmd,
                cwd,
            } => match self.submit(gpus, &vc, &user, cmd, cwd) {
                Ok(id) => (Response::Submitted(id), true),
                Err(e) => (Response::Refused(e), false),
            },
            Request::Status => (Response::Status(Box::new(self.status())), false),
            Request::Why(id) => match self.job_report(id) {
                Some(r) => (Response::Job(Box::new(r)), false),
                None => (
                    Response::Refused(format!(
                        "no job {id} (finished jobs are kept for the last {})",
                        self.cfg.history
                    )),
                    false,
                ),
            },
            Request::Cancel(id) => match self.cancel(id) {
                Ok(text) => (Response::Done(text), true),
                Err(e) => (Response::Refused(e), false),
            },
            Request::Swap {
                slot,
                name,
                wasm,
                config,
            } => {
                let done = policies::slot_named(&slot)
                    .and_then(|s| self.policies.swap(s, &name, &wasm, &config));
                match done {
                    Ok(text) => (Response::Done(text), false),
                    Err(e) => (Response::Refused(e.to_string()), false),
                }
            }
            Request::Rollback { slot } => match policies::slot_named(&slot) {
                Ok(s) => {
                    self.policies.rollback(s);
                    (
                        Response::Done(format!("{slot} rolls back at the next round")),
                        false,
                    )
                }
                Err(e) => (Response::Refused(e.to_string()), false),
            },
        }
    }

    fn submit(
        &mut self,
        gpus: u32,
        vc: &str,
        user: &str,
        cmd: Vec<String>,
        cwd: String,
    ) -> Result<u64, String> {
        let Some(&vc_id) = self.vcs.get(vc) else {
            let known: Vec<&str> = self.vcs.keys().map(String::as_str).collect();
            return Err(format!(
                "unknown virtual cluster {vc:?} (known: {})",
                known.join(", ")
            ));
        };
        if cmd.is_empty() {
            return Err("no command to run (give it after --)".into());
        }
        let id = self.next_id;
        let now = self.now_s();
        let spec = JobSpec {
            id: JobId(id),
            vc: vc_id,
            user: self.user_number(user),
            gpus,
            submitted_s: now,
        };
        self.sched.submit(spec).map_err(|e| match e {
            gangway_core::SchedulerError::TooLarge { gpus, cluster, .. } => {
                format!("the job asks for {gpus} GPUs but the cluster has only {cluster}")
            }
            gangway_core::SchedulerError::ZeroGpus(_) => "the job asks for 0 GPUs".into(),
            other => other.to_string(),
        })?;
        self.next_id += 1;
        let mut entry = JobEntry {
            id,
            vc: vc.to_string(),
            user: user.to_string(),
            gpus,
            cmd,
            cwd,
            submitted_ms: unix_ms(),
            ..JobEntry::default()
        };
        push_event(
            &mut entry,
            format!("submitted: {gpus} GPUs in {vc} by {user}"),
        );
        self.jobs.insert(id, entry);
        self.dirty = true;
        // Acknowledged means saved: a job that cannot be written is taken
        // back and refused (its id is not given again in this run).
        if let Err(e) = self.save() {
            self.jobs.remove(&id);
            let _ = self.sched.kill(JobId(id), now);
            let _ = self.sched.forget(JobId(id));
            self.last_error = Some(e.to_string());
            return Err(format!("the job could not be saved ({e}); not submitted"));
        }
        Ok(id)
    }

    fn cancel(&mut self, id: u64) -> Result<String, String> {
        if !self.jobs.contains_key(&id) {
            return Err(format!("no live job {id}"));
        }
        self.cancel_launch(id);
        let now = self.now_s();
        self.sched.kill(JobId(id), now).map_err(|e| e.to_string())?;
        if let Some(e) = self.jobs.get_mut(&id) {
            push_event(e, "cancelled by the user".into());
        }
        self.dirty = true;
        match self.save() {
            Ok(()) => Ok(format!("job {id} cancelled")),
            Err(e) => {
                self.last_error = Some(e.to_string());
                Ok(format!(
                    "job {id} cancelled (but the state could not be saved: {e})"
                ))
            }
        }
    }

    fn job_report(&self, id: u64) -> Option<JobReport> {
        if let Some(e) = self.jobs.get(&id) {
            return Some(self.live_report(e));
        }
        self.history.iter().find(|e| e.id == id).map(history_report)
    }

    fn live_report(&self, e: &JobEntry) -> JobReport {
        let record = self.sched.job(JobId(e.id));
        let (state, reason, waiting_s) = match record.map(|r| &r.state) {
            Some(JobState::Pending { since_s, reason }) => (
                "pending".to_string(),
                reason.map(|r| r.as_str().to_string()),
                self.last_now.saturating_sub(*since_s),
            ),
            Some(JobState::Running { .. }) => {
                let running = e.launch.as_ref().is_some_and(|l| l.running);
                let s = if running { "running" } else { "launching" };
                (s.to_string(), None, 0)
            }
            Some(JobState::AwaitingRetry(_)) => {
                ("failed; awaiting a retry decision".into(), None, 0)
            }
            Some(JobState::Delayed { since_s, until_s }) => (
                format!("retry at {until_s} s"),
                Some(WaitReason::RetryDelay.as_str().to_string()),
                self.last_now.saturating_sub(*since_s),
            ),
            Some(JobState::Finished { status, .. }) => (status.as_str().to_string(), None, 0),
            None => ("unknown".to_string(), None, 0),
        };
        JobReport {
            reason,
            wait: record.map_or_else(Vec::new, |r| wait_list(&r.wait_at(self.last_now).seconds)),
            waiting_s,
            slurm_job: e.launch.as_ref().and_then(|l| l.slurm_id),
            ..entry_report(e, state)
        }
    }

    /// The status report.
    pub fn status(&self) -> StatusReport {
        let mut pending: Vec<&JobEntry> = Vec::new();
        let mut running = Vec::new();
        for e in self.jobs.values() {
            match self.sched.job(JobId(e.id)).map(|r| &r.state) {
                Some(
                    JobState::Pending { .. }
                    | JobState::AwaitingRetry(_)
                    | JobState::Delayed { .. },
                ) => pending.push(e),
                _ => running.push(self.live_report(e)),
            }
        }
        pending.sort_by_key(|e| {
            (
                self.sched.job(JobId(e.id)).map(|r| r.spec.submitted_s),
                e.id,
            )
        });
        let nodes = (0..self.map.topology.servers().len())
            .map(|i| {
                let s = ServerId(u32::try_from(i).unwrap_or(u32::MAX));
                NodeReport {
                    name: self.map.node(s).to_string(),
                    rack: self.map.racks.get(i).cloned().unwrap_or_default(),
                    gpus: self.map.topology.servers()[i].gpus,
                    free: self.sched.state().avail(s),
                    health: format!(
                        "{:?}",
                        self.sched
                            .state()
                            .health(s)
                            .unwrap_or(gangway_core::Health::Down)
                    ),
                }
            })
            .collect();
        let policies = self
            .policies
            .status()
            .into_iter()
            .map(|(slot, st)| SlotReport {
                slot: slot.as_str().to_string(),
                quarantined: st.quarantined().iter().map(|s| s.to_string()).collect(),
                active: st.active,
                previous: st.previous,
                swaps: st.swaps,
            })
            .collect();
        let mut stats = self.stats.clone();
        stats.uptime_s = self.started.elapsed().as_secs();
        stats.rss_kib = rss_kib();
        StatusReport {
            nodes,
            policies,
            pending: pending.into_iter().map(|e| self.live_report(e)).collect(),
            running,
            finished: self
                .history
                .iter()
                .rev()
                .take(200)
                .rev()
                .map(history_report)
                .collect(),
            foreign_gpus: self
                .sched
                .virtual_clusters()
                .get(self.foreign_vc.0 as usize)
                .map_or(0, |v| v.held_gpus),
            stats,
            last_error: self.last_error.clone(),
            slurm_unreachable: self.outage.clone(),
            queue_held: self.hold.clone(),
            state_note: self.state_note.clone(),
        }
    }
}

fn wait_list(seconds: &[u64]) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = WaitReason::ALL
        .iter()
        .zip(seconds)
        .filter(|(_, s)| **s > 0)
        .map(|(r, s)| (r.as_str().to_string(), *s))
        .collect();
    out.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    out
}

/// What a job's entry says of it, in `state`: no wait reason, waits or
/// Slurm job (a live job's report adds them).
fn entry_report(e: &JobEntry, state: String) -> JobReport {
    JobReport {
        id: e.id,
        vc: e.vc.clone(),
        user: e.user.clone(),
        gpus: e.gpus,
        cmd: e.cmd.clone(),
        state,
        reason: None,
        wait: Vec::new(),
        waiting_s: 0,
        attempts: e.attempts,
        slurm_job: None,
        placement: e.last_placement.clone(),
        submitted_ms: e.submitted_ms,
        first_running_ms: e.first_running_ms,
        ended_ms: e.ended_ms,
        events: e.events.clone(),
    }
}

fn history_report(e: &JobEntry) -> JobReport {
    JobReport {
        wait: e.wait_s.clone(),
        ..entry_report(e, e.final_state.clone().unwrap_or_else(|| "gone".into()))
    }
}

/// What Slurm's I/O thread is asked to do, in order.
enum Work {
    /// Read `sinfo` and `squeue`.
    Read,
    /// Run these launches.
    Launch(Vec<LaunchOrder>),
    /// Cancel these Slurm jobs.
    Cancel(Vec<(u64, u64)>),
}

/// What the cycle thread hears: a client, or Slurm's I/O thread.
enum Event {
    /// A client's request, and where to answer.
    Client(Request, mpsc::Sender<Response>),
    /// What Slurm said, and how long it took.
    Read(Result<(Vec<NodeInfo>, Vec<SlurmJob>), SlurmError>, Duration),
    /// How launches went.
    Launched(Vec<(LaunchOrder, LaunchOutcome)>),
    /// Cancels Slurm did not answer for.
    CancelFailed(Vec<(u64, u64)>),
}

/// Slurm's I/O thread: runs the work it is given, in order, and reports.
/// Work runs in the order it was asked for, so a read asked after launches
/// sees them.
fn slurm_io(slurm: Slurm, work: mpsc::Receiver<Work>, events: mpsc::Sender<Event>) {
    for w in work {
        let event = match w {
            Work::Read => {
                let t = Instant::now();
                let read = slurm.nodes().and_then(|n| Ok((n, slurm.jobs()?)));
                Event::Read(read, t.elapsed())
            }
            Work::Launch(orders) => Event::Launched(run_launches(&slurm, orders)),
            Work::Cancel(cancels) => Event::CancelFailed(run_cancels(&slurm, cancels)),
        };
        if events.send(event).is_err() {
            return;
        }
    }
}

/// Runs the daemon until it is killed: binds the socket, then cycles every
/// `poll_interval_ms`. Slurm's commands run on a thread of their own, so
/// clients are answered at once whatever Slurm is doing.
pub fn serve(cfg: Config) -> Result<(), SlurmError> {
    let poll = Duration::from_millis(cfg.poll_interval_ms);
    let socket = cfg.socket();
    let mut daemon = Daemon::start(cfg)?;
    if std::os::unix::net::UnixStream::connect(&socket).is_ok() {
        return Err(SlurmError::Refused(format!(
            "another daemon is already listening on {}",
            socket.display()
        )));
    }
    let _ = std::fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket)
        .map_err(|e| SlurmError::io(format!("binding {}", socket.display()), e))?;
    let (tx, rx) = mpsc::channel::<Event>();
    let clients = tx.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let tx = clients.clone();
            std::thread::spawn(move || {
                let request: Request = match read_message(&mut stream) {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = write_message(&mut stream, &Response::Refused(e.to_string()));
                        return;
                    }
                };
                let (reply_tx, reply_rx) = mpsc::channel();
                if tx.send(Event::Client(request, reply_tx)).is_err() {
                    return;
                }
                if let Ok(response) = reply_rx.recv() {
                    let _ = write_message(&mut stream, &response);
                }
            });
        }
    });
    let (work, work_rx) = mpsc::channel::<Work>();
    let io_slurm = daemon.slurm.clone();
    std::thread::spawn(move || slurm_io(io_slurm, work_rx, tx));
    tracing::info!(
        "gangway-slurm serving on {} ({} nodes, {} GPUs{})",
        socket.display(),
        daemon.map.topology.servers().len(),
        daemon.map.topology.total_gpus(),
        if daemon.stats.recovered {
            ", recovered saved state"
        } else {
            ""
        }
    );
    let stopped = || SlurmError::Protocol("a thread of the daemon stopped".into());
    let mut reading = false;
    let mut next_read = Instant::now();
    loop {
        if !reading && Instant::now() >= next_read {
            work.send(Work::Read).map_err(|_| stopped())?;
            reading = true;
        }
        let cancels = daemon.take_cancels();
        if !cancels.is_empty() {
            work.send(Work::Cancel(cancels)).map_err(|_| stopped())?;
        }
        let wait = if reading {
            poll.max(Duration::from_millis(100))
        } else {
            next_read.saturating_duration_since(Instant::now())
        };
        match rx.recv_timeout(wait) {
            Ok(Event::Client(request, reply)) => {
                let (response, urgent) = daemon.handle(request);
                if daemon.dirty
                    && let Err(e) = daemon.save()
                {
                    tracing::error!("saving state: {e}");
                    daemon.last_error = Some(e.to_string());
                }
                let _ = reply.send(response);
                if urgent && !reading {
                    next_read = Instant::now();
                }
            }
            Ok(Event::Read(read, took)) => {
                reading = false;
                next_read = Instant::now() + poll;
                if let Err(e) = &read {
                    tracing::error!("cycle: {e}");
                }
                let orders = daemon.on_read(read, took);
                if !orders.is_empty() {
                    work.send(Work::Launch(orders)).map_err(|_| stopped())?;
                }
            }
            Ok(Event::Launched(results)) => daemon.on_launched(results),
            Ok(Event::CancelFailed(failed)) => daemon.retry_cancels(failed),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return Err(stopped()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(state: &str, exit: i64) -> SlurmJob {
        SlurmJob {
            job_id: 1,
            group: 1,
            name: String::new(),
            comment: String::new(),
            state: state.into(),
            reason: "None".into(),
            exit_code: exit,
            gpus: Vec::new(),
        }
    }

    #[test]
    fn group_states_and_ends() {
        let (a, b) = (job("RUNNING", 0), job("COMPLETED", 0));
        assert_eq!(group_state(&[&a, &b]), GroupState::Active);
        let (c, d) = (job("NODE_FAIL", 0), job("CANCELLED", 0));
        assert_eq!(
            group_state(&[&d, &c]),
            GroupState::Ended {
                state: "NODE_FAIL".into(),
                exit: 0
            }
        );
        let p = job("PENDING", 0);
        assert!(matches!(group_state(&[&p]), GroupState::Pending(_)));
        assert_eq!(attempt_end("COMPLETED", 0, false).0, AttemptEnd::Passed);
        let (end, why) = attempt_end("FAILED", 3 << 8, false);
        assert_eq!(
            end,
            AttemptEnd::Failed {
                class: FailureClass::Unknown,
                last: false
            }
        );
        assert_eq!(why, "failed (exit code 3); the retry policy decides");
        assert_eq!(
            attempt_end("NODE_FAIL", 0, true).0,
            AttemptEnd::Failed {
                class: FailureClass::JobPreempted,
                last: true
            }
        );
        assert_eq!(attempt_end("CANCELLED", 0, false).0, AttemptEnd::Killed);
    }
}
