//! Small programs a user copies, one topic per file; each runs with
//! `cargo run -p gangway-embed --example NAME` and as a test under
//! `cargo test`:
//!
//! - `embed_scheduler`: a host's loop around `gangway_core::Scheduler`: a cluster from a
//!   machine list, VCs with quotas, rounds, attempt ends, "why is my job
//!   pending?".
//! - `write_and_load_policy`: a fairness policy written against the SDK, run
//!   natively and as a Wasm module, checked with the conformance kit.
//! - `hot_swap_under_load`: swapping a slot's module from another thread
//!   while rounds run.
//!
//! This library itself is empty.

/// This folder's README, compiled and run as doc tests so the README
/// cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("README.md")]
pub struct ReadmeExamples;
