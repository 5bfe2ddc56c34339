//! Client requests, each authorized by the caller the kernel names: submit
//! (as the caller, to a VC they are a member of), cancel (their own jobs,
//! or anyone's for admins), swap and roll back (admins), status and why
//! (everyone; other users' jobs without their private parts). A change is
//! acknowledged only once it is journalled and saved.

use std::path::Path;

use gangway_core::{GpuRequest, JobId, JobSpec};

use super::{CancelHow, CancelOrder, Daemon, push_event, unix_ms};
use crate::access::{Access, Caller};
use crate::identity::RunAs;
use crate::launch;
use crate::persist::{self, JobEntry, SlotChange};
use crate::policies;
use crate::protocol::{Request, Response};

impl Daemon {
    /// Answers one client request from `caller`; `true` when a cycle
    /// should run at once.
    pub fn handle(&mut self, request: Request, caller: &Caller) -> (Response, bool) {
        let refused = |e: String| (Response::Refused(e), false);
        match request {
            Request::Submit {
                gpus,
                vc,
                cmd,
                cwd,
                env,
                gpu_request,
            } => match self.submit(caller, (gpus, &gpu_request), &vc, cmd, cwd, env) {
                Ok(id) => (Response::Submitted(id), true),
                Err(e) => refused(e),
            },
            Request::Status(page) => (Response::Status(Box::new(self.status(page, caller))), false),
            Request::Why(id) => match self.job_report(id, caller) {
                Some(r) => (Response::Job(Box::new(r)), false),
                None => refused(format!(
                    "no job {id} (finished jobs are kept for the last {})",
                    self.cfg.history
                )),
            },
            Request::Cancel(id) => match self.cancel(caller, id) {
                Ok(text) => (Response::Done(text), true),
                Err(e) => refused(e),
            },
            Request::Swap {
                slot,
                name,
                wasm,
                config,
            } => match self.swap(caller, &slot, &name, &wasm, &config) {
                Ok(text) => (Response::Done(text), false),
                Err(e) => refused(e),
            },
            Request::Rollback { slot } => match self.rollback(caller, &slot) {
                Ok(text) => (Response::Done(text), false),
                Err(e) => refused(e),
            },
        }
    }

    /// Why `caller` may not run the admin action `what`, if they may not.
    fn admin_only(caller: &Caller, what: &str) -> Result<(), String> {
        if caller.admin {
            Ok(())
        } else {
            Err(format!(
                "{what} is for admins (root, the daemon's user, access.admins and \
                 access.admin_groups); {} is not one",
                caller.user.name
            ))
        }
    }

    /// Queues a job of `gpus` GPUs of the types `gpu_request` accepts.
    fn submit(
        &mut self,
        caller: &Caller,
        (gpus, gpu_request): (u32, &GpuRequest),
        vc: &str,
        cmd: Vec<String>,
        cwd: String,
        env: Vec<(String, String)>,
    ) -> Result<u64, String> {
        if self.native_mode() {
            return Err(format!(
                "this daemon places jobs submitted with sbatch (native mode): \
                 sbatch -p {} -A <vc> --gpus=N ...",
                self.cfg.slurm.partition.as_deref().unwrap_or("")
            ));
        }
        let Some(vc_cfg) = self.cfg.vc.iter().find(|v| v.name == vc).cloned() else {
            let known: Vec<&str> = self.vcs.keys().map(String::as_str).collect();
            return Err(format!(
                "unknown virtual cluster {vc:?} (known: {})",
                known.join(", ")
            ));
        };
        self.access.may_submit(caller, &vc_cfg, &self.slurm)?;
        if cmd.is_empty() {
            return Err("no command to run (give it after --)".into());
        }
        self.check_user_limits(caller, &cmd, &cwd, &env)?;
        self.check_cwd(caller, &cwd)?;
        let env = identity_environment(launch::job_environment(env)?, caller);
        let entry = self.queue(caller, (gpus, gpu_request), vc, cmd, cwd, env)?;
        let detail = if gpu_request.is_any() {
            format!("vc {vc}, {gpus} GPUs")
        } else {
            format!("vc {vc}, {gpus} GPUs, {gpu_request}")
        };
        let id = entry.id;
        self.jobs.insert(id, entry);
        // Acknowledged means journalled and saved: a job that cannot be
        // written is taken back and refused (its id is not given again).
        if let Err(e) = self.commit("submit", Some(id), &caller.user.name, detail) {
            self.jobs.remove(&id);
            let now = self.now_s();
            let _ = self.sched.kill(JobId(id), now);
            let _ = self.sched.forget(JobId(id));
            return Err(format!("the job could not be saved ({e}); not submitted"));
        }
        Ok(id)
    }

