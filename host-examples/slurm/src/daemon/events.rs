//! What the daemon's threads say to each other: the work the cycle thread
//! gives Slurm's I/O thread, and the events the cycle thread hears (from
//! clients, Slurm's I/O thread, the record reader and signals).

use std::time::Duration;

use super::records::{RecordKey, RecordRead};
use super::{CancelOrder, JobUpdate, LaunchOrder, LaunchOutcome};
use crate::SlurmError;
use crate::engine::{NodeInfo, SlurmJob};
use crate::identity::Peer;
use crate::lock::Lock;
use crate::protocol::{Request, Response};

/// What Slurm's I/O thread is asked to do, in order.
pub(super) enum Work {
    /// Read `sinfo` and `squeue`.
    Read,
    /// Run these launches, each only while this lock is still the daemon's
    /// (its epoch checked just before each launch).
    Launch(Vec<LaunchOrder>, Option<Lock>),
    /// Cancel these Slurm jobs.
    Cancel(Vec<CancelOrder>),
    /// Update these Slurm jobs.
    Update(Vec<JobUpdate>),
    /// A clean stop: give the lock back.
    Release(Option<Lock>),
}

/// Slurm's nodes and jobs, as one read gives them.
pub(super) type SlurmRead = Result<(Vec<NodeInfo>, Vec<SlurmJob>), SlurmError>;

/// What the cycle thread hears.
pub(super) enum Event {
    /// A client's request, who sent it, and where to answer.
    Client(Request, Peer, tokio::sync::oneshot::Sender<Response>),
    /// What Slurm said, and how long it took.
    Read(SlurmRead, Duration),
    /// How launches went.
    Launched(Vec<(LaunchOrder, LaunchOutcome)>),
    /// Cancels Slurm did not answer for.
    CancelFailed(Vec<CancelOrder>),
    /// End records read.
    Records(Vec<(RecordKey, RecordRead)>),
    /// Stop cleanly (a signal, or the socket cannot be served), and why.
    Stop(String),
    /// The lock was given back (or why not): the daemon may exit.
    Released(Result<(), String>),
}
