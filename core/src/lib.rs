//! # gangway-core
//!
//! The engine an existing GPU-cluster scheduler links to decide where deep
//! learning jobs run: a topology graph of cluster > racks > servers > GPUs,
//! allocation state with all-or-nothing gang allocation, a placement search
//! that keeps gangs local and large holes free, and a scheduling round that
//! runs pluggable fairness, locality and gang policies.
//!
//! The core owns the truth; policies only advise. Whatever a policy answers,
//! the core validates it, so no GPU is ever held twice, no gang half-started
//! and no job lost.
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

#[cfg(feature = "conformance")]
pub mod conformance;
mod job;
mod job_table;
mod placement;
mod placement_strategy;
pub mod policy;
mod queue;
pub mod reconcile;
mod retention;
mod round;
mod scheduler;
pub mod snapshot;
mod state;
mod topology;
#[cfg(feature = "wasm")]
pub mod wasm;

pub use gangway_plugin_sdk::{
    FailureClass, JobId, Level, QueueOrder, RetryAction, Slot, SpreadLimit, VcId, WaitReason,
};
pub use job::{AttemptEnd, Failure, FinalStatus, JobRecord, JobSpec, JobState, WaitBreakdown};
pub use placement::PlacementChoice;
pub use placement_strategy::PlacementStrategy;
pub use reconcile::{Difference, EngineTruth};
pub use round::{Migration, Preemption, Reservation, RoundReport, Start};
pub use scheduler::{Scheduler, SchedulerError, VirtualCluster};
pub use snapshot::{SNAPSHOT_VERSION, Snapshot, SnapshotError};
pub use state::{
    ClusterState, GpuMask, Health, InvariantViolation, Placement, ServerGpus, StateError,
};
pub use topology::{
    Domain, DomainId, MAX_GPUS_PER_SERVER, Node, RackGrouping, Server, ServerId, Topology,
    TopologyBuilder, TopologyError,
};
