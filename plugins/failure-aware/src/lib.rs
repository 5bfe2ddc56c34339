//! `failure-aware`: retry what may pass, stop repeating what will not
//! (retry slot), after the Philly study's guideline 3.
//!
//! The study classified 39,776 failed trials by reason (PHILLY.md §3.7,
//! Table 7) and found that failures repeat for the same job: programming and
//! configuration errors fail again on every retry (syntax and import errors,
//! unreadable inputs, library mismatches), while infrastructure failures
//! (a lost MPI peer, a checkpoint write on a flaky store, an ECC error)
//! often pass on retry. Its advice: stop retrying the first kind, keep
//! retrying the second, and catch programming errors early on a small pool
//! or a single GPU. The rule, by [`FailureClass`]:
//!
//! | class | action |
//! |---|---|
//! | syntax error, import error, semantic error (library/dependency set-up), permission error, incorrect inputs, CUDA version mismatch, cannot load libs, output node error | give up at once: the same code and inputs fail the same way (Table 7: 1.0-2.0 trials per job, short runtime to failure) |
//! | CPU or GPU out of memory, invalid memory access, core dump, model diverged, traceback from a crash | one more try, then give up: often data- or timing-dependent, but 1.6-4.3 trials per failing job show they mostly repeat |
//! | model checkpoint error, MPI runtime failure, MPI error, GPU ECC error, CUDA failure, CUDA init failed, job preempted | retry after `infra_after_s` (a storage or network hiccup, a bad node: waiting helps), up to `max_attempts` |
//! | unknown, no signature | as `fixed`: retry up to `max_attempts`; but a gang of more than one GPU whose first attempt failed this way is first retried as a one-GPU probe for `probe_s`, which catches a programming error at a fraction of the GPU time |
//!
//! A failed probe of an unknown failure gives up; a probe that survives
//! `probe_s` lets the full gang run.
//!
//! # Options (TOML)
//!
//! | key | type | default | meaning |
//! |---|---|---|---|
//! | `max_attempts` | count | `5` | never more attempts than this (the public trace never shows more than 5) |
//! | `infra_after_s` | seconds, at most 366 days | `180` | wait before retrying an infrastructure failure (the trace's retry gaps cluster at 180-195 s) |
//! | `probe_s` | seconds, 0 = never probe, at most 366 days | `600` | how long a one-GPU probe must survive |
//!
//! ```
//! use gangway_plugin_sdk::*;
//! use gangway_policy_failure_aware::FailureAware;
//!
//! let p = FailureAware::from_config(b"").unwrap();
//! let f = |class, gpus| FailedAttempt { class, gpus, attempt_gpus: gpus, attempts: 1, ..FailedAttempt::default() };
//! let view = RetryView {
//!     now_s: 0,
//!     failures: vec![
//!         f(FailureClass::SyntaxError, 8),
//!         f(FailureClass::MpiRuntimeFailure, 8),
//!         f(FailureClass::Unknown, 8),
//!     ],
//! };
//! assert_eq!(
//!     p.retry(&view).actions,
//!     [
//!         RetryAction::GiveUp,
//!         RetryAction::Retry { after_s: 180 },
//!         RetryAction::Probe { gpus: 1, run_s: 600, after_s: 0 },
//!     ]
//! );
//! ```

use gangway_plugin_sdk::{
    ConfigError, ConfigForm, Configure, FailedAttempt, FailureClass, RetryAction, RetryDecision,
    RetryPolicy, RetryView, read_options,
};
use serde::Deserialize;

/// Configuration of [`FailureAware`], parsed from TOML.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FailureAwareConfig {
    /// Never more attempts than this.
    pub max_attempts: u32,
    /// Wait before retrying an infrastructure failure.
    pub infra_after_s: u64,
    /// How long a one-GPU probe must survive (0: never probe).
    pub probe_s: u64,
}

impl Default for FailureAwareConfig {
    fn default() -> Self {
        FailureAwareConfig {
            max_attempts: 5,
            infra_after_s: 180,
            probe_s: 600,
        }
    }
}

/// How the policy treats a class of failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Treatment {
    /// The same code and inputs fail the same way: give up at once.
    Deterministic,
    /// Often repeats: one more try, then give up.
    Likely,
    /// Infrastructure: retry after a delay.
    Transient,
    /// No classification: retry as `fixed` does, probing multi-GPU gangs.
    Unknown,
}

/// The treatment of each failure class (the table of the [crate docs](crate)).
pub fn treatment(class: FailureClass) -> Treatment {
    use FailureClass::*;
    match class {
        SyntaxError | ImportError | SemanticError | PermissionError | IncorrectInputs
        | CudaVersionMismatch | CannotLoadLibs | OutputNodeError => Treatment::Deterministic,
        CpuOutOfMemory | GpuOutOfMemory | InvalidMemoryAccess | CoreDump | ModelDiverged
        | TracebackFromCrash => Treatment::Likely,
        ModelCheckpointError | MpiRuntimeFailure | MpiError | GpuEccError | CudaFailure
        | CudaInitFailed | JobPreempted => Treatment::Transient,
        Unknown | NoSignature => Treatment::Unknown,
    }
}

/// Failure-aware retries. See the [crate docs](crate).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FailureAware {
    config: FailureAwareConfig,
}

impl FailureAware {
    /// The configuration in use.
    pub fn config(&self) -> &FailureAwareConfig {
        &self.config
    }

