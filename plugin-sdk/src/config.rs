//! A policy's configuration: the bytes the operator gives at load time.

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

/// The configuration as UTF-8 text, or a [`ConfigError`] saying it is not.
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

/// Parses a policy's options from TOML into `T`, usually a struct with
/// `#[serde(default, deny_unknown_fields)]`; a refusal starts with `policy:`
/// and says what is wrong (an unknown or mistyped key by name, a syntax
/// error by line and column).
///
/// The parser is [`basic_toml`], chosen for size: a policy compiled to Wasm
/// with it is about 50 KB smaller, and quicker to compile, than with the
/// `toml` crate. It reads TOML 0.5 (every table, array and scalar a policy's
/// options use) but not dates and times.
///
/// ```
/// use gangway_plugin_sdk::parse_options;
///
/// #[derive(serde::Deserialize, Debug, Default, PartialEq)]
/// #[serde(default, deny_unknown_fields)]
/// struct Options {
///     after_s: u64,
/// }
///
/// let o: Options = parse_options("fixed", b"after_s = 60").unwrap();
/// assert_eq!(o, Options { after_s: 60 });
/// assert_eq!(parse_options::<Options>("fixed", b"").unwrap(), Options::default());
/// let e = parse_options::<Options>("fixed", b"\nretries = 2").unwrap_err();
/// assert!(e.0.starts_with("fixed: unknown field `retries`, expected `after_s`"), "{e}");
/// let e = parse_options::<Options>("fixed", b"after_s = ").unwrap_err();
/// assert!(e.0.contains("at line 1 column 11"), "{e}");
/// ```
pub fn parse_options<T: serde::de::DeserializeOwned>(
    policy: &str,
    config: &[u8],
) -> Result<T, ConfigError> {
    basic_toml::from_str(config_text(config)?).map_err(|e| ConfigError(format!("{policy}: {e}")))
}
