//! The Philly-scale backlog the Wasm round benches and the `wasm_ratio`
//! example measure: the official machine list's shape, ~97 % full of running
//! jobs, with pending jobs queued behind them, and the built-in policies as
//! one sandboxed module.

use gangway_core::policy::PolicySet;
use gangway_core::wasm::{Budget, CallPath, PolicyEngine, PolicyModule, SandboxConfig};
use gangway_core::{JobId, JobSpec, Scheduler};
use gangway_plugin_sdk::{Fairness, Gang, Locality, Retry};

use crate::{philly_official, size_of_draw};

/// Philly's job-size mix, deterministic.
fn size(i: u64) -> u32 {
    size_of_draw(
        i.wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407),
    )
}

/// A cluster ~97 % full of running jobs and 1,000 more pending, every one
/// in the view (no window), one warm-up round done: the sandbox's cost per
/// round at Philly scale.
pub fn philly_backlog_all_in_view(policies: PolicySet) -> Scheduler {
    philly_backlog(policies, 1_000, 0)
}

/// A cluster ~97 % full of running jobs and `pending` more, with view
/// window `window` (0: every job), one warm-up round done.
pub fn philly_backlog(policies: PolicySet, pending: u64, window: usize) -> Scheduler {
    let topo = philly_official().expect("topology");
    let target = topo.total_gpus() * 97 / 100;
    let mut s = Scheduler::with_policies(topo, policies);
    s.set_view_window(window);
    let vcs: Vec<_> = (0..8)
        .map(|i| s.virtual_cluster(&format!("vc{i}")))
        .collect();
    let mut id = 0u64;
    let mut asked = 0;
    while asked + size(id) <= target {
        asked += size(id);
        s.submit(JobSpec {
            id: JobId(id),
            vc: vcs[(id % 8) as usize],
            user: 0,
            gpus: size(id),
            submitted_s: 0,
        })
        .expect("submit");
        id += 1;
    }
    s.round(0).expect("round");
    for k in 0..pending {
        let i = id + k;
        s.submit(JobSpec {
            id: JobId(i),
            vc: vcs[(i % 8) as usize],
            user: 1,
            gpus: size(i),
            submitted_s: 1,
        })
        .expect("submit");
    }
    let warm = s.round(1_000).expect("round");
    assert!(
        warm.waiting.len() + warm.queued > 500,
        "the backlog must stay pending"
    );
    s
}

/// The `builtin` plugin loaded on an engine with `sandbox`.
pub fn fallbacks_module(sandbox: SandboxConfig) -> PolicyModule {
    let bytes = gangway_plugin_artifacts::module("fallbacks").expect("builtin plugin");
    PolicyEngine::new(sandbox)
        .expect("engine")
        .load("fallbacks", bytes)
        .expect("load")
}

/// The built-in policies with the fairness, locality, gang and retry slots
/// of the `builtin` module under `budget`, entered by `call_path`.
pub fn fallback_wasm_policies(budget: Budget, call_path: CallPath) -> PolicySet {
    let builtin = fallbacks_module(SandboxConfig {
        budget,
        call_path,
        ..SandboxConfig::default()
    });
    PolicySet::fallbacks()
        .with::<Fairness>(builtin.backend::<Fairness>(b"").expect("fairness"))
        .with::<Locality>(builtin.backend::<Locality>(b"").expect("locality"))
        .with::<Gang>(builtin.backend::<Gang>(b"").expect("gang"))
        .with::<Retry>(builtin.backend::<Retry>(b"").expect("retry"))
}
