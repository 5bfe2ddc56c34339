//! What a cycle decides to do ([`Action`]), and the counters it keeps for
//! the metrics endpoint ([`Stats`]).

use std::collections::BTreeMap;
use std::time::Duration;

use gangway_core::policy::SlotEvent;
use gangway_core::{JobId, RoundReport};

use super::gangs::GangKey;

/// One thing to do against the API server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Bind every pod of a gang (a Binding each, with annotations).
    Bind(BindOrder),
    /// Evict (delete) a gang's pods; `grace0` deletes at once (a lost node).
    Evict {
        /// The gang.
        gang: GangKey,
        /// Its pods, `(namespace, name)`.
        pods: Vec<(String, String)>,
        /// Delete with grace period 0.
        grace0: bool,
    },
    /// Publish an Event.
    Event(EventOrder),
    /// Write a PodGroup's status: its phase and the `Scheduled` condition
    /// (status `True`/`False`, reason, message). Pods of no group have
    /// Events only.
    Status {
        /// The gang.
        gang: GangKey,
        /// `Pending` or `Scheduled`.
        phase: String,
        /// (status, reason, message).
        condition: (String, String, String),
    },
}

/// The Bindings of a gang's pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindOrder {
    /// The gang.
    pub gang: GangKey,
    /// Its Gangway job.
    pub job: JobId,
    /// One Binding per pod.
    pub binds: Vec<PodBind>,
    /// Unix ms its newest pod was first seen (for the bind-latency metric).
    pub last_pod_ms: u64,
}

/// One pod's Binding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodBind {
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub pod: String,
    /// The pod's uid: the Binding is refused if the pod was made again.
    pub uid: String,
    /// Target node.
    pub node: String,
    /// The GPU indices it is bound with.
    pub gpus: Vec<u32>,
    /// Annotations the API server copies onto the pod.
    pub annotations: BTreeMap<String, String>,
}

/// How one Binding went, as the scheduler process found out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BindOutcome {
    /// The pod is bound where we asked (the reply said so, or reading the
    /// pod did after an error or an "already assigned" reply).
    Bound,
    /// It is not and will not be: the pod is gone, was made again, or is
    /// bound elsewhere.
    Refused(String),
    /// The reply was lost and the pod could not be read: it may be bound.
    /// Its GPUs stay held until a read tells.
    Unknown(String),
}

/// What an Event is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A PodGroup.
    PodGroup {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// A pod.
    Pod {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
}

/// An Event to publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventOrder {
    /// What it is about.
    pub target: Target,
    /// Warning (else Normal).
    pub warning: bool,
    /// PascalCase reason.
    pub reason: String,
    /// What was being done (`Scheduling`, `Evicting`, or for a gang that
    /// waits, its wait reason). Events of the same object, reason and
    /// action are one Event whose count grows; a new action is a new
    /// Event, so a gang's Events show each reason it waited for.
    pub action: String,
    /// The message.
    pub note: String,
}

/// Counters and gauges of the host, for `/metrics`.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Rounds run.
    pub rounds: u64,
    /// Seconds spent in rounds.
    pub round_seconds: f64,
    /// The last round's seconds.
    pub last_round_seconds: f64,
    /// Pods bound.
    pub pods_bound: u64,
    /// Gangs bound whole.
    pub gangs_bound: u64,
    /// Bindings refused (pod gone, made again, or bound elsewhere).
    pub bind_errors: u64,
    /// Bindings whose reply was lost (resolved later by reading the pod).
    pub binds_unknown: u64,
    /// Bindings whose reply was lost and not yet resolved, now.
    pub binds_unresolved: u64,
    /// Gangs placed and waiting for pods on their way out, now.
    pub nominated: u64,
    /// Gangs finished (every pod ended).
    pub gangs_finished: u64,
    /// Gangs interrupted and evicted (node lost, preempted, moved, broken).
    pub gangs_interrupted: u64,
    /// Problems with users' gangs reported.
    pub problems: u64,
    /// Policy calls that failed (the built-in policy answered).
    pub policy_errors: u64,
    /// Policy modules quarantined.
    pub quarantines: u64,
    /// Times the topology was rebuilt from the nodes.
    pub topology_rebuilds: u64,
    /// Gangs waiting now, by reason.
    pub waiting: BTreeMap<String, u64>,
}

impl Stats {
    /// Counts a round's time and its policy errors and quarantines.
    pub fn note_round(&mut self, report: &RoundReport, took: Duration) {
        self.rounds += 1;
        self.last_round_seconds = took.as_secs_f64();
        self.round_seconds += took.as_secs_f64();
        self.policy_errors += report.policy_errors.len() as u64;
        self.quarantines += report
            .slot_events
            .iter()
            .filter(|(_, e)| matches!(e, SlotEvent::Quarantined { .. }))
            .count() as u64;
    }
}