    /// Why `caller` may not queue one more job with this command, folder
    /// and environment, if they may not: `limits.queued_jobs_per_user`
    /// live jobs already, or more than `limits.job_bytes` to keep.
    fn check_user_limits(
        &self,
        caller: &Caller,
        cmd: &[String],
        cwd: &str,
        env: &[(String, String)],
    ) -> Result<(), String> {
        let limits = &self.cfg.limits;
        let theirs: Vec<&JobEntry> = self
            .jobs
            .values()
            .filter(|e| e.uid == caller.user.uid)
            .collect();
        if theirs.len() >= limits.queued_jobs_per_user {
            return Err(format!(
                "{} has {} jobs pending or running, the limit \
                 (limits.queued_jobs_per_user = {}); wait for some to end or cancel some",
                caller.user.name,
                theirs.len(),
                limits.queued_jobs_per_user
            ));
        }
        let bytes = job_bytes(cmd, cwd, env);
        if bytes > limits.job_bytes {
            return Err(format!(
                "the job's command, environment and folder are {bytes} bytes, over the \
                 {}-byte limit (limits.job_bytes): unset what the job does not need, or \
                 put long arguments in a file",
                limits.job_bytes
            ));
        }
        let kept: usize = theirs
            .iter()
            .map(|e| job_bytes(&e.cmd, &e.cwd, &e.env))
            .sum();
        if kept + bytes > limits.queued_bytes_per_user {
            return Err(format!(
                "{}'s jobs pending or running keep {kept} bytes of commands, environments and \
                 folders; this one's {bytes} more would pass the {}-byte limit \
                 (limits.queued_bytes_per_user)",
                caller.user.name, limits.queued_bytes_per_user
            ));
        }
        Ok(())
    }

    /// Puts a job in the scheduler's queue; its entry.
    fn queue(
        &mut self,
        caller: &Caller,
        (gpus, gpu_request): (u32, &GpuRequest),
        vc: &str,
        cmd: Vec<String>,
        cwd: String,
        env: Vec<(String, String)>,
    ) -> Result<JobEntry, String> {
        let vc_id = self.vcs.get(vc).copied().ok_or("unknown virtual cluster")?;
        let id = self.next_id;
        let now = self.now_s();
        let spec = JobSpec {
            id: JobId(id),
            vc: vc_id,
            user: self.user_number(&caller.user.name),
            gpus,
            submitted_s: now,
        };
        self.sched
            .submit_requesting(spec, gpu_request)
            .map_err(|e| match e {
                gangway_core::SchedulerError::TooLarge { gpus, cluster, .. } => {
                    format!("the job asks for {gpus} GPUs but the cluster has only {cluster}")
                }
                gangway_core::SchedulerError::ZeroGpus(_) => "the job asks for 0 GPUs".into(),
                gangway_core::SchedulerError::GpuRequest { source, .. } => {
                    self.type_refusal(&source)
                }
                other => other.to_string(),
            })?;
        self.next_id += 1;
        let mut entry = JobEntry {
            id,
            vc: vc.to_string(),
            user: caller.user.name.clone(),
            uid: caller.user.uid,
            gid: caller.user.gid,
            gpus,
            cmd,
            cwd,
            env,
            submitted_ms: unix_ms(),
            ..JobEntry::default()
        };
        let who = &caller.user.name;
        push_event(
            &mut entry,
            if gpu_request.is_any() {
                format!("submitted: {gpus} GPUs in {vc} by {who}")
            } else {
                format!("submitted: {gpus} GPUs of {gpu_request} in {vc} by {who}")
            },
        );
        Ok(entry)
    }

    /// Why a job's GPU request was refused, with a hint when the config
    /// names no `[gpu_types]` (every node is then of one type).
    pub(super) fn type_refusal(&self, e: &gangway_core::GpuRequestError) -> String {
        match e {
            gangway_core::GpuRequestError::UnknownType { .. } if self.cfg.gpu_types.is_empty() => {
                format!(
                    "{e}: the daemon's config has no [gpu_types] (types are the node features \
                     and GRES types it names)"
                )
            }
            _ => e.to_string(),
        }
    }

    /// Whether `caller` could work in `cwd`: an absolute folder they can
    /// enter and write (its output goes there), checked as them.
    fn check_cwd(&self, caller: &Caller, cwd: &str) -> Result<(), String> {
        if !Path::new(cwd).is_absolute() {
            return Err(format!(
                "the working folder {cwd:?} is not an absolute path"
            ));
        }
        let mut test = std::process::Command::new("/bin/sh");
        test.args([
            "-c",
            "test -d \"$1\" && test -x \"$1\" && test -w \"$1\"",
            "sh",
            cwd,
        ])
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
        if let Some(run_as) = self.run_as(caller.user.uid, caller.user.gid) {
            RunAs {
                groups: caller.groups.clone(),
                ..run_as
            }
            .apply(&mut test);
        }
        match test.status() {
            Ok(s) if s.success() => Ok(()),
            Ok(_) => Err(format!(
                "{} cannot work in {cwd} (it must be a folder they can enter and write: \
                 the job's output goes there)",
                caller.user.name
            )),
            Err(e) => Err(format!("cannot check {cwd} as {}: {e}", caller.user.name)),
        }
    }

