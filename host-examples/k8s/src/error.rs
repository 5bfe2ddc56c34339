//! The errors of `gangway-k8s`: one enum for the scheduler process, one for
//! what is wrong with a user's pods or PodGroup (reported as an Event,
//! never a crash).

/// What went wrong in the scheduler process itself.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum K8sError {
    /// The configuration file is missing, malformed or inconsistent.
    #[error("{file}: {message}")]
    Config {
        /// The file (or `command line`).
        file: String,
        /// What is wrong.
        message: String,
    },
    /// The API server refused or failed a request.
    #[error("{what}: {source}")]
    Api {
        /// What was being done (verb and object).
        what: String,
        /// kube's error.
        source: Box<kube::Error>,
    },
    /// The cluster's nodes cannot be turned into a Gangway topology.
    #[error("topology: {0}")]
    Topology(String),
    /// A policy or Wasm module could not be built, loaded or swapped in.
    #[error("policy: {0}")]
    Policy(String),
    /// The scheduler refused an event (a bug in this host if it happens).
    #[error("scheduler: {0}")]
    Scheduler(String),
    /// A file or socket operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, with the path or address.
        what: String,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl K8sError {
    /// An API error while doing `what`.
    pub fn api(what: impl Into<String>, source: kube::Error) -> K8sError {
        K8sError::Api {
            what: what.into(),
            source: Box::new(source),
        }
    }

    /// An I/O error while doing `what`.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> K8sError {
        K8sError::Io {
            what: what.into(),
            source,
        }
    }
}

/// What is wrong with a user's workload: the gang is not scheduled, and the
/// message goes to an Event on the pod or PodGroup (reason
/// [`GangProblem::reason`]) and to the PodGroup's condition.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GangProblem {
    /// A pod's GPU request is not a whole, non-negative number.
    #[error("pod {pod}: {resource} = {value:?} is not a whole number of GPUs (0, 1, 2, ...)")]
    BadGpuCount {
        /// The pod.
        pod: String,
        /// The resource name (`nvidia.com/gpu`).
        resource: String,
        /// The quantity as written.
        value: String,
    },
    /// A pod's requests and limits name different GPU counts.
    #[error(
        "pod {pod}: {resource} request {request} and limit {limit} differ (GPUs cannot be overcommitted)"
    )]
    RequestLimitDiffer {
        /// The pod.
        pod: String,
        /// The resource name.
        resource: String,
        /// The request.
        request: u32,
        /// The limit.
        limit: u32,
    },
    /// The PodGroup's `minMember` is below 1 (absent or 0).
    #[error("PodGroup {group}: minMember is {min_member}; it must be at least 1")]
    MinMemberTooSmall {
        /// The PodGroup.
        group: String,
        /// Its minMember.
        min_member: i64,
    },
    /// A PodGroup's GPU-type annotation cannot be read.
    #[error("PodGroup {group}: {annotation} = {value:?} is not a whole number of GB")]
    BadGpuRequest {
        /// The PodGroup.
        group: String,
        /// The annotation.
        annotation: String,
        /// Its value.
        value: String,
    },
    /// The gang needs more GPUs than the cluster has, or a pod more than any
    /// node has.
    #[error("{gang}: {why}")]
    TooLarge {
        /// The gang (PodGroup or pod).
        gang: String,
        /// Why it can never fit.
        why: String,
    },
    /// The pods of a gang ask for different GPU counts.
    #[error(
        "{gang}: its pods ask for different GPU counts ({counts}); a gang's GPU pods must all ask for the same number"
    )]
    MixedGpuCounts {
        /// The gang.
        gang: String,
        /// The counts seen.
        counts: String,
    },
    /// The gang asks for no GPUs: it is not Gangway's to place.
    #[error("{gang}: asks for no GPUs; Gangway places GPU gangs (use the default scheduler)")]
    NoGpus {
        /// The gang.
        gang: String,
    },
    /// The gang's virtual cluster is not among the configured ones.
    #[error(
        "{gang}: unknown virtual cluster {vc:?} (known: {known}); set it in ConfigMap {configmap}"
    )]
    UnknownVc {
        /// The gang.
        gang: String,
        /// Its VC.
        vc: String,
        /// The known VCs.
        known: String,
        /// The ConfigMap that lists VCs (namespace/name).
        configmap: String,
    },
}

impl GangProblem {
    /// The Event reason (PascalCase, as Kubernetes events use).
    pub fn reason(&self) -> &'static str {
        match self {
            GangProblem::BadGpuCount { .. }
            | GangProblem::RequestLimitDiffer { .. }
            | GangProblem::BadGpuRequest { .. } => "InvalidGPURequest",
            GangProblem::MinMemberTooSmall { .. } => "InvalidMinMember",
            GangProblem::TooLarge { .. } => "GangTooLarge",
            GangProblem::MixedGpuCounts { .. } => "MixedGPUCounts",
            GangProblem::NoGpus { .. } => "NoGPUs",
            GangProblem::UnknownVc { .. } => "UnknownVirtualCluster",
        }
    }
}
