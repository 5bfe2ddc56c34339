//! The Wasm policy host's integration tests, gathered in one binary: loading
//! and validation, hostile guests, the two call paths on arbitrary replies,
//! native-vs-Wasm differential runs, hot swap and quarantine.
#![allow(clippy::unwrap_used)]

mod abi;
mod budgets;
mod buffered;
mod config_form;
mod costs;
mod differential;
mod findings;
mod guests;
mod hostile;
mod load;
mod shapes;
mod snapshot_policies;
mod structure;
mod support;
mod swap;
