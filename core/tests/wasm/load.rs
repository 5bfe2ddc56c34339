//! Loading: the real plugins load, report their slots and version, and the
//! cache makes a second load of the same bytes cheap.

use gangway_core::Slot;
use gangway_core::policy::PolicyErrorKind;
use gangway_core::wasm::WasmErrorKind;
use gangway_plugin_sdk::Fairness;

use crate::guests;

#[test]
fn real_plugins_load_with_their_slots() {
    let engine = guests::engine();
    let fifo = engine
        .load(
            "fifo.wasm",
            gangway_plugin_artifacts::module("fifo").unwrap(),
        )
        .unwrap();
    assert_eq!(fifo.name(), "fifo.wasm");
    assert_eq!(fifo.slots(), vec![Slot::Fairness]);
    assert_eq!(fifo.contract_version(), "2.1.0");
    let builtin = engine
        .load(
            "fallbacks",
            gangway_plugin_artifacts::module("fallbacks").unwrap(),
        )
        .unwrap();
    assert_eq!(
        builtin.slots(),
        vec![Slot::Retry, Slot::Fairness, Slot::Locality, Slot::Gang]
    );
    assert_eq!(engine.cached_modules(), 2);
}

#[test]
fn wat_guest_loads() {
    let engine = guests::engine();
    let m = engine.load("t", &guests::hostile("trap")).unwrap();
    assert_eq!(m.slots(), vec![Slot::Fairness]);
}

/// A module that floods the log import pays for the host's work: each call
/// costs fuel for the call and its bytes, so a flood of large messages runs
/// out of fuel at once (here at its warm-up), on either path, in well under
/// a second.
#[test]
fn log_floods_are_bounded() {
    let body = r#"(local $i i32)
        (loop $more
          (call $log (i32.const 2) (i32.const 300) (i32.const 60000))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br_if $more (i32.lt_u (local.get $i) (i32.const 1000))))"#;
    let core = guests::with_log(&guests::fairness_wat("2.0.0", 0, body, ""));
    // The body needs a local: move it into the function header.
    let core = core.replace("(then (local $i i32)", "(then").replace(
        "(param $ptr i32) (param $len i32) (result i32)",
        "(param $ptr i32) (param $len i32) (result i32) (local $i i32)",
    );
    let bytes = guests::componentize(&core, &[], guests::WIT, "fairness-policy");
    for path in guests::PATHS {
        let engine = guests::engine_on(path);
        let started = std::time::Instant::now();
        let err = engine.load("flood", &bytes).unwrap_err();
        assert!(
            matches!(&err.kind, WasmErrorKind::WarmUp(e) if matches!(e.kind, PolicyErrorKind::OutOfFuel(_))),
            "{path:?}: {err}"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }
    // A module that logs a little is served, its messages bounded.
    let chatty = guests::with_log(&guests::fairness_wat(
        "2.0.0",
        0,
        &body.replace("1000", "20"),
        "",
    ))
    .replace("(then (local $i i32)", "(then")
    .replace(
        "(param $ptr i32) (param $len i32) (result i32)",
        "(param $ptr i32) (param $len i32) (result i32) (local $i i32)",
    );
    let bytes = guests::componentize(&chatty, &[], guests::WIT, "fairness-policy");
    for path in guests::PATHS {
        let engine = guests::engine_on(path);
        let started = std::time::Instant::now();
        let module = engine.load("chatty", &bytes).unwrap();
        assert_eq!(module.call_path(), path);
        five_calls_in_time(&module, started);
    }
}

