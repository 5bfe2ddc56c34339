//! Launches: a round's starts made into Slurm jobs (`sbatch` as the
//! submitter, or in native mode the held job pinned and released), what
//! Slurm answered, and cancels.

use std::time::Instant;

use gangway_core::{AttemptEnd, JobId, Placement};
use gangway_plugin_sdk::FailureClass;

use super::{Daemon, push_event, unix_ms};
use crate::SlurmError;
use crate::engine::Slurm;
use crate::identity::RunAs;
use crate::launch::{self, LaunchSpec, Part};
use crate::persist::Launch;

/// What a launch does in Slurm.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LaunchWork {
    /// `sbatch ARGS` with `script` on stdin, as `run_as` (None: as the
    /// daemon, which is the job's user).
    Sbatch {
        /// `sbatch`'s arguments.
        args: Vec<String>,
        /// The batch script.
        script: String,
        /// Who it runs as.
        run_as: Option<RunAs>,
        /// Where the end record goes: its user's folder is made there
        /// first if missing, and its place reserved.
        records: Option<crate::daemon::records::RecordSpot>,
    },
    /// Native mode: put the held job back first if it ended
    /// (`scontrol requeuehold`), pin it (`scontrol update`), release it.
    Pin {
        /// The user's Slurm job.
        slurm_id: u64,
        /// The update's fields.
        fields: Vec<String>,
        /// Whether it ended and must be requeued (held) first.
        requeue: bool,
    },
}

/// The `scontrol update` fields that clear a job's GPU request.
const CLEAR_GPU_REQUEST: [&str; 2] = ["TresPerNode=", "TresPerJob="];

/// One launch to run: made by a cycle, run on the Slurm I/O side, its
/// outcome handed back ([`Daemon::on_launched`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchOrder {
    /// Gangway's job id.
    pub id: u64,
    /// Which launch of the job.
    pub number: u32,
    /// What to do in Slurm.
    pub work: LaunchWork,
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
    /// Not run: the partition's lock (this Slurm job) is no longer this
    /// daemon's, and why.
    Fenced(u64, String),
}

/// How to take a launch back in Slurm.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CancelHow {
    /// `scancel` as the job's user (None: as the daemon).
    Scancel(Option<RunAs>),
    /// Native mode: `scontrol requeuehold` (the user's job waits, held,
    /// to be placed again).
    RequeueHold,
}

/// A Slurm job to take back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CancelOrder {
    /// Gangway's job id.
    pub id: u64,
    /// The Slurm job.
    pub slurm_id: u64,
    /// How.
    pub how: CancelHow,
}

/// Runs one launch.
fn run_one(slurm: &Slurm, work: &LaunchWork) -> Result<u64, SlurmError> {
    match work {
        LaunchWork::Sbatch {
            args,
            script,
            run_as,
            records,
        } => {
            if let Some(spot) = records
                && let Err(e) = crate::daemon::records::reserve(spot)
            {
                tracing::warn!(
                    "{e}: the job's end record is written when it ends, if there is room"
                );
            }
            slurm.sbatch_as(args, script, run_as.as_ref())
        }
        LaunchWork::Pin {
            slurm_id,
            fields,
            requeue,
        } => {
            if *requeue {
                slurm.job_verb("requeuehold", *slurm_id)?;
            }
            // Slurm 22.05 adds a job's new GPU request to the one it had
            // (a job pinned to g4, then to g0, gets both): the old one is
            // cleared first.
            slurm.update_job(*slurm_id, &CLEAR_GPU_REQUEST.map(String::from))?;
            slurm.update_job(*slurm_id, fields)?;
            slurm.job_verb("release", *slurm_id)?;
            Ok(*slurm_id)
        }
    }
}

