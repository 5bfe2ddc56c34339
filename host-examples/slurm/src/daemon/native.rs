//! Native mode in the cycle: jobs users submitted with sbatch into the
//! managed partition are taken into Gangway's queue, followed, and told
//! why they wait (their admin comment). See [`crate::native`].

use std::collections::{BTreeMap, BTreeSet};

use gangway_core::{JobId, JobSpec, JobState};

use super::cycle::{GroupState, Groups, Seen, gpus_of, group_state};
use super::{Daemon, JobUpdate, push_event, unix_ms};
use crate::SlurmError;
use crate::config::Config;
use crate::engine::{Slurm, SlurmJob};
use crate::lock::LOCK_NAME;
use crate::native::{self, COMMENT_PREFIX};
use crate::persist::{JobEntry, Launch};
use crate::resources::{self, Needs};

/// What Slurm job `job` asks for, with its `gpus` GPUs.
fn slurm_needs(job: &SlurmJob, gpus: u32) -> Needs {
    Needs {
        gpus,
        cpus: job.cpus,
        memory_mb: job.memory_mb,
        exclusive: job.exclusive,
        nodes: job.node_count,
    }
}

/// The Slurm jobs of the managed partition the daemon knows.
#[derive(Clone, Debug, Default)]
pub(super) struct NativeBook {
    /// Slurm job to Gangway id.
    ids: BTreeMap<u64, u64>,
    /// Slurm jobs that ended (a new launch requeues them first).
    ended: BTreeSet<u64>,
    /// Slurm jobs that cannot be placed, and why (said once).
    refused: BTreeMap<u64, String>,
    /// The admin comment of each Slurm job, as last seen or written.
    comment: BTreeMap<u64, String>,
    /// How many times Slurm requeued each job, as last seen (a requeued
    /// job waits out Slurm's requeue delay unless its pin clears it).
    restarts: BTreeMap<u64, u32>,
}

impl NativeBook {
    /// Slurm job `gid` ended.
    pub(super) fn ended(&mut self, gid: u64) {
        self.ended.insert(gid);
    }

    /// Slurm job `gid` was pinned and released again.
    pub(super) fn released(&mut self, gid: u64) {
        self.ended.remove(&gid);
    }
}

/// Native mode's setup: `JobSubmitPlugins` includes lua and the daemon can
/// release other users' jobs (root, or Slurm's SlurmUser).
pub(super) fn check_setup(cfg: &Config, slurm: &Slurm) -> Result<(), SlurmError> {
    let conf = slurm.config()?;
    let get = |key: &str| {
        conf.iter()
            .find(|(k, _)| k == key)
            .map_or("", |(_, v)| v.as_str())
    };
    let err = |message: String| SlurmError::Config {
        file: cfg.file.clone(),
        message,
    };
    if !get("JobSubmitPlugins").contains("lua") {
        return Err(err(format!(
            "mode = \"native\" needs Slurm's job_submit/lua plugin holding the jobs of partition \
             {:?} (JobSubmitPlugins = {:?}; install host-examples/slurm/job_submit.lua beside \
             slurm.conf and set JobSubmitPlugins=lua)",
            cfg.slurm.partition.as_deref().unwrap_or(""),
            get("JobSubmitPlugins")
        )));
    }
    let me = crate::identity::effective_uid();
    let slurm_user = get("SlurmUser");
    let slurm_uid: Option<u32> = slurm_user
        .split_once('(')
        .and_then(|(_, rest)| rest.trim_end_matches(')').parse().ok());
    if me != 0 && slurm_uid != Some(me) {
        return Err(err(format!(
            "mode = \"native\" needs the daemon to run as root or as SlurmUser ({slurm_user}), \
             to pin and release other users' jobs; it runs as uid {me}"
        )));
    }
    Ok(())
}

