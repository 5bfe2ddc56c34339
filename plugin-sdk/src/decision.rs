//! What a policy returns. The core validates every decision before applying it.

use serde::{Deserialize, Serialize};

use crate::ids::{JobId, Level};

/// The fairness slot's answer: the order in which to try pending jobs, and
/// which of them may start now.
///
/// `order` must be a permutation of exactly the view's pending jobs. A job with
/// `eligible == false` waits this round with the reason *fair-share*.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FairnessDecision {
    /// Every pending job once, most urgent first, with its eligibility.
    pub order: Vec<Ranked>,
}

/// One entry of a [`FairnessDecision`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ranked {
    /// The job.
    pub job: JobId,
    /// Whether it may start this round.
    pub eligible: bool,
}

/// The locality slot's answer: one spread limit per job of the [`crate::QueueView`],
/// in the same order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalityDecision {
    /// `spread[i]` is the widest level job `i` may span this round.
    pub spread: Vec<Level>,
}

/// What a job that cannot be placed does to the jobs behind it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GangAction {
    /// Later jobs may start around it (backfill).
    Backfill,
    /// Later jobs wait too (head-of-line blocking); they are *held by policy*.
    Block,
    /// Free GPUs in the best domain for this job are held for it (up to its
    /// size) so later jobs cannot take them; later jobs may still use the rest.
    Reserve,
}

/// The gang slot's answer: one action per job of the [`crate::QueueView`], used if
/// that job turns out not to fit this round.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GangDecision {
    /// `on_blocked[i]` applies to job `i` of the view.
    pub on_blocked: Vec<GangAction>,
    /// At most this many jobs hold reservations in one round; further
    /// [`GangAction::Reserve`] answers act as [`GangAction::Backfill`].
    pub max_reservations: u32,
}
