//! The conformance kit's checks (every contract rule on generated views, and
//! scheduler scenarios with liveness) on this crate's policies at their defaults.

use gangway_core::conformance::{self, Options};
use gangway_plugin_sdk::*;

fn options() -> Options {
    Options {
        liveness: true,
        ..Options::default()
    }
}

#[test]
fn fairness_fifoquota_conforms() {
    let report = conformance::defaults::<Fairness, gangway_policy_fallbacks::FifoQuota>(&options())
        .unwrap_or_else(|f| panic!("{f}"));
    assert!(report.views >= 256 && report.scenarios == 16, "{report:?}");
}

#[test]
fn locality_strict_conforms() {
    let report = conformance::defaults::<Locality, gangway_policy_fallbacks::Strict>(&options())
        .unwrap_or_else(|f| panic!("{f}"));
    assert!(report.views >= 256 && report.scenarios == 16, "{report:?}");
}

#[test]
fn gang_backfill_conforms() {
    let report = conformance::defaults::<Gang, gangway_policy_fallbacks::Backfill>(&options())
        .unwrap_or_else(|f| panic!("{f}"));
    assert!(report.views >= 256 && report.scenarios == 16, "{report:?}");
}

#[test]
fn retry_fixed_conforms() {
    let report = conformance::defaults::<Retry, gangway_policy_fallbacks::Fixed>(&options())
        .unwrap_or_else(|f| panic!("{f}"));
    assert!(report.views >= 256 && report.scenarios == 16, "{report:?}");
}