/// The fence before one launch: `None` when it may run (no lock to check,
/// or the lock is still this daemon's in Slurm, its epoch:
/// [`crate::lock::still_ours`]), else the outcome that stops it (`Fenced`,
/// or `Unreachable` when Slurm does not answer: no launch on a guess).
fn fenced(slurm: &Slurm, fence: Option<&crate::lock::Lock>) -> Option<LaunchOutcome> {
    let lock = fence?;
    match crate::lock::still_ours(slurm, lock) {
        Ok(true) => None,
        Ok(false) => Some(LaunchOutcome::Fenced(
            lock.job,
            format!(
                "the partition's lock (Slurm job {}) is no longer this daemon's",
                lock.job
            ),
        )),
        Err(e) => Some(LaunchOutcome::Unreachable(e.to_string())),
    }
}

/// Runs `orders` one by one; once Slurm does not answer or refuses for its
/// configuration, the rest are not tried and get the same outcome. With
/// `fence` (the daemon's lock), each launch first checks that the lock is
/// still the daemon's ([`fenced`]); once it is not, nothing more is
/// launched.
pub fn run_launches(
    slurm: &Slurm,
    orders: Vec<LaunchOrder>,
    fence: Option<&crate::lock::Lock>,
) -> Vec<(LaunchOrder, LaunchOutcome)> {
    let mut stop: Option<LaunchOutcome> = None;
    orders
        .into_iter()
        .map(|order| {
            if let Some(outcome) = &stop {
                return (order, outcome.clone());
            }
            let outcome =
                fenced(slurm, fence).unwrap_or_else(|| launch_outcome(run_one(slurm, &order.work)));
            if matches!(
                outcome,
                LaunchOutcome::Unreachable(_)
                    | LaunchOutcome::Misconfigured(_)
                    | LaunchOutcome::Fenced(..)
            ) {
                stop = Some(outcome.clone());
            }
            (order, outcome)
        })
        .collect()
}

/// How a launch's result reads.
fn launch_outcome(result: Result<u64, SlurmError>) -> LaunchOutcome {
    match result {
        Ok(gid) => LaunchOutcome::Launched(gid),
        Err(e @ (SlurmError::Unreachable { .. } | SlurmError::CommandMissing { .. })) => {
            LaunchOutcome::Unreachable(e.to_string())
        }
        Err(e @ SlurmError::Misconfigured { .. }) => LaunchOutcome::Misconfigured(e.to_string()),
        Err(e) => LaunchOutcome::Refused(e.to_string()),
    }
}

/// Takes back each Slurm job; returns those Slurm did not answer for (to
/// try again). Other refusals (the job is gone) are logged.
pub fn run_cancels(slurm: &Slurm, cancels: Vec<CancelOrder>) -> Vec<CancelOrder> {
    let mut failed = Vec::new();
    for order in cancels {
        let done = match &order.how {
            CancelHow::Scancel(run_as) => slurm.scancel_as(order.slurm_id, run_as.as_ref()),
            // A running job is requeued and held; one still pending after
            // its release is held again.
            CancelHow::RequeueHold => slurm
                .job_verb("requeuehold", order.slurm_id)
                .or_else(|_| slurm.job_verb("hold", order.slurm_id)),
        };
        match done {
            Ok(()) => {}
            Err(e @ SlurmError::Unreachable { .. }) => {
                tracing::warn!(
                    job = order.id,
                    slurm_job = order.slurm_id,
                    "{e}; tried again"
                );
                failed.push(order);
            }
            Err(e) => tracing::warn!(job = order.id, slurm_job = order.slurm_id, "{e}"),
        }
    }
    failed
}

/// Seconds the queue stays held after a configuration refusal before a
/// launch tries again.
pub(super) const HOLD_RETRY_S: u64 = 30;

impl Daemon {
    /// Ends a job's current attempt in the scheduler, with an event.
    pub(super) fn end(&mut self, id: u64, now: u64, end: AttemptEnd, why: String) {
        self.drop_launch(id);
        if let Some(entry) = self.jobs.get_mut(&id) {
            push_event(entry, why);
        }
        if let Err(e) = self.sched.end_attempt(JobId(id), now, end) {
            tracing::warn!(job = id, "end_attempt refused: {e}");
        }
        self.dirty = true;
    }

