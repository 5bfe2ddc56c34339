//! Write a policy, check it, run it natively, then run the same rule as a
//! sandboxed Wasm module.
//!
//! 1. A fairness policy written against the SDK in a few lines: the VC with
//!    the fewest GPUs in use goes first, FIFO within a VC.
//! 2. The conformance kit puts it through every rule of the contract on
//!    generated views and through scheduler scenarios (what a policy crate's
//!    `tests/conformance.rs` does in one line).
//! 3. It runs natively in a scheduler.
//! 4. A policy built for Wasm (`plugins/example-smallest-first`, compiled by
//!    `plugins/artifacts`) is loaded through the sandbox and decides the same
//!    views as its native twin, decision for decision.
//!
//! `cargo run -p gangway-embed --example write_and_load_policy`
//! (also run by `cargo test`).

use gangway_core::conformance::{self, Options};
use gangway_core::policy::{Native, PolicySet};
use gangway_core::wasm::{PolicyEngine, SandboxConfig};
use gangway_core::{JobId, JobSpec, Scheduler, Topology};
use gangway_plugin_sdk::Fairness;
use gangway_plugin_sdk::{
    Configure, FairnessDecision, FairnessPolicy, FairnessView, Ranked, no_options,
};
use gangway_policy_example_smallest_first::SmallestFirst;
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;

/// The least-served VC first (fewest GPUs held), then submit order.
#[derive(Clone, Copy, Debug, Default)]
struct LeastServedVcFirst;

impl FairnessPolicy for LeastServedVcFirst {
    fn order(&self, view: &FairnessView) -> FairnessDecision {
        let held = |vc| {
            view.vcs
                .iter()
                .find(|v| v.id == vc)
                .map_or(0, |v| v.held_gpus)
        };
        let mut jobs: Vec<_> = view.jobs.iter().collect();
        jobs.sort_by_key(|j| (held(j.vc), j.submitted_s, j.id));
        FairnessDecision {
            order: jobs
                .into_iter()
                .map(|j| Ranked {
                    job: j.id,
                    eligible: true,
                })
                .collect(),
        }
    }
}

impl Configure for LeastServedVcFirst {
    fn from_config(bytes: &[u8]) -> Result<Self, gangway_plugin_sdk::ConfigError> {
        no_options("least-served-vc-first", bytes)?;
        Ok(LeastServedVcFirst)
    }
}

fn run() -> Result<String, Box<dyn std::error::Error>> {
    let mut log = String::new();
    // 2. Every contract rule, on generated views and scenarios.
    let report = conformance::policy::<Fairness>(LeastServedVcFirst, &Options::quick())
        .map_err(|failure| failure.to_string())?;
    log.push_str(&format!(
        "conformance: {} views, {} scenarios, slowest call {} us\n",
        report.views, report.scenarios, report.slowest_us
    ));

    // 3. Natively in a scheduler.
    let policies = PolicySet::fallbacks().with::<Fairness>(Box::new(Native::new(
        "least-served-vc-first",
        LeastServedVcFirst::from_config(b"")?,
    )));
    let mut sched = Scheduler::with_policies(Topology::uniform(1, 2, 8)?, policies);
    let busy = sched.virtual_cluster("busy");
    let idle = sched.virtual_cluster("idle");
    sched.submit(JobSpec {
        id: JobId(0),
        vc: busy,
        user: 0,
        gpus: 8,
        submitted_s: 0,
    })?;
    sched.round(0)?;
    // Both VCs want the last 8 GPUs; "idle" holds nothing, so it goes first.
    sched.submit(JobSpec {
        id: JobId(1),
        vc: busy,
        user: 0,
        gpus: 8,
        submitted_s: 1,
    })?;
    sched.submit(JobSpec {
        id: JobId(2),
        vc: idle,
        user: 1,
        gpus: 8,
        submitted_s: 2,
    })?;
    let round = sched.round(3)?;
    let started: Vec<JobId> = round.starts.iter().map(|s| s.job).collect();
    log.push_str(&format!("native: started {started:?}\n"));

    // 4. A policy built as a Wasm component, in the sandbox.
    let engine = PolicyEngine::new(SandboxConfig::default())?;
    let bytes = gangway_plugin_artifacts::module("example-smallest-first")
        .ok_or("the example-smallest-first module was not built")?;
    let module = engine.load("example-smallest-first.wasm", bytes)?;
    log.push_str(&format!(
        "loaded {}: slots {:?}, contract {}, entered {:?}\n",
        module.name(),
        module.slots(),
        module.contract_version(),
        module.call_path()
    ));
    let report = conformance::module(&module, b"", &Options::quick())
        .map_err(|failure| failure.to_string())?;
    log.push_str(&format!("module conformance: {} reports\n", report.len()));
    let mut wasm = module.backend::<Fairness>(b"")?;
    let native = SmallestFirst::from_config(b"")?;
    let mut runner = TestRunner::deterministic();
    let views = <gangway_plugin_sdk::Fairness as gangway_plugin_sdk::testing::SlotViews>::views();
    for _ in 0..50 {
        let view = views
            .new_tree(&mut runner)
            .map_err(|r| r.to_string())?
            .current();
        if wasm.decide(&view)? != native.order(&view) {
            return Err(format!("Wasm and native differ on {view:?}").into());
        }
    }
    log.push_str("wasm = native on 50 generated views\n");
    Ok(log)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    print!("{}", run()?);
    Ok(())
}

#[test]
fn the_policy_conforms_and_wasm_matches_native() {
    let log = run().unwrap();
    assert!(log.contains("native: started [JobId(2)]"), "{log}");
    assert!(log.contains("wasm = native on 50 generated views"), "{log}");
}
