//! Steps 5 and 6 of a cycle: a round, and what it decided. A start
//! becomes a Binding of every pod of the gang, unless some of its GPUs are
//! still held by pods on their way out (a gang the same round preempted,
//! or one evicted this cycle): it then waits, holding those GPUs in the
//! books, until they are left, as kube-scheduler's nominated pods wait for
//! their victims. Waiting gangs get their reason.

use std::collections::{BTreeMap, BTreeSet};

use gangway_core::{GpuTypeId, JobId, Placement, ServerId, WaitReason};

use super::fits::{Fits, Usage};
use super::truth::Occupied;
use super::{Host, NOMINATED_MAX_MS, Nominated, explain, reason_name};
use crate::GangProblem;
use crate::K8sError;
use crate::gangs::{GangKey, GangView};
use crate::objects::NodeInfo;
use crate::objects::{GANG_ANNOTATION, GANG_PLAN_ANNOTATION, GPU_INDICES_ANNOTATION, indices_text};
use crate::plan::{self, Plan};
use crate::report::{self, Action, EventOrder, PodBind, Target};
use crate::topology::ClusterMap;

/// What a round's decisions are carried out against.
pub(super) struct At<'a> {
    /// GPUs held by pods and Bindings.
    pub(super) occupied: &'a Occupied,
    /// The nodes as the guard takes them.
    pub(super) nodes: &'a [NodeInfo],
    /// Where each restricted gang's pods fit.
    pub(super) fits: &'a BTreeMap<GangKey, Fits>,
    /// Seconds now.
    pub(super) now: u64,
    /// Unix ms now.
    pub(super) now_ms: u64,
}

/// What the starts of one round have taken so far.
struct Starting<'a> {
    occupied: &'a mut Occupied,
    nodes: &'a BTreeMap<&'a str, &'a NodeInfo>,
    usage: &'a mut Usage,
}

impl Host {
    /// Step 6: a round, and what it decided.
    pub(super) fn round(
        &mut self,
        views: &BTreeMap<GangKey, GangView<'_>>,
        at: &At<'_>,
        mut usage: Usage,
        out: &mut Vec<Action>,
    ) -> Result<(), K8sError> {
        let (now, now_ms) = (at.now, at.now_ms);
        let Some(sched) = self.sched.as_mut() else {
            return Ok(());
        };
        let t = std::time::Instant::now();
        let report = sched
            .round(now)
            .map_err(|e| K8sError::Scheduler(format!("round: {e}")))?;
        self.stats.note_round(&report, t.elapsed());
        let mut occupied = at.occupied.clone();
        let nodes: BTreeMap<&str, &NodeInfo> =
            at.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
        let mut starting = Starting {
            occupied: &mut occupied,
            nodes: &nodes,
            usage: &mut usage,
        };
        for p in &report.preempted {
            if let Some(key) = self.by_job.get(&p.job).cloned() {
                let why = format!("preempted by the reclaim policy after {} s", p.ran_s);
                let pods = self.evictable(views, &key);
                self.evict(&key, pods, &why, false, out);
            }
        }
        for m in &report.migrations {
            if let Some(key) = self.by_job.get(&m.job).cloned() {
                let why = "moved by the defragment policy (pods are recreated by their controller)";
                let pods = self.evictable(views, &key);
                self.evict(&key, pods, why, false, out);
            }
        }
        for start in &report.starts {
            self.start(
                views,
                start.job,
                &start.choice.placement,
                &mut starting,
                now,
                now_ms,
                out,
            );
        }
        let mut seen: BTreeSet<JobId> = BTreeSet::new();
        for (job, reason) in report.waiting.clone() {
            seen.insert(job);
            self.waits(views, job, reason, at.fits, out);
        }
        let queued: Vec<JobId> = self
            .sched
            .as_ref()
            .map(|s| s.pending_jobs().filter(|j| !seen.contains(j)).collect())
            .unwrap_or_default();
        for job in queued {
            let reason = self
                .sched
                .as_ref()
                .and_then(|s| s.why_pending(job))
                .unwrap_or(WaitReason::Queued);
            self.waits(views, job, reason, at.fits, out);
        }
        Ok(())
    }

