//! What a round decided: [`RoundReport`] and its parts.

use gangway_plugin_sdk::{JobId, RetryAction, Slot, WaitReason};
use serde::{Deserialize, Serialize};

use crate::placement::PlacementChoice;
use crate::policy::{PolicyError, SlotEvent};
use crate::state::Placement;

/// A job the round started. The host launches it on `choice.placement`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Start {
    /// The job.
    pub job: JobId,
    /// Where it runs, its achieved locality and servers spanned.
    pub choice: PlacementChoice,
    /// For a retry policy's probe (fewer GPUs than the gang): how long it
    /// must run without failing before the host ends it as passed (the full
    /// gang is queued next).
    pub probe_s: Option<u64>,
}

/// A job that holds a reservation after this round.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// The blocked job.
    pub job: JobId,
    /// GPUs held for it during the round.
    pub held_gpus: u32,
}

/// A running job the reclaim slot stopped. The host stops it; it is pending
/// again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preemption {
    /// The job.
    pub job: JobId,
    /// The GPUs it held.
    pub placement: Placement,
    /// How long the stopped attempt ran.
    pub ran_s: u64,
}

/// A running job the defragment slot moved. The host checkpoints it and
/// restarts it on `to`; it stays running.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Migration {
    /// The job.
    pub job: JobId,
    /// The GPUs it held.
    pub from: Placement,
    /// Where it runs now.
    pub to: PlacementChoice,
}

/// What a round decided.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundReport {
    /// The round's time.
    pub now_s: u64,
    /// Jobs started, in the order they were placed.
    pub starts: Vec<Start>,
    /// Every job of the round's fairness view still pending, with why.
    pub waiting: Vec<(JobId, WaitReason)>,
    /// Pending jobs left out of the fairness view (they wait with
    /// [`WaitReason::Queued`] behind their VC's first jobs).
    pub queued: usize,
    /// Reservations made.
    pub reservations: Vec<Reservation>,
    /// Jobs the reclaim slot stopped (re-queued).
    pub preempted: Vec<Preemption>,
    /// Jobs the defragment slot moved.
    pub migrations: Vec<Migration>,
    /// What the retry slot chose for each failed attempt it saw.
    pub retries: Vec<(JobId, RetryAction)>,
    /// Slots whose active policy changed since the last round: by
    /// [`Scheduler::swap`](crate::Scheduler::swap) between rounds, or by a
    /// staged swap or rollback at the start of this one.
    pub swapped: Vec<Slot>,
    /// What happened to each slot since the last round: swaps and rollbacks
    /// at its start, quarantines during it (slot by slot, oldest first).
    pub slot_events: Vec<(Slot, SlotEvent)>,
    /// Policy calls that failed; the slot's built-in policy answered instead.
    pub policy_errors: Vec<PolicyError>,
}
