//! `gangway-slurm`: Gangway as the placement brain of a real Slurm cluster.
//!
//! The daemon ([`daemon`]) keeps Gangway's queue and drives Slurm through
//! its command line, as an operator would:
//!
//! * the topology comes from `sinfo --json` (nodes, typed GPU GRES, state)
//!   plus racks from the config or Slurm's `topology.conf` ([`topology`]),
//!   and each node's GPU type from its features or its GPUs' GRES type
//!   (`[gpu_types]` in the config); a job asks for types (`submit --gpu-type`, or in native mode
//!   Slurm's own `--gres=gpu:a100:4`) and its gang runs on one;
//! * users submit with `gangway-slurm submit`, which talks to the daemon over
//!   a Unix socket in the state folder ([`protocol`]); the daemon knows who
//!   asks from the kernel and authorizes each request by that uid
//!   ([`identity`], [`access`]); jobs wait in Gangway, not in Slurm's queue;
//! * each round's starts are launched with `sbatch`, run as the submitter,
//!   pinned to the chosen nodes (`-w`) and GPU indices (one GRES type per
//!   index, `gpu:g5:1`), an uneven gang as a heterogeneous job with one
//!   component per node ([`launch`]);
//! * or, in native mode, users keep their own `sbatch` into a partition
//!   Gangway manages, where `job_submit.lua` holds each job until the daemon
//!   pins and releases it ([`native`]);
//! * one daemon serves a partition: a lock Slurm holds ([`lock`]);
//! * `squeue --json` and `sinfo --json` are read every cycle ([`engine`]):
//!   ends become `end_attempt`, node states and everything else go through
//!   [`gangway_core::Scheduler::reconcile`], so jobs started in Slurm
//!   directly count as foreign load;
//! * the state (scheduler snapshot plus the daemon's job table) is written
//!   to the state folder after every change, and a restarted daemon
//!   recovers from it and from Slurm's own view ([`persist`]);
//! * policies are the catalog's presets and Wasm modules, hot-swappable
//!   ([`policies`]); `status` and `why` report wait reasons ([`client`]);
//! * jobs are counted in what they hold: GPUs in the core, CPUs, memory
//!   and whole nodes in per-node books that restrict where each job may
//!   go ([`resources`]);
//! * clients are served within limits per user and in all, on a thread of
//!   their own ([`config::LimitsConfig`]).
//!
//! The binary is `src/bin/gangway-slurm.rs`; `host-examples/slurm/README.md`
//! is the operator's guide (and its trust model), and `tests/slurm/` tests
//! it against real Slurm daemons started by `tests/slurm/cluster.sh`, with
//! real unprivileged users.

pub mod access;
pub mod client;
pub mod config;
pub mod daemon;
pub mod engine;
mod error;
pub mod hostlist;
pub mod identity;
pub mod launch;
pub mod lock;
pub mod native;
pub mod persist;
pub mod policies;
pub mod protocol;
pub mod resources;
pub mod topology;

pub use error::SlurmError;
