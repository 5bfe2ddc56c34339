//! `fallbacks`: the slots' fallback policies as one component that exports
//! four slots, built from the very types the core runs natively
//! (`SlotContract::Fallback` of each slot in `gangway_plugin_sdk`): FIFO within virtual-cluster quotas
//! (`fifo-quota`), strict locality (`strict`), backfill (`backfill`) and
//! retry every failure (`fixed` without options). These are the only
//! implementations of those rules: the catalog names map to this module's
//! slots.
//!
//! It exists so that the defaults can be compared natively and sandboxed
//! decision by decision, and as the smallest example of a multi-slot module.
//!
//! ```
//! use gangway_plugin_sdk::Configure;
//! use gangway_policy_fallbacks::{Backfill, FifoQuota, Fixed, Strict};
//!
//! assert!(FifoQuota::from_config(b"").is_ok());
//! assert!(Strict::from_config(b"").is_ok());
//! assert!(Fixed::from_config(b"").is_ok());
//! assert!(Backfill::from_config(b"x = 1").is_err());
//! ```

pub use gangway_plugin_sdk::{Backfill, FifoQuota, Fixed, Strict};

gangway_plugin_sdk::export!(Fairness, FifoQuota);
gangway_plugin_sdk::export!(Locality, Strict);
gangway_plugin_sdk::export!(Gang, Backfill);
gangway_plugin_sdk::export!(Retry, Fixed);
