//! One scheduling round at Philly scale (552 servers, 2,490 GPUs, 1,000
//! pending jobs on a ~97 % full cluster), with the built-in default policies
//! running natively and as one sandboxed Wasm component (`builtin`: its
//! fairness, locality, gang and retry slots) under the default fuel budget (`wasm`, deterministic, what a
//! replay uses) and under an epoch deadline (`wasm_deadline`, what a live
//! host would use). The ratio to `native` is the cost of the sandbox per
//! round (target: within 1.2x).
//!
//! On a shared machine whose speed drifts between runs, read the ratio from
//! the `wasm_ratio` example instead, which alternates the two.
//!
//! `round_philly_100000_pending` is the same round with 100,000 pending
//! jobs and the default view window, native and Wasm (target: at most
//! 5 ms with Wasm).
//!
//! A further group, `slot_call_philly_1000_pending`, takes one fairness call
//! of that round apart: the view's postcard encoding and decoding alone
//! (serde and the SDK's derived codec), the native policy, the Wasm call
//! under a fuel budget and under an epoch deadline, the same call told by
//! the core's change log that nothing changed, and a trivial Wasm policy
//! (transport alone).
//!
//! `cargo bench -p gangway-benches --bench wasm_round`
#![allow(missing_docs)] // criterion's macros generate undocumented functions

use criterion::{Criterion, criterion_group, criterion_main};
use gangway_benches::{
    fallback_wasm_policies, fallbacks_module, philly_backlog, philly_backlog_all_in_view,
};
use gangway_core::Scheduler;
use gangway_core::policy::{Backend, PolicySet};
use gangway_core::wasm::{Budget, CallPath, SandboxConfig};
use gangway_plugin_sdk::FifoQuota;
use gangway_plugin_sdk::{Fairness, Gang};

fn rounds(c: &mut Criterion) {
    let mut group = c.benchmark_group("round_philly_1000_pending");
    let variants = [
        ("native", PolicySet::fallbacks()),
        (
            "wasm",
            fallback_wasm_policies(Budget::Fuel(Budget::DEFAULT_FUEL), CallPath::Direct),
        ),
        (
            "wasm_component_runtime",
            fallback_wasm_policies(Budget::Fuel(Budget::DEFAULT_FUEL), CallPath::Component),
        ),
        (
            "wasm_deadline",
            fallback_wasm_policies(
                Budget::Deadline(std::time::Duration::from_millis(50)),
                CallPath::Direct,
            ),
        ),
    ];
    for (name, policies) in variants {
        bench_round(&mut group, name, philly_backlog_all_in_view(policies));
    }
    group.finish();
}

/// Benchmarks one round of `sched` after another, each a second later.
fn bench_round(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    mut sched: Scheduler,
) {
    let mut now = 1_000;
    group.bench_function(name, |b| {
        b.iter(|| {
            now += 1;
            let r = sched.round(now).expect("round");
            assert!(r.policy_errors.is_empty());
            r
        })
    });
}

/// One round with 100,000 pending jobs and the default view window, native
/// and Wasm (target: at most 5 ms with Wasm).
fn rounds_100k(c: &mut Criterion) {
    let mut group = c.benchmark_group("round_philly_100000_pending");
    let variants = [
        ("native", PolicySet::fallbacks()),
        (
            "wasm",
            fallback_wasm_policies(Budget::Fuel(Budget::DEFAULT_FUEL), CallPath::Direct),
        ),
    ];
    for (name, policies) in variants {
        let sched = philly_backlog(policies, 100_000, Scheduler::DEFAULT_VIEW_WINDOW);
        bench_round(&mut group, name, sched);
    }
    group.finish();
}

/// The fairness view of the backlog round, as the scheduler builds it.
fn fairness_view() -> gangway_plugin_sdk::FairnessView {
    struct Capture(std::sync::Arc<std::sync::Mutex<Option<gangway_plugin_sdk::FairnessView>>>);
    impl Backend<Fairness> for Capture {
        fn name(&self) -> &str {
            "capture"
        }
        fn manifest(&self) -> gangway_plugin_sdk::Manifest {
            gangway_plugin_sdk::Policy::<Fairness>::manifest(&FifoQuota)
        }
        fn decide(
            &mut self,
            view: &gangway_plugin_sdk::FairnessView,
        ) -> Result<gangway_plugin_sdk::FairnessDecision, gangway_core::policy::PolicyError>
        {
            if let Ok(mut v) = self.0.lock() {
                *v = Some(view.clone());
            }
            Ok(gangway_plugin_sdk::FairnessPolicy::order(&FifoQuota, view))
        }
    }
    let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
    let mut sched = philly_backlog_all_in_view(PolicySet::fallbacks());
    sched.swap::<Fairness>(Box::new(Capture(seen.clone())));
    sched.round(2_000).expect("round");
    seen.lock().ok().and_then(|mut v| v.take()).expect("view")
}

