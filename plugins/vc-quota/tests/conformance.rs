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
fn fairness_vcquota_conforms() {
    let report = conformance::defaults::<Fairness, gangway_policy_vc_quota::VcQuota>(&options())
        .unwrap_or_else(|f| panic!("{f}"));
    assert!(report.views >= 256 && report.scenarios == 16, "{report:?}");
}

/// With `when_can_borrow = "try-next-type"` it chooses types (contract
/// 2.2): the kit drives its typed calls and checks every choice.
#[test]
fn fairness_vcquota_trying_the_next_type_conforms() {
    let policy = <gangway_policy_vc_quota::VcQuota as Configure>::from_config(
        b"when_can_borrow = \"try-next-type\"",
    )
    .unwrap();
    let report =
        conformance::policy::<Fairness>(policy, &options()).unwrap_or_else(|f| panic!("{f}"));
    assert!(report.typed_calls >= report.views, "{report:?}");
}