    /// A started gang: its pods' plan, bound whole now, or once the pods
    /// on their way out have left its GPUs.
    #[allow(clippy::too_many_arguments)]
    fn start(
        &mut self,
        views: &BTreeMap<GangKey, GangView<'_>>,
        job: JobId,
        placement: &Placement,
        starting: &mut Starting<'_>,
        now: u64,
        now_ms: u64,
        out: &mut Vec<Action>,
    ) {
        let occupied = &*starting.occupied;
        let Some(key) = self.by_job.get(&job).cloned() else {
            return;
        };
        let Some(view) = views.get(&key) else {
            // Settled before the round: never happens; never hold GPUs for it.
            self.withdraw(&key, now);
            return;
        };
        let (Some(map), Some(sched)) = (&self.map, &self.sched) else {
            return;
        };
        let spare = |s: ServerId| {
            let used = occupied.get(&s).copied().unwrap_or(0);
            (0..map.gpus(s))
                .filter(|g| used >> g & 1 == 0 && sched.state().owner(s, *g).is_none())
                .fold(0u64, |m, g| m | 1 << g)
        };
        let fitted = plan::fit(&view.needs(), placement, |s| map.node(s).to_string(), spare);
        let Some((plan, used)) = fitted else {
            let _ = self.sched.as_mut().map(|s| s.requeue(job, now));
            let note = format!(
                "Gangway placed it on {} but its pods do not divide into those nodes' shares; placed again next cycle",
                placement_text(map, placement)
            );
            self.set_reason(view, "PodsDoNotFit", &note, out);
            return;
        };
        if let Err(why) = self.check_start(view, &plan, starting.nodes, starting.usage) {
            let _ = self.sched.as_mut().map(|s| s.requeue(job, now));
            self.set_reason(
                view,
                "PodsDoNotFit",
                &format!("{why}; placed again next cycle"),
                out,
            );
            return;
        }
        let occupied = &mut *starting.occupied;
        let left_behind = used
            .parts
            .iter()
            .any(|p| occupied.get(&p.server).copied().unwrap_or(0) & p.gpus != 0);
        for part in &used.parts {
            *occupied.entry(part.server).or_default() |= part.gpus;
        }
        if left_behind {
            let text = self
                .map
                .as_ref()
                .map_or_else(String::new, |m| placement_text(m, &used));
            let note =
                format!("placed on {text}; it binds once the pods leaving those GPUs are gone");
            self.set_reason(view, "WaitingForEvictions", &note, out);
            if let Some(e) = self.gangs.get_mut(&key) {
                e.nominated = Some(Nominated {
                    plan,
                    placement: used,
                    since_ms: now_ms,
                });
            }
            return;
        }
        self.bind(view, job, &plan, &used, out);
    }

    /// The Bindings of a gang's every pod, with its status and Event.
    fn bind(
        &mut self,
        view: &GangView<'_>,
        job: JobId,
        plan: &Plan,
        used: &Placement,
        out: &mut Vec<Action>,
    ) {
        let Some(map) = &self.map else { return };
        let key = view.key.clone();
        let binds: Vec<PodBind> = plan
            .places
            .iter()
            .map(|pl| {
                let uid = view
                    .pods
                    .iter()
                    .find(|p| p.name == pl.pod)
                    .map_or("", |p| p.uid.as_str());
                pod_bind(&key, job, plan, pl, uid)
            })
            .collect();
        let text = placement_text(map, used);
        tracing::info!(gang = %key, "binding {} pods to {text}", binds.len());
        if let Some(e) = self.gangs.get_mut(&key) {
            e.reason = None;
            e.note = None;
            e.excluded.clear();
        }
        out.push(Action::Status {
            gang: key.clone(),
            phase: "Scheduled".into(),
            condition: (
                "True".into(),
                "Scheduled".into(),
                format!("bound to {text}"),
            ),
        });
        out.push(Action::Event(EventOrder {
            target: target(&key),
            warning: false,
            reason: "Scheduled".into(),
            action: "Binding".into(),
            note: format!("Gangway bound {} pods to {text}", binds.len()),
        }));
        out.push(Action::Bind(report::BindOrder {
            gang: key,
            job,
            binds,
            last_pod_ms: self.last_seen_ms(view),
        }));
    }