fn five_calls_in_time(module: &gangway_core::wasm::PolicyModule, started: std::time::Instant) {
    let mut backend = module.backend::<Fairness>(b"").unwrap();
    let view = crate::support::empty_view();
    for _ in 0..5 {
        assert!(backend.decide(&view).unwrap().order.is_empty());
    }
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

/// A module exporting `_initialize` has it run once before `init`, on either
/// call path (this guest traps on any call made before it ran).
#[test]
fn initialize_runs_before_the_first_call() {
    let fields = r#"(global $ready (mut i32) (i32.const 0))
        (func (export "_initialize") (global.set $ready (i32.const 1)))"#;
    let body = "(if (i32.eqz (global.get $ready)) (then unreachable))";
    let bytes = guests::componentize(
        &guests::fairness_wat("2.0.0", 0, body, fields),
        &[],
        guests::WIT,
        "fairness-policy",
    );
    for path in guests::PATHS {
        let engine = guests::engine_on(path);
        let module = engine.load("initialized", &bytes).unwrap();
        assert_eq!(module.call_path(), path);
        let mut backend = module.backend::<Fairness>(b"").unwrap();
        let view = crate::support::empty_view();
        assert!(backend.decide(&view).unwrap().order.is_empty());
    }
}

/// `init`'s `ok` carries the policy's manifest: one that points out of the
/// guest's memory breaks the ABI and the module cannot start, on either path.
#[test]
fn a_manifest_out_of_bounds_fails_the_load() {
    let core = guests::fairness_wat("2.0.0", 100, "(unreachable)", "").replace(
        "(i32.store8 (i32.const 16) (i32.const 0))\n    (i32.const 16))",
        "(i32.store8 (i32.const 16) (i32.const 0))
    (i32.store (i32.const 20) (i32.const -16))
    (i32.store (i32.const 24) (i32.const 1000000))
    (i32.const 16))",
    );
    assert!(core.contains("1000000"));
    let bytes = guests::componentize(&core, &[], guests::WIT, "fairness-policy");
    for path in guests::PATHS {
        let err = guests::engine_on(path)
            .load("bad-init", &bytes)
            .unwrap_err();
        assert!(
            matches!(&err.kind, WasmErrorKind::Instantiate { source, .. } if matches!(source.kind, PolicyErrorKind::Abi(_))),
            "{path:?}: {err}"
        );
    }
}

