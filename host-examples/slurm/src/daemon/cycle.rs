//! The Slurm cycle: what `sinfo` and `squeue` say, brought into the
//! scheduler step by step (launches followed, unsaved launches adopted,
//! native jobs taken, foreign load, node health, reconcile), then a round
//! and the retirement of finished jobs.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use gangway_core::reconcile::{Difference, EngineTruth};
use gangway_core::{AttemptEnd, JobId, JobState, Placement, ServerGpus};
use gangway_plugin_sdk::FailureClass;

use super::launches::{CancelHow, CancelOrder, HOLD_RETRY_S};
use super::report::wait_list;
use super::state::Recorded;
use super::{Daemon, FOREIGN_BIT, LaunchOrder, push_event, run_cancels, run_launches, unix_ms};
use crate::SlurmError;
use crate::engine::{NodeGpus, NodeInfo, SlurmJob};
use crate::launch;
use crate::persist::Launch;

/// Milliseconds a launch may stay unconfirmed (its `sbatch` was running
/// when the daemon died) before it is taken as never submitted.
const UNCONFIRMED_MS: u64 = 5_000;

/// What Slurm says a launch waits for when it waits for resources Gangway
/// does not see (load started in Slurm directly): not the job's fault.
const WAITING_FOR_RESOURCES: [&str; 2] = ["Resources", "Priority"];

/// Slurm's jobs by group (a heterogeneous job's components together).
pub(super) type Groups<'a> = BTreeMap<u64, Vec<&'a SlurmJob>>;

/// What a Slurm job (all its components) is doing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum GroupState {
    /// Holding its nodes (running, completing, ...).
    Active,
    /// Still in Slurm's queue, with Slurm's reason.
    Pending(String),
    /// Ended: the most telling state of its components and exit code.
    Ended { state: String, exit: i64 },
}

