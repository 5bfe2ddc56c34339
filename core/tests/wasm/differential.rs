//! Native vs Wasm: for random views of every slot, every built-in plugin
//! gives the same decisions natively and as a sandboxed component, on both
//! call paths, also when views that change from round to round travel as
//! changes. And a whole scheduler run with the built-in policies as Wasm
//! matches the native run round by round.

use std::sync::OnceLock;

use gangway_core::Slot;
use gangway_core::policy::{BoxedBackend, Native, PolicySet};
use gangway_core::wasm::{CallPath, PolicyEngine, PolicyModule, SandboxConfig};
use gangway_plugin_sdk::SlotContract;
use gangway_plugin_sdk::testing::SlotViews;
use gangway_plugin_sdk::{Configure, FairnessView, JobId, Policy, QueueView, SpreadLimit};
use gangway_plugin_sdk::{Defragment, Fairness, Gang, Locality, Reclaim, Retry};
use proptest::prelude::*;

use crate::support::{accounted, run, scheduler};

/// Every plugin, loaded once per call path.
pub(crate) fn modules(path: CallPath) -> &'static [PolicyModule] {
    static DIRECT: OnceLock<Vec<PolicyModule>> = OnceLock::new();
    static COMPONENT: OnceLock<Vec<PolicyModule>> = OnceLock::new();
    let cell = match path {
        CallPath::Direct => &DIRECT,
        CallPath::Component => &COMPONENT,
    };
    cell.get_or_init(|| {
        let engine = PolicyEngine::new(SandboxConfig {
            call_path: path,
            ..SandboxConfig::default()
        })
        .unwrap();
        gangway_plugin_artifacts::all()
            .iter()
            .map(|(name, bytes)| engine.load(name, bytes).unwrap())
            .collect()
    })
}

fn native<S: SlotContract, P: Policy<S> + Configure + Send + 'static>() -> BoxedBackend<S> {
    Box::new(Native::new("native", P::from_config(b"").unwrap()))
}

/// The native twins of a module's slots (default configuration).
#[derive(Default)]
struct Twins {
    fairness: Option<BoxedBackend<Fairness>>,
    locality: Option<BoxedBackend<Locality>>,
    gang: Option<BoxedBackend<Gang>>,
    reclaim: Option<BoxedBackend<Reclaim>>,
    retry: Option<BoxedBackend<Retry>>,
    defragment: Option<BoxedBackend<Defragment>>,
}

impl Twins {
    fn slots(&self) -> Vec<Slot> {
        let mut s = Vec::new();
        if self.retry.is_some() {
            s.push(Slot::Retry);
        }
        if self.fairness.is_some() {
            s.push(Slot::Fairness);
        }
        if self.locality.is_some() {
            s.push(Slot::Locality);
        }
        if self.gang.is_some() {
            s.push(Slot::Gang);
        }
        if self.reclaim.is_some() {
            s.push(Slot::Reclaim);
        }
        if self.defragment.is_some() {
            s.push(Slot::Defragment);
        }
        s
    }
}

