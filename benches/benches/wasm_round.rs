//! One scheduling round at Philly scale (552 servers, 2,490 GPUs, 1,000
//! pending jobs on a ~97 % full cluster), with the built-in default policies
//! running natively and as one sandboxed Wasm component (`builtin`: its
//! fairness, locality, gang and retry slots) under the default fuel budget (`wasm`, deterministic, what a
//! replay uses) and under an epoch deadline (`wasm_deadline`, what a live
//! host would use). The ratio to `native` is the cost of the sandbox per
//! round (target: within 1.2x).
//!
//! `round_philly_100000_pending` is the same round with 100,000 pending
//! jobs and the default view window, native and Wasm (target: at most
//! 5 ms with Wasm).
//!
//! A further group, `slot_call_philly_1000_pending`, takes one fairness call
//! of that round apart: the view's postcard encoding and decoding alone
//! (serde and the SDK's hand-written codec), the native policy, the Wasm call
//! under a fuel budget and under an epoch deadline, and a trivial Wasm policy
//! (transport alone).
//!
//! `cargo bench -p gangway-benches --bench wasm_round`
#![allow(missing_docs)] // criterion's macros generate undocumented functions

use criterion::{Criterion, criterion_group, criterion_main};
use gangway_core::policy::{Backend, PolicySet};
use gangway_core::wasm::{Budget, CallPath, PolicyEngine, SandboxConfig};
use gangway_core::{JobId, JobSpec, RackGrouping, Scheduler, Topology};
use gangway_plugin_sdk::builtin::FifoQuota;
use gangway_plugin_sdk::slots::{Fairness, Gang, Locality, Retry};

/// The Philly machine list's shape: 321 servers with 2 GPUs, 231 with 8.
fn philly() -> Topology {
    let mut text = String::from("machineId,number of GPUs\n");
    for m in 0..552 {
        text.push_str(&format!("m{m},{}\n", if m < 321 { 2 } else { 8 }));
    }
    Topology::from_machine_list_str("philly", &text, RackGrouping::default()).expect("topology")
}

/// Philly's job-size mix, deterministic.
fn size(i: u64) -> u32 {
    let x = i
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    match (x >> 33) % 1000 {
        0..=866 => 1,
        867..=889 => 2,
        890..=938 => 4,
        939..=989 => 8,
        990..=997 => 16,
        _ => 32,
    }
}

/// A cluster ~97 % full of running jobs and 1,000 more pending, every one
/// in the view, one warm-up round done.
fn backlog(policies: PolicySet) -> Scheduler {
    // Every pending job in the view (no window): the sandbox's cost per
    // round at Philly scale, as measured before the default window.
    backlog_of(policies, 1_000, 0)
}

/// A cluster ~97 % full of running jobs and `pending` more, with view
/// window `window` (0: every job), one warm-up round done.
fn backlog_of(policies: PolicySet, pending: u64, window: usize) -> Scheduler {
    let topo = philly();
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
fn builtin(sandbox: SandboxConfig) -> gangway_core::wasm::PolicyModule {
    let bytes = gangway_plugin_artifacts::module("builtin").expect("builtin plugin");
    PolicyEngine::new(sandbox)
        .expect("engine")
        .load("builtin", bytes)
        .expect("load")
}

/// The three slots of the `builtin` module under `budget`, entered by
/// `call_path`.
fn wasm_defaults(budget: Budget, call_path: CallPath) -> PolicySet {
    let builtin = builtin(SandboxConfig {
        budget,
        call_path,
        ..SandboxConfig::default()
    });
    PolicySet::builtin()
        .with::<Fairness>(builtin.backend::<Fairness>(b"").expect("fairness"))
        .with::<Locality>(builtin.backend::<Locality>(b"").expect("locality"))
        .with::<Gang>(builtin.backend::<Gang>(b"").expect("gang"))
        .with::<Retry>(builtin.backend::<Retry>(b"").expect("retry"))
}

fn rounds(c: &mut Criterion) {
    let mut group = c.benchmark_group("round_philly_1000_pending");
    let variants = [
        ("native", PolicySet::builtin()),
        (
            "wasm",
            wasm_defaults(Budget::Fuel(Budget::DEFAULT_FUEL), CallPath::Direct),
        ),
        (
            "wasm_component_runtime",
            wasm_defaults(Budget::Fuel(Budget::DEFAULT_FUEL), CallPath::Component),
        ),
        (
            "wasm_deadline",
            wasm_defaults(
                Budget::Deadline(std::time::Duration::from_millis(50)),
                CallPath::Direct,
            ),
        ),
    ];
    for (name, policies) in variants {
        bench_round(&mut group, name, backlog(policies));
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
        ("native", PolicySet::builtin()),
        (
            "wasm",
            wasm_defaults(Budget::Fuel(Budget::DEFAULT_FUEL), CallPath::Direct),
        ),
    ];
    for (name, policies) in variants {
        let sched = backlog_of(policies, 100_000, Scheduler::DEFAULT_VIEW_WINDOW);
        bench_round(&mut group, name, sched);
    }
    group.finish();
}

/// The fairness view of the backlog round, as the scheduler builds it.
fn fairness_view() -> gangway_plugin_sdk::RoundView {
    struct Capture(std::sync::Arc<std::sync::Mutex<Option<gangway_plugin_sdk::RoundView>>>);
    impl Backend<Fairness> for Capture {
        fn name(&self) -> &str {
            "capture"
        }
        fn manifest(&self) -> gangway_plugin_sdk::Manifest {
            gangway_plugin_sdk::Policy::<Fairness>::manifest(&FifoQuota)
        }
        fn decide(
            &mut self,
            view: &gangway_plugin_sdk::RoundView,
        ) -> Result<gangway_plugin_sdk::FairnessDecision, gangway_core::policy::PolicyError>
        {
            if let Ok(mut v) = self.0.lock() {
                *v = Some(view.clone());
            }
            Ok(gangway_plugin_sdk::FairnessPolicy::order(&FifoQuota, view))
        }
    }
    let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
    let mut sched = backlog(PolicySet::builtin());
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
            gangway_plugin_sdk::wire::decode::<gangway_plugin_sdk::RoundView>(&encoded)
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
        let mut backend = builtin(SandboxConfig {
            budget,
            ..SandboxConfig::default()
        })
        .backend::<Fairness>(b"")
        .expect("fairness");
        group.bench_function(name, |b| b.iter(|| backend.decide(&view).expect("call")));
    }
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
    let mut gang = builtin(SandboxConfig::default())
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
        let mut gang = builtin(SandboxConfig {
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