pub(super) fn group_state(comps: &[&SlurmJob]) -> GroupState {
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
pub(super) fn attempt_end(state: &str, exit: i64, last: bool) -> (AttemptEnd, String) {
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

/// Every node and GPU index a Slurm job's components hold.
pub(super) fn gpus_of(comps: &[&SlurmJob]) -> NodeGpus {
    comps.iter().flat_map(|j| j.gpus.iter().cloned()).collect()
}

/// What the steps of a cycle build up: the engine's truth and the Slurm
/// jobs already accounted for.
#[derive(Default)]
pub(super) struct Seen {
    pub(super) truth: EngineTruth,
    pub(super) claimed: BTreeSet<u64>,
    /// Every GPU a running Slurm job holds (node, index).
    pub(super) taken: BTreeSet<(String, u32)>,
}

/// Gangway ids of the GPUs of a node whose CPUs or memory are all held:
/// this bit, [`FOREIGN_BIT`] and the server.
pub(super) const NODE_WORTH_BIT: u64 = 1 << 61;

impl Daemon {
    /// Slurm's nodes and GPU indices as a Gangway placement (`None` when
    /// they name nothing this cluster map knows).
    pub(super) fn placement_of(&self, gpus: &NodeGpus) -> Option<Placement> {
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

    /// The launches of this daemon Slurm knows, by (job, launch number):
    /// tagged with this daemon's identity and run as the job's user.
    fn tagged(&self, groups: &Groups<'_>) -> BTreeMap<(u64, u32), u64> {
        let mut ours = BTreeMap::new();
        for (gid, comps) in groups {
            let Some((daemon, id, n)) = comps.iter().find_map(|j| launch::parse_tag(&j.comment))
            else {
                continue;
            };
            let mine = daemon == self.id || (daemon.is_empty() && self.legacy_tags);
            let user_ok = self
                .jobs
                .get(&id)
                .is_none_or(|e| comps.iter().all(|j| j.user_id == e.uid));
            if mine && user_ok {
                ours.insert((id, n), *gid);
            }
        }
        ours
    }

    /// Steps 2 to 4 of a cycle: Slurm's view into the scheduler.
    fn apply_slurm(&mut self, nodes: &[NodeInfo], sjobs: &[SlurmJob], now: u64) {
        let mut groups: Groups<'_> = BTreeMap::new();
        for j in sjobs {
            groups.entry(j.group).or_default().push(j);
        }
        let ours = self.tagged(&groups);
        let mut seen = Seen::default();
        for comps in groups.values() {
            if group_state(comps) == GroupState::Active {
                for (node, idx) in gpus_of(comps) {
                    seen.taken
                        .extend(idx.into_iter().map(|g| (node.clone(), g)));
                }
            }
        }
        self.books = crate::resources::Books::of(nodes, self.memory_tracked);
        self.follow_launches(&groups, &ours, now, &mut seen);
        self.adopt_unsaved(&groups, &ours, &mut seen);
        self.cancel_strays(&groups, &ours, &mut seen);
        if self.native_mode() {
            self.follow_native(&groups, now, &mut seen);
        }
        self.count_foreign(&groups, &mut seen);
        self.count_full_nodes(nodes, &mut seen);
        for node in nodes {
            if let Some(s) = self.map.server(&node.name) {
                seen.truth.health.insert(s, node.health);
            }
        }
        let diffs = self
            .sched
            .reconcile(&seen.truth, Some(self.foreign_vc), now);
        for d in diffs {
            self.on_difference(d);
        }
        let books = std::mem::take(&mut self.books);
        self.book_launches(books);
    }

    /// Step 2: every current launch against its Slurm job.
    fn follow_launches(
        &mut self,
        groups: &Groups<'_>,
        ours: &BTreeMap<(u64, u32), u64>,
        now: u64,
        seen: &mut Seen,
    ) {
        let ids: Vec<u64> = self.jobs.keys().copied().collect();
        for id in ids {
            let Some(launch) = self.jobs.get(&id).and_then(|e| e.launch.clone()) else {
                continue;
            };
            let Some(gid) = self.confirm(id, &launch, groups, ours, now, seen) else {
                continue;
            };
            seen.claimed.insert(gid);
            let last = self.counted(id) >= self.cfg.max_attempts;
            match groups.get(&gid) {
                // Gone from squeue: it ended and Slurm forgot it (the daemon
                // was away longer than MinJobAge). Never run again on
                // absence alone. Until its end record is read, it keeps
                // its GPUs.
                None => {
                    if !self.vanished(id, Some(gid), launch.number, last, now)
                        && let Some(p) = self.placement_of(&launch.placement)
                    {
                        seen.truth.running.insert(JobId(id), p);
                    }
                }
                Some(comps) => self.follow_group(id, gid, comps, &launch, now, seen),
            }
        }
    }

    /// The Slurm job of job `id`'s launch, once it is known to be this
    /// launch's: the id `sbatch` printed checked against `squeue` (the tag
    /// and the user), else found by its tag. `None` when there is nothing
    /// (yet) to follow.
    fn confirm(
        &mut self,
        id: u64,
        launch: &Launch,
        groups: &Groups<'_>,
        ours: &BTreeMap<(u64, u32), u64>,
        now: u64,
        seen: &mut Seen,
    ) -> Option<u64> {
        if launch.verified {
            return launch.slurm_id;
        }
        let now_ms = unix_ms();
        if let Some(&gid) = ours.get(&(id, launch.number)) {
            self.confirmed(id, gid, launch);
            return Some(gid);
        }
        if now_ms.saturating_sub(launch.launched_ms) <= UNCONFIRMED_MS {
            // sbatch may still be running, or squeue not show it yet.
            if let Some(p) = self.placement_of(&launch.placement) {
                seen.truth.running.insert(JobId(id), p);
            }
            return None;
        }
        if let Some(gid) = launch.slurm_id {
            let what = match groups.get(&gid) {
                Some(_) => format!(
                    "Slurm job {gid}, which sbatch named, is not this launch (its tag or user differ)"
                ),
                None => format!("Slurm job {gid}, which sbatch named, is not in squeue"),
            };
            if let Some(e) = self.jobs.get_mut(&id) {
                push_event(e, format!("{what}: not trusted"));
            }
        }
        let last = self.counted(id) >= self.cfg.max_attempts;
        match self.recorded_end(id, launch.number) {
            Recorded::Waiting => {
                if let Some(p) = self.placement_of(&launch.placement) {
                    seen.truth.running.insert(JobId(id), p);
                }
            }
            // It ran and ended while the daemon was away.
            Recorded::Known(Some(status)) => {
                self.ended_while_away(id, None, Some(status), last, now);
            }
            Recorded::Known(None) => {
                let why = "launch never reached Slurm (the daemon stopped during sbatch); \
                           placed again (not counted)";
                self.requeue_uncounted(id, now, why.into());
            }
        }
        None
    }

    /// Launch `launch` of job `id` is Slurm job `gid`.
    fn confirmed(&mut self, id: u64, gid: u64, launch: &Launch) {
        let Some(e) = self.jobs.get_mut(&id) else {
            return;
        };
        let Some(l) = e.launch.as_mut() else {
            return;
        };
        let was_known = l.slurm_id == Some(gid);
        l.slurm_id = Some(gid);
        l.verified = true;
        if !l.taken {
            l.taken = true;
            e.attempts += 1;
        }
        if !was_known {
            push_event(e, format!("launch confirmed as Slurm job {gid}"));
            self.log_launch(id, launch.number, gid, &launch.placement);
        }
        self.dirty = true;
    }

    /// Job `id`'s launch is Slurm job `gid` (its components `comps`).
    fn follow_group(
        &mut self,
        id: u64,
        gid: u64,
        comps: &[&SlurmJob],
        launch: &Launch,
        now: u64,
        seen: &mut Seen,
    ) {
        let ours_place = self.placement_of(&launch.placement);
        match group_state(comps) {
            GroupState::Active => {
                let actual = self.own_gpus(id, gpus_of(comps), &launch.placement);
                self.now_running(id, gid, &actual, launch);
                let held = self.with_worth(&actual, launch, seen);
                if let Some(p) = self.placement_of(&held).or(ours_place) {
                    seen.truth.running.insert(JobId(id), p);
                }
            }
            GroupState::Pending(reason) => {
                if !self.still_pending(id, gid, &reason, launch, now)
                    && let Some(p) = ours_place
                {
                    seen.truth.running.insert(JobId(id), p);
                }
            }
            GroupState::Ended { state, exit } => {
                let last = self.counted(id) >= self.cfg.max_attempts;
                let (end, why) = attempt_end(&state, exit, last);
                self.native.ended(gid);
                self.end(id, now, end, format!("Slurm job {gid} {why}"));
            }
        }
    }

    /// What a running job holds in Gangway's books: the GPUs Slurm gives
    /// it (`actual`) and, when an older daemon placed it at more than its
    /// GPUs (at what its CPUs and memory were worth in GPUs), as many more
    /// of the GPUs chosen for it, idle but held (others of its nodes where
    /// Slurm gave it GPUs Gangway did not choose).
    fn with_worth(&self, actual: &NodeGpus, launch: &Launch, seen: &Seen) -> NodeGpus {
        let count = |g: &NodeGpus| g.iter().map(|(_, i)| i.len()).sum::<usize>();
        let mut need = count(&launch.placement).saturating_sub(count(actual));
        if need == 0 {
            return actual.clone();
        }
        let mut held = actual.clone();
        let free = |node: &str, g: u32, held: &NodeGpus| {
            !seen.taken.contains(&(node.to_string(), g))
                && !held.iter().any(|(n, i)| n == node && i.contains(&g))
        };
        let chosen = launch
            .placement
            .iter()
            .flat_map(|(n, i)| i.iter().map(move |g| (n, *g)));
        let others = launch.placement.iter().flat_map(|(n, _)| {
            let gpus = self
                .map
                .server(n)
                .and_then(|s| self.map.topology.server(s))
                .map_or(0, |s| s.gpus);
            (0..gpus).map(move |g| (n, g))
        });
        for (node, g) in chosen.chain(others) {
            if need == 0 {
                break;
            }
            if free(node, g, &held) {
                match held.iter_mut().find(|(n, _)| n == node) {
                    Some((_, i)) => i.push(g),
                    None => held.push((node.clone(), vec![g])),
                }
                need -= 1;
            }
        }
        held
    }

    /// Step 4b: a node whose CPUs (or tracked memory) are all held has no
    /// usable GPU left: its GPUs nobody counts are held as foreign load.
    fn count_full_nodes(&self, nodes: &[NodeInfo], seen: &mut Seen) {
        for node in nodes {
            let Some(server) = self.map.server(&node.name) else {
                continue;
            };
            if !crate::resources::node_full(node, self.memory_tracked) {
                continue;
            }
            let counted: Vec<u32> = seen
                .truth
                .running
                .values()
                .flat_map(|p| p.parts.iter().filter(|x| x.server == server))
                .flat_map(|x| (0..64u32).filter(move |g| x.gpus & (1 << g) != 0))
                .collect();
            let gpus = self.map.topology.server(server).map_or(0, |s| s.gpus);
            let mask = (0..gpus)
                .filter(|g| !counted.contains(g))
                .fold(0u64, |m, g| m | (1 << g));
            if mask != 0 {
                let placement = Placement {
                    parts: vec![ServerGpus { server, gpus: mask }],
                };
                let id = FOREIGN_BIT | NODE_WORTH_BIT | u64::from(server.0);
                seen.truth.running.insert(JobId(id), placement);
            }
        }
    }

    /// Job `id`'s launch runs: the first time, its start is recorded.
    fn now_running(&mut self, id: u64, gid: u64, actual: &NodeGpus, launch: &Launch) {
        let count = |g: &NodeGpus| g.iter().map(|(_, i)| i.len()).sum::<usize>();
        // A launch placed at its worth keeps what was chosen (the GPUs it
        // holds idle are among them).
        let moved = !actual.is_empty()
            && *actual != launch.placement
            && count(actual) >= count(&launch.placement);
        let Some(e) = self.jobs.get_mut(&id) else {
            return;
        };
        let Some(l) = e.launch.as_mut() else {
            return;
        };
        if l.running {
            return;
        }
        l.running = true;
        if moved {
            l.placement = actual.clone();
            e.last_placement = actual.clone();
        }
        let now_ms = unix_ms();
        e.first_running_ms.get_or_insert(now_ms);
        let after = now_ms.saturating_sub(l.launched_ms);
        push_event(
            e,
            format!("running as Slurm job {gid} ({after} ms after launch)"),
        );
        self.dirty = true;
    }

    /// Job `id`'s launch is still pending in Slurm: after
    /// `replace_pending_s` waiting for resources Gangway does not see it is
    /// placed again (not counted), after `launch_timeout_s` for anything
    /// else it is a failed attempt. Returns whether it was taken back.
    fn still_pending(
        &mut self,
        id: u64,
        gid: u64,
        reason: &str,
        launch: &Launch,
        now: u64,
    ) -> bool {
        let native = self.jobs.get(&id).is_some_and(|e| e.native.is_some());
        if native && launch.running {
            self.requeued_in_slurm(id, gid, reason, now);
            return true;
        }
        if reason == "BeginTime" {
            // Slurm's own delay (a requeued job's, about 120 s): the job
            // starts when it ends, however long that is.
            return false;
        }
        let waited = unix_ms().saturating_sub(launch.launched_ms);
        let replace_ms = self.cfg.replace_pending_s.saturating_mul(1000);
        let timeout_ms = self.cfg.launch_timeout_s.saturating_mul(1000);
        if WAITING_FOR_RESOURCES.contains(&reason) && waited > replace_ms {
            // Load Gangway does not see holds the GPUs it chose: placed
            // again, elsewhere if it can.
            self.cancel_launch(id);
            let why = format!(
                "Slurm kept job {gid} pending ({reason}) over {} s; taken back and placed again (not counted)",
                self.cfg.replace_pending_s
            );
            self.requeue_uncounted(id, now, why);
            return true;
        }
        if waited <= timeout_ms {
            return false;
        }
        if native {
            // A user's own job is never cancelled for taking long: held
            // again and placed again.
            self.cancel_launch(id);
            let why = format!(
                "Slurm kept job {gid} pending ({reason}) over {} s; held and placed again (not counted)",
                self.cfg.launch_timeout_s
            );
            self.requeue_uncounted(id, now, why);
            return true;
        }
        let max = self.cfg.max_attempts;
        let counted = self.counted(id);
        self.cancel_launch(id);
        let then = if counted < max {
            " and re-queued"
        } else {
            "; no launches left"
        };
        let why = format!(
            "Slurm kept job {gid} pending ({reason}) over {} s; taken back{then}",
            self.cfg.launch_timeout_s
        );
        let end = AttemptEnd::Failed {
            class: FailureClass::JobPreempted,
            last: counted >= max,
        };
        self.end(id, now, end, why);
        true
    }

    /// Ends job `id`, whose Slurm job `gid` (launch `number`) is gone from
    /// `squeue`, from its end record; without one it is not run again.
    /// Returns `false` while the record is still being read (decided at a
    /// later cycle).
    fn vanished(&mut self, id: u64, gid: Option<u64>, number: u32, last: bool, now: u64) -> bool {
        let native = self.jobs.get(&id).is_some_and(|e| e.native.is_some());
        let recorded = if native {
            // A job submitted with sbatch runs its own script: no record.
            None
        } else {
            match self.recorded_end(id, number) {
                Recorded::Waiting => return false,
                Recorded::Known(r) => r,
            }
        };
        self.ended_while_away(id, gid, recorded, last, now);
        true
    }

    /// Ends job `id`, which ended while the daemon was away, by its end
    /// record's exit status (`None`: no trustworthy record).
    fn ended_while_away(
        &mut self,
        id: u64,
        gid: Option<u64>,
        recorded: Option<i64>,
        last: bool,
        now: u64,
    ) {
        let slurm_job =
            gid.map_or_else(|| "its Slurm job".to_string(), |g| format!("Slurm job {g}"));
        let then = if last {
            "; no attempts left"
        } else {
            "; the retry policy decides"
        };
        let native = self.jobs.get(&id).is_some_and(|e| e.native.is_some());
        let (end, why) = match recorded {
            Some(0) => (
                AttemptEnd::Passed,
                format!("{slurm_job} completed (exit code 0, from its end record)"),
            ),
            Some(code) => (
                AttemptEnd::Failed {
                    class: FailureClass::Unknown,
                    last,
                },
                format!("{slurm_job} failed (exit code {code}, from its end record){then}"),
            ),
            None if native => (
                AttemptEnd::Failed {
                    class: FailureClass::Unknown,
                    last: true,
                },
                format!("{slurm_job} is gone from squeue: how it ended is unknown (see sacct)"),
            ),
            None => (
                AttemptEnd::Failed {
                    class: FailureClass::Unknown,
                    last: true,
                },
                format!(
                    "{slurm_job} is gone from squeue and left no end record of its own in {} \
                     (is it shared with the nodes? was it full?): how it ended is unknown, so it \
                     is not run again",
                    self.record_place(id)
                ),
            ),
        };
        self.end(id, now, end, why);
    }

    /// Where job `id`'s user's end records go, for messages.
    fn record_place(&self, id: u64) -> String {
        self.jobs
            .get(&id)
            .and_then(|e| Some(self.record_folder(e.uid)?.path(e.uid)))
            .map_or_else(
                || "any folder (its user has no home)".into(),
                |p| p.display().to_string(),
            )
    }

    /// Launched before a crash, not saved: adopt what Slurm runs.
    fn adopt_unsaved(
        &mut self,
        groups: &Groups<'_>,
        ours: &BTreeMap<(u64, u32), u64>,
        seen: &mut Seen,
    ) {
        let now_ms = unix_ms();
        for (&(id, number), &gid) in ours {
            if seen.claimed.contains(&gid) {
                continue;
            }
            let Some(comps) = groups.get(&gid) else {
                continue;
            };
            let fresh = self
                .jobs
                .get(&id)
                .is_some_and(|e| e.launch.is_none() && number > e.launches);
            if !fresh || group_state(comps) != GroupState::Active {
                continue;
            }
            let gpus = gpus_of(comps);
            let Some(p) = self.placement_of(&gpus) else {
                continue;
            };
            if let Some(e) = self.jobs.get_mut(&id) {
                e.launches = number;
                e.attempts += 1;
                e.launch = Some(Launch {
                    slurm_id: Some(gid),
                    number,
                    launched_ms: now_ms,
                    placement: gpus.clone(),
                    running: true,
                    verified: true,
                    taken: true,
                    token: String::new(),
                });
                e.last_placement = gpus;
                e.first_running_ms.get_or_insert(now_ms);
            }
            seen.claimed.insert(gid);
            seen.truth.running.insert(JobId(id), p);
        }
    }

    /// Launches of this daemon that no job follows any more (launched
    /// after the job was cancelled or placed again): taken back, as the
    /// job's user. Only jobs tagged with this daemon's identity (not a
    /// version 0.1 tag, which another daemon may have written).
    fn cancel_strays(
        &mut self,
        groups: &Groups<'_>,
        ours: &BTreeMap<(u64, u32), u64>,
        seen: &mut Seen,
    ) {
        for (&(id, number), &gid) in ours {
            if seen.claimed.contains(&gid) {
                continue;
            }
            let Some(comps) = groups.get(&gid) else {
                continue;
            };
            let tagged_by_us = comps
                .iter()
                .any(|j| launch::parse_tag(&j.comment).is_some_and(|(d, _, _)| d == self.id));
            if !tagged_by_us || matches!(group_state(comps), GroupState::Ended { .. }) {
                continue;
            }
            let uid = comps.first().map_or(0, |j| j.user_id);
            let gid_user = comps.first().map_or(0, |j| j.group_id);
            tracing::warn!(
                job = id,
                slurm_job = gid,
                "launch {number} is no longer followed: cancelled"
            );
            self.cancels.push(CancelOrder {
                id,
                slurm_id: gid,
                how: CancelHow::Scancel(self.run_as(uid, gid_user)),
            });
            seen.claimed.insert(gid);
        }
    }

    /// Everything else that holds GPUs is foreign load.
    fn count_foreign(&mut self, groups: &Groups<'_>, seen: &mut Seen) {
        for (gid, comps) in groups {
            if seen.claimed.contains(gid) || group_state(comps) != GroupState::Active {
                continue;
            }
            if let Some(p) = self.placement_of(&gpus_of(comps)) {
                seen.truth.running.insert(JobId(FOREIGN_BIT | gid), p);
            }
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
                for id in interrupted.iter().filter_map(|j| ours(*j)) {
                    self.cancel_launch(id);
                    if let Some(e) = self.jobs.get_mut(&id) {
                        push_event(e, format!("interrupted: node {node} is {now:?}; re-queued"));
                    }
                }
            }
            Difference::NotRunning { job } => {
                if let Some(id) = ours(*job) {
                    self.drop_launch(id);
                    if let Some(e) = self.jobs.get_mut(&id) {
                        push_event(e, "its Slurm job is gone from squeue; re-queued".into());
                    }
                }
            }
            Difference::Started { job, .. } => {
                if let Some(e) = ours(*job).and_then(|id| self.jobs.get_mut(&id)) {
                    push_event(e, "found running in Slurm; adopted".into());
                }
            }
            Difference::Moved { job, .. } => {
                if let Some(e) = ours(*job).and_then(|id| self.jobs.get_mut(&id)) {
                    push_event(e, "Slurm runs it on other GPUs than chosen; adopted".into());
                }
            }
            Difference::Shrunk { job, now, .. } => match ours(*job) {
                Some(id) => {
                    let on = launch::placement_text(&self.parts(now));
                    if let Some(e) = self.jobs.get_mut(&id) {
                        push_event(e, format!("Slurm shrank it to GPUs {on}; the rest freed"));
                    }
                }
                None => tracing::debug!("{d}"),
            },
            Difference::Unresolved { job, why } => match ours(*job) {
                Some(id) => {
                    self.cancel_launch(id);
                    if let Some(e) = self.jobs.get_mut(&id) {
                        push_event(e, format!("taken back: {why}; re-queued"));
                    }
                }
                None => tracing::warn!("foreign Slurm job {}: {why}", job.0 & !FOREIGN_BIT),
            },
            Difference::Foreign { job, placement } if job.0 & NODE_WORTH_BIT != 0 => {
                tracing::info!(
                    "CPUs and memory held on a node make GPUs {} unusable",
                    launch::placement_text(&self.parts(placement))
                )
            }
            Difference::Foreign { job, placement } => tracing::info!(
                "foreign Slurm job {} holds GPUs {}",
                job.0 & !FOREIGN_BIT,
                launch::placement_text(&self.parts(placement))
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

    /// Step 6: finished jobs leave the scheduler and go to the history
    /// (also right after a request or a launch's outcome ended one, so that
    /// reports never show a finished job among the running ones).
    pub(super) fn retire(&mut self) {
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
            self.native_finished(&entry);
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
            let away = unix_ms().saturating_sub(since) / 1000;
            tracing::warn!("Slurm answers again after {away} s");
        }
        self.last_error = None;
        let nodes = super::served_nodes(nodes, &self.served_nodes);
        let now = self.now_s();
        // A daemon whose lock is gone decides nothing more: no launch, no
        // cancel, no update (another daemon serves the partition).
        self.check_lock(&sjobs);
        if self.lost_lock.is_some() {
            self.cancels.clear();
            self.updates.clear();
            return Vec::new();
        }
        self.apply_slurm(&nodes, &sjobs, now);
        self.restrict_by_fit();
        self.synced = true;
        let held = self
            .hold
            .as_ref()
            .is_some_and(|(since, _)| unix_ms().saturating_sub(*since) < HOLD_RETRY_S * 1000);
        let orders = if held {
            Vec::new()
        } else {
            self.round_and_plan(now).unwrap_or_else(|e| {
                self.last_error = Some(e.to_string());
                Vec::new()
            })
        };
        if self.native_mode() {
            self.comment_waits();
        }
        self.retire();
        if self.dirty
            && let Err(e) = self.save()
        {
            self.last_error = Some(e.to_string());
        }
        self.stats.cycle_us += u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
        orders
    }

    /// A round at once, on the daemon's current view of Slurm (read at
    /// most a poll interval ago), after a submission or a cancel: a new job
    /// is launched without waiting for the next read. Nothing while Slurm
    /// does not answer, the queue is held, the lock is lost, or before the
    /// first read since the daemon started.
    pub fn round_now(&mut self) -> Vec<LaunchOrder> {
        let held = self
            .hold
            .as_ref()
            .is_some_and(|(since, _)| unix_ms().saturating_sub(*since) < HOLD_RETRY_S * 1000);
        if !self.synced || held || self.outage.is_some() || self.lost_lock.is_some() {
            return Vec::new();
        }
        let now = self.now_s();
        let orders = self.round_and_plan(now).unwrap_or_else(|e| {
            self.last_error = Some(e.to_string());
            Vec::new()
        });
        if self.dirty
            && let Err(e) = self.save()
        {
            self.last_error = Some(e.to_string());
        }
        orders
    }

    /// Our lock must still be in Slurm's queue as ours: if someone
    /// cancelled it and no other daemon holds the partition, it is taken
    /// again; if another daemon took it (or holds an older lock of the same
    /// partition or of any of its nodes), this daemon has lost it
    /// ([`Daemon::lose_lock`]).
    fn check_lock(&mut self, sjobs: &[SlurmJob]) {
        let Some((lock, _)) = &self.lock else {
            return;
        };
        let trusted = [0, self.access.daemon_uid];
        let older = crate::lock::locks(sjobs, &self.served, &trusted)
            .into_iter()
            .find(|l| l.daemon != self.id && l.job < lock.job);
        if let Some(other) = older {
            let why = format!(
                "another daemon holds an older lock of {}: {}",
                crate::lock::holds(&other, &self.served),
                other.describe(unix_ms() / 1000)
            );
            return self.lose_lock(why);
        }
        let there = sjobs
            .iter()
            .any(|j| j.job_id == lock.job && j.state == "PENDING");
        if there {
            return;
        }
        match self.take_lock() {
            Ok(()) => tracing::warn!("the partition's lock was gone from Slurm: taken again"),
            Err(e) => self.lose_lock(format!("the partition's lock was taken over: {e}")),
        }
    }

    /// This daemon lost its lock: it decides and launches nothing more, and
    /// stops (see `serve`), leaving the partition to the daemon that has it.
    pub(super) fn lose_lock(&mut self, why: String) {
        if self.lost_lock.is_none() {
            tracing::error!("{why}: this daemon stops deciding and launching");
            self.warnings.push(format!("LOCK LOST: {why}"));
            self.lost_lock = Some(why);
        }
        self.lock = None;
    }

    /// One whole cycle on this thread: read Slurm, decide, launch, cancel.
    /// (`serve` runs the same steps with Slurm's commands on a thread of
    /// their own, so clients are answered while Slurm is slow.)
    pub fn cycle(&mut self) -> Result<(), SlurmError> {
        let t = Instant::now();
        let read = self.slurm.nodes().and_then(|n| Ok((n, self.slurm.jobs()?)));
        let orders = self.on_read(read, t.elapsed());
        let fence = self.lock.as_ref().map(|(l, _)| l.clone());
        let results = run_launches(&self.slurm, orders, fence.as_ref());
        if !results.is_empty() {
            self.on_launched(results);
        }
        let cancels = self.take_cancels();
        let failed = run_cancels(&self.slurm, cancels);
        self.retry_cancels(failed);
        let updates = self.take_updates();
        super::serve::run_updates(&self.slurm, updates);
        match &self.last_error {
            Some(e) => Err(SlurmError::Refused(e.clone())),
            None => Ok(()),
        }
    }
}
