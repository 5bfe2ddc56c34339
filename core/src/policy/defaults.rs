//! The built-in native defaults, used when no policy is configured and as the
//! fallback when a configured policy fails: FIFO within virtual-cluster
//! quotas, strict locality, backfill.
//!
//! They are defined in the SDK ([`gangway_plugin_sdk::builtin`]) so the same
//! types also build as a Wasm component; this module re-exports them.

pub use gangway_plugin_sdk::builtin::{Backfill, FifoQuota, StrictLocality};
