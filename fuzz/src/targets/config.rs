//! Built-in policies' configurations: whatever the bytes, a configuration
//! is refused with an error or gives a policy whose decisions pass every
//! rule of the contract.

use gangway_catalog::CatalogSlot;
use gangway_plugin_sdk::SlotContract;
use gangway_plugin_sdk::testing::SlotViews;

use super::{by_slot, generate};

fn one<S: CatalogSlot + SlotContract + SlotViews>(pick: u8, config: &[u8]) {
    let name = S::NAMES[usize::from(pick) % S::NAMES.len()];
    let Ok(mut policy) = S::native(name, config) else {
        return;
    };
    let Some(view) = generate(S::views(), config) else {
        return;
    };
    let decision = match policy.decide(&view) {
        Ok(d) => d,
        Err(e) => panic!("native {name} failed: {e}"),
    };
    if let Err(e) = S::validate(&view, &decision) {
        panic!(
            "{name} with configuration {:?} decided invalidly: {e}",
            String::from_utf8_lossy(config)
        );
    }
}

/// Byte 0 picks the slot, byte 1 the policy, the rest is its configuration.
pub(crate) fn policy_config(data: &[u8]) {
    let (Some(&slot), Some(&pick)) = (data.first(), data.get(1)) else {
        return;
    };
    let config = &data[2..];
    by_slot!(slot, one(pick, config));
}
