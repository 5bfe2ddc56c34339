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

mod decision;
mod ids;
mod policy;
mod view;
pub mod wire;

pub use decision::{FairnessDecision, GangAction, GangDecision, LocalityDecision, Ranked};
pub use ids::{JobId, Level, VcId};
pub use policy::{ConfigError, Configure, FairnessPolicy, GangPolicy, LocalityPolicy, config_text};
pub use view::{ClusterSummary, LevelSummary, PendingJob, QueueView, RoundView, VcUsage};