    /// How to take job `id`'s Slurm job back: as its user, or held again
    /// in native mode.
    fn cancel_how(&self, id: u64) -> CancelHow {
        match self.jobs.get(&id) {
            Some(e) if e.native.is_some() => CancelHow::RequeueHold,
            Some(e) => CancelHow::Scancel(self.run_as(e.uid, e.gid)),
            None => CancelHow::Scancel(None),
        }
    }

    /// Who to run a user's commands as: `None` when it is the daemon's own
    /// user (or it cannot switch users).
    pub(super) fn run_as(&self, uid: u32, gid: u32) -> Option<RunAs> {
        if uid == self.access.daemon_uid || !self.access.can_switch_users() {
            return None;
        }
        let user = crate::identity::user_by_uid(uid);
        Some(match user {
            Some(u) => RunAs::user(&u),
            None => RunAs {
                uid,
                gid,
                groups: vec![gid],
            },
        })
    }

    /// Forgets a job's launch and takes its Slurm job back (on the Slurm
    /// I/O side: see [`Daemon::take_cancels`]). A Slurm job never seen
    /// with the launch's tag and the job's user is not touched: the id
    /// `sbatch` printed is not trusted until `squeue` confirms it.
    pub(super) fn cancel_launch(&mut self, id: u64) {
        let how = self.cancel_how(id);
        let Some(launch) = self.drop_launch(id) else {
            return;
        };
        if let (Some(gid), true) = (launch.slurm_id, launch.verified) {
            self.cancels.push(CancelOrder {
                id,
                slurm_id: gid,
                how,
            });
        }
        self.dirty = true;
    }

    /// Launches of job `id` that count against `max_attempts`: those
    /// Slurm took or refused, less those replaced through no fault of the
    /// job's.
    pub(super) fn counted(&self, id: u64) -> u32 {
        let tried = self
            .jobs
            .get(&id)
            .map_or(0, |e| e.attempts.saturating_add(e.refusals));
        tried.saturating_sub(self.uncounted.get(&id).copied().unwrap_or(0))
    }

    /// Puts job `id`, whose launch went nowhere through no fault of its
    /// own, back in the queue; a launch Slurm took does not count.
    pub(super) fn requeue_uncounted(&mut self, id: u64, now: u64, why: String) {
        let taken = self.drop_launch(id).is_some_and(|l| l.taken);
        if let Some(e) = self.jobs.get_mut(&id) {
            push_event(e, why);
        }
        if taken {
            *self.uncounted.entry(id).or_insert(0) += 1;
        }
        if let Err(e) = self.sched.requeue(JobId(id), now) {
            tracing::warn!(job = id, "requeue refused: {e}");
        }
        self.dirty = true;
    }

    /// A Gangway placement as Slurm parts: node names, indices, and the
    /// GRES types to ask for (each index's own, or the node's one type for
    /// each GPU: then Slurm chooses the GPUs within the node).
    pub(super) fn parts(&self, placement: &Placement) -> Vec<Part> {
        placement
            .parts
            .iter()
            .map(|p| {
                let gpus: Vec<u32> = (0..64u32).filter(|g| p.gpus & (1 << g) != 0).collect();
                Part {
                    node: self.map.node(p.server).to_string(),
                    types: self.map.gres_types(p.server, &gpus),
                    gpus,
                }
            })
            .collect()
    }

