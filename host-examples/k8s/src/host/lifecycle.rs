//! A gang's life in the host: submitted when complete, withdrawn when it
//! no longer is, ended when it holds nothing any more, evicted whole when
//! it cannot run as planned, finished when a previous scheduler bound it
//! in part.

use std::collections::{BTreeMap, BTreeSet};

use gangway_core::{AttemptEnd, FailureClass, JobId, JobSpec, SchedulerError};

use super::truth::Hold;
use super::{EVICT_AGAIN_MS, Host, Inputs, ROLL_FORWARD_MS, gang_key, plan_gpus};
use crate::gangs::{GangKey, GangView};
use crate::objects::{GPUS_ANNOTATION, PodInfo};
use crate::report::{self, Action, EventOrder, PodBind};

impl Host {
    /// Drops entries of gangs that no longer exist and hold nothing (a
    /// pending one leaves the queue; a running one is ended by
    /// [`Host::act_on_holds`] first).
    pub(super) fn forget_gone(&mut self, views: &BTreeMap<GangKey, GangView<'_>>) {
        let gone: Vec<GangKey> = self
            .gangs
            .keys()
            .filter(|k| !views.contains_key(*k))
            .cloned()
            .collect();
        for key in gone {
            let claimed = self.claims.iter().any(|(_, c)| c.gang == key);
            let Some(e) = self.gangs.get(&key) else {
                continue;
            };
            let running = e
                .job
                .and_then(|j| self.sched.as_ref()?.job(j))
                .is_some_and(|j| j.is_running());
            if running || claimed || e.evicting {
                continue;
            }
            self.withdraw(&key, self.last_now);
            self.gangs.remove(&key);
        }
    }

    /// Step 2: per gang, what is wrong with it, and whether it is
    /// submitted or withdrawn.
    pub(super) fn sync_gangs(
        &mut self,
        views: &BTreeMap<GangKey, GangView<'_>>,
        input: &Inputs<'_>,
        now: u64,
        out: &mut Vec<Action>,
    ) {
        let holding = self.holding_gangs(input.pods);
        for view in views.values() {
            let entry = self.gangs.entry(view.key.clone()).or_default();
            if entry.evicting && !holding.contains(&view.key) {
                entry.evicting = false;
            }
            if entry.evicting {
                self.evict_again(view, input.now_ms, out);
            }
            self.report_annotations(view, out);
            if let Some(problem) = view.problem.clone() {
                self.withdraw(&view.key, now);
                self.report_problem(view, &problem, out);
                continue;
            }
            self.submit_or_withdraw(view, now, input.now_ms, out);
        }
    }

    /// Orders an eviction again for an evicted gang's pods that are still
    /// there and not being deleted, [`EVICT_AGAIN_MS`] after the last.
    fn evict_again(&mut self, view: &GangView<'_>, now_ms: u64, out: &mut Vec<Action>) {
        let Some(e) = self.gangs.get_mut(&view.key) else {
            return;
        };
        if now_ms.saturating_sub(e.evicted_ms) < EVICT_AGAIN_MS {
            return;
        }
        let pods: Vec<(String, String)> = view
            .live()
            .filter(|p| p.node.is_some())
            .map(|p| (p.namespace.clone(), p.name.clone()))
            .collect();
        if pods.is_empty() {
            return;
        }
        e.evicted_ms = now_ms;
        tracing::info!(gang = %view.key, pods = pods.len(), "its pods are still there; evicted again");
        out.push(Action::Evict {
            gang: view.key.clone(),
            pods,
            grace0: e.evict_grace0,
        });
    }

    /// Gangs any of whose pods holds GPUs (bound and not ended, being
    /// deleted included) or has a Binding the cache does not show yet.
    fn holding_gangs(&self, pods: &[PodInfo]) -> BTreeSet<GangKey> {
        let mut out: BTreeSet<GangKey> = pods
            .iter()
            .filter(|p| p.ours && p.holds())
            .map(gang_key)
            .collect();
        out.extend(self.claims.iter().map(|(_, c)| c.gang.clone()));
        out
    }

