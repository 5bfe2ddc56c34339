//! Every cost a module causes is charged and bounded: what it logs (per
//! call and per backend, the rest dropped and counted), the text it refuses
//! with (charged before the host reads it), its `init` (under the work
//! budget), the host's twin checks (charged to the run's fuel, and drawn
//! at random so a twin cannot count its way around them), and a per-call
//! charge capped so a module burning each call's fuel cannot stay within
//! its work budget.

use gangway_core::policy::PolicyErrorKind;
use gangway_core::wasm::{Budget, PolicyEngine, SandboxConfig};
use gangway_plugin_sdk::{
    Fairness, FairnessDecision, FairnessView, JobId, Level, PendingJob, Reclaim, ReclaimView,
    RunningJob, ServerId, VcId, VcUsage,
};

use crate::guests;
use crate::support::{past_trigger, scheduler};

fn engine(config: SandboxConfig) -> PolicyEngine {
    PolicyEngine::new(SandboxConfig {
        module_cache: None,
        ..config
    })
    .unwrap()
}

/// A fairness view of `jobs` one-GPU jobs of one VC.
fn view_with_jobs(jobs: u64) -> FairnessView {
    FairnessView {
        now_s: 1_000,
        cluster: scheduler(0).state().summary(),
        vcs: vec![VcUsage {
            id: VcId(0),
            weight: 1,
            pending_jobs: u32::try_from(jobs).unwrap(),
            pending_gpus: u32::try_from(jobs).unwrap(),
            ..VcUsage::default()
        }],
        jobs: (0..jobs)
            .map(|i| PendingJob {
                id: JobId(i + 1),
                vc: VcId(0),
                user: 0,
                gpus: 1,
                submitted_s: i,
                waiting_s: 1_000 - i,
                attempts: 0,
                attained_gpu_s: 0,
                min_level: Level(2),
                min_servers: 1,
            })
            .collect(),
    }
}

/// Whether `d` makes no job eligible (the answer a diverging twin gives).
fn none_eligible(d: &FairnessDecision) -> bool {
    !d.order.is_empty() && d.order.iter().all(|r| !r.eligible)
}

#[test]
fn a_module_logging_16_kib_per_call_keeps_a_bounded_log() {
    let engine = engine(SandboxConfig::default());
    let module = engine
        .load("chatty.wasm", &guests::chatty_fairness())
        .unwrap();
    let mut backend = module.backend::<Fairness>(b"").unwrap();
    let before = engine.log_counts();
    for _ in 0..500 {
        backend.decide(&past_trigger()).unwrap();
    }
    let logged = engine.log_counts().since(&before);
    // 16 messages of 1 KiB a call: 4 KiB kept a call, 64 KiB in all.
    assert_eq!(logged.kept + logged.dropped, 500 * 16);
    assert_eq!(logged.kept, 64, "{logged:?}");
    assert_eq!(logged.kept_bytes, 64 << 10, "{logged:?}");
    assert_eq!(logged.dropped_bytes, (500 * 16 - 64) * 1024, "{logged:?}");
}

#[test]
fn a_module_refusing_with_60_mib_of_text_is_charged_for_it() {
    let mib = 60u64 << 20;
    for path in guests::PATHS {
        let config = SandboxConfig {
            call_path: path,
            work_budget: None,
            round_budget: None,
            ..SandboxConfig::default()
        };
        let module = engine(config.clone())
            .load("refuse.wasm", &guests::huge_nul_refusal(60))
            .unwrap();
        let mut backend = module.backend::<Fairness>(b"").unwrap();
        let before = module.fuel_used();
        let e = backend.decide(&past_trigger()).unwrap_err();
        assert!(
            matches!(e.kind, PolicyErrorKind::Refused(_)),
            "{path:?}: {e}"
        );
        let charged = module.fuel_used() - before;
        assert!(charged >= mib, "{path:?}: {charged} units charged");
        // With less fuel than the text has bytes, the call runs out of
        // fuel instead: the host does not read it.
        let short = engine(SandboxConfig {
            budget: Budget::Fuel(50_000_000),
            ..config
        })
        .load("refuse.wasm", &guests::huge_nul_refusal(60))
        .unwrap();
        let e = short
            .backend::<Fairness>(b"")
            .unwrap()
            .decide(&past_trigger())
            .unwrap_err();
        assert!(
            matches!(e.kind, PolicyErrorKind::OutOfFuel(_)),
            "{path:?}: {e}"
        );
    }
}

#[test]
fn a_module_burning_in_init_meets_its_work_budget() {
    let burner = guests::init_burner(150_000_000);
    let refused = engine(SandboxConfig::default())
        .load("init.wasm", &burner)
        .unwrap_err();
    assert!(refused.to_string().contains("work budget"), "{refused}");
    // Without a work budget only the per-call fuel holds `init`.
    let module = engine(SandboxConfig {
        work_budget: None,
        ..SandboxConfig::default()
    })
    .load("init.wasm", &burner)
    .unwrap();
    assert!(module.fuel_used() >= 150_000_000);
}

