//! Load-time validation: every malformed or over-reaching module is refused
//! with the exact error naming the module and the problem, nothing is cached,
//! and the engine goes on serving good modules to a scheduler.

use gangway_core::Slot;
use gangway_core::wasm::{CONTRACT_VERSION, CallPath, WasmError, WasmErrorKind};
use gangway_plugin_sdk::Fairness;
use gangway_plugin_sdk::{FairnessDecision, JobId, Ranked, wire};
use gangway_plugin_sdk::{Gang, Locality};

use crate::guests::{self, WIT, componentize, fairness_wat};
use crate::support::{accounted, empty_view, run, scheduler};

/// The engine still loads and runs a good module after refusing others.
fn engine_still_serves(engine: &gangway_core::wasm::PolicyEngine) {
    let fifo = engine
        .load("fifo", gangway_plugin_artifacts::module("fifo").unwrap())
        .unwrap();
    let mut sched = scheduler(20);
    sched.swap::<Fairness>(fifo.backend::<Fairness>(b"").unwrap());
    let reports = run(&mut sched, 100, 3);
    assert!(reports.iter().all(|r| r.policy_errors.is_empty()));
    accounted(&sched, 21);
}

#[test]
fn not_wasm_and_core_modules_without_a_component_type_are_refused() {
    let engine = guests::engine();
    let err = engine.load("notes.txt", b"hello").unwrap_err();
    assert_eq!(err.module.as_deref(), Some("notes.txt"));
    assert_eq!(err.kind, WasmErrorKind::NotWasm);
    let core = wat::parse_str(fairness_wat("2.0.0", 0, "(unreachable)", "")).unwrap();
    let err = engine.load("core.wasm", &core).unwrap_err();
    assert!(matches!(err.kind, WasmErrorKind::NotAComponent(_)), "{err}");
    assert!(
        err.to_string()
            .starts_with("module core.wasm: a core Wasm module that cannot be made a component ("),
        "{err}"
    );
    assert!(err.to_string().contains("export macro"), "{err}");
    assert_eq!(engine.cached_modules(), 0);
    engine_still_serves(&engine);
}

/// A core module as the SDK leaves it (the component type embedded) is
/// made a component at load and decides as the component does: the `fifo`
/// plugin as cargo built it against its component.
#[test]
fn a_core_module_with_its_component_type_is_componentized_at_load() {
    let engine = guests::engine();
    let core = std::fs::read(gangway_plugin_artifacts::core_path("fifo").unwrap()).unwrap();
    assert_eq!(&core[4..8], &[1, 0, 0, 0], "a core module");
    let module = engine.load("fifo.wasm", &core).unwrap();
    assert_eq!(module.slots(), vec![Slot::Fairness]);
    let component = gangway_plugin_artifacts::module("fifo").unwrap();
    assert_ne!(component, &core[..]);
    let from_component = engine.load("fifo.wasm", component).unwrap();
    let mut a = scheduler(20);
    let mut b = scheduler(20);
    a.swap::<Fairness>(module.backend::<Fairness>(b"").unwrap());
    b.swap::<Fairness>(from_component.backend::<Fairness>(b"").unwrap());
    let (mut ra, mut rb) = (run(&mut a, 100, 3), run(&mut b, 100, 3));
    assert!(ra.iter().all(|r| r.policy_errors.is_empty()), "{ra:?}");
    // The swap events name each module by its own bytes' hash.
    for r in ra.iter_mut().chain(rb.iter_mut()) {
        r.slot_events.clear();
    }
    assert_eq!(format!("{ra:?}"), format!("{rb:?}"));
    assert_eq!(a.jobs(), b.jobs());
    // A WAT guest with its component type embedded loads too.
    let wat = fairness_wat("2.0.0", 0, "", "");
    let typed = guests::with_metadata(&wat, &[], WIT, "fairness-policy");
    assert_eq!(
        engine.load("typed.wasm", &typed).unwrap().slots(),
        vec![Slot::Fairness]
    );
}