    /// A pod whose GPU annotation disagrees with its resources: an Event,
    /// once; the count is the resources'.
    fn report_annotations(&mut self, view: &GangView<'_>, out: &mut Vec<Action>) {
        for p in &view.pods {
            let Some(value) = &p.gpus_annotation else {
                continue;
            };
            let note = format!(
                "pod {}: annotation {GPUS_ANNOTATION}={value:?} is ignored; its GPUs are its resources' ({})",
                p.name,
                p.gpus.as_ref().map_or(0, |g| *g)
            );
            let e = self.gangs.entry(view.key.clone()).or_default();
            if !e.reported.insert(note.clone()) {
                continue;
            }
            tracing::warn!(gang = %view.key, "{note}");
            out.push(Action::Event(EventOrder {
                target: report::Target::Pod {
                    namespace: p.namespace.clone(),
                    name: p.name.clone(),
                },
                warning: true,
                reason: "GPUAnnotationIgnored".into(),
                action: "Scheduling".into(),
                note,
            }));
        }
    }

    /// Takes a gang's job out of the scheduler if it is pending (it
    /// changed, broke, or waits for something).
    pub(super) fn withdraw(&mut self, key: &GangKey, now: u64) {
        let Some(e) = self.gangs.get_mut(key) else {
            return;
        };
        let Some(job) = e.job else { return };
        let Some(sched) = self.sched.as_mut() else {
            return;
        };
        if sched.job(job).is_some_and(|j| j.is_pending()) {
            let _ = sched.kill(job, now);
            let _ = sched.forget(job);
            e.job = None;
            self.by_job.remove(&job);
        }
    }

    /// Ends a gang's job whatever its state (killed) and forgets it.
    fn end_job(&mut self, key: &GangKey, now: u64) {
        let Some(e) = self.gangs.get_mut(key) else {
            return;
        };
        e.nominated = None;
        let Some(job) = e.job.take() else { return };
        self.by_job.remove(&job);
        if let Some(sched) = self.sched.as_mut() {
            let _ = sched.kill(job, now);
            let _ = sched.forget(job);
        }
    }

    /// Whether a gang may be submitted now, and if not, why it waits
    /// (reason, message), `None` when nothing needs saying.
    fn readiness(
        &self,
        view: &GangView<'_>,
        now_ms: u64,
    ) -> Result<(), Option<(&'static str, String)>> {
        let Some(entry) = self.gangs.get(&view.key) else {
            return Err(None);
        };
        if entry.evicting || entry.broken.is_some() {
            return Err(None);
        }
        if view.plan.is_some() {
            return Ok(());
        }
        if view.awaiting_group {
            let group = view.key.name();
            return Err(Some((
                "WaitingForPodGroup",
                format!(
                    "its pods name PodGroup {group}, which does not exist; the gang waits for it"
                ),
            )));
        }
        if !view.complete() {
            let finished = !view.pods.is_empty() && view.live().next().is_none();
            if finished || (view.group.is_none() && view.live().next().is_none()) {
                return Err(None);
            }
            let live = view.live().count();
            let timeout = view.group.and_then(|g| {
                let t = g.schedule_timeout_s?;
                (now_ms.saturating_sub(g.created_ms) > t.saturating_mul(1000)).then_some(t)
            });
            if let Some(t) = timeout {
                return Err(Some((
                    "ScheduleTimeout",
                    format!(
                        "{live} of minMember {} pods exist after scheduleTimeoutSeconds {t}; the gang keeps waiting for the rest",
                        view.min_member
                    ),
                )));
            }
            return Err(Some((
                "WaitingForPods",
                format!(
                    "{live} of minMember {} pods exist; the gang waits for the rest",
                    view.min_member
                ),
            )));
        }
        if let Some(short) = view.group.and_then(|g| self.short_of(&g.min_resources)) {
            return Err(Some((
                "MinResources",
                format!("its PodGroup's minResources are not free in the cluster: {short}"),
            )));
        }
        if now_ms < entry.retry_after_ms {
            let secs = (entry.retry_after_ms - now_ms).div_ceil(1000);
            return Err(Some((
                "BindBackoff",
                format!("its Bindings were refused; it is placed again in {secs} s"),
            )));
        }
        Ok(())
    }