/// `fuel_per_backend` (replay's `--policy-fuel`) bounds everything a
/// backend spends: its calls, its instances' `init`, and the host's twin
/// checks (here on every call), to the unit.
#[test]
fn the_fuel_for_a_run_bounds_everything_checks_included() {
    let limit = 3_000_000;
    let module = engine(SandboxConfig {
        fuel_per_backend: Some(limit),
        work_budget: None,
        round_budget: None,
        twin_check_every: 1,
        ..SandboxConfig::default()
    })
    .load("fifo", gangway_plugin_artifacts::module("fifo").unwrap())
    .unwrap();
    let before = module.fuel_used();
    let mut backend = module.backend::<Fairness>(b"").unwrap();
    let view = view_with_jobs(400);
    let mut answered = 0;
    let error = loop {
        match backend.decide(&view) {
            Ok(_) => answered += 1,
            Err(e) => break e,
        }
    };
    assert!(answered > 2, "{answered} calls answered");
    assert!(
        matches!(error.kind, PolicyErrorKind::RunBudget(l) if l == limit),
        "{error}"
    );
    let spent = module.fuel_used() - before;
    assert!(spent <= limit, "{spent} units spent, {limit} allowed");
    assert!(spent > limit * 9 / 10, "{spent} units spent");
}

/// A twin that counts its calls and, after 1,500, answers otherwise on
/// every call but the 1st and every 64th (the calls a host checking those
/// would check) is declined: which calls are checked is drawn from the
/// seed, so it cannot tell. The same seed declines it at the same call.
#[test]
fn a_twin_counting_its_calls_is_declined() {
    let declined_at = |seed: u64| {
        let module = engine(SandboxConfig {
            seed,
            ..guests::sandbox()
        })
        .load("counting.wasm", &guests::counting_twin(1_500))
        .unwrap();
        let mut backend = module.backend::<Fairness>(b"").unwrap();
        let view = view_with_jobs(10);
        let mut divergent = Vec::new();
        for call in 0..3_000 {
            let d = backend.decide(&view).unwrap();
            if none_eligible(&d) {
                divergent.push(call);
            }
        }
        // Every divergent answer came before the twins were declined.
        let last = *divergent.last().expect("the twin diverged");
        assert!(divergent.iter().all(|c| *c >= 1_500), "{divergent:?}");
        assert!(last < 1_500 + 64 * 8, "used until call {last}");
        last
    };
    let at = declined_at(7);
    assert_eq!(declined_at(7), at, "the same seed, the same call");
    let others: Vec<u64> = (8..12).map(declined_at).collect();
    assert!(others.iter().any(|o| *o != at), "{at} {others:?}");
}

/// A reclaim view of 1,000 running jobs and one waiting.
fn large_reclaim_view() -> ReclaimView {
    let mut view = ReclaimView {
        vcs: past_trigger().vcs,
        cluster: scheduler(0).state().summary(),
        ..ReclaimView::default()
    };
    view.running = (0..1_000)
        .map(|i| RunningJob {
            id: JobId(i + 1),
            vc: VcId(0),
            user: 0,
            gpus: 1,
            submitted_s: 0,
            started_s: 1,
            attempts: 1,
            attained_gpu_s: 10,
            parts: vec![(ServerId(0), 1)],
        })
        .collect();
    view
}

/// A reclaim module burning just under each call's fuel on a view of
/// 1,000 running jobs stayed within its work budget (20 times 20,000
/// units a job passes the per-call fuel); a call's charge is now capped at
/// a fortieth of the per-call fuel, so it fails its first slow calls.
#[test]
fn a_reclaim_module_burning_each_calls_fuel_on_large_views_meets_its_work_budget() {
    let module = engine(SandboxConfig::default())
        .load("slow.wasm", &guests::slow_reclaim(0))
        .unwrap();
    let mut backend = module.backend::<Reclaim>(b"").unwrap();
    let view = large_reclaim_view();
    let errors: Vec<PolicyErrorKind> = (0..4)
        .filter_map(|_| backend.decide(&view).err().map(|e| e.kind))
        .collect();
    assert!(errors.len() >= 3, "{errors:?}");
    assert!(
        errors.iter().all(|k| matches!(
            k,
            PolicyErrorKind::WorkBudget { .. } | PolicyErrorKind::RoundBudget { .. }
        )),
        "{errors:?}"
    );
}

/// The round budget bounds what a module costs over any 100 rounds,
/// whatever its views: one burning 176 million units on every call, its
/// work budget off, runs out of the window's 2x10^9 units (in 12 calls)
/// or its 250 ms (in fewer on a machine running it slower), and every
/// call of the window after that fails at once.
#[test]
fn the_round_budget_bounds_a_window_of_rounds() {
    let module = engine(SandboxConfig {
        work_budget: None,
        ..SandboxConfig::default()
    })
    .load("slow.wasm", &guests::slow_reclaim(0))
    .unwrap();
    let mut backend = module.backend::<Reclaim>(b"").unwrap();
    let view = large_reclaim_view();
    let mut outcomes = Vec::new();
    for _ in 0..16 {
        backend.prepare_round();
        outcomes.push(backend.decide(&view).map(|_| ()).map_err(|e| e.kind));
    }
    let answered = outcomes.iter().take_while(|o| o.is_ok()).count();
    assert!((2..=11).contains(&answered), "{outcomes:?}");
    assert!(
        outcomes[answered..]
            .iter()
            .all(|o| matches!(o, Err(PolicyErrorKind::RoundBudget { .. }))),
        "{outcomes:?}"
    );
}
