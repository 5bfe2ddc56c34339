//! The sandbox holes that a set of hostile modules written against
//! CONTRACT.md and the WIT alone found (issue 12), one test each: every one
//! of these modules was accepted, or cost the host far more than its budget,
//! before the fix. The log flood, the duplicate slot export and the discard
//! of a failed instance have their tests in `load.rs`, `structure.rs` and
//! `hostile.rs`.

use gangway_core::policy::{GuardSettings, PolicyErrorKind};
use gangway_core::wasm::{CallPath, PolicyEngine, SandboxConfig, WasmErrorKind};
use gangway_core::{RoundReport, Scheduler};
use gangway_plugin_sdk::Fairness;

use crate::guests::{self, WIT, componentize, fairness_wat};
use crate::support::{run, scheduler};

/// Runs `module` as the fairness policy of a [`scheduler`] for a few rounds,
/// never quarantining it, and returns the reports.
fn rounds_with(module: &gangway_core::wasm::PolicyModule) -> (Scheduler, Vec<RoundReport>) {
    let mut sched = scheduler(60);
    sched
        .policies_mut()
        .set_guard(GuardSettings::never_quarantine(2));
    sched.swap::<Fairness>(module.backend::<Fairness>(b"").unwrap());
    let reports = run(&mut sched, 100, 3);
    (sched, reports)
}

/// Eight linear memories of just under the cap each made 2.6 GB of one
/// instance. A policy may have one linear memory: a second is refused at
/// load with a compile error that names the feature.
#[test]
fn a_module_with_two_memories_is_refused() {
    let core = fairness_wat("2.0.0", 100, "(unreachable)", "").replace(
        "(memory (export \"memory\") 1)",
        "(memory (export \"memory\") 1)\n  (memory $second 1)",
    );
    let bytes = componentize(&core, &[], WIT, "fairness-policy");
    for path in guests::PATHS {
        let err = guests::engine_on(path)
            .load("eight-memories.wasm", &bytes)
            .unwrap_err();
        assert_eq!(err.module.as_deref(), Some("eight-memories.wasm"));
        match &err.kind {
            WasmErrorKind::Compile(text) => {
                assert!(text.contains("multiple memories"), "{path:?}: {text}");
            }
            other => panic!("{path:?}: expected a compile error, got {other}"),
        }
    }
}

/// One function with 40,000 locals took 223 s to compile. Load limits
/// refuse it before anything is compiled, naming the function and the bound.
#[test]
fn forty_thousand_locals_are_refused_before_compiling() {
    let locals = "(local i32)".repeat(40_000);
    let core = fairness_wat("2.0.0", 100, "(unreachable)", "").replace(
        "(param $ptr i32) (param $len i32) (result i32)",
        &format!("(param $ptr i32) (param $len i32) (result i32) {locals}"),
    );
    let bytes = componentize(&core, &[], WIT, "fairness-policy");
    let err = guests::engine().load("locals.wasm", &bytes).unwrap_err();
    match &err.kind {
        WasmErrorKind::TooLarge { what, found, limit } => {
            assert!(what.contains("locals of function"), "{what}");
            assert_eq!(*found, 40_000);
            assert_eq!(*limit, 2_000);
        }
        other => panic!("expected TooLarge, got {other}"),
    }
    assert!(
        err.to_string()
            .starts_with("module locals.wasm: too large to compile safely: the locals of function"),
        "{err}"
    );
}

/// A refusal of 56 MiB was printed whole by policy-check and replay. The
/// host reads at most `log_message_bytes` of it, on either path.
#[test]
fn a_huge_refusal_is_cut_to_the_log_bound() {
    // error(8 MiB of 'x' at 65536), in memory grown to 129 pages + the heap.
    let body = r#"(drop (memory.grow (i32.const 160)))
        (memory.fill (i32.const 65536) (i32.const 120) (i32.const 8388608))
        (i32.store8 (i32.const 16) (i32.const 1))
        (i32.store (i32.const 20) (i32.const 65536))
        (i32.store (i32.const 24) (i32.const 8388608))
        (return (i32.const 16))"#;
    let bytes = guests::fairness(100, body, "");
    for path in guests::PATHS {
        let engine = guests::engine_on(path);
        let bound = SandboxConfig::default().log_message_bytes;
        let module = engine.load("loud.wasm", &bytes).unwrap();
        let (_, reports) = rounds_with(&module);
        for report in &reports {
            let err = &report.policy_errors[0];
            match &err.kind {
                PolicyErrorKind::Refused(text) => {
                    assert!(text.len() <= bound + 3, "{path:?}: {} bytes", text.len());
                    assert!(
                        text.starts_with("xxxx") && text.ends_with("..."),
                        "{path:?}"
                    );
                }
                other => panic!("{path:?}: expected a refusal, got {other}"),
            }
            assert!(err.to_string().len() < bound + 100);
        }
    }
}

