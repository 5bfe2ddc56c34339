//! What every slot is to the host and to a policy: [`SlotContract`], the
//! description of one slot (its view, decision, wire encoding, rules and
//! built-in policy), and [`Policy`], a policy of any slot. The marker types
//! of [`crate::slots`] implement the first; every type implementing a slot
//! trait implements the second.

use serde::{Serialize, de::DeserializeOwned};

use crate::manifest::Manifest;
use crate::slots::Slot;
use crate::view::{ClusterSummary, VcUsage};
use crate::wire::{WireDecision, WireView};

/// Why a decision breaks its slot's rules ([`SlotContract::validate`]):
/// what it names that it must not, e.g. "lists job 7 twice".
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct InvalidDecision {
    reason: String,
}

impl InvalidDecision {
    /// A broken rule, described for the policy's author.
    pub fn new(reason: impl Into<String>) -> Self {
        InvalidDecision {
            reason: reason.into(),
        }
    }

    /// What the decision broke.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// What the decision broke, owned.
    pub fn into_reason(self) -> String {
        self.reason
    }
}

/// What one call of a slot's built-in policies costs at most, in fuel units
/// (about one per Wasm instruction), measured on their Wasm modules over
/// the largest views of Philly-scale replays: a fixed part (decoding,
/// set-up) and parts per job and per server in the view
/// ([`SlotContract::view_size`]).
///
/// ```
/// use gangway_plugin_sdk::{ViewSize, WorkCost};
/// let cost = WorkCost { per_call: 30_000, per_job: 1_000, ..WorkCost::default() };
/// assert_eq!(cost.of(10), 40_000);
/// let servers = WorkCost { per_server: 10, ..cost };
/// assert_eq!(servers.of_size(ViewSize { jobs: 10, servers: 30 }), 40_300);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkCost {
    /// Fuel of a call whatever the view's size.
    pub per_call: u64,
    /// Fuel per job in the view.
    pub per_job: u64,
    /// Fuel per server in the view.
    pub per_server: u64,
}

impl WorkCost {
    /// No cost at all (to fill the parts a slot's cost does not have, in a
    /// `const`).
    pub const NONE: WorkCost = WorkCost {
        per_call: 0,
        per_job: 0,
        per_server: 0,
    };

    /// The cost of a call on a view of `jobs` jobs (and nothing else).
    pub const fn of(&self, jobs: usize) -> u64 {
        self.per_call
            .saturating_add(self.per_job.saturating_mul(jobs as u64))
    }

    /// The cost of a call on a view of `size`.
    pub const fn of_size(&self, size: ViewSize) -> u64 {
        self.per_call
            .saturating_add(self.per_job.saturating_mul(size.jobs))
            .saturating_add(self.per_server.saturating_mul(size.servers))
    }
}

/// What a view holds that a call's cost may grow with
/// ([`SlotContract::view_size`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ViewSize {
    /// Jobs, of every list of the view.
    pub jobs: u64,
    /// Servers.
    pub servers: u64,
}

/// One slot of the contract, described once: its [`Slot`], its view and
/// decision types (whose wire encoding is derived from their definitions:
/// [`WireView`], [`WireDecision`]), its rules and its built-in policy.
/// Implemented by the marker types of [`crate::slots`]; everything that
/// handles "any slot" (the host's backends and validation, the guest glue)
/// is generic over it.
pub trait SlotContract: Copy + Default + Send + Sync + std::fmt::Debug + 'static {
    /// Which slot.
    const SLOT: Slot;
    /// The slot's name as used in WIT, configs and reports.
    const NAME: &'static str;
    /// The name of the slot's per-round function in its WIT interface.
    const CALL: &'static str;
    /// The name of the slot's built-in policy ([`SlotContract::Fallback`]).
    const FALLBACK: &'static str;
    /// Whether the built-in policy never decides anything (the reclaim and
    /// defragment slots' `none`): a host then neither builds the slot's
    /// view nor calls it.
    const FALLBACK_DECIDES_NOTHING: bool = false;
    /// What a call of the slot's built-in policies costs at most, in fuel,
    /// on a view of a given size ([`SlotContract::view_size`]): the
    /// measure a host holds a module's work to (a module may use a
    /// multiple of it over its recent calls, see the core's `WorkBudget`).
    const WORK: WorkCost;
    /// What the policy sees each round.
    type View: WireView
        + Clone
        + std::fmt::Debug
        + Default
        + PartialEq
        + Serialize
        + DeserializeOwned
        + Send
        + Sync;
    /// What it answers.
    type Decision: WireDecision<View = Self::View>
        + Clone
        + std::fmt::Debug
        + Default
        + PartialEq
        + Serialize
        + DeserializeOwned
        + Send;
    /// The slot's built-in policy: what a host runs when no policy is
    /// configured, and falls back on for a round when a configured one
    /// fails.
    type Fallback: Policy<Self> + Default + Send + Sync + 'static;

    /// Checks a decision against the view it answers: the rules a policy
    /// must keep whatever the cluster's state. (Rules that depend on the
    /// state, e.g. that a reclaim frees room, are checked when the host
    /// applies the decision.)
    fn validate(view: &Self::View, decision: &Self::Decision) -> Result<(), InvalidDecision>;

    /// How many jobs `view` holds.
    fn view_jobs(view: &Self::View) -> usize;

    /// What `view` holds that a call's cost may grow with: by default its
    /// jobs ([`SlotContract::view_jobs`]).
    fn view_size(view: &Self::View) -> ViewSize {
        ViewSize {
            jobs: Self::view_jobs(view) as u64,
            ..ViewSize::default()
        }
    }

    /// The view of an idle cluster summarised by `cluster`, with virtual
    /// clusters `vcs`: no job waits, runs or failed (what a host calls a
    /// module with once, to check it answers, before it uses it).
    fn idle_view(cluster: &ClusterSummary, vcs: &[VcUsage]) -> Self::View;

    /// The most bytes a well-formed reply to `view` can take. A longer reply
    /// is refused before anything is decoded, so a reply can never make the
    /// host allocate more than a bounded multiple of the view.
    fn max_reply_bytes(view: &Self::View) -> usize;
}

/// A policy for slot `S`, whichever slot that is: what the host calls. Every
/// type implementing a slot trait ([`crate::FairnessPolicy`] and the others)
/// implements it for that slot; implement the slot trait, not this.
pub trait Policy<S: SlotContract> {
    /// Whether the policy takes the GPU types (contract 2.2; fairness and
    /// reclaim policies say so with their own `GPU_TYPES`).
    const GPU_TYPES: bool = false;
    /// The policy's decision for `view`.
    fn decide(&self, view: &S::View) -> S::Decision;
    /// The policy's decision for `view` with the cluster's GPU types beside
    /// it, and the types it chose for jobs of the view (contract 2.2; only
    /// a fairness policy's choices are used). Asked instead of
    /// [`Policy::decide`] when the policy's manifest takes the types
    /// ([`Manifest::gpu_types`]) and the cluster has several; the default
    /// decides without them and chooses nothing.
    fn decide_typed(
        &self,
        view: &S::View,
        types: &crate::TypesView,
    ) -> (S::Decision, crate::TypeChoices) {
        let _ = types;
        (self.decide(view), crate::TypeChoices::default())
    }
    /// What the policy tells the host about itself once, when it is loaded.
    fn manifest(&self) -> Manifest {
        Manifest::default()
    }
}
