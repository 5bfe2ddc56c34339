//! `gangway-k8s`: Gangway as the gang scheduler of a Kubernetes cluster.
//!
//! It schedules the pods whose `spec.schedulerName` is `gangway`:
//!
//! * the topology comes from Node objects: GPUs from the `nvidia.com/gpu`
//!   allocatable, levels (zone, rack, ...) from node labels named in the
//!   configuration, health from the Ready condition and `unschedulable`
//!   ([`objects`], [`topology`]);
//! * gangs are the pods of a scheduler-plugins PodGroup
//!   (`scheduling.x-k8s.io/pod-group` label, `minMember`), a pod without one
//!   is a gang of one ([`gangs`], [`podgroup`]); virtual clusters are
//!   namespaces (or a label), quotas (of any GPU type, or per type) come
//!   from a ConfigMap ([`vcs`]);
//! * every cycle runs a Gangway round ([`host`]) and binds every pod of a
//!   started gang through the Binding subresource, with the GPU indices as
//!   annotations the API server copies onto the pod; a gang is bound whole
//!   or, if the API refuses part of it, evicted and placed again whole
//!   ([`plan`] writes the whole gang's plan on every Binding, so a
//!   restarted scheduler finishes a gang it had begun);
//! * wait reasons go to the PodGroup's `Scheduled` condition and to
//!   `FailedScheduling` Events; reclaim and defragment decisions and lost
//!   nodes evict whole gangs ([`report`]);
//! * the cluster is the truth: a restarted scheduler (or a new leader)
//!   rebuilds everything from the pods' bindings and annotations through
//!   [`gangway_core::Scheduler::reconcile`]; replicas elect a leader with a
//!   Lease ([`leader`]); policies are hot-swapped from a ConfigMap
//!   ([`policies`]); `/metrics`, `/healthz` and `/readyz` ([`metrics`]).
//!
//! [`run`] wires it to the API server; the binary is
//! `src/bin/gangway-k8s.rs`. The crate's README is the operator guide.

mod apply;
mod binding;
pub mod config;
mod error;
pub mod fit;
pub mod gangs;
pub mod host;
pub mod leader;
pub mod metrics;
pub mod objects;
pub mod plan;
pub mod podgroup;
pub mod policies;
pub mod quantity;
pub mod report;
pub mod run;
pub mod topology;
pub mod vcs;

pub use error::{GangProblem, K8sError};
