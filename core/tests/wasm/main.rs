//! The Wasm policy host's integration tests, gathered in one binary: loading
//! and validation, hostile guests, native-vs-Wasm differential runs, hot swap
//! and quarantine.
#![allow(clippy::unwrap_used)]

mod differential;
mod guests;
mod hostile;
mod load;
mod structure;
mod support;
mod swap;
