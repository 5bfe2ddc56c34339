//! # gangway-core
//!
//! The engine an existing GPU-cluster scheduler links to decide where
//! deep-learning jobs run. The core owns the truth; policies only advise:
//! whatever a policy answers, the core validates it, so no GPU is ever held
//! twice, no gang half-started and no job lost.
//!
//! ## Core concepts
//!
//! * [`Topology`]: the cluster as a tree of levels, cluster > racks >
//!   servers > GPUs, immutable once built ([`TopologyBuilder`], a Philly
//!   machine list, or a TOML file).
//! * [`ClusterState`]: who holds which GPU. All-or-nothing gang allocation
//!   ([`Placement`]) and the locality-aware placement search
//!   ([`PlacementChoice`], ties broken by a [`PlacementStrategy`]).
//! * [`Scheduler`]: the facade a host drives. It takes events (submit,
//!   [`Scheduler::end_attempt`], kill, server down, up and draining) for
//!   jobs ([`JobSpec`], then a [`JobRecord`] in one [`JobState`]) of
//!   virtual clusters ([`VirtualCluster`]), and runs a
//!   [`round`](Scheduler::round) whenever the host likes. A refused event is
//!   a [`SchedulerError`] and changes nothing.
//! * [`RoundReport`]: what a round decided: the jobs it started ([`Start`])
//!   and where, why each viewed job still waits ([`WaitReason`]),
//!   [`Reservation`]s, [`Preemption`]s, [`Migration`]s, retries, policy swaps
//!   and the policy errors it fell back on.
//! * [`policy`]: a [`policy::PolicySet`] holds one policy per slot of the
//!   contract (retry, fairness, locality, gang, reclaim, defragment; see
//!   `gangway-plugin-sdk`), each [`policy::Guarded`]: every decision
//!   validated, the built-in policy deciding when one fails, hot swap,
//!   rollback and quarantine.
//! * `wasm` (feature `wasm`, on by default): policies as sandboxed
//!   WebAssembly components: a `PolicyEngine` loads and compiles them, a
//!   `PolicyModule` makes a backend of any slot it exports.
//! * [`snapshot`], [`reconcile`] and [`Scheduler::forget`]: what a
//!   long-lived host needs: save and restore the whole state, bring it in
//!   line with what the engine it drives says is true, and keep memory
//!   bounded by the live jobs.
//! * `conformance` (feature `conformance`): the kit a policy author runs:
//!   every contract rule on generated views and scenarios.
//!
//! A round goes retry -> fairness -> locality -> placement with gang ->
//! reclaim -> defragment; the core never reads a clock (time is always the
//! host's) and the same events and policies give the same decisions.
//!
//! ```
//! use gangway_core::{JobId, JobSpec, Scheduler, Topology};
//!
//! // 4 racks of 8 servers with 8 GPUs each.
//! let mut sched = Scheduler::new(Topology::uniform(4, 8, 8).unwrap());
//! let vc = sched.virtual_cluster("vision");
//! for i in 0..10 {
//!     let spec = JobSpec { id: JobId(i), vc, user: 1, gpus: 1 << (i % 5), submitted_s: i };
//!     sched.submit(spec).unwrap();
//! }
//! let report = sched.round(10).unwrap();
//! for start in &report.starts {
//!     println!("{} on {} servers", start.job, start.choice.servers);
//! }
//! assert_eq!(report.starts.len(), 10);
//! sched.check_invariants().unwrap();
//! ```

mod book;
#[cfg(feature = "conformance")]
pub mod conformance;
mod freed_gpus;
mod job;
mod placement;
mod placement_strategy;
pub mod policy;
mod reach;
pub mod reconcile;
mod retention;
mod round;
mod scheduler;
mod scheduler_error;
mod server_set;
pub mod snapshot;
mod state;
mod topology;
#[cfg(feature = "wasm")]
pub mod wasm;

pub use book::{TypeQuota, TypeQuotas, VirtualCluster};
pub use gangway_plugin_sdk::{
    FailureClass, GpuTypeId, GpuTypeSet, JobId, Level, QueueOrder, RetryAction, RunningJob, Slot,
    SpreadLimit, VcId, WaitReason,
};
pub use job::{
    AttemptEnd, AttemptFailure, FinalStatus, JobRecord, JobSpec, JobState, WaitBreakdown,
};
pub use placement::PlacementChoice;
pub use placement_strategy::PlacementStrategy;
pub use round::{Migration, Preemption, Reservation, RoundReport, Start};
pub use scheduler::Scheduler;
pub use scheduler_error::SchedulerError;
pub use server_set::ServerSet;
pub use state::{
    ClusterState, GpuMask, Health, InvariantViolation, Placement, ServerGpus, StateError,
};
pub use topology::{
    DEFAULT_GPU_TYPE, Domain, DomainId, GpuRequest, GpuRequestError, GpuType, MAX_GPUS_PER_SERVER,
    Node, RackGrouping, Server, ServerId, Topology, TopologyBuilder, TopologyError,
};
