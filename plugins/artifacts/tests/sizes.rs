//! Every built-in policy module stays small: at most 150,000 bytes as the
//! component a host embeds. A module a host loads is compiled at load and
//! kept in memory by every instance; the budget keeps that cheap and
//! catches a change that drags a parser or a duplicated decoder into one.

/// The most bytes a built-in module's component may have.
const BUDGET: usize = 150_000;

#[test]
fn every_built_in_module_is_within_its_size_budget() {
    let over: Vec<String> = gangway_plugin_artifacts::all()
        .iter()
        .filter(|(_, bytes)| bytes.len() > BUDGET)
        .map(|(name, bytes)| format!("{name}: {} bytes", bytes.len()))
        .collect();
    assert!(!gangway_plugin_artifacts::all().is_empty());
    assert!(
        over.is_empty(),
        "built-in modules over {BUDGET} bytes: {}",
        over.join(", ")
    );
}