/// A 60 MB reply decoded into 528 MB of host memory. A reply longer than
/// any answer to its view is refused unread, and a count that claims more
/// entries than the view holds is refused before anything is allocated
/// (here a count of 2^30 entries in a 5-byte reply).
#[test]
fn replies_cannot_amplify_in_host_memory() {
    let cases = [
        // 8 MiB of reply to a view of 61 jobs.
        (
            "long",
            r#"(drop (memory.grow (i32.const 160)))
               (return (call $reply (i32.const 65536) (i32.const 8388608)))"#,
            "",
        ),
        // order: a list of 2^30 entries, then nothing.
        (
            "counted",
            "(return (call $reply (i32.const 300) (i32.const 5)))",
            r#"(data (i32.const 300) "\80\80\80\80\04")"#,
        ),
    ];
    for (name, body, data) in cases {
        let bytes = guests::fairness(100, body, data);
        for path in guests::PATHS {
            let module = guests::engine_on(path).load(name, &bytes).unwrap();
            let (sched, reports) = rounds_with(&module);
            for report in &reports {
                assert_eq!(report.policy_errors.len(), 1, "{name} {path:?}");
                assert!(
                    matches!(report.policy_errors[0].kind, PolicyErrorKind::Decode(_)),
                    "{name} {path:?}: {}",
                    report.policy_errors[0]
                );
            }
            sched.check_invariants().unwrap();
        }
    }
}

/// A component whose slot functions are lifted from one core module while
/// another core module, instantiated but never lifted, exports the same
/// canonical names: the direct path ran the decoy. It must run the module
/// the component lifts (or decline and leave the call to the component
/// runtime), so both paths decide alike and the decoy never runs.
#[test]
fn the_direct_path_runs_what_the_component_lifts() {
    let honest = guests::fairness(100, "", "");
    let printed = wasmprinter::print_bytes(&honest).unwrap();
    let decoy = r#"
  (core module $decoy
    (memory (export "memory") 1)
    (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) (unreachable))
    (func (export "gangway:policy/fairness@2.0.0#init") (param i32 i32) (result i32) (unreachable))
    (func (export "gangway:policy/fairness@2.0.0#order") (param i32 i32) (result i32) (unreachable))
  )
  (core instance $decoy-instance (instantiate $decoy))
"#;
    // Appended last, so no index of the real component moves.
    let end = printed.rfind(')').unwrap();
    let bytes = wat::parse_str(format!("{}{decoy}{}", &printed[..end], &printed[end..])).unwrap();
    {
        for path in guests::PATHS {
            let engine = PolicyEngine::new(SandboxConfig {
                call_path: path,
                ..guests::sandbox()
            })
            .unwrap();
            let module = engine.load("decoyed.wasm", &bytes).unwrap();
            if path == CallPath::Component {
                assert_eq!(module.call_path(), CallPath::Component);
            }
            // The honest guest answers an empty order (an invalid decision
            // once jobs are pending); the decoy would trap.
            let (_, reports) = rounds_with(&module);
            let twin = engine.load("decoyed.wasm", &honest).unwrap();
            let (_, expected) = rounds_with(&twin);
            for (got, want) in reports.iter().zip(&expected) {
                assert_eq!(
                    got.policy_errors,
                    want.policy_errors,
                    "{path:?} (entered {:?})",
                    module.call_path()
                );
                assert!(
                    got.policy_errors
                        .iter()
                        .all(|e| matches!(e.kind, PolicyErrorKind::InvalidDecision(_))),
                    "{:?}",
                    got.policy_errors
                );
            }
        }
    }
}
