//! `builtin`: the core's default policies as one component that exports all
//! three slots, built from the very types the core runs natively
//! ([`gangway_plugin_sdk::builtin`]): FIFO within virtual-cluster quotas,
//! strict locality and backfill.
//!
//! It exists so that the defaults can be compared natively and sandboxed
//! decision by decision, and as the smallest example of a multi-slot module.
//!
//! ```
//! use gangway_plugin_sdk::Configure;
//! use gangway_policy_builtin::{Backfill, FifoQuota, StrictLocality};
//!
//! assert!(FifoQuota::from_config(b"").is_ok());
//! assert!(StrictLocality::from_config(b"").is_ok());
//! assert!(Backfill::from_config(b"x = 1").is_err());
//! ```

pub use gangway_plugin_sdk::builtin::{Backfill, FifoQuota, StrictLocality};

gangway_plugin_sdk::export_fairness!(FifoQuota);
gangway_plugin_sdk::export_locality!(StrictLocality);
gangway_plugin_sdk::export_gang!(Backfill);
