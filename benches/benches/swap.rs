//! Hot-swap latency of a policy module between two rounds:
//!
//! * `cached`: a module the engine has compiled before (same bytes): hash
//!   and cache lookup, a new instance with `init`, the exchange in the
//!   scheduler. Target: well under 1 ms.
//! * `new_module`: bytes never seen before (a fresh custom section makes
//!   each iteration's hash new): validation, compilation, the warm-up call
//!   per slot, then the same as `cached`.
//! * `instance_only`: just the new instance with `init`, for reference.
//!
//! `cargo bench -p gangway-benches --bench swap`
#![allow(missing_docs)] // criterion's macros generate undocumented functions

use criterion::{Criterion, criterion_group, criterion_main};
use gangway_core::wasm::{PolicyEngine, SandboxConfig};
use gangway_core::{Scheduler, Topology};
use gangway_plugin_sdk::Fairness;

/// `bytes` with a custom section appended (valid in a component), so the
/// module hash differs for every `n`.
fn renamed(bytes: &[u8], n: u64) -> Vec<u8> {
    let name = b"gangway-bench";
    let payload = n.to_le_bytes();
    let mut out = bytes.to_vec();
    out.push(0); // custom section id
    out.push((1 + name.len() + payload.len()) as u8); // size (< 128)
    out.push(name.len() as u8);
    out.extend_from_slice(name);
    out.extend_from_slice(&payload);
    out
}

fn swaps(c: &mut Criterion) {
    let engine = PolicyEngine::new(SandboxConfig::default()).expect("engine");
    let fifo = gangway_plugin_artifacts::module("fifo").expect("fifo plugin");
    let module = engine.load("fifo", fifo).expect("load");
    let mut sched = Scheduler::new(Topology::uniform(4, 8, 8).expect("topology"));

    let mut group = c.benchmark_group("hot_swap");
    group.bench_function("cached", |b| {
        b.iter(|| {
            let m = engine.load("fifo", fifo).expect("load");
            sched.swap::<Fairness>(m.backend::<Fairness>(b"").expect("instance"))
        })
    });
    group.bench_function("instance_only", |b| {
        b.iter(|| module.backend::<Fairness>(b"").expect("instance"))
    });
    group.sample_size(10);
    let mut n = 0u64;
    group.bench_function("new_module", |b| {
        b.iter(|| {
            n += 1;
            let m = engine.load("fifo-new", &renamed(fifo, n)).expect("load");
            sched.swap::<Fairness>(m.backend::<Fairness>(b"").expect("instance"))
        })
    });
    group.finish();
}

criterion_group!(benches, swaps);
criterion_main!(benches);