    /// Step 5: gangs waiting for pods on their way out bind once those
    /// are gone; a gang that changed meanwhile leaves the queue, one that
    /// waited too long is placed again.
    pub(super) fn release_nominated(
        &mut self,
        views: &BTreeMap<GangKey, GangView<'_>>,
        occupied: &Occupied,
        now: u64,
        now_ms: u64,
        out: &mut Vec<Action>,
    ) {
        let waiting: Vec<(GangKey, Nominated, JobId)> = self
            .gangs
            .iter()
            .filter_map(|(k, e)| Some((k.clone(), e.nominated.clone()?, e.job?)))
            .collect();
        for (key, n, job) in waiting {
            let view = views
                .get(&key)
                .filter(|v| v.problem.is_none() && v.complete() && v.needs() == needs_of(&n.plan));
            let Some(view) = view else {
                tracing::info!(gang = %key, "changed while it waited for evictions; withdrawn");
                self.unnominate(&key, job, now);
                continue;
            };
            let blocked = n
                .placement
                .parts
                .iter()
                .any(|p| occupied.get(&p.server).copied().unwrap_or(0) & p.gpus != 0);
            if !blocked {
                if let Some(e) = self.gangs.get_mut(&key) {
                    e.nominated = None;
                }
                self.bind(view, job, &n.plan, &n.placement, out);
            } else if now_ms.saturating_sub(n.since_ms) > nominated_max_ms(view) {
                tracing::warn!(gang = %key, "the pods it waited for did not leave; placed again");
                // Submitted again by the next cycle (complete, without a job).
                self.unnominate(&key, job, now);
            }
        }
    }

    /// Ends a nomination: the job leaves the scheduler.
    fn unnominate(&mut self, key: &GangKey, job: JobId, now: u64) {
        if let Some(e) = self.gangs.get_mut(key) {
            e.nominated = None;
            e.job = None;
        }
        self.by_job.remove(&job);
        if let Some(s) = self.sched.as_mut() {
            let _ = s.kill(job, now);
            let _ = s.forget(job);
        }
    }

    /// A waiting gang's reason, written when it changes.
    fn waits(
        &mut self,
        views: &BTreeMap<GangKey, GangView<'_>>,
        job: JobId,
        reason: WaitReason,
        fits: &BTreeMap<GangKey, Fits>,
        out: &mut Vec<Action>,
    ) {
        let Some(key) = self.by_job.get(&job).cloned() else {
            return;
        };
        let Some(view) = views.get(&key) else { return };
        let fit = fits.get(&key);
        if let Some(f) = fit.filter(|f| f.allowed.as_ref().is_some_and(|a| a.is_empty())) {
            let note = format!("no node can run its pods: {}", f.message());
            self.set_reason(view, "Unschedulable", &note, out);
            return;
        }
        if reason == WaitReason::FairShare
            && let Some(note) = self.type_quota_wait(job, &view.vc)
        {
            self.set_reason(view, "TypeQuota", &note, out);
            return;
        }
        let mut note = format!("{}: {}", reason.as_str(), explain(reason));
        if let Some(f) = fit {
            note = format!("{note}, counting the nodes its pods fit ({})", f.message());
        }
        self.set_reason(view, reason_name(reason), &note, out);
    }

    /// Why job `job` of VC `vc` waits if its VC's quotas per GPU type
    /// leave none of the types it may use room for its gang (a type not
    /// named, or one whose held GPUs plus the gang's pass its cap); `None`
    /// if one has room or the VC has no quotas per type.
    fn type_quota_wait(&self, job: JobId, vc: &str) -> Option<String> {
        let sched = self.sched.as_ref()?;
        let spec = &sched.job(job)?.spec;
        let quotas = sched.type_quotas(spec.vc)?;
        let topo = sched.topology();
        let allowed: Vec<GpuTypeId> = match sched.allowed_gpu_types(job) {
            Some(types) => types.to_vec(),
            // One type: every server's.
            None => topo
                .servers()
                .first()
                .map(|s| s.gpu_type)
                .into_iter()
                .collect(),
        };
        let mut full = Vec::new();
        for t in allowed {
            let name = topo
                .gpu_types()
                .get(t.index())
                .map_or("?", |g| g.name.as_str());
            let Some(q) = quotas.get(&t) else {
                full.push(format!("{name}: not in its quotas"));
                continue;
            };
            let cap = q.cap()?;
            let held = sched.held_of_type(spec.vc, t);
            if u64::from(held) + u64::from(spec.gpus) <= u64::from(cap) {
                return None;
            }
            full.push(format!(
                "{name}: {held} of its cap {cap} held (nominal {} + borrowing limit {})",
                q.nominal_gpus,
                q.borrowing_limit_gpus.unwrap_or_default()
            ));
        }
        if full.is_empty() {
            return None;
        }
        Some(format!(
            "virtual cluster {vc}'s quotas per GPU type leave no type it may use room for {} GPUs: {}",
            spec.gpus,
            full.join("; ")
        ))
    }