    /// Submits a gang that is ready (complete, or bound: reconcile adopts
    /// a bound one where its pods are), withdraws a pending one that no
    /// longer is or whose size changed, and says why one waits.
    fn submit_or_withdraw(
        &mut self,
        view: &GangView<'_>,
        now: u64,
        now_ms: u64,
        out: &mut Vec<Action>,
    ) {
        let ready = self.readiness(view, now_ms);
        let Some(entry) = self.gangs.get(&view.key) else {
            return;
        };
        let gpus = view.plan.as_ref().map_or_else(|| view.gpus(), plan_gpus);
        let pending = entry
            .job
            .and_then(|j| self.sched.as_ref()?.job(j))
            .is_some_and(|j| j.is_pending());
        if pending && (ready.is_err() || entry.gpus != gpus) {
            self.withdraw(&view.key, now);
        }
        if let Err(why) = ready {
            if let Some((reason, note)) = why {
                self.set_reason(view, reason, &note, out);
            }
            return;
        }
        if self.gangs.get(&view.key).is_some_and(|e| e.job.is_some()) {
            return;
        }
        self.submit(view, gpus, now, out);
    }

    /// Submits a gang's job for the GPU types it asks for; a request no
    /// node satisfies now waits, its reason on the PodGroup (nodes of the
    /// type may join).
    fn submit(&mut self, view: &GangView<'_>, gpus: u32, now: u64, out: &mut Vec<Action>) {
        let request = view.gpu_request(&self.gpu_type_label);
        let vc = self.vc(&view.vc);
        let id = JobId(self.next_job);
        self.next_job += 1;
        let spec = JobSpec {
            id,
            vc,
            user: vc.0,
            gpus,
            submitted_s: (view.last_pod_ms / 1000).min(now),
        };
        let Some(sched) = self.sched.as_mut() else {
            return;
        };
        match sched.submit_requesting(spec, &request) {
            Ok(()) => {
                self.by_job.insert(id, view.key.clone());
                if let Some(e) = self.gangs.get_mut(&view.key) {
                    e.job = Some(id);
                    e.gpus = gpus;
                }
            }
            Err(SchedulerError::GpuRequest { source, .. }) => {
                let note = format!("it asks for {request}: {source}");
                self.set_reason(view, "NoGpuType", &note, out);
            }
            Err(e) => tracing::warn!(gang = %view.key, "submit refused: {e}"),
        }
    }

    /// Step 3: a running gang that holds nothing any more ends (its pods
    /// finished or were deleted: a cancel); one that cannot run as planned
    /// is evicted whole.
    pub(super) fn act_on_holds(
        &mut self,
        views: &BTreeMap<GangKey, GangView<'_>>,
        holds: &BTreeMap<GangKey, Hold>,
        now: u64,
        out: &mut Vec<Action>,
    ) {
        let broken: Vec<(GangKey, String)> = self
            .gangs
            .iter_mut()
            .filter_map(|(k, e)| e.broken.take().map(|why| (k.clone(), why)))
            .collect();
        for (key, why) in broken {
            let pods = self.evictable(views, &key);
            self.evict(&key, pods, &why, false, out);
        }
        for (key, hold) in holds {
            match hold {
                Hold::Nothing => self.end_if_gone(views.get(key), key, now),
                Hold::Broken { why, lost } => {
                    let pods = self.evictable(views, key);
                    self.evict(key, pods, why, *lost, out);
                }
                Hold::Held(_) | Hold::Unmapped => {}
            }
        }
    }

    /// Ends the job of a running gang that holds nothing: passed if every
    /// pod succeeded, failed if they all ended and one failed, re-queued if
    /// its pods wait unbound (its Bindings did not happen), killed if its
    /// pods are gone (deleted: a cancel).
    fn end_if_gone(&mut self, view: Option<&GangView<'_>>, key: &GangKey, now: u64) {
        let Some(job) = self.gangs.get(key).and_then(|e| e.job) else {
            return;
        };
        let Some(sched) = self.sched.as_mut() else {
            return;
        };
        if !sched.job(job).is_some_and(|j| j.is_running()) {
            return;
        }
        let pods = view.map_or(&[][..], |v| &v.pods[..]);
        let all_ended = !pods.is_empty() && pods.iter().all(|p| p.phase.ended());
        let waiting = view.is_some_and(|v| v.complete());
        let end = if all_ended && view.is_some_and(GangView::all_succeeded) {
            AttemptEnd::Passed
        } else if all_ended {
            AttemptEnd::Failed {
                class: FailureClass::Unknown,
                last: true,
            }
        } else if waiting {
            tracing::info!(gang = %key, "its Bindings did not happen; placed again");
            let _ = sched.requeue(job, now);
            return;
        } else {
            AttemptEnd::Killed
        };
        if let Err(e) = sched.end_attempt(job, now, end) {
            tracing::warn!(gang = %key, "end_attempt refused: {e}");
        }
        let _ = sched.forget(job);
        self.by_job.remove(&job);
        self.stats.gangs_finished += 1;
        if let Some(e) = self.gangs.get_mut(key) {
            e.job = None;
        }
        tracing::info!(gang = %key, ?end, "ended; its GPUs are free");
    }

