//! Loading: the real plugins load, report their slots and version, and the
//! cache makes a second load of the same bytes cheap.

use gangway_core::policy::Slot;

use crate::guests;

#[test]
fn real_plugins_load_with_their_slots() {
    let engine = guests::engine();
    let fifo = engine
        .load(
            "fifo.wasm",
            gangway_plugin_artifacts::module("fifo").unwrap(),
        )
        .unwrap();
    assert_eq!(fifo.name(), "fifo.wasm");
    assert_eq!(fifo.slots(), vec![Slot::Fairness]);
    assert_eq!(fifo.contract_version(), "1.0.0");
    let builtin = engine
        .load(
            "builtin",
            gangway_plugin_artifacts::module("builtin").unwrap(),
        )
        .unwrap();
    assert_eq!(builtin.slots(), Slot::ALL.to_vec());
    assert_eq!(engine.cached_modules(), 2);
}

#[test]
fn wat_guest_loads() {
    let engine = guests::engine();
    let m = engine.load("t", &guests::hostile("trap")).unwrap();
    assert_eq!(m.slots(), vec![Slot::Fairness]);
}
