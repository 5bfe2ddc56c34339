//! Programs that embed Gangway the way real hosts do, and the pieces they
//! share: trace readers, the workload generator, the discrete-event replay,
//! the built-in policy catalog and presets, and reports.

pub mod catalog;
pub mod cluster_shape;
pub mod cpu_time;
pub mod logging;
pub mod plots;
pub mod policies;
pub mod policy_check;
pub mod replay_cli;
pub mod replay_json;
pub mod report;
pub mod sim;
pub mod slot_handles;
pub mod slurm;
pub mod trace;
pub mod workload;

/// The README's Rust examples, compiled and run as doc tests so the README
/// cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeExamples;
