//! What `status` and `why` show: each job as its owner (or an admin) sees
//! it, and other users' jobs without their commands, working directories
//! or environments.

use gangway_core::{GpuTypeId, JobId, JobState, ServerId, WaitReason};

use super::Daemon;
use crate::access::{Access, Caller};
use crate::persist::JobEntry;
use crate::protocol::{
    FinishedPage, JobReport, NodeReport, SlotReport, StatusReport, TYPE_QUOTA, TypeUseReport,
};

/// Finished jobs a status report lists by default (the newest).
const DEFAULT_FINISHED: u32 = 200;

/// Finished jobs one page may list.
const MAX_PAGE: u32 = 1000;

pub(super) fn wait_list(seconds: &[u64]) -> Vec<(String, u64)> {
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
        cwd: e.cwd.clone(),
        private: false,
        state,
        reason: None,
        wait: Vec::new(),
        waiting_s: 0,
        gpu_types: Vec::new(),
        attempts: e.attempts,
        slurm_job: e.native,
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

/// `report` as `caller` may see it: another user's job without its
/// command, working directory or environment (its events name none).
fn as_seen_by(mut report: JobReport, owner_uid: u32, caller: &Caller) -> JobReport {
    if !Access::owns_or_admin(caller, owner_uid) {
        // Slurm's messages in events may quote the launch's paths.
        if !report.cwd.is_empty() {
            for e in &mut report.events {
                *e = e.replace(&report.cwd, "(private)");
            }
        }
        report.cmd = Vec::new();
        report.cwd = String::new();
        report.private = true;
    }
    report
}

impl Daemon {
    /// One job's report for `caller`, if the job is known.
    pub(super) fn job_report(&self, id: u64, caller: &Caller) -> Option<JobReport> {
        if let Some(e) = self.jobs.get(&id) {
            return Some(as_seen_by(self.live_report(e), e.uid, caller));
        }
        self.history
            .iter()
            .find(|e| e.id == id)
            .map(|e| as_seen_by(history_report(e), e.uid, caller))
    }

    /// The GPU types job `id` may run on, most preferred first, if it may
    /// not run on every type of the cluster; empty otherwise.
    pub(super) fn restricted_types(&self, id: u64) -> Vec<String> {
        let topo = &self.map.topology;
        match self.sched.allowed_gpu_types(JobId(id)) {
            Some(allowed) if allowed.len() < topo.gpu_types().len() => allowed
                .iter()
                .filter_map(|t| topo.gpu_types().get(t.index()))
                .map(|t| t.name.clone())
                .collect(),
            _ => Vec::new(),
        }
    }

    /// How the reports name job `id`'s wait `reason`: the core's word, or
    /// [`TYPE_QUOTA`] for a fair-share wait its VC's quotas per GPU type
    /// explain.
    pub(super) fn reason_word(&self, id: u64, reason: WaitReason) -> &'static str {
        match reason {
            WaitReason::FairShare if self.type_quota_full(id) => TYPE_QUOTA,
            r => r.as_str(),
        }
    }

    /// Whether job `id`'s VC's quotas per GPU type leave none of the
    /// types it may use room for its gang (a type the VC does not name has
    /// none).
    fn type_quota_full(&self, id: u64) -> bool {
        let Some(job) = self.sched.job(JobId(id)) else {
            return false;
        };
        let vc = job.spec.vc;
        let Some(quotas) = self.sched.type_quotas(vc) else {
            return false;
        };
        let gpus = job.next_gpus();
        let all: Vec<GpuTypeId> = (0..self.sched.topology().gpu_types().len())
            .map(|t| GpuTypeId(u8::try_from(t).unwrap_or(u8::MAX)))
            .collect();
        let types = self.sched.allowed_gpu_types(JobId(id)).unwrap_or(&all);
        types.iter().all(|t| {
            quotas.get(t).is_none_or(|q| {
                q.cap().is_some_and(|cap| {
                    u64::from(self.sched.held_of_type(vc, *t)) + u64::from(gpus) > u64::from(cap)
                })
            })
        })
    }

    fn live_report(&self, e: &JobEntry) -> JobReport {
        let record = self.sched.job(JobId(e.id));
        let (state, reason, waiting_s) = match record.map(|r| &r.state) {
            Some(JobState::Pending { since_s, reason }) => (
                "pending".to_string(),
                reason.map(|r| self.reason_word(e.id, r).to_string()),
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
            gpu_types: self.restricted_types(e.id),
            slurm_job: e.launch.as_ref().and_then(|l| l.slurm_id).or(e.native),
            ..entry_report(e, state)
        }
    }

    fn node_reports(&self) -> Vec<NodeReport> {
        (0..self.map.topology.servers().len())
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
                    gpu_type: self.type_name(self.map.topology.servers()[i].gpu_type),
                }
            })
            .collect()
    }

    /// The name of GPU type `t` as the reports show it: empty on a cluster
    /// of one type.
    fn type_name(&self, t: GpuTypeId) -> String {
        let types = self.sched.topology().gpu_types();
        match types.get(t.index()) {
            Some(info) if types.len() > 1 => info.name.clone(),
            _ => String::new(),
        }
    }

    /// Each configured VC's use of each GPU type and its quota of it: on a
    /// cluster of several types, or for a VC with quotas per type.
    fn type_use(&self) -> Vec<TypeUseReport> {
        let types = self.sched.topology().gpu_types();
        let mut out = Vec::new();
        for (name, vc) in &self.vcs {
            let quotas = self.sched.type_quotas(*vc);
            if types.len() < 2 && quotas.is_none() {
                continue;
            }
            for (i, info) in types.iter().enumerate() {
                let t = GpuTypeId(u8::try_from(i).unwrap_or(u8::MAX));
                // A type the VC's quotas do not name is one it may not use.
                let none = gangway_core::TypeQuota::new(0, Some(0));
                let quota = quotas.map(|q| q.get(&t).copied().unwrap_or(none));
                out.push(TypeUseReport {
                    vc: name.clone(),
                    gpu_type: info.name.clone(),
                    held: self.sched.held_of_type(*vc, t),
                    nominal: quota.map(|q| q.nominal_gpus),
                    borrowing_limit: quota.and_then(|q| q.borrowing_limit_gpus),
                });
            }
        }
        out
    }

    fn slot_reports(&self) -> Vec<SlotReport> {
        self.policies
            .status()
            .into_iter()
            .map(|(slot, st)| SlotReport {
                slot: slot.as_str().to_string(),
                quarantined: st.quarantined().iter().map(|s| s.to_string()).collect(),
                active: st.active,
                previous: st.previous,
                swaps: st.swaps,
            })
            .collect()
    }

    /// The finished jobs of `page` (default: the newest 200), as `caller`
    /// sees them, with where the page starts.
    fn finished_page(&self, page: Option<FinishedPage>, caller: &Caller) -> (Vec<JobReport>, u32) {
        let total = u32::try_from(self.history.len()).unwrap_or(u32::MAX);
        let (offset, count) = match page {
            Some(p) => (p.offset.min(total), p.count.min(MAX_PAGE)),
            None => (total.saturating_sub(DEFAULT_FINISHED), DEFAULT_FINISHED),
        };
        let list = self
            .history
            .iter()
            .skip(offset as usize)
            .take(count as usize)
            .map(|e| as_seen_by(history_report(e), e.uid, caller))
            .collect();
        (list, offset)
    }

    /// The status report, as `caller` sees it.
    pub(super) fn status(&self, page: Option<FinishedPage>, caller: &Caller) -> StatusReport {
        let mut pending: Vec<&JobEntry> = Vec::new();
        let mut running = Vec::new();
        for e in self.jobs.values() {
            match self.sched.job(JobId(e.id)).map(|r| &r.state) {
                Some(
                    JobState::Pending { .. }
                    | JobState::AwaitingRetry(_)
                    | JobState::Delayed { .. },
                ) => pending.push(e),
                _ => running.push(as_seen_by(self.live_report(e), e.uid, caller)),
            }
        }
        pending.sort_by_key(|e| {
            (
                self.sched.job(JobId(e.id)).map(|r| r.spec.submitted_s),
                e.id,
            )
        });
        let mut stats = self.stats.clone();
        stats.uptime_s = self.started.elapsed().as_secs();
        stats.rss_kib = rss_kib();
        let (finished, finished_offset) = self.finished_page(page, caller);
        StatusReport {
            nodes: self.node_reports(),
            policies: self.slot_reports(),
            pending: pending
                .into_iter()
                .map(|e| as_seen_by(self.live_report(e), e.uid, caller))
                .collect(),
            running,
            finished,
            finished_total: u32::try_from(self.history.len()).unwrap_or(u32::MAX),
            finished_offset,
            foreign_gpus: self
                .sched
                .virtual_clusters()
                .get(self.foreign_vc.0 as usize)
                .map_or(0, |v| v.held_gpus),
            type_use: self.type_use(),
            stats,
            last_error: self.last_error.clone(),
            slurm_unreachable: self.outage.clone(),
            queue_held: self.hold.clone(),
            state_note: self.state_note.clone(),
            warnings: self.warnings.clone(),
            mode: format!("{:?}", self.cfg.mode).to_ascii_lowercase(),
        }
    }
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
