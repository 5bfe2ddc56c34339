//! The scheduler's GPU types: jobs that ask for types, where each job
//! runs, and the invariant that a gang runs on one type.

use std::sync::Arc;

use gangway_plugin_sdk::{GpuTypeId, JobId, VcId};

use super::Scheduler;
use crate::book::TypeQuotas;
use crate::job::JobSpec;
use crate::scheduler_error::SchedulerError;
use crate::server_set::ServerSet;
use crate::state::InvariantViolation;
use crate::topology::GpuRequest;

impl Scheduler {
    /// Submits a job that asks for GPU types (most preferred first) or a
    /// memory minimum; it waits for the next round. The request is
    /// resolved now to the types the job may run on
    /// ([`Scheduler::allowed_gpu_types`]), and refused
    /// ([`SchedulerError::GpuRequest`]) if no type of the cluster satisfies
    /// it or none is large enough for the gang. Each placement puts the
    /// whole gang on one type: the most local placement among the allowed
    /// types, the earlier type on a tie.
    ///
    /// A method rather than a field of [`JobSpec`]: specs are written as
    /// struct literals by every host and test, and kept in snapshots; a job
    /// that asks for nothing is submitted as before.
    ///
    /// ```
    /// use gangway_core::{GpuRequest, JobId, JobSpec, Scheduler, TopologyBuilder};
    /// let mut b = TopologyBuilder::new();
    /// let (k80, v100) = (b.add_gpu_type("k80", 12)?, b.add_gpu_type("v100", 32)?);
    /// let r = b.add_domain(b.root(), "r0")?;
    /// b.add_server_of_type(r, "old", 8, k80)?;
    /// b.add_server_of_type(r, "new", 8, v100)?;
    /// let mut sched = Scheduler::new(b.build()?);
    /// let vc = sched.virtual_cluster("a");
    /// let spec = |id| JobSpec { id: JobId(id), vc, user: 0, gpus: 4, submitted_s: 0 };
    /// sched.submit_requesting(spec(1), &GpuRequest::default().with_min_memory_gb(16))?;
    /// assert_eq!(sched.allowed_gpu_types(JobId(1)), Some(&[v100][..]));
    /// let err = sched.submit_requesting(spec(2), &GpuRequest::types(["a100"])).unwrap_err();
    /// assert!(err.to_string().contains("no GPU type \"a100\""), "{err}");
    /// assert!(sched.job(JobId(2)).is_none());
    /// sched.round(0)?;
    /// assert_eq!(sched.running_gpu_type(JobId(1)), Some(v100));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn submit_requesting(
        &mut self,
        spec: JobSpec,
        request: &GpuRequest,
    ) -> Result<(), SchedulerError> {
        self.book.check_submit(&spec)?;
        let types = self.resolve_request(spec.id, spec.gpus, request)?;
        self.book.submit(spec, types)
    }

    /// The GPU types `request` allows job `id`'s gang of `gpus` on this
    /// topology, most preferred first: `None` on a cluster of one type
    /// (every job may use it), an error if no type satisfies it.
    fn resolve_request(
        &self,
        id: JobId,
        gpus: u32,
        request: &GpuRequest,
    ) -> Result<Option<Arc<[GpuTypeId]>>, SchedulerError> {
        let topo = self.state.topology();
        if request.is_any() && !topo.is_heterogeneous() {
            return Ok(None);
        }
        let types = crate::topology::resolve(request, gpus, topo.gpu_types(), topo.type_capacity())
            .map_err(|source| SchedulerError::GpuRequest { job: id, source })?;
        Ok(topo.is_heterogeneous().then(|| Arc::from(types)))
    }

    /// The GPU types job `id` may run on, most preferred first: on a
    /// cluster of several types, what its request allowed (every type
    /// large enough for its gang if it asked for none); `None` on a
    /// cluster of one type, or for an unknown job.
    pub fn allowed_gpu_types(&self, id: JobId) -> Option<&[GpuTypeId]> {
        self.book.gpu_types.get(&id).map(|t| &**t)
    }

    /// The GPU type job `id` runs on now, if it runs.
    pub fn running_gpu_type(&self, id: JobId) -> Option<GpuTypeId> {
        self.state.running_type(id)
    }

    /// Gives virtual cluster `vc` a quota per GPU type (Kueue's shape):
    /// the nominal GPUs of each type and how many more of it the VC may
    /// borrow. A job of the VC starts only on a type the VC names, and only
    /// while the VC's GPUs of that type stay within the nominal quota plus
    /// the borrowing limit, whatever the policies decide; it waits for its
    /// fair share ([`WaitReason::FairShare`](crate::WaitReason)) when no
    /// type it may use has room in the VC's caps. The VC's pooled quota
    /// (what policies of contract 2.0 and 2.1 see) becomes the sum of the
    /// nominal quotas. Empty `quotas` take the per-type quotas away (the
    /// pooled quota stays as it was). Unknown ids are ignored.
    ///
    /// ```
    /// use gangway_core::{JobId, JobSpec, Scheduler, TopologyBuilder, TypeQuota, WaitReason};
    /// let mut b = TopologyBuilder::new();
    /// let (k80, v100) = (b.add_gpu_type("k80", 12)?, b.add_gpu_type("v100", 32)?);
    /// let r = b.add_domain(b.root(), "r0")?;
    /// b.add_server_of_type(r, "old", 8, k80)?;
    /// b.add_server_of_type(r, "new", 8, v100)?;
    /// let mut sched = Scheduler::new(b.build()?);
    /// let vc = sched.virtual_cluster("a");
    /// // 4 V100s, borrowing none; no K80s.
    /// sched.set_type_quotas(vc, [(v100, TypeQuota::new(4, Some(0)))].into());
    /// let spec = |id| JobSpec { id: JobId(id), vc, user: 0, gpus: 4, submitted_s: 0 };
    /// sched.submit(spec(1))?;
    /// sched.submit(spec(2))?;
    /// assert_eq!(sched.round(0)?.starts.len(), 1);
    /// assert_eq!(sched.running_gpu_type(JobId(1)), Some(v100));
    /// assert_eq!(sched.why_pending(JobId(2)), Some(WaitReason::FairShare));
    /// assert_eq!(sched.held_of_type(vc, v100), 4);
    /// assert_eq!(sched.virtual_clusters()[0].quota_gpus, Some(4));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_type_quotas(&mut self, vc: VcId, quotas: TypeQuotas) {
        if self.book.vcs.list().get(vc.index()).is_none() {
            return;
        }
        if !quotas.is_empty() {
            let nominal = quotas
                .values()
                .fold(0u32, |n, q| n.saturating_add(q.nominal_gpus));
            self.book.change_vc(vc, |v| v.quota_gpus = Some(nominal));
        }
        self.book.set_type_quotas(vc, quotas);
    }

    /// Virtual cluster `vc`'s quotas per GPU type, if it has any.
    pub fn type_quotas(&self, vc: VcId) -> Option<&TypeQuotas> {
        self.book.type_quotas.get(&vc)
    }

    /// GPUs of type `t` virtual cluster `vc`'s running jobs hold.
    pub fn held_of_type(&self, vc: VcId, t: GpuTypeId) -> u32 {
        self.book.running_index().held_of_type(vc, t)
    }

    /// Gives job `id` a class: the row of the speeds
    /// ([`Scheduler::set_class_speeds`]) that says how fast it runs on each
    /// GPU type, shown to policies that take the types (contract 2.2).
    /// Jobs without one are of class 0. Not kept in snapshots: a host sets
    /// it again after a restore.
    pub fn set_job_class(&mut self, id: JobId, class: u32) -> Result<(), SchedulerError> {
        if self.book.get(&id).is_none() {
            return Err(SchedulerError::UnknownJob(id));
        }
        self.book.job_classes.insert(id, class);
        Ok(())
    }

    /// How fast each class of job runs on each GPU type (a throughput per
    /// type id, in a unit the same across types; 0: not known), shown to
    /// policies that take the types (contract 2.2). Not kept in snapshots.
    pub fn set_class_speeds(&mut self, mut speeds: Vec<gangway_plugin_sdk::ClassSpeeds>) {
        speeds.sort_by_key(|s| s.class);
        speeds.dedup_by_key(|s| s.class);
        self.book.class_speeds = speeds;
    }

    /// The servers job `id` is restricted to, if it is.
    pub fn allowed_servers(&self, id: JobId) -> Option<&ServerSet> {
        self.book.allowed.get(&id).map(|a| &**a)
    }

    /// Every gang on one GPU type, one its job may use (a host's
    /// restriction is not checked: it holds from when it is set on).
    pub(super) fn check_types(&self) -> Result<(), InvariantViolation> {
        let topo = self.topology();
        for (id, placement) in self.state.allocations() {
            let types: std::collections::BTreeSet<GpuTypeId> = placement
                .parts
                .iter()
                .filter_map(|p| topo.server(p.server).map(|s| s.gpu_type))
                .collect();
            if types.len() > 1 {
                return Err(InvariantViolation(format!(
                    "{id} runs on {} GPU types",
                    types.len()
                )));
            }
            let allowed = self.book.gpu_types.get(id);
            if let (Some(allowed), Some(t)) = (allowed, types.first())
                && !allowed.contains(t)
            {
                return Err(InvariantViolation(format!(
                    "{id} runs on {t}, which it may not use"
                )));
            }
        }
        Ok(())
    }

    /// Each job's allowed GPU types by name, most preferred first, by job
    /// id (none on a cluster of one type): what a snapshot records.
    pub(crate) fn gpu_type_names(&self) -> Vec<(JobId, Vec<String>)> {
        let topo = self.topology();
        let mut out: Vec<(JobId, Vec<String>)> = self
            .book
            .gpu_types
            .iter()
            .map(|(id, types)| {
                let names = types
                    .iter()
                    .filter_map(|t| topo.gpu_types().get(t.index()))
                    .map(|t| t.name.clone())
                    .collect();
                (*id, names)
            })
            .collect();
        out.sort_unstable_by_key(|(id, _)| *id);
        out
    }

    /// Gives restored jobs their allowed GPU types: those `recorded` (by
    /// name), and on a cluster of several types every type large enough
    /// for a job without a record (a snapshot of version 2 or before).
    /// Refuses a job whose types cannot be given, with why.
    pub(crate) fn restore_gpu_types(
        &mut self,
        recorded: &[(JobId, Vec<String>)],
    ) -> Result<(), (JobId, String)> {
        let invalid = |job, why: String| (job, why);
        for (id, names) in recorded {
            let Some(gpus) = self.book.get(id).map(|j| j.spec.gpus) else {
                return Err(invalid(*id, "has GPU types but no record".into()));
            };
            let request = GpuRequest::types(names.iter().cloned());
            let types = self.resolve_request(*id, gpus, &request);
            let types = types.map_err(|e| invalid(*id, why(e)))?;
            if let Some(types) = types {
                self.book.set_gpu_types(*id, types);
            }
        }
        if !self.topology().is_heterogeneous() {
            return Ok(());
        }
        let untyped: Vec<(JobId, u32)> = self
            .book
            .records()
            .iter()
            .filter(|(id, _)| !self.book.gpu_types.contains_key(id))
            .map(|(id, j)| (*id, j.spec.gpus))
            .collect();
        for (id, gpus) in untyped {
            let types = self.resolve_request(id, gpus, &GpuRequest::default());
            if let Some(types) = types.map_err(|e| invalid(id, why(e)))? {
                self.book.set_gpu_types(id, types);
            }
        }
        Ok(())
    }
}

/// What is wrong with a request, without the job's name.
fn why(e: SchedulerError) -> String {
    match e {
        SchedulerError::GpuRequest { source, .. } => source.to_string(),
        other => other.to_string(),
    }
}