    /// Step 5: a round, and the launches of its starts, saved as intents
    /// before any `sbatch` runs (see persist); returns them to be run. If
    /// the intents cannot be saved, nothing is launched: the started jobs
    /// go back to the queue (no launch of theirs counts).
    pub(super) fn round_and_plan(&mut self, now: u64) -> Result<Vec<LaunchOrder>, SlurmError> {
        let t = Instant::now();
        let report = self
            .sched
            .round(now)
            .map_err(|e| SlurmError::Refused(format!("round: {e}")))?;
        self.stats.rounds += 1;
        self.stats.round_us += u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
        // The reclaim slot stopped these: pending again in Gangway, their
        // Slurm jobs are taken back before anything new launches.
        for p in &report.preempted {
            self.cancel_launch(p.job.0);
            if let Some(e) = self.jobs.get_mut(&p.job.0) {
                let why = format!(
                    "preempted by the reclaim policy after {} s; re-queued",
                    p.ran_s
                );
                push_event(e, why);
            }
            self.dirty = true;
        }
        // The defragment slot moved these: taken back where they ran and
        // launched again (from their checkpoint) where they run now.
        let mut launches: Vec<(u64, Placement)> = Vec::new();
        for m in &report.migrations {
            self.cancel_launch(m.job.0);
            if let Some(e) = self.jobs.get_mut(&m.job.0) {
                push_event(e, "migrated by the defragment policy".into());
            }
            launches.push((m.job.0, m.to.placement.clone()));
        }
        launches.extend(
            report
                .starts
                .iter()
                .map(|s| (s.job.0, s.choice.placement.clone())),
        );
        let launches = self.fitting_starts(launches, now);
        if launches.is_empty() {
            return Ok(Vec::new());
        }
        self.plan(launches, now)
    }

    /// Records a launch intent for each start, saves them, and makes the
    /// orders.
    fn plan(
        &mut self,
        launches: Vec<(u64, Placement)>,
        now: u64,
    ) -> Result<Vec<LaunchOrder>, SlurmError> {
        let now_ms = unix_ms();
        let mut batch = Vec::with_capacity(launches.len());
        for (id, placement) in launches {
            let parts = self.parts(&placement);
            let token = crate::persist::random_hex(16)?;
            if let Some(e) = self.jobs.get_mut(&id) {
                e.launches += 1;
                e.launch = Some(Launch {
                    slurm_id: e.native,
                    number: e.launches,
                    launched_ms: now_ms,
                    placement: launch::node_gpus(&parts),
                    running: false,
                    verified: e.native.is_some(),
                    taken: false,
                    token,
                });
                e.last_placement = launch::node_gpus(&parts);
                batch.push((id, e.launches, parts));
            }
        }
        // The intent is saved before any sbatch runs (see persist).
        if let Err(e) = self.save() {
            for (id, _, _) in &batch {
                let why = format!(
                    "not launched: the launch could not be saved first ({e}); pending again"
                );
                self.requeue_uncounted(*id, now, why);
            }
            return Err(e);
        }
        Ok(batch
            .into_iter()
            .filter_map(|(id, number, parts)| self.order(id, number, parts))
            .collect())
    }

    /// The order of launch `number` of job `id` onto `parts`.
    fn order(&self, id: u64, number: u32, parts: Vec<Part>) -> Option<LaunchOrder> {
        let entry = self.jobs.get(&id)?;
        let work = match entry.native {
            Some(slurm_id) => self.pin_work(entry, slurm_id, &parts),
            None => {
                let token = entry.launch.as_ref().map_or("", |l| l.token.as_str());
                let folder = self.record_folder(entry.uid);
                let record_dir = folder.as_ref().map(|f| f.path(entry.uid));
                let record_name = super::records::record_name(token);
                let spec = LaunchSpec {
                    daemon: &self.id,
                    id,
                    number,
                    cmd: &entry.cmd,
                    cwd: &entry.cwd,
                    env: &entry.env,
                    partition: Some(&self.served.partition),
                    record_dir: record_dir.as_deref(),
                    record_name: &record_name,
                    token,
                };
                LaunchWork::Sbatch {
                    args: launch::sbatch_args(&spec, &parts),
                    script: launch::script(&spec, &parts),
                    run_as: self.run_as(entry.uid, entry.gid),
                    records: folder.map(|folder| super::records::RecordSpot {
                        folder,
                        uid: entry.uid,
                        gid: entry.gid,
                        name: record_name,
                    }),
                }
            }
        };
        Some(LaunchOrder {
            id,
            number,
            work,
            parts,
        })
    }