fn calls(c: &mut Criterion) {
    let view = fairness_view();
    let mut group = c.benchmark_group("slot_call_philly_1000_pending");
    let mut buf = Vec::new();
    group.bench_function("encode_view_serde", |b| {
        b.iter(|| {
            gangway_plugin_sdk::wire::encode_into(&view, &mut buf);
            buf.len()
        })
    });
    group.bench_function("encode_view_codec", |b| {
        b.iter(|| gangway_plugin_sdk::wire::encode_view::<Fairness>(&view).len())
    });
    let encoded = gangway_plugin_sdk::wire::encode(&view);
    group.bench_function("decode_view_serde", |b| {
        b.iter(|| {
            gangway_plugin_sdk::wire::decode::<gangway_plugin_sdk::FairnessView>(&encoded)
                .expect("decode")
        })
    });
    group.bench_function("decode_view_codec", |b| {
        b.iter(|| gangway_plugin_sdk::wire::decode_view::<Fairness>(&encoded).expect("decode"))
    });
    group.bench_function("native", |b| {
        b.iter(|| gangway_plugin_sdk::FairnessPolicy::order(&FifoQuota, &view))
    });
    for (name, budget) in [
        ("wasm_fuel", Budget::Fuel(Budget::DEFAULT_FUEL)),
        (
            "wasm_deadline",
            Budget::Deadline(std::time::Duration::from_millis(50)),
        ),
    ] {
        let mut backend = fallbacks_module(SandboxConfig {
            budget,
            ..SandboxConfig::default()
        })
        .backend::<Fairness>(b"")
        .expect("fairness");
        group.bench_function(name, |b| b.iter(|| backend.decide(&view).expect("call")));
    }
    // The same call as a round makes it, the core's change log saying that
    // nothing changed since the last view: kept entries are found by id.
    let log = Scheduler::new(gangway_core::Topology::uniform(1, 1, 1).expect("topology"));
    let changes = log.view_changes();
    let mut backend = fallbacks_module(SandboxConfig::default())
        .backend::<Fairness>(b"")
        .expect("fairness");
    group.bench_function("wasm_fuel_known_changes", |b| {
        b.iter(|| backend.decide_with_changes(&view, &changes).expect("call"))
    });
    // Transport alone: the trivial backfill gang policy on the same 1,000 jobs.
    let queue = gangway_plugin_sdk::QueueView {
        now_s: view.now_s,
        cluster: view.cluster.clone(),
        spread: view
            .jobs
            .iter()
            .map(|j| gangway_plugin_sdk::SpreadLimit::new(j.min_level, j.min_servers))
            .collect(),
        jobs: view.jobs.clone(),
    };
    let mut gang = fallbacks_module(SandboxConfig::default())
        .backend::<Gang>(b"")
        .expect("gang");
    group.bench_function("wasm_fuel_trivial_gang", |b| {
        b.iter(|| gang.decide(&queue).expect("call"))
    });
    group.finish();

    // The crossing itself: the trivial gang policy on a view with no jobs,
    // entered directly and through the component runtime.
    let mut group = c.benchmark_group("empty_slot_call");
    let empty = gangway_plugin_sdk::QueueView {
        now_s: view.now_s,
        cluster: view.cluster.clone(),
        spread: Vec::new(),
        jobs: Vec::new(),
    };
    for (name, call_path) in [
        ("direct", CallPath::Direct),
        ("component_runtime", CallPath::Component),
    ] {
        let mut gang = fallbacks_module(SandboxConfig {
            call_path,
            ..SandboxConfig::default()
        })
        .backend::<Gang>(b"")
        .expect("gang");
        group.bench_function(name, |b| b.iter(|| gang.decide(&empty).expect("call")));
    }
    group.finish();
}

criterion_group!(benches, rounds, rounds_100k, calls);
criterion_main!(benches);