    /// Writes a gang's reason to its status and an Event, if it changed.
    pub(super) fn set_reason(
        &mut self,
        view: &GangView<'_>,
        reason: &str,
        note: &str,
        out: &mut Vec<Action>,
    ) {
        let e = self.gangs.entry(view.key.clone()).or_default();
        let new_reason = e.reason.as_deref() != Some(reason);
        if !new_reason && e.note.as_deref() == Some(note) {
            return;
        }
        e.reason = Some(reason.to_string());
        e.note = Some(note.to_string());
        let note = format!("{} ({} GPUs) waits: {note}", view.key, view.gpus());
        out.push(Action::Status {
            gang: view.key.clone(),
            phase: "Pending".into(),
            condition: ("False".into(), reason.to_string(), note.clone()),
        });
        if new_reason {
            tracing::info!(gang = %view.key, "{note}");
            out.push(Action::Event(EventOrder {
                target: target(&view.key),
                warning: true,
                reason: "FailedScheduling".into(),
                action: reason.to_string(),
                note,
            }));
        }
    }

    /// Reports a gang's problem once (Event and status).
    pub(super) fn report_problem(
        &mut self,
        view: &GangView<'_>,
        problem: &GangProblem,
        out: &mut Vec<Action>,
    ) {
        let text = problem.to_string();
        let e = self.gangs.entry(view.key.clone()).or_default();
        if !e.reported.insert(text.clone()) {
            return;
        }
        self.stats.problems += 1;
        tracing::warn!(gang = %view.key, "{text}");
        e.reason = Some(problem.reason().to_string());
        out.push(Action::Event(EventOrder {
            target: target(&view.key),
            warning: true,
            reason: problem.reason().to_string(),
            action: "Scheduling".into(),
            note: text.clone(),
        }));
        if matches!(view.key, GangKey::Group { .. }) {
            out.push(Action::Status {
                gang: view.key.clone(),
                phase: "Pending".into(),
                condition: ("False".into(), problem.reason().to_string(), text),
            });
        }
    }
}

/// How long a start may wait for evicted pods to leave its GPUs: its
/// PodGroup's `scheduleTimeoutSeconds`, else [`NOMINATED_MAX_MS`].
fn nominated_max_ms(view: &GangView<'_>) -> u64 {
    view.group
        .and_then(|g| g.schedule_timeout_s)
        .map_or(NOMINATED_MAX_MS, |s| s.saturating_mul(1000))
}

/// What a plan's pods need, in its order (to tell a gang that changed).
fn needs_of(plan: &Plan) -> Vec<plan::PodNeed> {
    let mut out: Vec<plan::PodNeed> = plan
        .places
        .iter()
        .map(|p| plan::PodNeed {
            pod: p.pod.clone(),
            gpus: p.gpus.len() as u32,
        })
        .collect();
    out.sort_by(|a, b| a.pod.cmp(&b.pod));
    out
}

/// The object a gang's Events and status go to.
pub(super) fn target(key: &GangKey) -> Target {
    match key {
        GangKey::Group { namespace, name } => Target::PodGroup {
            namespace: namespace.clone(),
            name: name.clone(),
        },
        GangKey::Pod { namespace, name } => Target::Pod {
            namespace: namespace.clone(),
            name: name.clone(),
        },
    }
}

/// The Binding of one pod of a plan (the pod of uid `uid`), with its
/// annotations.
pub(super) fn pod_bind(
    key: &GangKey,
    job: JobId,
    plan: &Plan,
    place: &plan::PodPlace,
    uid: &str,
) -> PodBind {
    let mut annotations = BTreeMap::new();
    annotations.insert(
        GPU_INDICES_ANNOTATION.to_string(),
        indices_text(&place.gpus),
    );
    annotations.insert(GANG_PLAN_ANNOTATION.to_string(), plan.text());
    annotations.insert(GANG_ANNOTATION.to_string(), format!("{key}#{}", job.0));
    PodBind {
        namespace: key.namespace().to_string(),
        pod: place.pod.clone(),
        uid: uid.to_string(),
        node: place.node.clone(),
        gpus: place.gpus.clone(),
        annotations,
    }
}

/// A placement in words: `n1:0-3 n2:0-7`.
fn placement_text(map: &ClusterMap, p: &Placement) -> String {
    p.parts
        .iter()
        .map(|part| {
            let idx: Vec<u32> = (0..64u32).filter(|g| part.gpus >> g & 1 == 1).collect();
            format!("{}:{}", map.node(part.server), indices_text(&idx))
        })
        .collect::<Vec<_>>()
        .join(" ")
}