    /// What Slurm said of each launch of a cycle.
    pub fn on_launched(&mut self, results: Vec<(LaunchOrder, LaunchOutcome)>) {
        let now = self.now_s();
        for (order, outcome) in results {
            let current = self
                .jobs
                .get(&order.id)
                .and_then(|e| e.launch.as_ref())
                .is_some_and(|l| l.number == order.number && !l.taken);
            match outcome {
                LaunchOutcome::Launched(gid) if !current => {
                    // Cancelled (or re-queued) while its sbatch ran: taken
                    // back once squeue shows it is this launch (as a
                    // stray of this daemon, see cycle).
                    tracing::info!(
                        job = order.id,
                        slurm_job = gid,
                        "launched after it was taken back"
                    );
                }
                LaunchOutcome::Launched(gid) => self.launched(&order, gid),
                _ if !current => {}
                LaunchOutcome::Unreachable(why) => {
                    self.note_unreachable(why.clone());
                    let why = format!("not launched: {why}; pending again (not counted)");
                    self.requeue_uncounted(order.id, now, why);
                }
                LaunchOutcome::Misconfigured(why) => {
                    if self.hold.is_none() {
                        tracing::error!(
                            "{why}: holding the queue; launches are tried again every {HOLD_RETRY_S} s"
                        );
                    }
                    self.hold = Some((unix_ms(), why.clone()));
                    let why = format!("not launched: {why}; the queue is held (not counted)");
                    self.requeue_uncounted(order.id, now, why);
                }
                LaunchOutcome::Refused(why) => self.refused(order.id, now, why),
                LaunchOutcome::Fenced(lock_job, why) => {
                    let text = format!("not launched: {why}; pending again (not counted)");
                    self.requeue_uncounted(order.id, now, text);
                    // A lock this daemon has since taken again (someone
                    // cancelled the old one) is no loss.
                    if self.lock.as_ref().is_none_or(|(l, _)| l.job == lock_job) {
                        self.lose_lock(why);
                    }
                }
            }
        }
        self.retire();
        self.dirty = true;
        if let Err(e) = self.save() {
            self.last_error = Some(e.to_string());
        }
    }

    /// Slurm took launch `order` as its job `gid`.
    fn launched(&mut self, order: &LaunchOrder, gid: u64) {
        self.stats.launches += 1;
        let text = launch::placement_text(&order.parts);
        let native = self.jobs.get(&order.id).is_some_and(|e| e.native.is_some());
        if let Some(e) = self.jobs.get_mut(&order.id) {
            e.attempts += 1;
            if let Some(l) = e.launch.as_mut() {
                l.slurm_id = Some(gid);
                l.taken = true;
            }
            let how = if native {
                "pinned and released"
            } else {
                "launched"
            };
            if native {
                self.native.released(gid);
            }
            push_event(e, format!("{how} as Slurm job {gid} on {text}"));
        }
        self.log_launch(
            order.id,
            order.number,
            gid,
            &launch::node_gpus(&order.parts),
        );
    }

    /// Slurm refused a launch: a failed attempt (counted).
    fn refused(&mut self, id: u64, now: u64, why: String) {
        self.stats.refusals += 1;
        let last = self.counted(id) + 1 >= self.cfg.max_attempts;
        if let Some(e) = self.jobs.get_mut(&id) {
            // Not a launch (no Slurm job), but it counts against
            // max_attempts.
            e.refusals += 1;
        }
        let then = if last {
            "; no launches left"
        } else {
            "; re-queued"
        };
        self.end(
            id,
            now,
            AttemptEnd::Failed {
                class: FailureClass::Unknown,
                last,
            },
            format!("Slurm refused the launch: {why}{then}"),
        );
    }

