//! TOML text to a configuration tree (see `tree.rs`): what a host does
//! once per configured slot for a module that reads its options as a tree,
//! and what [`crate::read_options`] does natively. Not compiled into guests.

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::tree::TreeWriter;
use super::{ConfigError, config_text};

/// The configuration tree of the TOML `config` (empty bytes: an empty
/// table), or the TOML error naming its line and column.
///
/// ```
/// use gangway_plugin_sdk::config_tree;
///
/// assert!(config_tree(b"after_s = 60").is_ok());
/// let e = config_tree(b"a = 1\nafter_s = ").unwrap_err();
/// assert!(e.0.ends_with("at line 2 column 11"), "{e}");
/// ```
pub fn config_tree(config: &[u8]) -> Result<Vec<u8>, ConfigError> {
    let text = config_text(config)?;
    let table = DeTable::parse(text).map_err(|e| {
        let place = e.span().map_or_else(String::new, |span| {
            let (line, column) = line_column(text, span.start);
            format!(" at line {line} column {column}")
        });
        ConfigError(format!("{}{place}", e.message().trim_end()))
    })?;
    let mut w = TreeWriter::new();
    write_table(&mut w, text, table.get_ref())?;
    Ok(w.finish())
}

/// The 1-based line and column (in characters) of byte `at` of `text`.
fn line_column(text: &str, at: usize) -> (u32, usize) {
    let before = text.get(..at).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (u32::try_from(line).unwrap_or(u32::MAX), column)
}

fn write_table(w: &mut TreeWriter, text: &str, table: &DeTable<'_>) -> Result<(), ConfigError> {
    w.table(table.len());
    // In the order of the text, whether or not the `toml` crate keeps it
    // (its `preserve_order` feature, which another crate may turn on).
    let mut entries: Vec<_> = table.iter().collect();
    entries.sort_by_key(|(key, _)| key.span().start);
    for (key, value) in entries {
        let (line, _) = line_column(text, key.span().start);
        w.key(key.get_ref(), line);
        write_value(w, text, value)?;
    }
    Ok(())
}

fn write_value(
    w: &mut TreeWriter,
    text: &str,
    value: &Spanned<DeValue<'_>>,
) -> Result<(), ConfigError> {
    let out_of_range = |what: &str, raw: &str| {
        let (line, column) = line_column(text, value.span().start);
        ConfigError(format!(
            "{what} `{raw}` is out of range at line {line} column {column}"
        ))
    };
    match value.get_ref() {
        DeValue::String(s) => w.str(s),
        DeValue::Integer(i) => w.int(
            i64::from_str_radix(i.as_str(), i.radix())
                .map_err(|_| out_of_range("integer", i.as_str()))?,
        ),
        DeValue::Float(f) => w.float(
            f.as_str()
                .parse()
                .map_err(|_| out_of_range("float", f.as_str()))?,
        ),
        DeValue::Boolean(b) => w.bool(*b),
        DeValue::Datetime(d) => w.str(&d.to_string()),
        DeValue::Array(items) => {
            w.array(items.len());
            for item in items.iter() {
                write_value(w, text, item)?;
            }
        }
        DeValue::Table(table) => write_table(w, text, table)?,
    }
    Ok(())
}
