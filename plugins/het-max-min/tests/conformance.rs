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
fn fairness_het_max_min_conforms() {
    let report =
        conformance::defaults::<Fairness, gangway_policy_het_max_min::HetMaxMin>(&options())
            .unwrap_or_else(|f| panic!("{f}"));
    assert!(report.views >= 256 && report.scenarios == 16, "{report:?}");
}

#[test]
fn reclaim_het_preempt_conforms() {
    let report =
        conformance::defaults::<Reclaim, gangway_policy_het_max_min::HetPreempt>(&options())
            .unwrap_or_else(|f| panic!("{f}"));
    assert!(report.views >= 256 && report.scenarios == 16, "{report:?}");
}
