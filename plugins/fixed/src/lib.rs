//! `fixed`: retry failed attempts a fixed number of times (retry slot).
//!
//! Philly retried a failed job a fixed number of times to get past
//! non-deterministic failures (PHILLY.md §3.3, item 6; the public trace never
//! shows more than 5 attempts). This is that rule, with options: retry every
//! failure after `after_s` seconds until the job has had `max_attempts`
//! attempts (0: as many as the host allows; a host marks its last allowed
//! attempt as final), then give up. The rule itself is the core's built-in
//! retry policy ([`gangway_plugin_sdk::Fixed`]); this crate adds its
//! options.
//!
//! # Options (TOML)
//!
//! | key | type | default | meaning |
//! |---|---|---|---|
//! | `max_attempts` | count, 0 = the host's limit | `0` | give up after this many attempts |
//! | `after_s` | seconds, at most 366 days | `0` | wait before a retry is queued |
//!
//! ```
//! use gangway_plugin_sdk::*;
//! use gangway_policy_fixed::FixedRetry;
//!
//! let p = FixedRetry::from_config(b"max_attempts = 3\nafter_s = 180").unwrap();
//! let f = |attempts| FailedAttempt { attempts, gpus: 1, attempt_gpus: 1, ..FailedAttempt::default() };
//! let view = RetryView { now_s: 0, failures: vec![f(1), f(3)] };
//! assert_eq!(p.retry(&view).actions, [RetryAction::Retry { after_s: 180 }, RetryAction::GiveUp]);
//! ```

use gangway_plugin_sdk::Fixed;
use gangway_plugin_sdk::{
    ConfigError, ConfigForm, Configure, RetryAction, RetryDecision, RetryPolicy, RetryView,
    read_options,
};
use serde::Deserialize;

/// Configuration of [`FixedRetry`], parsed from TOML.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FixedConfig {
    /// Give up once a job has had this many attempts (0: never; the host's
    /// own limit applies).
    pub max_attempts: u32,
    /// Seconds to wait before a retry is queued.
    pub after_s: u64,
}

/// Fixed retries with options. See the [crate docs](crate).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FixedRetry(Fixed);

impl Configure for FixedRetry {
    // The host hands it its TOML as a tree: no parser in its module.
    const CONFIG_FORM: ConfigForm = ConfigForm::Tree;

    fn from_config(config: &[u8]) -> Result<Self, ConfigError> {
        let c: FixedConfig = read_options("fixed", config)?;
        if c.after_s > RetryAction::MAX_DELAY_S {
            return Err(ConfigError(format!(
                "fixed: after_s = {} is longer than the {} s (366 days) the contract allows a retry delay",
                c.after_s,
                RetryAction::MAX_DELAY_S
            )));
        }
        Ok(FixedRetry(Fixed {
            max_attempts: c.max_attempts,
            after_s: c.after_s,
        }))
    }
}

impl RetryPolicy for FixedRetry {
    fn retry(&self, view: &RetryView) -> RetryDecision {
        self.0.retry(view)
    }
}

gangway_plugin_sdk::export!(Retry, FixedRetry);

#[cfg(test)]
mod tests {
    use super::*;
    use gangway_plugin_sdk::Retry;
    use gangway_plugin_sdk::testing::SlotViews;
    use proptest::prelude::*;

    #[test]
    fn defaults_retry_everything_at_once() {
        assert_eq!(FixedRetry::from_config(b"").unwrap(), FixedRetry::default());
        let e = FixedRetry::from_config(b"retries = 2").unwrap_err();
        assert!(e.0.starts_with("fixed:") && e.0.contains("retries"), "{e}");
        let e = FixedRetry::from_config(b"after_s = 31622401").unwrap_err();
        assert!(e.0.contains("after_s = 31622401"), "{e}");
        assert!(FixedRetry::from_config(b"after_s = 31622400").is_ok());
    }

    proptest! {
        #[test]
        fn one_action_per_failure_never_a_probe(view in Retry::views(), max in 0u32..6) {
            let p = FixedRetry(Fixed { max_attempts: max, after_s: 5 });
            let d = p.retry(&view);
            prop_assert_eq!(d.actions.len(), view.failures.len());
            for (f, a) in view.failures.iter().zip(&d.actions) {
                let give_up = max > 0 && f.attempts >= max;
                prop_assert_eq!(*a == RetryAction::GiveUp, give_up);
            }
        }
    }
}