    fn cancel(&mut self, caller: &Caller, id: u64) -> Result<String, String> {
        let Some(entry) = self.jobs.get(&id) else {
            return Err(format!("no live job {id}"));
        };
        if !Access::owns_or_admin(caller, entry.uid) {
            return Err(format!(
                "job {id} is {}'s: only its user or an admin may cancel it",
                entry.user
            ));
        }
        // The cancel is saved before it is applied: a restart applies it
        // again; a cancel that cannot be saved is refused, not lost.
        if let Some(e) = self.jobs.get_mut(&id) {
            e.cancel = Some(caller.user.name.clone());
        }
        if let Err(e) = self.commit("cancel", Some(id), &caller.user.name, String::new()) {
            if let Some(entry) = self.jobs.get_mut(&id) {
                entry.cancel = None;
            }
            return Err(format!(
                "job {id} was not cancelled: the cancel could not be saved ({e})"
            ));
        }
        self.apply_cancel(id, &caller.user.name);
        if let Err(e) = self.save() {
            self.last_error = Some(e.to_string());
        }
        Ok(format!("job {id} cancelled"))
    }

    /// Kills job `id` in the scheduler and cancels its Slurm job as its
    /// user (a native job's own Slurm job included).
    fn apply_cancel(&mut self, id: u64, by: &str) {
        let native = self.jobs.get(&id).and_then(|e| e.native);
        match native {
            Some(gid) => {
                let how = self
                    .jobs
                    .get(&id)
                    .map(|e| CancelHow::Scancel(self.run_as(e.uid, e.gid)));
                self.drop_launch(id);
                if let Some(how) = how {
                    self.cancels.push(CancelOrder {
                        id,
                        slurm_id: gid,
                        how,
                    });
                }
            }
            None => self.cancel_launch(id),
        }
        let now = self.now_s();
        let _ = self.sched.kill(JobId(id), now);
        if let Some(e) = self.jobs.get_mut(&id) {
            push_event(e, format!("cancelled by {by}"));
        }
        self.dirty = true;
    }

    fn swap(
        &mut self,
        caller: &Caller,
        slot_name: &str,
        name: &str,
        wasm: &[u8],
        config: &[u8],
    ) -> Result<String, String> {
        Self::admin_only(caller, "swap")?;
        let slot = policies::slot_named(slot_name).map_err(|e| e.to_string())?;
        let module = self
            .policies
            .load(slot, name, wasm)
            .map_err(|e| e.to_string())?;
        let digest = persist::keep_module(&self.cfg.state_dir, wasm).map_err(|e| e.to_string())?;
        let change = SlotChange::Swap {
            name: name.to_string(),
            digest,
            config: config.to_vec(),
        };
        self.slot_changes.push((slot_name.to_string(), change));
        let detail = format!("{slot_name} <- {name}");
        if let Err(e) = self.commit("swap", None, &caller.user.name, detail) {
            self.slot_changes.pop();
            return Err(format!("not swapped: the swap could not be saved ({e})"));
        }
        match self.policies.stage(slot, &module, name, config) {
            Ok(text) => Ok(text),
            Err(e) => {
                self.slot_changes.pop();
                self.dirty = true;
                Err(e.to_string())
            }
        }
    }

    fn rollback(&mut self, caller: &Caller, slot_name: &str) -> Result<String, String> {
        Self::admin_only(caller, "rollback")?;
        let slot = policies::slot_named(slot_name).map_err(|e| e.to_string())?;
        let before = self.slot_changes.clone();
        let last = self.slot_changes.iter().rposition(|(s, _)| s == slot_name);
        match last.map(|i| (i, &self.slot_changes[i].1)) {
            // A rollback after a swap cancels it.
            Some((i, SlotChange::Swap { .. })) => {
                self.slot_changes.remove(i);
            }
            _ => self
                .slot_changes
                .push((slot_name.to_string(), SlotChange::Rollback)),
        }
        if let Err(e) = self.commit("rollback", None, &caller.user.name, slot_name.to_string()) {
            self.slot_changes = before;
            return Err(format!(
                "not rolled back: the rollback could not be saved ({e})"
            ));
        }
        self.policies.rollback(slot);
        Ok(format!("{slot_name} rolls back at the next round"))
    }
}

/// The job's environment with `USER`, `LOGNAME` and `HOME` those of the
/// caller as the system knows them (from the kernel's uid), not whatever
/// the client sent.
fn identity_environment(mut env: Vec<(String, String)>, caller: &Caller) -> Vec<(String, String)> {
    env.retain(|(n, _)| !matches!(n.as_str(), "USER" | "LOGNAME" | "HOME"));
    env.push(("USER".into(), caller.user.name.clone()));
    env.push(("LOGNAME".into(), caller.user.name.clone()));
    if !caller.user.home.is_empty() {
        env.push(("HOME".into(), caller.user.home.clone()));
    }
    env
}

/// The bytes a job's command, folder and environment take.
fn job_bytes(cmd: &[String], cwd: &str, env: &[(String, String)]) -> usize {
    cmd.iter().map(|w| w.len() + 1).sum::<usize>()
        + env
            .iter()
            .map(|(n, v)| n.len() + v.len() + 2)
            .sum::<usize>()
        + cwd.len()
}