#[test]
fn a_wasi_import_is_refused() {
    let wasi =
        "package wasi:cli@0.2.0;\ninterface environment { get-arguments: func() -> list<string>; }";
    let world = "package test:sneaky;\nworld sneaky {\n  import wasi:cli/environment@0.2.0;\n  export gangway:policy/fairness@2.0.0;\n}";
    let core = fairness_wat("2.0.0", 100, "(unreachable)", "").replacen(
        "(module",
        "(module\n  (import \"wasi:cli/environment@0.2.0\" \"get-arguments\" (func (param i32)))",
        1,
    );
    let bytes = componentize(&core, &[wasi], world, "sneaky");
    let engine = guests::engine();
    let err = engine.load("sneaky.wasm", &bytes).unwrap_err();
    assert_eq!(
        err.to_string(),
        "module sneaky.wasm: imports wasi:cli/environment@0.2.0; only gangway:policy/log is allowed"
    );
    assert_eq!(
        err.kind,
        WasmErrorKind::ForbiddenImport("wasi:cli/environment@0.2.0".into())
    );
    engine_still_serves(&engine);
}

/// A module built against contract 1.0.0 (or a future 3.x) is refused with
/// a message naming the version found and saying how to rebuild.
#[test]
fn an_incompatible_contract_version_is_refused() {
    for version in ["1.0.0", "3.0.0"] {
        let old = WIT.replace("gangway:policy@2.0.0", &format!("gangway:policy@{version}"));
        let core = fairness_wat(version, 100, "(unreachable)", "");
        let bytes = guests::componentize_doctored(&core, &old, "fairness-policy");
        let engine = guests::engine();
        let err = engine.load("old.wasm", &bytes).unwrap_err();
        let found = format!("gangway:policy/fairness@{version}");
        assert_eq!(
            err.kind,
            WasmErrorKind::IncompatibleVersion {
                found: found.clone(),
                host: CONTRACT_VERSION.into(),
            }
        );
        assert_eq!(
            err.to_string(),
            format!(
                "module old.wasm: implements {found}; this host speaks gangway:policy@2.1.0 \
                 (any 2.x module): rebuild the policy against gangway-plugin-sdk with contract \
                 2.1.0 (the SDK's export macros produce it)"
            )
        );
        engine_still_serves(&engine);
    }
}