/// The native twins of `module`; `None` for a module this test does not know
/// (which fails [`every_plugin_has_a_native_twin_with_the_same_slots`]).
fn twins(module: &str) -> Option<Twins> {
    let t = Twins::default();
    Some(match module {
        "fallbacks" => Twins {
            fairness: Some(native::<Fairness, gangway_plugin_sdk::FifoQuota>()),
            locality: Some(native::<Locality, gangway_plugin_sdk::Strict>()),
            gang: Some(native::<Gang, gangway_plugin_sdk::Backfill>()),
            retry: Some(native::<Retry, gangway_plugin_sdk::Fixed>()),
            ..t
        },
        "fifo" => Twins {
            fairness: Some(native::<Fairness, gangway_policy_fifo::Fifo>()),
            ..t
        },
        "vc-quota" => Twins {
            fairness: Some(native::<Fairness, gangway_policy_vc_quota::VcQuota>()),
            ..t
        },
        "max-min" => Twins {
            fairness: Some(native::<Fairness, gangway_policy_max_min::MaxMin>()),
            ..t
        },
        "las" => Twins {
            fairness: Some(native::<Fairness, gangway_policy_las::Las>()),
            reclaim: Some(native::<Reclaim, gangway_policy_las::LasPreempt>()),
            ..t
        },
        "het-max-min" => Twins {
            fairness: Some(native::<Fairness, gangway_policy_het_max_min::HetMaxMin>()),
            reclaim: Some(native::<Reclaim, gangway_policy_het_max_min::HetPreempt>()),
            ..t
        },
        "example-smallest-first" => Twins {
            fairness: Some(native::<
                Fairness,
                gangway_policy_example_smallest_first::SmallestFirst,
            >()),
            ..t
        },
        "delay" => Twins {
            locality: Some(native::<Locality, gangway_policy_delay::Delay>()),
            ..t
        },
        "greedy" => Twins {
            locality: Some(native::<Locality, gangway_policy_greedy::Greedy>()),
            ..t
        },
        "fifo-block" => Twins {
            gang: Some(native::<Gang, gangway_policy_fifo_block::FifoBlock>()),
            ..t
        },
        "reserve" => Twins {
            gang: Some(native::<Gang, gangway_policy_reserve::Reserve>()),
            ..t
        },
        "quota-reclaim" => Twins {
            reclaim: Some(native::<Reclaim, gangway_policy_quota_reclaim::QuotaReclaim>()),
            ..t
        },
        "fixed" => Twins {
            retry: Some(native::<Retry, gangway_policy_fixed::FixedRetry>()),
            ..t
        },
        "failure-aware" => Twins {
            retry: Some(native::<Retry, gangway_policy_failure_aware::FailureAware>()),
            ..t
        },
        "gandiva" => Twins {
            defragment: Some(native::<Defragment, gangway_policy_gandiva::Gandiva>()),
            ..t
        },
        _ => return None,
    })
}

/// Every built-in plugin is of the standard shape, so an engine that allows
/// it enters each directly; one that does not goes through the component
/// runtime.
#[test]
fn every_plugin_takes_the_call_path_asked_for() {
    for path in crate::guests::PATHS {
        for m in modules(path) {
            assert_eq!(m.call_path(), path, "{}", m.name());
        }
    }
}

#[test]
fn every_plugin_has_a_native_twin_with_the_same_slots() {
    let names: Vec<&str> = modules(CallPath::Direct).iter().map(|m| m.name()).collect();
    for required in [
        "fallbacks",
        "fifo",
        "las",
        "quota-reclaim",
        "failure-aware",
        "gandiva",
    ] {
        assert!(names.contains(&required), "{names:?}");
    }
    for m in modules(CallPath::Direct) {
        let twins = twins(m.name()).unwrap_or_else(|| {
            panic!(
                "plugin {} has no native twin in core/tests/wasm/differential.rs",
                m.name()
            )
        });
        assert_eq!(m.slots(), twins.slots(), "{}", m.name());
    }
}

/// Asks the Wasm and the native backend of slot `S` about `view`.
fn alike<S: SlotContract>(
    name: &str,
    wasm: &PolicyModule,
    native: &mut Option<BoxedBackend<S>>,
    view: &S::View,
) -> Result<(), TestCaseError> {
    let Some(native) = native else {
        return Ok(());
    };
    let mut sandboxed = wasm.backend::<S>(b"").unwrap();
    prop_assert_eq!(
        sandboxed.manifest(),
        native.manifest(),
        "{} {}",
        name,
        S::SLOT
    );
    let got = sandboxed.decide(view).unwrap();
    let want = native.decide(view).unwrap();
    prop_assert_eq!(got, want, "{} {}", name, S::SLOT);
    Ok(())
}

