//! [`SchedulerError`]: an event the scheduler refused, and why.

use gangway_plugin_sdk::{JobId, VcId};

use crate::topology::ServerId;

/// A refused event. The scheduler is unchanged.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchedulerError {
    /// A job with this id was already submitted.
    #[error("{0} was already submitted")]
    DuplicateJob(JobId),
    /// The job is not known.
    #[error("{0} is unknown")]
    UnknownJob(JobId),
    /// The job asks for no GPUs.
    #[error("{0} asks for 0 GPUs")]
    ZeroGpus(JobId),
    /// The job can never fit on this cluster.
    #[error("{job} asks for {gpus} GPUs but the cluster has only {cluster}")]
    TooLarge {
        /// The job.
        job: JobId,
        /// Its GPUs.
        gpus: u32,
        /// The cluster's GPUs.
        cluster: u32,
    },
    /// No GPU type of the cluster satisfies what the job asks of its GPUs
    /// (or, on a cluster of several types, none is large enough for its
    /// gang: a gang runs on one type).
    #[error("{job}: {source}")]
    GpuRequest {
        /// The job.
        job: JobId,
        /// Why its request cannot be satisfied.
        source: crate::topology::GpuRequestError,
    },
    /// The virtual cluster id was not created by [`crate::Scheduler::virtual_cluster`].
    #[error("{job}: unknown virtual cluster {vc:?}")]
    UnknownVc {
        /// The job.
        job: JobId,
        /// The id.
        vc: VcId,
    },
    /// The event does not fit the job's state (e.g. ending a pending job).
    #[error("{job}: cannot {event} a job that is {state}")]
    WrongState {
        /// The job.
        job: JobId,
        /// The event.
        event: &'static str,
        /// Its state.
        state: &'static str,
    },
    /// A shrink named GPUs the job does not hold, or none at all.
    #[error("{job}: cannot shrink: {why}")]
    Shrink {
        /// The job.
        job: JobId,
        /// What is wrong with what it would keep.
        why: String,
    },
    /// The server does not exist.
    #[error("{0} does not exist")]
    UnknownServer(ServerId),
    /// Time went backwards.
    #[error("time went backwards: {now} is before the last round at {last}")]
    TimeWentBack {
        /// The time given.
        now: u64,
        /// The previous round.
        last: u64,
    },
}
