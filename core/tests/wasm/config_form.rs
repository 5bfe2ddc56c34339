//! How a module gets its configuration: the operator's bytes as given
//! (every module without a `gangway:config-tree` section, as all modules
//! built before it), or the configuration tree the host makes of the TOML
//! once (the built-ins); a TOML error is the host's, by line and column,
//! and a guest reading the tree names a bad key by its line.

use gangway_core::Slot;
use gangway_core::wasm::WasmErrorKind;
use gangway_plugin_sdk::{ConfigForm, Fairness, Reclaim, config_tree};

use crate::guests::{self, WIT, componentize, fairness_wat};

/// A 2.0 fairness guest whose `init` refuses any non-empty configuration
/// with the configuration's own bytes as its message: what it was handed,
/// seen from the host. `section` adds a custom section to its core module.
fn echo_guest(section: &str) -> Vec<u8> {
    let init = "(func (export \"gangway:policy/fairness@2.0.0#init\") (param i32 i32) (result i32)\n    \
                (i32.store8 (i32.const 16) (i32.const 0))\n    (i32.const 16))";
    let echo = r#"(func (export "gangway:policy/fairness@2.0.0#init") (param $p i32) (param $l i32) (result i32)
    (i32.store8 (i32.const 16) (i32.ne (local.get $l) (i32.const 0)))
    (i32.store (i32.const 20) (local.get $p))
    (i32.store (i32.const 24) (local.get $l))
    (i32.const 16))"#;
    let wat = fairness_wat("2.0.0", 0, "", "");
    assert!(wat.contains(init), "the test guest's init changed");
    let wat = wat.replacen(init, &format!("{echo}\n  {section}"), 1);
    componentize(&wat, &[], WIT, "fairness-policy")
}

/// What the echo guest was handed for `config`.
fn handed(module: &[u8], config: &[u8]) -> String {
    let engine = guests::engine();
    let module = engine.load("echo.wasm", module).unwrap();
    match module.backend::<Fairness>(config).err().unwrap().kind {
        WasmErrorKind::Config { message, .. } => message,
        other => panic!("not a configuration refusal: {other:?}"),
    }
}

#[test]
fn a_module_without_the_section_is_handed_the_text_as_given() {
    let module = echo_guest("");
    let engine = guests::engine();
    let loaded = engine.load("echo.wasm", &module).unwrap();
    assert_eq!(loaded.config_form(Slot::Fairness), ConfigForm::Text);
    // Not TOML at all: the host does not parse it.
    let text = "{\"lend\": false}\n# a policy's own format";
    assert_eq!(handed(&module, text.as_bytes()), text);
}

#[test]
fn a_module_with_the_section_is_handed_the_tree_of_its_toml() {
    let module = echo_guest(r#"(@custom "gangway:config-tree" "fairness\n")"#);
    let engine = guests::engine();
    let loaded = engine.load("tree.wasm", &module).unwrap();
    assert_eq!(loaded.config_form(Slot::Fairness), ConfigForm::Tree);
    // (Small numbers: the echo comes back as a string, so UTF-8.)
    let text = b"lend = false\n[quota]\n0 = 6\n";
    let tree = config_tree(text).unwrap();
    assert_eq!(handed(&module, text).as_bytes(), &tree[..]);
    // A TOML error is the host's, by line and column; the module is not
    // asked.
    let e = handed(&module, b"lend = false\nquota = [1,");
    assert!(e.starts_with("invalid policy configuration: "), "{e}");
    assert!(e.ends_with("at line 2 column 12"), "{e}");
}

#[test]
fn a_section_naming_a_slot_not_exported_is_refused() {
    let module = echo_guest(r#"(@custom "gangway:config-tree" "reclaim\n")"#);
    let err = guests::engine().load("odd.wasm", &module).unwrap_err();
    assert_eq!(
        err.to_string(),
        "module odd.wasm: has a malformed gangway:config-tree section: it names \"reclaim\"; \
         it must list slots the module exports, each followed by a newline"
    );
}

#[test]
fn the_built_ins_read_the_tree_and_name_a_bad_key_by_its_line() {
    let engine = guests::engine();
    let las = engine
        .load("las", gangway_plugin_artifacts::module("las").unwrap())
        .unwrap();
    assert_eq!(las.config_form(Slot::Fairness), ConfigForm::Tree);
    assert_eq!(las.config_form(Slot::Reclaim), ConfigForm::Tree);
    assert!(las.backend::<Reclaim>(b"promote_after_s = 600").is_ok());
    let err = las
        .backend::<Fairness>(b"promote_after_s = 600\n\nthresholds = [1]")
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "module las: refused its fairness configuration: invalid policy configuration: las: \
         unknown field `thresholds`, expected `thresholds_gpu_s` or `promote_after_s` at line 3"
    );
    let err = las
        .backend::<Fairness>(b"promote_after_s = 1.5")
        .err()
        .unwrap();
    assert!(
        err.to_string()
            .ends_with("las: invalid type: floating point number, expected u64 at line 1"),
        "{err}"
    );
    let err = las
        .backend::<Fairness>(b"\npromote_after_s = ")
        .err()
        .unwrap();
    assert!(err.to_string().ends_with("at line 2 column 19"), "{err}");
    // A policy without options keeps the text and its own check.
    let fifo = engine
        .load("fifo", gangway_plugin_artifacts::module("fifo").unwrap())
        .unwrap();
    assert_eq!(fifo.config_form(Slot::Fairness), ConfigForm::Text);
}