    /// What to do about one failure.
    pub fn action(&self, f: &FailedAttempt) -> RetryAction {
        let c = &self.config;
        if f.attempts >= c.max_attempts {
            return RetryAction::GiveUp;
        }
        match treatment(f.class) {
            Treatment::Deterministic => RetryAction::GiveUp,
            Treatment::Likely if f.attempts >= 2 => RetryAction::GiveUp,
            Treatment::Likely => RetryAction::Retry { after_s: 0 },
            Treatment::Transient => RetryAction::Retry {
                after_s: c.infra_after_s,
            },
            // A failed probe: the error is in the job, not its size.
            Treatment::Unknown if f.probe => RetryAction::GiveUp,
            Treatment::Unknown if f.attempts == 1 && f.gpus > 1 && c.probe_s > 0 => {
                RetryAction::Probe {
                    gpus: 1,
                    run_s: c.probe_s,
                    after_s: 0,
                }
            }
            Treatment::Unknown => RetryAction::Retry { after_s: 0 },
        }
    }
}

impl Configure for FailureAware {
    // The host hands it its TOML as a tree: no parser in its module.
    const CONFIG_FORM: ConfigForm = ConfigForm::Tree;

    fn from_config(config: &[u8]) -> Result<Self, ConfigError> {
        let config: FailureAwareConfig = read_options("failure-aware", config)?;
        if config.max_attempts == 0 {
            return Err(ConfigError(
                "failure-aware: max_attempts must be at least 1".into(),
            ));
        }
        for (key, value, max) in [
            (
                "infra_after_s",
                config.infra_after_s,
                RetryAction::MAX_DELAY_S,
            ),
            ("probe_s", config.probe_s, RetryAction::MAX_PROBE_S),
        ] {
            if value > max {
                return Err(ConfigError(format!(
                    "failure-aware: {key} = {value} is longer than the {max} s (366 days) the contract allows"
                )));
            }
        }
        Ok(FailureAware { config })
    }
}

impl RetryPolicy for FailureAware {
    fn retry(&self, view: &RetryView) -> RetryDecision {
        RetryDecision {
            actions: view.failures.iter().map(|f| self.action(f)).collect(),
        }
    }
}

gangway_plugin_sdk::export!(Retry, FailureAware);

#[cfg(test)]
mod tests {
    use super::*;
    use gangway_plugin_sdk::Retry;
    use gangway_plugin_sdk::testing::SlotViews;
    use proptest::prelude::*;

    fn failure(class: FailureClass, gpus: u32, attempts: u32, probe: bool) -> FailedAttempt {
        FailedAttempt {
            class,
            gpus,
            attempt_gpus: if probe { 1 } else { gpus },
            attempts,
            probe,
            ..FailedAttempt::default()
        }
    }

    #[test]
    fn likely_repeats_get_one_more_try() {
        let p = FailureAware::default();
        let oom = |n| p.action(&failure(FailureClass::CpuOutOfMemory, 4, n, false));
        assert_eq!(oom(1), RetryAction::Retry { after_s: 0 });
        assert_eq!(oom(2), RetryAction::GiveUp);
    }

    #[test]
    fn unknown_failures_probe_then_judge() {
        let p = FailureAware::default();
        let one_gpu = p.action(&failure(FailureClass::Unknown, 1, 1, false));
        assert_eq!(
            one_gpu,
            RetryAction::Retry { after_s: 0 },
            "nothing smaller to probe"
        );
        let probe_failed = p.action(&failure(FailureClass::NoSignature, 8, 2, true));
        assert_eq!(probe_failed, RetryAction::GiveUp);
        let later = p.action(&failure(FailureClass::Unknown, 8, 3, false));
        assert_eq!(later, RetryAction::Retry { after_s: 0 });
        let no_probes = FailureAware::from_config(b"probe_s = 0").unwrap();
        assert_eq!(
            no_probes.action(&failure(FailureClass::Unknown, 8, 1, false)),
            RetryAction::Retry { after_s: 0 }
        );
    }

    #[test]
    fn the_attempt_limit_holds_for_every_class() {
        let p = FailureAware::from_config(b"max_attempts = 2").unwrap();
        let f = failure(FailureClass::MpiRuntimeFailure, 8, 2, false);
        assert_eq!(p.action(&f), RetryAction::GiveUp);
        assert!(FailureAware::from_config(b"max_attempts = 0").is_err());
        let e = FailureAware::from_config(b"infra_after_s = 31622401").unwrap_err();
        assert!(e.0.contains("infra_after_s = 31622401"), "{e}");
        let e = FailureAware::from_config(b"probe_s = 40000000").unwrap_err();
        assert!(e.0.contains("probe_s"), "{e}");
        assert!(FailureAware::from_config(b"probe = 1").is_err());
    }

    proptest! {
        /// One action per failure; a probe is always smaller than its gang;
        /// deterministic failures are never retried.
        #[test]
        fn answers_are_well_formed(view in Retry::views()) {
            let d = FailureAware::default().retry(&view);
            prop_assert_eq!(d.actions.len(), view.failures.len());
            for (f, a) in view.failures.iter().zip(&d.actions) {
                if let RetryAction::Probe { gpus, run_s, .. } = a {
                    prop_assert!(*gpus >= 1 && *gpus < f.gpus && *run_s > 0);
                }
                if treatment(f.class) == Treatment::Deterministic {
                    prop_assert_eq!(*a, RetryAction::GiveUp);
                }
            }
        }
    }
}
