//! The contract between Gangway's core and its scheduling policies.
//!
//! A policy *advises*; the core owns the truth. Each round the core builds a
//! compact, read-only view (ids and counts, never object graphs), calls each
//! policy slot once with the whole batch, validates the answer and applies it.
//! A policy can therefore schedule badly but never make the cluster
//! inconsistent.
//!
//! Three slots run in order each round:
//!
//! 1. [`FairnessPolicy`] orders every pending job and marks which may start now
//!    (an ineligible job waits with *fair-share delay*).
//! 2. [`LocalityPolicy`] gives each eligible job a spread limit, a [`Level`] of
//!    the topology whose single domain must hold the gang. The core searches a
//!    placement within it; none found is *fragmentation delay*.
//! 3. [`GangPolicy`] decides what a job that did not fit does to the jobs
//!    behind it: [`GangAction::Backfill`], [`GangAction::Block`] or
//!    [`GangAction::Reserve`].
//!
//! Views are shaped for one cheap copy across a sandbox boundary: every job is
//! a fixed-size record of integers, virtual clusters and topology levels are
//! small tables indexed by dense ids, and one call serves a whole round, so the
//! crossing cost is paid per round, not per job. The [`wire`] module is the
//! byte format (postcard) used when a view crosses into WebAssembly.
//!
//! ```
//! use gangway_plugin_sdk::*;
//!
//! /// Oldest job first, everyone eligible.
//! struct Fifo;
//! impl FairnessPolicy for Fifo {
//!     fn order(&self, view: &RoundView) -> FairnessDecision {
//!         let mut jobs: Vec<&PendingJob> = view.jobs.iter().collect();
//!         jobs.sort_by_key(|j| (j.submitted_s, j.id));
//!         FairnessDecision {
//!             order: jobs.iter().map(|j| Ranked { job: j.id, eligible: true }).collect(),
//!         }
//!     }
//! }
//! let view = RoundView {
//!     now_s: 10,
//!     cluster: ClusterSummary { total_gpus: 8, free_gpus: 8, server_level: Level(1), levels: vec![] },
//!     vcs: vec![],
//!     jobs: vec![],
//! };
//! assert!(Fifo.order(&view).order.is_empty());
//! ```
//!
//! ## Running as a Wasm component
//!
//! The same type becomes a sandboxed plugin with one macro line,
//! [`export_fairness!`], [`export_locality!`] or [`export_gang!`], in a
//! `cdylib` crate built for `wasm32-unknown-unknown`. The contract is the WIT
//! package `gangway:policy@1.0.0` in this crate's `wit/policy.wit`; the
//! [contract page](crate::contract) explains the calling convention, the byte
//! layout of every view and decision, the limits a policy runs under and how
//! to write one in another language.
//!
//! In a Wasm build the glue decodes each view into buffers kept from the
//! previous call, and (Cargo feature `talc`, on by default) installs the
//! guest's global allocator: talc behind a small cache of recently freed
//! blocks, since every call allocates and frees the same few small buffers.
//! Turn default features off to bring your own `#[global_allocator]`.
//!
//! [`builtin`] holds the core's default policies, here so that they too run
//! natively and as Wasm.

pub mod builtin;
pub mod codec;
mod decision;
#[doc(hidden)]
pub mod export;
#[cfg(target_arch = "wasm32")]
pub mod guest;
#[cfg(any(test, all(target_arch = "wasm32", feature = "talc")))]
mod guest_alloc;
mod ids;
mod log;
mod policy;
mod view;
pub mod wire;

pub use decision::{FairnessDecision, GangAction, GangDecision, LocalityDecision, Ranked};
pub use ids::{JobId, Level, VcId};
pub use log::{LogLevel, log};
pub use policy::{
    ConfigError, Configure, FairnessPolicy, GangPolicy, LocalityPolicy, config_text, no_options,
};
pub use view::{ClusterSummary, LevelSummary, PendingJob, QueueView, RoundView, VcUsage};

/// The policy contract, for authors in any language (`CONTRACT.md`).
#[doc = include_str!("../CONTRACT.md")]
pub mod contract {}
