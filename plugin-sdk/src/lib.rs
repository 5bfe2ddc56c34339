//! The contract between Gangway's core and its scheduling policies.
//!
//! A policy *advises*; the core owns the truth. Each round the core builds a
//! compact, read-only view (ids and counts, never object graphs), calls each
//! policy slot at most once with the whole batch, validates the answer and
//! applies it. A policy can therefore schedule badly but never make the
//! cluster inconsistent.
//!
//! Six slots, consulted in this order each round (each in [`slots`]):
//!
//! 1. [`RetryPolicy`]: what follows each attempt that failed since the last
//!    round: retry now or later, a smaller probe first, or give up.
//! 2. [`FairnessPolicy`] orders the pending jobs and marks which may start now
//!    (an ineligible job waits with *fair-share delay*).
//! 3. [`LocalityPolicy`] gives each eligible job a [`SpreadLimit`]: a
//!    [`Level`] of the topology whose single domain must hold the gang, and a
//!    bound on its servers. The core searches a placement within it; none
//!    found is *fragmentation delay*.
//! 4. [`GangPolicy`] decides what a job that did not fit does to the jobs
//!    behind it: [`GangAction::Backfill`], [`GangAction::Block`] or
//!    [`GangAction::Reserve`].
//! 5. [`ReclaimPolicy`] may stop running jobs whole so waiting ones start
//!    (preemption).
//! 6. [`DefragmentPolicy`] may migrate running jobs to make local room for a
//!    waiting gang.
//!
//! Each slot is described once by a marker type in [`slots`] implementing
//! [`SlotContract`] (its name, view, decision, rules and built-in policy;
//! the wire encoding of the view and decision is derived from their types,
//! see [`wire`]); a policy type implements the slot's own small trait and
//! thereby [`Policy`] for that slot.
//!
//! ```
//! use gangway_plugin_sdk::*;
//!
//! /// Oldest job first, everyone eligible.
//! struct Fifo;
//! impl FairnessPolicy for Fifo {
//!     fn order(&self, view: &FairnessView) -> FairnessDecision {
//!         let mut jobs: Vec<&PendingJob> = view.jobs.iter().collect();
//!         jobs.sort_by_key(|j| (j.submitted_s, j.id));
//!         FairnessDecision {
//!             order: jobs.iter().map(|j| Ranked { job: j.id, eligible: true }).collect(),
//!         }
//!     }
//!     // Within a VC it is oldest first: the core may show it only the
//!     // oldest jobs of each VC, so a round costs the same however long
//!     // the backlog.
//!     fn queue_order(&self) -> QueueOrder {
//!         QueueOrder::Submit
//!     }
//! }
//! let view = FairnessView { now_s: 10, ..FairnessView::default() };
//! assert!(Fifo.order(&view).order.is_empty());
//! ```
//!
//! ## Running as a Wasm component
//!
//! The same type becomes a sandboxed plugin with one macro line
//! ([`export!`]`(Fairness, MyPolicy)`) in a `cdylib` crate built for
//! `wasm32-unknown-unknown`. The contract is the WIT package
//! `gangway:policy@2.1.0` in this crate's `wit/policy.wit`; the
//! [contract page](crate::contract) explains the calling convention, the
//! byte layout of every view and decision, the limits a policy runs under
//! and how to write one in another language.
//!
//! In a Wasm build the glue decodes each view into buffers kept from the
//! previous call and (Cargo feature `talc`, on by default) installs the
//! guest allocator of the `gangway-guest-alloc` crate, the only `unsafe`
//! code of the SDK. Turn default features off to bring your own
//! `#[global_allocator]`.
//!
//! Each slot's fallback policy ([`SlotContract::Fallback`]: what a host runs
//! when no policy is configured, and falls back on when one fails) lives in
//! its slot's folder, here so that it too runs natively and as Wasm.
#![forbid(unsafe_code)]

// The derived wire code names this crate by its name, here too.
extern crate self as gangway_plugin_sdk;

mod config;
#[doc(hidden)]
pub mod export;
mod gpu_types;
#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
pub mod guest;
mod ids;
mod log;
mod manifest;
pub mod room;
mod slot_contract;
mod slots;
pub mod sort;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod view;
pub mod wire;

#[cfg(not(target_arch = "wasm32"))]
pub use config::config_tree;
pub use config::{
    CONFIG_TREE_SECTION, ConfigError, ConfigForm, Configure, config_text, no_options,
    parse_options, read_options,
};
pub use gpu_types::{
    ClassSpeeds, GpuTypeSummary, JobTypes, TypeChoice, TypeChoices, TypesView, VcTypeUsage,
};
pub use ids::{GpuTypeId, GpuTypeSet, JobId, Level, ServerId, VcId};
pub use log::{LogLevel, log};
pub use manifest::{Manifest, QueueOrder, RunningScope};
pub use slot_contract::{InvalidDecision, Policy, SlotContract, ViewSize, WorkCost};
pub use slots::{
    Backfill, Defragment, DefragmentDecision, DefragmentPolicy, DefragmentView, FailedAttempt,
    FailureClass, Fairness, FairnessDecision, FairnessPolicy, FairnessView, FifoQuota, Fixed, Gang,
    GangAction, GangDecision, GangPolicy, Locality, LocalityDecision, LocalityPolicy, Move,
    Nothing, QueueView, Ranked, Reclaim, ReclaimDecision, ReclaimPolicy, ReclaimView, Retry,
    RetryAction, RetryDecision, RetryPolicy, RetryView, Slot, Strict,
};
/// The give-back walk of [`RunningScope::GiveBack`], for hosts that walk
/// their own index of running jobs ([`ReclaimView::give_back`] is the
/// definition).
#[doc(hidden)]
pub use slots::{GpuCounts, give_back_walk};
pub use view::{
    ClusterSummary, LevelSummary, PendingJob, RunningJob, ServerState, SpreadLimit, VcUsage,
    WaitReason, WaitingJob,
};

/// The version of the contract this SDK builds policies against.
pub const CONTRACT_VERSION: &str = "2.1.0";

/// The policy contract, for authors in any language (`CONTRACT.md`).
#[doc = include_str!("../CONTRACT.md")]
pub mod contract {}