impl Daemon {
    /// Step 3 in native mode: every job of the managed partition. A new
    /// held one is taken into Gangway's queue (or, if it cannot be placed,
    /// told why); one that runs without a launch of ours (an admin
    /// released it) is adopted as running; one that ended while waiting in
    /// Gangway (the user cancelled it) leaves the queue.
    pub(super) fn follow_native(&mut self, groups: &Groups<'_>, now: u64, seen: &mut Seen) {
        let partition = self.cfg.slurm.partition.clone().unwrap_or_default();
        for (gid, comps) in groups {
            let Some(first) = comps.first() else { continue };
            if first.partition != partition || first.name == LOCK_NAME {
                continue;
            }
            self.native
                .comment
                .insert(*gid, first.admin_comment.clone());
            self.native.restarts.insert(*gid, first.restarts);
            if seen.claimed.contains(gid) {
                continue;
            }
            match self.native.ids.get(gid).copied() {
                Some(id) => {
                    if let Some(e) = self.jobs.get(&id) {
                        self.needs.insert(id, slurm_needs(first, e.gpus));
                    }
                    self.follow_waiting(id, *gid, comps, now, seen);
                }
                None => self.take_native(*gid, comps, now, seen),
            }
        }
        // Gone from squeue while waiting in Gangway.
        let known: Vec<(u64, u64)> = self.native.ids.iter().map(|(g, i)| (*g, *i)).collect();
        for (gid, id) in known {
            let waiting = self.jobs.get(&id).is_some_and(|e| e.launch.is_none());
            if waiting && !groups.contains_key(&gid) {
                self.native_gone(id, gid, "it is gone from squeue", now);
            }
        }
    }

    /// A native job Gangway knows that has no launch: still held, ended
    /// (cancelled by its user), or running after someone released it.
    fn follow_waiting(
        &mut self,
        id: u64,
        gid: u64,
        comps: &[&SlurmJob],
        now: u64,
        seen: &mut Seen,
    ) {
        if self.jobs.get(&id).is_none_or(|e| e.launch.is_some()) {
            return;
        }
        seen.claimed.insert(gid);
        match group_state(comps) {
            GroupState::Ended { state, .. } if !self.native.ended.contains(&gid) => {
                self.native_gone(id, gid, &format!("it ended in Slurm as {state}"), now);
            }
            GroupState::Ended { .. } => {}
            GroupState::Active => {
                let gpus = self.own_gpus(id, gpus_of(comps), &Vec::new());
                if let Some(p) = self.placement_of(&gpus) {
                    seen.truth.running.insert(JobId(id), p);
                    self.adopt_running(id, gid, gpus);
                }
            }
            GroupState::Pending(_) if comps.iter().all(|j| j.priority > 0) => {
                // Released by someone else, or requeued by Slurm: held
                // again until Gangway places it.
                self.updates.push(JobUpdate {
                    job: gid,
                    fields: vec!["hold".into()],
                });
                let why =
                    format!("Slurm job {gid} was not held; held again until Gangway places it");
                if let Some(e) = self.jobs.get_mut(&id) {
                    push_event(e, why);
                }
            }
            GroupState::Pending(_) => {}
        }
    }

    /// Native job `id`'s Slurm job `gid` ran and is pending again: its
    /// user (or Slurm, for `--requeue` after a failure) requeued it. The
    /// attempt is over (not counted); it is held in Slurm and waits in
    /// Gangway's queue, to be placed again whatever Slurm's requeue delay.
    pub(super) fn requeued_in_slurm(&mut self, id: u64, gid: u64, reason: &str, now: u64) {
        self.updates.push(JobUpdate {
            job: gid,
            fields: vec!["hold".into()],
        });
        let why = format!(
            "Slurm job {gid} was requeued in Slurm (by its user or Slurm; pending, {reason}): \
             held, and placed again by Gangway (not counted)"
        );
        self.requeue_uncounted(id, now, why);
    }

    /// A native job that runs without a launch of ours: adopted.
    fn adopt_running(&mut self, id: u64, gid: u64, gpus: crate::engine::NodeGpus) {
        if let Some(e) = self.jobs.get_mut(&id) {
            e.launches += 1;
            e.attempts += 1;
            e.launch = Some(Launch {
                slurm_id: Some(gid),
                number: e.launches,
                launched_ms: unix_ms(),
                placement: gpus.clone(),
                running: true,
                verified: true,
                taken: true,
                token: String::new(),
            });
            e.last_placement = gpus;
        }
        self.dirty = true;
    }

    /// A native job waiting in Gangway ended or vanished in Slurm: it
    /// leaves the queue as killed.
    fn native_gone(&mut self, id: u64, gid: u64, why: &str, now: u64) {
        let _ = self.sched.kill(JobId(id), now);
        self.native.ids.remove(&gid);
        if let Some(e) = self.jobs.get_mut(&id) {
            push_event(e, format!("Slurm job {gid}: {why}; it leaves the queue"));
        }
        self.dirty = true;
    }