/// A component exporting one slot twice (under two versions) is refused:
/// which one would run is not defined.
#[test]
fn a_slot_exported_twice_is_refused() {
    let bytes = crate::guests::twice_exported_fairness();
    let engine = guests::engine();
    let err = engine.load("twice.wasm", &bytes).unwrap_err();
    assert!(
        matches!(
            &err.kind,
            WasmErrorKind::DuplicateSlot {
                slot: Slot::Fairness,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("exports the fairness slot twice"),
        "{err}"
    );
    engine_still_serves(&engine);
}

#[test]
fn a_missing_export_is_refused() {
    // The contract with `order` removed from the fairness interface.
    let start = WIT.find("    order: func").unwrap();
    let end = start + WIT[start..].find('\n').unwrap() + 1;
    let partial = format!("{}{}", &WIT[..start], &WIT[end..]);
    let core = fairness_wat("2.0.0", 100, "(unreachable)", "")
        .replace("(export \"gangway:policy/fairness@2.0.0#order\")", "");
    let bytes = guests::componentize_doctored(&core, &partial, "fairness-policy");
    let engine = guests::engine();
    let err = engine.load("half.wasm", &bytes).unwrap_err();
    assert_eq!(err.module.as_deref(), Some("half.wasm"));
    assert_eq!(
        err.kind,
        WasmErrorKind::MissingExport {
            slot: Slot::Fairness,
            interface: "gangway:policy/fairness@2.0.0".into(),
            function: "order".into(),
        }
    );
    engine_still_serves(&engine);
}

#[test]
fn a_module_without_slots_is_refused() {
    let other =
        "package test:other;\ninterface tools { ping: func(); }\nworld other { export tools; }";
    let core = r#"(module
      (memory (export "memory") 1)
      (func (export "test:other/tools#ping")))"#;
    let bytes = componentize(core, &[], other, "other");
    let engine = guests::engine();
    let err = engine.load("other.wasm", &bytes).unwrap_err();
    assert_eq!(err.kind, WasmErrorKind::NoSlots("test:other/tools".into()));
    engine_still_serves(&engine);
}

#[test]
fn a_wrong_signature_is_refused() {
    // `order` taking a string: same core signature, different component type.
    let wrong = WIT.replace("order: func(view: list<u8>)", "order: func(view: string)");
    let core = fairness_wat("2.0.0", 100, "(unreachable)", "");
    let bytes = guests::componentize_doctored(&core, &wrong, "fairness-policy");
    let engine = guests::engine();
    let err = engine.load("wrong.wasm", &bytes).unwrap_err();
    assert!(
        matches!(&err.kind, WasmErrorKind::WrongSignature { slot: Slot::Fairness, function, .. }
            if function == "order"),
        "{err}"
    );
    assert_eq!(err.module.as_deref(), Some("wrong.wasm"));
    engine_still_serves(&engine);
}

/// The host's `log` is typed as the contract says: a `log` taking its
/// parameters the other way round (which lowers to the same three i32s) does
/// not link, on either path.
#[test]
fn a_log_import_of_another_type_is_refused() {
    let wrong = WIT.replace(
        "log: func(level: level, message: string);",
        "log: func(message: string, level: level);",
    );
    assert_ne!(wrong, WIT);
    // log("hi", info), lowered as (ptr, len, level).
    let body = "(call $log (i32.const 300) (i32.const 2) (i32.const 2))";
    let data = r#"(data (i32.const 300) "hi")"#;
    let core = guests::with_log(&fairness_wat("2.0.0", 0, body, data));
    let bytes = guests::componentize_doctored(&core, &wrong, "fairness-policy");
    for path in guests::PATHS {
        let engine = guests::engine_on(path);
        let err = engine.load("odd-log.wasm", &bytes).unwrap_err();
        assert!(
            matches!(err.kind, WasmErrorKind::Link(_)),
            "{path:?}: {err}"
        );
    }
    let _ = (CallPath::Direct, empty_view());
}

#[test]
fn a_refused_configuration_names_the_module() {
    let engine = guests::engine();
    let builtin = engine
        .load(
            "fallbacks",
            gangway_plugin_artifacts::module("fallbacks").unwrap(),
        )
        .unwrap();
    let err = builtin.backend::<Gang>(b"reserve = true").err().unwrap();
    assert_eq!(
        err,
        WasmError {
            module: Some("fallbacks".into()),
            kind: WasmErrorKind::Config {
                slot: Slot::Gang,
                message: "invalid policy configuration: backfill: takes no options, but line 1 \
                          is `reserve = true`"
                    .into()
            }
        }
    );
    let fifo = engine
        .load("fifo", gangway_plugin_artifacts::module("fifo").unwrap())
        .unwrap();
    let err = fifo.backend::<Locality>(b"").err().unwrap();
    assert_eq!(
        err.to_string(),
        "module fifo: does not implement the locality slot (it implements: fairness)"
    );
}

#[test]
fn the_cache_serves_known_bytes_under_any_name() {
    let engine = guests::engine();
    let bytes = gangway_plugin_artifacts::module("fifo").unwrap();
    let a = engine.load("a", bytes).unwrap();
    let b = engine.load("b", bytes).unwrap();
    assert_eq!(engine.cached_modules(), 1);
    assert_eq!(a.hash(), b.hash());
    assert_eq!(b.name(), "b");
    // The warm-up ran once, for the first load only: one instance of the
    // slot entered through its twins, and one through its own function,
    // which the first call of every backend checks the twins against.
    assert_eq!(b.instantiations(), 2);
}

#[test]
fn the_worked_example_in_contract_md_is_right() {
    let d = FairnessDecision {
        order: vec![
            Ranked {
                job: JobId(300),
                eligible: true,
            },
            Ranked {
                job: JobId(5),
                eligible: false,
            },
        ],
    };
    assert_eq!(wire::encode(&d), vec![0x02, 0xac, 0x02, 0x01, 0x05, 0x00]);
}

#[test]
fn a_module_asking_for_too_much_memory_cannot_start() {
    // 300 pages (19.7 MB) of initial memory against a 16 MiB cap.
    let core = fairness_wat("2.0.0", 100, "(unreachable)", "").replace(
        "(memory (export \"memory\") 1)",
        "(memory (export \"memory\") 300)",
    );
    let bytes = componentize(&core, &[], WIT, "fairness-policy");
    let engine = guests::engine();
    let err = engine.load("greedy.wasm", &bytes).unwrap_err();
    assert_eq!(err.module.as_deref(), Some("greedy.wasm"));
    match &err.kind {
        WasmErrorKind::Instantiate { slot, source } => {
            assert_eq!(*slot, Slot::Fairness);
            assert_eq!(
                source.kind,
                gangway_core::policy::PolicyErrorKind::MemoryLimit(16 << 20)
            );
        }
        other => panic!("expected an instantiation failure, got {other}"),
    }
    engine_still_serves(&engine);
}