fn every_module(
    mut each: impl FnMut(&str, &PolicyModule, &mut Twins) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    for path in crate::guests::PATHS {
        for m in modules(path) {
            let mut t = twins(m.name()).unwrap();
            each(&format!("{} ({path:?})", m.name()), m, &mut t)?;
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn fairness_native_and_wasm_decide_alike(view in Fairness::views()) {
        every_module(|n, m, t| alike(n, m, &mut t.fairness, &view))?;
    }

    #[test]
    fn locality_and_gang_native_and_wasm_decide_alike(
        locality in Locality::views(),
        gang in Gang::views(),
    ) {
        every_module(|n, m, t| {
            alike(n, m, &mut t.locality, &locality)?;
            alike(n, m, &mut t.gang, &gang)
        })?;
    }

    #[test]
    fn reclaim_retry_defragment_native_and_wasm_decide_alike(
        reclaim in Reclaim::views(),
        retry in Retry::views(),
        defragment in Defragment::views(),
    ) {
        every_module(|n, m, t| {
            alike(n, m, &mut t.reclaim, &reclaim)?;
            alike(n, m, &mut t.retry, &retry)?;
            alike(n, m, &mut t.defragment, &defragment)
        })?;
    }
}

/// Asks one Wasm backend of slot `S`, kept across the steps, and the native
/// one about each of `views` in turn: after the first, the Wasm backend
/// sends each view as a change from the last.
fn alike_in_turn<S: SlotContract>(
    name: &str,
    wasm: &PolicyModule,
    native: &mut Option<BoxedBackend<S>>,
    views: &[S::View],
) -> Result<(), TestCaseError> {
    let Some(native) = native else {
        return Ok(());
    };
    let mut sandboxed = wasm.backend::<S>(b"").unwrap();
    for (step, view) in views.iter().enumerate() {
        let got = sandboxed.decide(view).unwrap();
        let want = native.decide(view).unwrap();
        prop_assert_eq!(got, want, "{} {} step {}", name, S::SLOT, step);
    }
    Ok(())
}

/// `view`'s jobs over `steps` rounds of `dt` seconds each: each round some
/// jobs leave (started), one changes, and one arrives at the back.
fn in_turn(view: &FairnessView, steps: &[(u64, u64)]) -> Vec<FairnessView> {
    let mut views = vec![view.clone()];
    for (k, &(dt, seed)) in steps.iter().enumerate() {
        let Some(last) = views.last() else { break };
        let mut next = last.clone();
        next.now_s = next.now_s.wrapping_add(dt);
        next.jobs.retain(|j| (j.id.0 ^ seed) % 7 != 0);
        for j in &mut next.jobs {
            j.waiting_s = j.waiting_s.wrapping_add(dt);
        }
        if let Some(j) = next.jobs.get_mut(seed as usize % 5) {
            j.attempts += 1;
            j.waiting_s = 0;
        }
        if let Some(mut j) = last.jobs.first().copied() {
            j.id = JobId(1_000_000 + k as u64);
            j.waiting_s = 0;
            next.jobs.push(j);
        }
        views.push(next);
    }
    views
}

/// The same views as each slot that takes a queue view sees them.
fn queues(views: &[FairnessView], with_limits: bool) -> Vec<QueueView> {
    views
        .iter()
        .map(|v| QueueView {
            now_s: v.now_s,
            cluster: v.cluster.clone(),
            spread: if with_limits {
                v.jobs
                    .iter()
                    .map(|j| SpreadLimit::new(j.min_level, j.min_servers))
                    .collect()
            } else {
                Vec::new()
            },
            jobs: v.jobs.clone(),
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Views that change from round to round travel as changes, and every
    /// built-in still decides as its native twin, step by step.
    #[test]
    fn changing_views_decide_alike_round_after_round(
        view in Fairness::views(),
        steps in prop::collection::vec((0u64..5_000, any::<u64>()), 1..6),
    ) {
        let views = in_turn(&view, &steps);
        let (locality, gang) = (queues(&views, false), queues(&views, true));
        every_module(|n, m, t| {
            alike_in_turn(n, m, &mut t.fairness, &views)?;
            alike_in_turn(n, m, &mut t.locality, &locality)?;
            alike_in_turn(n, m, &mut t.gang, &gang)
        })?;
    }
}

/// The built-in policies as one Wasm module drive a scheduler exactly as the
/// native built-ins do, round by round.
#[test]
fn a_scheduler_on_wasm_builtins_matches_the_native_one() {
    for path in crate::guests::PATHS {
        let builtin = modules(path)
            .iter()
            .find(|m| m.name() == "fallbacks")
            .unwrap();
        let wasm = PolicySet::fallbacks()
            .with::<Fairness>(builtin.backend::<Fairness>(b"").unwrap())
            .with::<Locality>(builtin.backend::<Locality>(b"").unwrap())
            .with::<Gang>(builtin.backend::<Gang>(b"").unwrap())
            .with::<Retry>(builtin.backend::<Retry>(b"").unwrap());
        let mut sandboxed = scheduler(120);
        *sandboxed.policies_mut() = wasm;
        let mut native = scheduler(120);
        let a = run(&mut sandboxed, 50, 12);
        let b = run(&mut native, 50, 12);
        assert!(
            a.iter().all(|r| r.policy_errors.is_empty()),
            "{:?}",
            a[0].policy_errors
        );
        assert_eq!(a, b);
        assert!(a.iter().map(|r| r.starts.len()).sum::<usize>() > 100);
        accounted(&sandboxed, 121);
    }
}
