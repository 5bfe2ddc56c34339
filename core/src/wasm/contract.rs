//! The contract as the host checks it: interface names and versions, the
//! WebAssembly features a policy may use, and how much text the host takes
//! from a guest.

use gangway_plugin_sdk::{CONFIG_TREE_SECTION, Slot};
use wasmparser::{Parser, Payload, WasmFeatures};

use super::error::WasmErrorKind;

/// The contract version this host speaks; any `2.x` module is accepted.
pub use gangway_plugin_sdk::CONTRACT_VERSION;

const PACKAGE: &str = "gangway:policy";
/// The contract's major version: modules of another major are refused.
const MAJOR: u64 = 2;

/// `gangway:policy/x@v` -> (`x`, `v`).
pub(crate) fn parse_name(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix(PACKAGE)?.strip_prefix('/')?;
    rest.split_once('@')
}

/// The slot and contract version of an export named
/// `gangway:policy/<slot>@<version>`; `None` for any other export.
pub(crate) fn slot_export(name: &str) -> Option<(Slot, &str)> {
    let (iface, version) = parse_name(name)?;
    Some((Slot::from_name(iface)?, version))
}

/// Whether `name` is the `log` interface, of any version.
pub(crate) fn is_log(name: &str) -> bool {
    parse_name(name).is_some_and(|(iface, _)| iface == "log")
}

/// Refuses an import or export of a contract version this host does not
/// speak, naming it and saying how to rebuild.
pub(crate) fn check_version(name: &str, version: &str) -> Result<(), WasmErrorKind> {
    let major = version
        .split('.')
        .next()
        .and_then(|m| m.parse::<u64>().ok());
    if major == Some(MAJOR) {
        Ok(())
    } else {
        Err(WasmErrorKind::IncompatibleVersion {
            found: name.to_string(),
            host: CONTRACT_VERSION.to_string(),
        })
    }
}

/// The slots of `exported` whose policies read their options as a
/// configuration tree (`ConfigForm::Tree`): those named in the module's
/// [`CONFIG_TREE_SECTION`] custom sections, in the component or in any of
/// its core modules (each slot's name and a newline). No section: none, as
/// for every module built before the tree (they take text). A name that is
/// not a slot the module exports is refused.
pub(crate) fn config_tree_slots(
    component: &[u8],
    exported: &[Slot],
) -> Result<Vec<Slot>, WasmErrorKind> {
    let mut slots = Vec::new();
    for payload in Parser::new(0).parse_all(component) {
        let Ok(Payload::CustomSection(section)) = payload else {
            continue;
        };
        if section.name() != CONFIG_TREE_SECTION {
            continue;
        }
        let bad = |what: String| {
            WasmErrorKind::ConfigTreeSection(format!(
                "{what}; it must list slots the module exports, each followed by a newline"
            ))
        };
        let text =
            std::str::from_utf8(section.data()).map_err(|_| bad("is not UTF-8".to_string()))?;
        let Some(names) = text.strip_suffix('\n') else {
            if text.is_empty() {
                continue;
            }
            return Err(bad(format!("does not end in a newline ({text:?})")));
        };
        for name in names.split('\n') {
            match Slot::from_name(name) {
                Some(slot) if exported.contains(&slot) => {
                    if !slots.contains(&slot) {
                        slots.push(slot);
                    }
                }
                _ => return Err(bad(format!("names {name:?}"))),
            }
        }
    }
    Ok(slots)
}

/// The WebAssembly features a policy may use: the core language of
/// wasm32-unknown-unknown as Rust and C compilers emit it (mutable globals,
/// sign extension, saturating conversions, multi-value, bulk memory,
/// reference types, SIMD, and the extended constant expressions that
/// dynamically linked modules such as componentize-py's use) and the component model (`GC_TYPES` only enables
/// the `funcref` tables components use, not garbage collection). Not: multiple memories,
/// 64-bit memories, threads and shared memory, exceptions, garbage
/// collection, tail calls, stack switching, or the component model's async
/// and other proposals. A policy has exactly one linear memory, so the memory
/// cap bounds the whole instance.
pub(crate) fn features() -> WasmFeatures {
    WasmFeatures::MUTABLE_GLOBAL
        | WasmFeatures::SATURATING_FLOAT_TO_INT
        | WasmFeatures::SIGN_EXTENSION
        | WasmFeatures::MULTI_VALUE
        | WasmFeatures::BULK_MEMORY
        | WasmFeatures::REFERENCE_TYPES
        | WasmFeatures::SIMD
        | WasmFeatures::EXTENDED_CONST
        | WasmFeatures::FLOATS
        | WasmFeatures::GC_TYPES
        | WasmFeatures::COMPONENT_MODEL
}

/// At most `max` bytes of `text` (cut at a character boundary), with `...`
/// when cut: what the host keeps of a log message or a refusal.
pub(crate) fn bounded(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", &text[..cut])
}

/// At most `max` bytes of `bytes` as UTF-8 text: invalid UTF-8 in the part
/// read is an error; a character cut by the bound is dropped.
pub(crate) fn bounded_utf8(bytes: &[u8], max: usize) -> Result<String, std::str::Utf8Error> {
    if bytes.len() <= max {
        return std::str::from_utf8(bytes).map(str::to_string);
    }
    let head = &bytes[..max];
    match std::str::from_utf8(head) {
        Ok(s) => Ok(format!("{s}...")),
        // A character cut at the end is not an error; anything else is.
        Err(e) if e.error_len().is_none() => {
            let s = std::str::from_utf8(&head[..e.valid_up_to()])?;
            Ok(format!("{s}..."))
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_versions() {
        assert_eq!(
            slot_export("gangway:policy/defragment@2.0.0"),
            Some((Slot::Defragment, "2.0.0"))
        );
        assert_eq!(slot_export("gangway:policy/log@2.0.0"), None);
        assert!(is_log("gangway:policy/log@2.1.0"));
        assert!(check_version("x", "2.3.1").is_ok());
        let e = check_version("gangway:policy/fairness@1.0.0", "1.0.0").unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("implements gangway:policy/fairness@1.0.0"),
            "{text}"
        );
        assert!(text.contains("rebuild"), "{text}");
    }

    #[test]
    fn text_is_bounded() {
        assert_eq!(bounded("héllo", 2), "h...");
        assert_eq!(bounded("ok", 8), "ok");
        assert_eq!(bounded_utf8("héllo".as_bytes(), 2).unwrap(), "h...");
        assert!(bounded_utf8(&[0xff, b'a', b'b'], 2).is_err());
        assert_eq!(bounded_utf8(&[b'a'; 5000], 4).unwrap(), "aaaa...");
    }
}