    /// A job of the managed partition Gangway does not know yet.
    fn take_native(&mut self, gid: u64, comps: &[&SlurmJob], now: u64, seen: &mut Seen) {
        let Some(first) = comps.first().copied() else {
            return;
        };
        let state = group_state(comps);
        if matches!(state, GroupState::Ended { .. }) || self.native.refused.contains_key(&gid) {
            return;
        }
        if !native::held_for_gangway(first) && matches!(state, GroupState::Pending(_)) {
            let why = format!(
                "Slurm job {gid} in partition {} was not held at submission: is job_submit.lua installed?",
                first.partition
            );
            tracing::error!("{why}");
            self.warnings.push(why);
        }
        let admitted = native::unplaceable(comps)
            .map(str::to_string)
            .map_or_else(|| self.admit(first), Err);
        match admitted {
            Ok(entry) => {
                let id = entry.id;
                self.native.ids.insert(gid, id);
                self.jobs.insert(id, entry);
                self.dirty = true;
                seen.claimed.insert(gid);
                if state == GroupState::Active {
                    self.follow_waiting(id, gid, comps, now, seen);
                }
            }
            Err(why) => {
                let text = format!("not placed: {why}");
                self.updates.push(JobUpdate {
                    job: gid,
                    fields: vec![format!(
                        "AdminComment={}",
                        native::comment(&text, &first.admin_comment)
                    )],
                });
                self.native.refused.insert(gid, text);
            }
        }
    }

    /// Job `job`'s entry in Gangway's queue, or why it cannot be placed
    /// (its account is no VC the user may use, its request, its size, a
    /// GPU type the cluster lacks).
    fn admit(&mut self, job: &SlurmJob) -> Result<JobEntry, String> {
        let request = {
            let known: Vec<&str> = self
                .map
                .topology
                .gpu_types()
                .iter()
                .map(|t| t.name.as_str())
                .collect();
            native::requested(&job.admin_comment, &known).map_err(|e| e.to_string())?
        };
        let gpus = request.gpus;
        let vc = job.account.clone();
        let Some(&vc_id) = self.vcs.get(&vc) else {
            let known: Vec<&str> = self.vcs.keys().map(String::as_str).collect();
            return Err(format!(
                "its account {vc:?} is not a Gangway virtual cluster (submit with -A one of: {})",
                known.join(", ")
            ));
        };
        let groups = crate::identity::user_by_uid(job.user_id)
            .map_or_else(|| vec![job.group_id], |u| crate::identity::groups_of(&u));
        self.access
            .is_member(&job.user_name, &groups, &vc, &self.slurm)?;
        let id = self.next_id;
        let needs = self.submit_native(id, vc_id, job, &request)?;
        self.next_id += 1;
        let mut entry = JobEntry {
            id,
            vc: vc.clone(),
            user: job.user_name.clone(),
            uid: job.user_id,
            gid: job.group_id,
            gpus,
            submitted_ms: unix_ms(),
            native: Some(job.job_id),
            ..JobEntry::default()
        };
        let types = if request.types.is_empty() {
            String::new()
        } else {
            format!(" of type {}", request.types.join(" or "))
        };
        push_event(
            &mut entry,
            format!(
                "submitted with sbatch as Slurm job {}: {gpus} GPUs{types} in {vc} by {}",
                job.job_id, job.user_name
            ),
        );
        if needs.beyond_gpus() {
            push_event(
                &mut entry,
                format!(
                    "holds {} besides its GPUs: placed where they fit",
                    needs.describe()
                ),
            );
        }
        Ok(entry)
    }

    /// Puts native job `job` in the scheduler's queue as Gangway job `id`
    /// at its own GPUs with their types, its CPUs and memory in the books;
    /// what it holds, or why it cannot be placed (its CPUs or memory fit
    /// on no node even empty).
    fn submit_native(
        &mut self,
        id: u64,
        vc: gangway_core::VcId,
        job: &SlurmJob,
        request: &native::NativeRequest,
    ) -> Result<Needs, String> {
        let needs = slurm_needs(job, request.gpus);
        self.books.fits_ever(&needs)?;
        let spec = JobSpec {
            id: JobId(id),
            vc,
            user: self.user_number(&job.user_name),
            gpus: request.gpus,
            submitted_s: self.last_now,
        };
        let types = gangway_core::GpuRequest::types(request.types.iter().cloned());
        self.sched
            .submit_requesting(spec, &types)
            .map_err(|e| match e {
                gangway_core::SchedulerError::TooLarge { cluster, .. } => format!(
                    "it asks {} GPUs but the cluster has only {cluster}",
                    request.gpus
                ),
                gangway_core::SchedulerError::GpuRequest { source, .. } => {
                    self.type_refusal(&source)
                }
                other => other.to_string(),
            })?;
        self.needs.insert(id, needs);
        Ok(needs)
    }

