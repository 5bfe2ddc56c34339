//! The slot traits a policy implements. One type per slot; the same type runs
//! natively and, exported with the SDK's macros, as a Wasm component.

use crate::decision::{FairnessDecision, GangDecision, LocalityDecision};
use crate::view::{QueueView, RoundView};

/// A policy's construction from its load-time configuration bytes (TOML, JSON,
/// or whatever the policy documents). Empty bytes mean "all defaults".
pub trait Configure: Sized {
    /// Builds the policy, or says what is wrong with the configuration.
    fn from_config(config: &[u8]) -> Result<Self, ConfigError>;
}

/// A configuration a policy refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid policy configuration: {0}")]
pub struct ConfigError(pub String);

/// The fairness slot: order pending jobs and mark which may start now.
pub trait FairnessPolicy {
    /// Orders every pending job of `view` and marks eligibility.
    fn order(&self, view: &RoundView) -> FairnessDecision;
}

/// The locality-relaxation slot: a spread limit per eligible job.
pub trait LocalityPolicy {
    /// Returns one spread limit per job of `view`, in order.
    fn spread(&self, view: &QueueView) -> LocalityDecision;
}

/// The gang slot: what a blocked job does to the jobs behind it.
pub trait GangPolicy {
    /// Returns one action per job of `view`, in order.
    fn on_blocked(&self, view: &QueueView) -> GangDecision;
}

/// Parses TOML-or-JSON configuration helper is left to each policy; this one
/// turns UTF-8 problems into a [`ConfigError`].
///
/// ```
/// assert_eq!(gangway_plugin_sdk::config_text(b"a = 1").unwrap(), "a = 1");
/// assert!(gangway_plugin_sdk::config_text(&[0xff]).is_err());
/// ```
pub fn config_text(config: &[u8]) -> Result<&str, ConfigError> {
    std::str::from_utf8(config).map_err(|e| ConfigError(format!("configuration is not UTF-8: {e}")))
}

/// Accepts only an empty configuration (blank lines and `#` comments), for a
/// policy that takes no options: anything else is refused, naming the
/// `policy` and the first line that is not empty. This spares such a policy
/// a TOML parser, which would make its Wasm module several times larger and
/// slower to compile.
///
/// ```
/// use gangway_plugin_sdk::no_options;
///
/// assert!(no_options("backfill", b"# nothing to set\n\n").is_ok());
/// let e = no_options("backfill", b"\nafter_s = 60").unwrap_err();
/// assert_eq!(e.0, "backfill: takes no options, but line 2 is `after_s = 60`");
/// ```
pub fn no_options(policy: &str, config: &[u8]) -> Result<(), ConfigError> {
    let text = config_text(config)?;
    match text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .find(|(_, l)| !l.is_empty() && !l.starts_with('#'))
    {
        None => Ok(()),
        Some((line, content)) => Err(ConfigError(format!(
            "{policy}: takes no options, but line {line} is `{content}`"
        ))),
    }
}
