//! The six slots of the contract, one file each: the slot's own view and
//! decision, the trait a policy author implements, and the marker type that
//! describes the slot to the host ([`crate::SlotContract`]).
//!
//! A round consults them in this order: [`Retry`] (failed attempts since the
//! last round), [`Fairness`], [`Locality`], placement with [`Gang`], then
//! [`Reclaim`] and [`Defragment`] for the jobs still waiting.

mod defragment;
mod fairness;
mod gang;
mod locality;
mod reclaim;
mod retry;

pub use defragment::{DefragDecision, DefragView, Defragment, DefragmentPolicy, Move};
pub use fairness::{Fairness, FairnessDecision, FairnessPolicy, Ranked, RoundView};
pub use gang::{Gang, GangAction, GangDecision, GangPolicy};
pub use locality::{Locality, LocalityDecision, LocalityPolicy, QueueView};
pub use reclaim::{Reclaim, ReclaimDecision, ReclaimPolicy, ReclaimView};
pub use retry::{
    FailedAttempt, FailureClass, Retry, RetryAction, RetryDecision, RetryPolicy, RetryView,
};