    /// Slurm did not answer: noted (since when, and why) for `status`.
    pub(super) fn note_unreachable(&mut self, why: String) {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A Slurm whose `squeue` says the lock (job 7, daemon d1) is pending
    /// for its first `pending_for` checks and cancelled after, and whose
    /// `sbatch` writes a line to `sbatch.calls` for each submission; its
    /// folder.
    fn fake_slurm(name: &str, pending_for: u32) -> (Slurm, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("gw-fence-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let d = dir.display();
        let squeue = format!(
            "#!/bin/sh\nn=$(cat {d}/checks 2>/dev/null || echo 0); n=$((n + 1)); echo $n > {d}/checks\n\
             if [ $n -le {pending_for} ]; then s=PENDING; else s=CANCELLED; fi\n\
             echo \"$s|gangway-lock:gpu:d1:h:1:100:n[1-4]\"\n"
        );
        let sbatch =
            format!("#!/bin/sh\ncat > /dev/null\necho launched >> {d}/sbatch.calls\necho 4242\n");
        for (file, text) in [("squeue", squeue), ("sbatch", sbatch)] {
            let path = dir.join(file);
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        (Slurm::new(Some(dir.clone()), None), dir)
    }

    fn orders(n: u64) -> Vec<LaunchOrder> {
        (1..=n)
            .map(|id| LaunchOrder {
                id,
                number: 1,
                work: LaunchWork::Sbatch {
                    args: Vec::new(),
                    script: "#!/bin/sh\ntrue\n".into(),
                    run_as: None,
                    records: None,
                },
                parts: Vec::new(),
            })
            .collect()
    }

    fn lock() -> crate::lock::Lock {
        crate::lock::Lock {
            job: 7,
            partition: "gpu".into(),
            daemon: "d1".into(),
            host: "h".into(),
            pid: 1,
            beat_s: 100,
            nodes: "n[1-4]".into(),
        }
    }

    fn sbatch_calls(dir: &std::path::Path) -> usize {
        std::fs::read_to_string(dir.join("sbatch.calls")).map_or(0, |t| t.lines().count())
    }

    #[test]
    fn a_lock_lost_between_launches_stops_the_rest() {
        // The lock is ours at the first launch's check, taken before the
        // second's: one sbatch, then nothing (a check at read time alone
        // would have let all three run).
        let (slurm, between) = fake_slurm("between", 1);
        let out = run_launches(&slurm, orders(3), Some(&lock()));
        let got: Vec<&LaunchOutcome> = out.iter().map(|(_, o)| o).collect();
        assert_eq!(got[0], &LaunchOutcome::Launched(4242));
        for o in &got[1..] {
            assert!(
                matches!(o, LaunchOutcome::Fenced(7, why) if why.contains("no longer this daemon's")),
                "{o:?}"
            );
        }
        assert_eq!(sbatch_calls(&between), 1);
        // Lost before the first launch: nothing at all.
        let (slurm, dir) = fake_slurm("before", 0);
        let out = run_launches(&slurm, orders(2), Some(&lock()));
        assert!(
            out.iter()
                .all(|(_, o)| matches!(o, LaunchOutcome::Fenced(7, _)))
        );
        assert_eq!(sbatch_calls(&dir), 0);
        assert!(fenced(&slurm, Some(&lock())).is_some());
        // Another daemon's comment on our lock's job is not ours either.
        let (slurm, dir2) = fake_slurm("theirs", 9);
        let theirs = crate::lock::Lock {
            daemon: "d2".into(),
            ..lock()
        };
        assert!(matches!(
            fenced(&slurm, Some(&theirs)),
            Some(LaunchOutcome::Fenced(7, _))
        ));
        // Ours throughout, or no lock to check: every launch runs.
        assert_eq!(fenced(&slurm, Some(&lock())), None);
        let out = run_launches(&slurm, orders(2), Some(&lock()));
        assert!(out.iter().all(|(_, o)| *o == LaunchOutcome::Launched(4242)));
        assert_eq!(
            run_launches(&slurm, orders(1), None)[0].1,
            LaunchOutcome::Launched(4242)
        );
        assert_eq!(sbatch_calls(&dir2), 3);
        for d in [between, dir, dir2] {
            std::fs::remove_dir_all(d).unwrap();
        }
    }
}
