//! A policy's configuration: the bytes the operator gives at load time,
//! as text the policy parses ([`parse_options`], or its own parser), or as
//! the configuration tree the host makes of the TOML ([`read_options`]).
//!
//! Why a tree: a TOML parser is about 36 KB of a policy's Wasm module, and
//! the float formatting its errors pull in about 15 KB more, in every
//! module and parsed again by every fresh instance. The host already
//! parses TOML (with the `toml` crate, whose errors name line and column),
//! so it parses the text once and hands the module a value tree in
//! postcard's layout that serde's derive reads into the policy's options
//! type with a few hundred bytes of code; each key keeps its line, so an
//! unknown or mistyped option is still named by line. A module says it
//! reads the tree ([`Configure::CONFIG_FORM`], which the export macro
//! writes into the module's `gangway:config-tree` custom section);
//! a module that does not (every module built before, or one parsing
//! JSON) gets the operator's bytes as before.

#[cfg(not(target_arch = "wasm32"))]
mod toml_tree;
pub(crate) mod tree;

#[cfg(not(target_arch = "wasm32"))]
pub use toml_tree::config_tree;

/// The custom section of a policy's Wasm module (of its core module or of
/// the component) that names the slots whose policies read their options
/// as a configuration tree ([`ConfigForm::Tree`]): each slot's name (as in
/// WIT: `fairness`, ...) followed by a newline. The export macro writes it;
/// a module without it takes text in every slot.
pub const CONFIG_TREE_SECTION: &str = "gangway:config-tree";

/// How a policy's module takes its configuration from the host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ConfigForm {
    /// The operator's bytes as given (TOML, JSON, or whatever the policy
    /// documents): the policy parses them.
    #[default]
    Text,
    /// The operator's TOML as a configuration tree the host made of it
    /// ([`config_tree`] natively), read with [`read_options`].
    Tree,
}

/// A policy's construction from its load-time configuration bytes (TOML, JSON,
/// or whatever the policy documents). Empty bytes mean "all defaults".
pub trait Configure: Sized {
    /// How its Wasm module takes the configuration: [`ConfigForm::Tree`]
    /// for a policy whose `from_config` reads its options with
    /// [`read_options`], so that its module carries no TOML parser;
    /// [`ConfigForm::Text`] (the default) hands it the operator's bytes.
    const CONFIG_FORM: ConfigForm = ConfigForm::Text;

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

/// Reads a policy's TOML options into `T` (usually a struct with
/// `#[serde(default, deny_unknown_fields)]`) from a configuration tree, as
/// a host hands it to a policy whose [`Configure::CONFIG_FORM`] is
/// [`ConfigForm::Tree`]; natively, TOML text is made a tree first
/// ([`config_tree`]), so a policy reads the same natively and as Wasm. A
/// refusal starts with `policy:` and names what is wrong and its line: a
/// TOML syntax error by line and column, an unknown or mistyped key by the
/// line of the key. Empty bytes (and, in a guest, blank text) are all
/// defaults.
///
/// ```
/// use gangway_plugin_sdk::read_options;
///
/// #[derive(serde::Deserialize, Debug, Default, PartialEq)]
/// #[serde(default, deny_unknown_fields)]
/// struct Options {
///     after_s: u64,
/// }
///
/// let o: Options = read_options("fixed", b"after_s = 60").unwrap();
/// assert_eq!(o, Options { after_s: 60 });
/// assert_eq!(read_options::<Options>("fixed", b"").unwrap(), Options::default());
/// let e = read_options::<Options>("fixed", b"\nretries = 2").unwrap_err();
/// assert_eq!(e.0, "fixed: unknown field `retries`, expected `after_s` at line 2");
/// let e = read_options::<Options>("fixed", b"after_s = -1").unwrap_err();
/// assert_eq!(e.0, "fixed: invalid value: integer `-1`, expected u64 at line 1");
/// let e = read_options::<Options>("fixed", b"after_s = ").unwrap_err();
/// assert!(e.0.starts_with("fixed: ") && e.0.ends_with("at line 1 column 11"), "{e}");
/// ```
pub fn read_options<T: serde::de::DeserializeOwned>(
    policy: &str,
    config: &[u8],
) -> Result<T, ConfigError> {
    let refused = |e: &dyn std::fmt::Display| ConfigError(format!("{policy}: {e}"));
    if config.starts_with(tree::MAGIC) {
        return tree::read(config).map_err(|e| refused(&e));
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let tree = config_tree(config).map_err(|e| refused(&e.0))?;
        tree::read(&tree).map_err(|e| refused(&e))
    }
    #[cfg(target_arch = "wasm32")]
    {
        if !config.trim_ascii().is_empty() {
            return Err(refused(
                &"this module reads its options as the configuration tree a Gangway host makes \
                  of the TOML (its `gangway:config-tree` section), but was given text",
            ));
        }
        tree::read(tree::EMPTY).map_err(|e| refused(&e))
    }
}
