//! What contract 2.2 adds to the fairness and reclaim views on a cluster
//! of several GPU types: the types, each job's allowed types and class,
//! each VC's use and quota of each type, and how fast each class of job
//! runs on each type ([`TypesView`]); and what a fairness policy may answer
//! with it, a type for a job ([`TypeChoice`]).
//!
//! A policy opts in through its manifest ([`crate::Manifest::gpu_types`],
//! which the slot traits set from `FairnessPolicy::uses_gpu_types` and
//! `ReclaimPolicy::uses_gpu_types`). A policy that does not is shown the
//! views as before, collapsed over the types (a VC's quota is the sum of
//! its nominal quotas), and its decisions place each job on any type it may
//! use. On a cluster of one type no policy is shown types.

use serde::{Deserialize, Serialize};

use crate::ids::{GpuTypeId, JobId, VcId};
use crate::wire::Wire;

/// One GPU type of the cluster.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, Wire)]
pub struct GpuTypeSummary {
    /// The type.
    pub id: GpuTypeId,
    /// GB of memory of one GPU of it (0: not known).
    pub memory_gb: u32,
    /// GPUs of the type on servers that are up.
    pub total_gpus: u32,
    /// GPUs of the type free for new work.
    pub free_gpus: u32,
}

/// A job's GPU types.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, Wire)]
pub struct JobTypes {
    /// The job.
    pub job: JobId,
    /// The types it may run on, most preferred first.
    pub allowed: Vec<GpuTypeId>,
    /// The type it runs on, if it runs.
    pub running: Option<GpuTypeId>,
    /// Its class: the row of [`TypesView::speeds`] that says how fast it
    /// runs on each type (0 unless the host gave one).
    pub class: u32,
}

/// A virtual cluster's use and quota of one GPU type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, Wire)]
pub struct VcTypeUsage {
    /// The virtual cluster.
    pub vc: VcId,
    /// The type.
    pub gpu_type: GpuTypeId,
    /// GPUs of the type its running jobs hold.
    pub held_gpus: u32,
    /// Its nominal quota of the type, if it has quotas per type (`Some(0)`
    /// for a type it does not name: it may not use it).
    pub nominal_gpus: Option<u32>,
    /// How many GPUs of the type it may hold beyond its nominal quota
    /// (`None`: no limit).
    pub borrowing_limit_gpus: Option<u32>,
}

/// How fast one class of job runs on each GPU type.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, Wire)]
pub struct ClassSpeeds {
    /// The class ([`JobTypes::class`]).
    pub class: u32,
    /// Its throughput on each type, by type id, in any unit the same
    /// across types (e.g. steps per second times 1,000); 0: not known.
    pub per_type: Vec<u32>,
}

impl ClassSpeeds {
    /// The throughput on `t` (0 if not known).
    pub fn on(&self, t: GpuTypeId) -> u32 {
        self.per_type.get(t.index()).copied().unwrap_or(0)
    }
}

/// The GPU types as contract 2.2's fairness and reclaim views show them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, Wire)]
pub struct TypesView {
    /// Every type of the cluster, by id.
    pub types: Vec<GpuTypeSummary>,
    /// The types of the view's jobs (a fairness view's pending jobs; a
    /// reclaim view's waiting and running jobs), in job id order.
    pub jobs: Vec<JobTypes>,
    /// Every VC's use (and quota) of every type, by (VC, type).
    pub vcs: Vec<VcTypeUsage>,
    /// Speeds by job class, in class order (empty when the host gave
    /// none: a policy then treats the types as equally fast or reads its
    /// own configuration).
    pub speeds: Vec<ClassSpeeds>,
    /// The type of each server of the reclaim view, in the order of its
    /// `servers` (empty beside a fairness view, and for a module whose
    /// manifest does not take them, [`crate::Manifest::server_types`]: a
    /// module built before the field was added reads the layout without
    /// it). See [`TypesView::server_type`].
    #[wire(trailing)]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<GpuTypeId>,
}

impl TypesView {
    /// Job `id`'s types, if the view has it.
    pub fn job(&self, id: JobId) -> Option<&JobTypes> {
        self.jobs
            .binary_search_by_key(&id, |j| j.job)
            .ok()
            .and_then(|i| self.jobs.get(i))
    }

    /// The speeds of job class `class`, if the host gave them.
    pub fn speeds_of(&self, class: u32) -> Option<&ClassSpeeds> {
        self.speeds
            .binary_search_by_key(&class, |s| s.class)
            .ok()
            .and_then(|i| self.speeds.get(i))
    }

    /// VC `vc`'s use of type `t`.
    pub fn vc_type(&self, vc: VcId, t: GpuTypeId) -> Option<&VcTypeUsage> {
        self.vcs
            .binary_search_by_key(&(vc, t), |u| (u.vc, u.gpu_type))
            .ok()
            .and_then(|i| self.vcs.get(i))
    }

    /// Whether VC `vc` has quotas per type (its entries have a nominal
    /// quota) rather than one pooled quota.
    pub fn has_type_quotas(&self, vc: VcId) -> bool {
        let at = self.vcs.partition_point(|u| u.vc < vc);
        self.vcs
            .get(at)
            .is_some_and(|u| u.vc == vc && u.nominal_gpus.is_some())
    }

    /// The type of the server at position `at` of the reclaim view's
    /// `servers`, if the host gave the servers' types.
    pub fn server_type(&self, at: usize) -> Option<GpuTypeId> {
        self.servers.get(at).copied()
    }
}

/// A fairness policy's choice of GPU type for one job of its view: the job
/// starts this round only on that type (one of its allowed types).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, Wire)]
pub struct TypeChoice {
    /// The job.
    pub job: JobId,
    /// The type.
    pub gpu_type: GpuTypeId,
}

/// A fairness decision with its type choices (contract 2.2).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, Wire)]
pub struct TypeChoices {
    /// At most one choice per job of the view, in any order.
    pub choices: Vec<TypeChoice>,
}
