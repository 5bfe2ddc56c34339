//! The retry slot's built-in policy, `fixed`.

use super::{RetryAction, RetryDecision, RetryPolicy, RetryView};
use crate::config::{ConfigError, Configure, no_options};

/// `fixed`: retry every failed attempt at once, as often as the host lets a
/// job run (Philly retried failed jobs a fixed number of times; that limit
/// is the host's, which marks a job's last allowed attempt as final). The
/// `fixed` plugin adds options (a lower limit, a delay) to this rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fixed {
    /// Give up once a job has had this many attempts (0: never).
    pub max_attempts: u32,
    /// Seconds to wait before a retry is pending.
    pub after_s: u64,
}

impl RetryPolicy for Fixed {
    fn retry(&self, view: &RetryView) -> RetryDecision {
        RetryDecision {
            actions: view
                .failures
                .iter()
                .map(|f| {
                    if self.max_attempts > 0 && f.attempts >= self.max_attempts {
                        RetryAction::GiveUp
                    } else {
                        RetryAction::Retry {
                            after_s: self.after_s,
                        }
                    }
                })
                .collect(),
        }
    }
}

impl Configure for Fixed {
    fn from_config(config: &[u8]) -> Result<Self, ConfigError> {
        no_options("fixed", config)?;
        Ok(Fixed::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FailedAttempt;

    #[test]
    fn fixed_retries_up_to_its_limit() {
        let failure = |attempts| FailedAttempt {
            attempts,
            ..FailedAttempt::default()
        };
        let view = RetryView {
            now_s: 0,
            failures: vec![failure(1), failure(3)],
        };
        let limited = Fixed {
            max_attempts: 3,
            after_s: 60,
        };
        assert_eq!(
            limited.retry(&view).actions,
            [RetryAction::Retry { after_s: 60 }, RetryAction::GiveUp]
        );
        assert_eq!(
            Fixed::default().retry(&view).actions,
            [RetryAction::Retry { after_s: 0 }; 2]
        );
    }

    #[test]
    fn it_takes_no_options() {
        let e = Fixed::from_config(b"max_attempts = 2").unwrap_err();
        assert!(e.0.starts_with("fixed: takes no options"), "{e}");
    }
}