    /// Writes each held native job's wait reason into its admin comment,
    /// when it changed.
    pub(super) fn comment_waits(&mut self) {
        let mut updates = Vec::new();
        for (gid, id) in &self.native.ids {
            let Some(e) = self.jobs.get(id) else { continue };
            if e.launch.is_some() {
                continue;
            }
            let types = self.restricted_types(*id);
            let job = if types.is_empty() {
                format!("job {id}")
            } else {
                format!("job {id}, GPU type {}", types.join(" or "))
            };
            let text = match self.sched.job(JobId(*id)).map(|r| &r.state) {
                Some(JobState::Pending { .. }) if self.fit_waits.contains_key(id) => format!(
                    "pending in Gangway ({job}): {}",
                    self.fit_waits.get(id).map_or("", String::as_str)
                ),
                Some(JobState::Pending {
                    reason: Some(r), ..
                }) => {
                    let word = self.reason_word(*id, *r);
                    format!(
                        "pending in Gangway ({job}): {word}: {}",
                        crate::client::explain(word)
                    )
                }
                Some(JobState::Pending { reason: None, .. } | JobState::AwaitingRetry(_)) => {
                    format!("pending in Gangway ({job})")
                }
                Some(JobState::Delayed { until_s, .. }) => {
                    format!("pending in Gangway ({job}): retried at {until_s} s")
                }
                // Running or finished: nothing to say.
                _ => continue,
            };
            let Some(current) = self.native.comment.get(gid) else {
                continue;
            };
            let comment = native::comment(&text, current);
            if *current != comment {
                updates.push((*gid, comment));
            }
        }
        for (gid, comment) in updates {
            self.native.comment.insert(gid, comment.clone());
            self.updates.push(JobUpdate {
                job: gid,
                fields: vec![format!("AdminComment={comment}")],
            });
        }
    }

    /// A finished native job: forgotten; if Gangway failed it while Slurm
    /// still holds it, it is cancelled (its admin comment says why).
    pub(super) fn native_finished(&mut self, entry: &JobEntry) {
        let Some(gid) = entry.native else { return };
        self.native.ids.remove(&gid);
        self.native.comment.remove(&gid);
        self.native.restarts.remove(&gid);
        let ended = self.native.ended.remove(&gid);
        if !ended && entry.final_state.as_deref() == Some("failed") {
            let why = entry.events.last().cloned().unwrap_or_default();
            self.updates.push(JobUpdate {
                job: gid,
                fields: vec![format!(
                    "AdminComment={COMMENT_PREFIX}failed in Gangway: {why}"
                )],
            });
            self.cancels.push(super::CancelOrder {
                id: entry.id,
                slurm_id: gid,
                how: super::CancelHow::Scancel(self.run_as(entry.uid, entry.gid)),
            });
        }
    }

    /// The pin of a held native job onto `parts`: requeued first if it
    /// ended (a retry).
    pub(super) fn pin_work(
        &self,
        entry: &JobEntry,
        slurm_id: u64,
        parts: &[crate::launch::Part],
    ) -> super::LaunchWork {
        let text = format!(
            "placed by Gangway (job {}) on {}",
            entry.id,
            crate::launch::placement_text(parts)
        );
        let old = self
            .native
            .comment
            .get(&slurm_id)
            .map_or("", String::as_str);
        let own = resources::own_parts(parts, entry.gpus);
        let (mut fields, _exact) = native::pin_fields(&own, &native::comment(&text, old));
        let requeue = self.native.ended.contains(&slurm_id);
        if requeue || self.native.restarts.get(&slurm_id).is_some_and(|r| *r > 0) {
            // A requeued job waits out Slurm's requeue delay (about 120 s,
            // reason BeginTime); Gangway has seen its last run end and
            // chose free GPUs for it, so it may start now.
            fields.push("StartTime=now".into());
        }
        super::LaunchWork::Pin {
            slurm_id,
            fields,
            requeue,
        }
    }

    /// The user number of `user` (its index in the user list).
    pub(super) fn user_number(&mut self, user: &str) -> u32 {
        let i = match self.users.iter().position(|u| u == user) {
            Some(i) => i,
            None => {
                self.users.push(user.to_string());
                self.users.len() - 1
            }
        };
        u32::try_from(i).unwrap_or(0)
    }

    /// Rebuilds the native book from the saved jobs (after a restart).
    pub(super) fn rebuild_native_book(&mut self) {
        for e in self.jobs.values() {
            if let Some(gid) = e.native {
                self.native.ids.insert(gid, e.id);
            }
        }
    }
}