/// A compiled module outlives the process: a second engine (as a later run
/// would make) takes it from the disk cache, decides exactly as the first,
/// and a damaged entry is compiled again, never trusted.
#[test]
fn compiled_modules_are_kept_on_disk_across_engines() {
    use gangway_core::wasm::{CallPath, PolicyEngine, SandboxConfig};
    use gangway_plugin_sdk::testing::SlotViews;
    use proptest::strategy::{Strategy, ValueTree};
    use proptest::test_runner::TestRunner;

    let dir = std::env::temp_dir().join(format!("gw-module-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let bytes = gangway_plugin_artifacts::module("las").unwrap();
    let mut runner = TestRunner::deterministic();
    let views: Vec<_> = (0..20)
        .map(|_| Fairness::views().new_tree(&mut runner).unwrap().current())
        .collect();
    for path in [CallPath::Direct, CallPath::Component] {
        let config = SandboxConfig {
            module_cache: Some(dir.clone()),
            call_path: path,
            ..SandboxConfig::default()
        };
        let decide = || {
            let engine = PolicyEngine::new(config.clone()).unwrap();
            let module = engine.load("las.wasm", bytes).unwrap();
            let mut backend = module.backend::<Fairness>(b"").unwrap();
            views
                .iter()
                .map(|v| backend.decide(v).unwrap())
                .collect::<Vec<_>>()
        };
        let first = decide();
        let entries = std::fs::read_dir(&dir).unwrap().count();
        assert!(entries > 0, "{path:?}: nothing kept");
        assert_eq!(decide(), first, "{path:?}: from the cache");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), entries);
        // Every entry damaged: compiled again, the same decisions.
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let mut b = std::fs::read(e.path()).unwrap();
            let mid = b.len() / 2;
            b[mid] ^= 0xff;
            std::fs::write(e.path(), b).unwrap();
        }
        assert_eq!(decide(), first, "{path:?}: after damage");
        // And rewritten whole.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), entries);
        assert_eq!(decide(), first, "{path:?}: from the rewritten cache");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A module that fails validation is refused on every load, with a cache
/// folder as without: no record of it as valid is ever made (a load skips
/// validation only for a module it recorded valid).
#[test]
fn an_invalid_module_is_never_recorded_valid() {
    use gangway_core::wasm::{PolicyEngine, SandboxConfig, WasmErrorKind};

    let dir = std::env::temp_dir().join(format!("gw-invalid-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let valid = gangway_plugin_artifacts::module("fifo").unwrap();
    // The same module with eight `i32.add`s written over the middle of its
    // main module's code: operands of the wrong types, or a body cut short.
    let mut broken = valid.to_vec();
    let engine = || {
        PolicyEngine::new(SandboxConfig {
            module_cache: Some(dir.clone()),
            ..SandboxConfig::default()
        })
        .unwrap()
    };
    engine().load("fifo", valid).unwrap();
    let records = || {
        std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "valid"))
            .count()
    };
    assert_eq!(records(), 1, "the valid module is recorded");
    let at = broken.len() / 2;
    broken[at..at + 8].fill(0x6a); // i32.add, eight times
    for _ in 0..2 {
        let e = engine().load("broken", &broken).unwrap_err();
        assert!(
            matches!(&e.kind, WasmErrorKind::Compile(m) if m.contains("a policy may use")),
            "refused by validation: {e}"
        );
    }
    assert_eq!(records(), 1, "nothing recorded for the broken module");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A module's fuel over its life in a slot is bounded
/// (`SandboxConfig::fuel_per_backend`), everything it costs counted (its
/// `init`, its calls, the host's twin checks); with a `fuel_period` the
/// bound is per period, so a long-running host's module gets its allowance
/// again once the period has passed.
#[test]
fn the_fuel_allowance_comes_back_each_period() {
    let fifo = gangway_plugin_artifacts::module("fifo").unwrap();
    let view = crate::support::past_trigger();
    let engine = |limit, period| {
        gangway_core::wasm::PolicyEngine::new(gangway_core::wasm::SandboxConfig {
            fuel_per_backend: limit,
            fuel_period: period,
            ..guests::sandbox()
        })
        .unwrap()
    };
    // What the load's warm-up (a backend of its own: a start and one call
    // on a small view), starting a backend and its first two calls cost,
    // unbounded.
    let module = engine(None, None).load("fifo", fifo).unwrap();
    let warm_up = module.fuel_used();
    let mut costs = Vec::new();
    let mut at = module.fuel_used();
    let mut backend = module.backend::<Fairness>(b"").unwrap();
    for call in 0..3 {
        costs.push(module.fuel_used() - at);
        at = module.fuel_used();
        if call < 2 {
            backend.decide(&view).unwrap();
        }
    }
    let (start, first, second) = (costs[0], costs[1], costs[2]);
    // Enough to warm up, or to start and answer once; not to answer twice.
    let limit = warm_up.max(start + first) + second / 2;
    assert!(limit < start + first + second, "{warm_up} {costs:?}");
    let guest = |period| {
        engine(Some(limit), period)
            .load("fifo", fifo)
            .unwrap()
            .backend::<Fairness>(b"")
            .unwrap()
    };
    let spent = |b: &mut gangway_core::policy::BoxedBackend<Fairness>| {
        matches!(
            b.decide(&view).map_err(|e| e.kind),
            Err(PolicyErrorKind::RunBudget(l)) if l == limit
        )
    };
    // One allowance for life: the first call spends it, the rest fail.
    let mut life = guest(None);
    assert!(!spent(&mut life));
    assert!(spent(&mut life));
    std::thread::sleep(std::time::Duration::from_millis(120));
    assert!(spent(&mut life));
    // Per period: spent within the period, served again after it.
    let mut daily = guest(Some(std::time::Duration::from_millis(100)));
    assert!(!spent(&mut daily));
    assert!(spent(&mut daily));
    std::thread::sleep(std::time::Duration::from_millis(120));
    assert!(!spent(&mut daily));
}