    /// A gang's pods to delete when it is evicted: those bound and not
    /// ended, and those with a Binding the cache does not show yet.
    pub(super) fn evictable(
        &self,
        views: &BTreeMap<GangKey, GangView<'_>>,
        key: &GangKey,
    ) -> Vec<(String, String)> {
        let mut pods: BTreeSet<(String, String)> = views.get(key).map_or_else(BTreeSet::new, |v| {
            v.live()
                .filter(|p| p.node.is_some())
                .map(|p| (p.namespace.clone(), p.name.clone()))
                .collect()
        });
        pods.extend(
            self.claims
                .iter()
                .filter(|(_, c)| c.gang == *key)
                .map(|(k, _)| k.clone()),
        );
        pods.into_iter().collect()
    }

    /// Evicts a gang's pods (`grace0`: at once, for a lost node) and
    /// reports why on the gang. Its job ends now; its pods hold their GPUs
    /// (as foreign load) until they are gone, and it is not placed again
    /// before then.
    pub(super) fn evict(
        &mut self,
        key: &GangKey,
        pods: Vec<(String, String)>,
        why: &str,
        grace0: bool,
        out: &mut Vec<Action>,
    ) {
        self.end_job(key, self.last_now);
        let e = self.gangs.entry(key.clone()).or_default();
        e.evicting = true;
        e.evicted_ms = self.now_ms;
        e.evict_grace0 = grace0;
        let n = pods.len();
        self.stats.gangs_interrupted += 1;
        let note = format!("{why}: the gang is re-queued whole; its {n} running pods are evicted");
        tracing::warn!(gang = %key, "{note}");
        out.push(Action::Event(EventOrder {
            target: super::round::target(key),
            warning: true,
            reason: "GangInterrupted".into(),
            action: "Evicting".into(),
            note,
        }));
        if !pods.is_empty() {
            out.push(Action::Evict {
                gang: key.clone(),
                pods,
                grace0,
            });
        }
    }

    /// Before a round: a pending job whose gang is not ready leaves the
    /// queue, so a round never starts a gang without its pods.
    pub(super) fn settle_queue(
        &mut self,
        views: &BTreeMap<GangKey, GangView<'_>>,
        now: u64,
        now_ms: u64,
    ) {
        let pending: Vec<GangKey> = self
            .gangs
            .iter()
            .filter(|(_, e)| {
                e.job
                    .and_then(|j| self.sched.as_ref()?.job(j))
                    .is_some_and(|j| j.is_pending())
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in pending {
            let ready = views
                .get(&key)
                .is_some_and(|v| v.problem.is_none() && self.readiness(v, now_ms).is_ok());
            if !ready {
                self.withdraw(&key, now);
            }
        }
    }

    /// Binds the unbound pods of a gang whose bound pods carry a plan (a
    /// scheduler stopped while binding it), except pods with a Binding
    /// already sent.
    pub(super) fn roll_forward(
        &mut self,
        views: &BTreeMap<GangKey, GangView<'_>>,
        now_ms: u64,
        out: &mut Vec<Action>,
    ) {
        for view in views.values() {
            let Some(plan) = &view.plan else { continue };
            let Some(e) = self.gangs.get(&view.key) else {
                continue;
            };
            if e.evicting || now_ms.saturating_sub(e.rolled_ms) < ROLL_FORWARD_MS {
                continue;
            }
            let Some(job) = e.job else { continue };
            let binds: Vec<PodBind> = view
                .unbound()
                .filter(|p| self.claims.get(&p.namespace, &p.name).is_none())
                .filter_map(|p| {
                    plan.place(&p.name)
                        .map(|pl| super::round::pod_bind(&view.key, job, plan, pl, &p.uid))
                })
                .collect();
            if binds.is_empty() {
                continue;
            }
            if let Some(e) = self.gangs.get_mut(&view.key) {
                e.rolled_ms = now_ms;
            }
            tracing::info!(gang = %view.key, pods = binds.len(), "finishing a gang bound in part");
            out.push(Action::Bind(report::BindOrder {
                gang: view.key.clone(),
                job,
                binds,
                last_pod_ms: self.last_seen_ms(view),
            }));
        }
    }
}
