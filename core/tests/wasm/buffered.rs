//! Contract 2.1: a slot's `-buffered` functions enter the guest once per
//! call on the direct path. Every built-in module has them; a 2.0 module
//! (without them) still loads and runs beside 2.1 ones; a hostile 2.1 guest
//! (a view buffer or reply outside its memory, a refusal, a trap) fails the
//! call with the typed error, the round falls back, and the component
//! runtime, which keeps to the slot's own functions, never sees them.

use gangway_core::Slot;
use gangway_core::policy::PolicyErrorKind;
use gangway_core::wasm::{CallPath, PolicyEngine, SandboxConfig};
use gangway_plugin_sdk::Fairness;

use crate::guests;
use crate::support::{accounted, beside_default, empty_view, run, scheduler, the_fairness_error};

const JOBS: u64 = 60;
const ROUNDS: u64 = 4;

fn buffered_component(buffer: &str, call: &str, data: &str) -> Vec<u8> {
    guests::componentize_doctored(
        &guests::buffered_wat(buffer, call, data),
        guests::WIT_2_1,
        "fairness-policy-buffered",
    )
}

#[test]
fn every_builtin_module_enters_each_call_once() {
    for (path, buffered) in [(CallPath::Direct, true), (CallPath::Component, false)] {
        let engine = PolicyEngine::new(SandboxConfig {
            call_path: path,
            ..SandboxConfig::default()
        })
        .unwrap();
        for (name, bytes) in gangway_plugin_artifacts::all() {
            let module = engine.load(name, bytes).unwrap();
            assert_eq!(module.contract_version(), "2.1.0", "{name}");
            let mut got = module.buffered_slots();
            got.sort();
            let mut expected = if buffered { module.slots() } else { vec![] };
            expected.sort();
            assert_eq!(got, expected, "{name} on {path:?}");
        }
    }
}

#[test]
fn a_2_0_module_runs_beside_2_1_modules() {
    let engine = guests::engine();
    let old = engine
        .load("old.wasm", &guests::fairness(100, "(unreachable)", ""))
        .unwrap();
    let new = engine
        .load("fifo", gangway_plugin_artifacts::module("fifo").unwrap())
        .unwrap();
    assert_eq!(old.contract_version(), "2.0.0");
    assert_eq!(new.contract_version(), "2.1.0");
    assert_eq!(old.call_path(), CallPath::Direct);
    assert_eq!(old.buffered_slots(), vec![]);
    assert_eq!(new.buffered_slots(), vec![Slot::Fairness]);
    // Both answer (the 2.0 guest only views without jobs).
    for module in [&old, &new] {
        let mut backend = module.backend::<Fairness>(b"").unwrap();
        backend.decide(&empty_view()).unwrap();
    }
    let mut sched = scheduler(4);
    sched.swap::<Fairness>(new.backend::<Fairness>(b"").unwrap());
    let reports = run(&mut sched, 100, 3);
    assert!(
        reports.iter().all(|r| r.policy_errors.is_empty()),
        "{reports:?}"
    );
    accounted(&sched, 5);
}

/// Runs the buffered guest as the fairness policy next to a default
/// scheduler: every round fails and falls back to the default's decisions,
/// on the direct path with `expect`, on the component runtime (which calls
/// the slot's own functions, whose `order` traps on real rounds) with that
/// trap, and a fresh instance follows each failure.
fn check(name: &str, bytes: &[u8], expect: impl Fn(&PolicyErrorKind) -> bool) {
    for path in guests::PATHS {
        let engine = guests::engine_on(path);
        let module = engine.load(name, bytes).unwrap();
        let buffered = path == CallPath::Direct;
        assert_eq!(module.buffered_slots().is_empty(), !buffered, "{name}");
        let (sched, reports, expected) = beside_default(&module, JOBS, ROUNDS);
        let trap = PolicyErrorKind::Trap("wasm `unreachable` instruction executed".into());
        for (got, want) in reports.iter().zip(&expected) {
            let err = the_fairness_error(got, name);
            if buffered {
                assert!(expect(&err.kind), "{name}: unexpected {err}");
            } else {
                assert_eq!(err.kind, trap, "{name}: the component runtime");
            }
            assert_eq!(got.starts, want.starts, "{name}: fallback differs");
        }
        accounted(&sched, JOBS as usize + 1);
        assert!(module.instantiations() > ROUNDS, "{name}");
    }
}

#[test]
fn a_view_buffer_outside_memory_breaks_the_abi() {
    let bytes = buffered_component("(i32.const -65536)", "(i64.const 64)", "");
    check(
        "buffer-out-of-bounds",
        &bytes,
        |k| matches!(k, PolicyErrorKind::Abi(m) if m.contains("view buffer")),
    );
}

#[test]
fn a_view_buffer_too_short_for_the_view_breaks_the_abi() {
    // A buffer 100 bytes before the end of memory.
    let bytes = buffered_component(
        "(i32.sub (i32.mul (memory.size) (i32.const 65536)) (i32.const 100))",
        "(i64.const 64)",
        "",
    );
    check(
        "buffer-too-short",
        &bytes,
        |k| matches!(k, PolicyErrorKind::Abi(m) if m.contains("view buffer")),
    );
}

#[test]
fn a_reply_outside_memory_breaks_the_abi() {
    let bytes = buffered_component("(i32.const 32768)", "(i64.const 0xffff000000001000)", "");
    check(
        "reply-out-of-bounds",
        &bytes,
        |k| matches!(k, PolicyErrorKind::Abi(m) if m.contains("out of bounds")),
    );
}

#[test]
fn an_error_bit_is_a_refusal_with_its_text() {
    let bytes = buffered_component(
        "(i32.const 32768)",
        "(i64.or (i64.shl (i64.const 300) (i64.const 32)) (i64.const 0x80000004))",
        r#"(data (i32.const 300) "nope")"#,
    );
    check("refusal", &bytes, |k| {
        *k == PolicyErrorKind::Refused("nope".into())
    });
}

#[test]
fn a_trap_in_the_buffered_call_is_a_trap() {
    let bytes = buffered_component("(i32.const 32768)", "(unreachable)", "");
    check("trap", &bytes, |k| {
        *k == PolicyErrorKind::Trap("wasm `unreachable` instruction executed".into())
    });
}

#[test]
fn garbage_in_the_buffered_reply_does_not_decode() {
    let bytes = buffered_component(
        "(i32.const 32768)",
        "(i64.or (i64.shl (i64.const 300) (i64.const 32)) (i64.const 3))",
        r#"(data (i32.const 300) "\80\80\80")"#,
    );
    check(
        "garbage",
        &bytes,
        |k| matches!(k, PolicyErrorKind::Decode(m) if m.contains("FairnessDecision")),
    );
}

/// `log` inside `view-buffer` is allowed (the contract forbids it only in
/// `cabi_realloc` and post-return): on both paths the module runs every
/// round to its answer, the same one (the empty order, which the core
/// refuses for leaving out the pending jobs), with no ABI error or trap.
#[test]
fn log_in_view_buffer_is_allowed_on_both_paths() {
    let core = guests::buffered_wat(
        "(block (result i32) (call $log (i32.const 2) (i32.const 300) (i32.const 5)) (i32.const 32768))",
        "(i64.or (i64.shl (i64.const 64) (i64.const 32)) (i64.const 1))",
        r#"(data (i32.const 300) "hello")"#,
    )
    // The slot's own function answers the empty decision too.
    .replace("(then (unreachable))", "(then (nop))")
    .replacen(
        "(module",
        "(module\n  (import \"gangway:policy/log@2.1.0\" \"log\" (func $log (param i32 i32 i32)))",
        1,
    );
    let bytes = guests::componentize_doctored(&core, guests::WIT_2_1, "fairness-policy-buffered");
    let mut answers = Vec::new();
    for path in guests::PATHS {
        let module = guests::engine_on(path)
            .load("log-in-buffer", &bytes)
            .unwrap();
        assert_eq!(
            module.buffered_slots().is_empty(),
            path == CallPath::Component
        );
        let (sched, reports, _) = beside_default(&module, JOBS, ROUNDS);
        let errors: Vec<PolicyErrorKind> = reports
            .iter()
            .map(|r| the_fairness_error(r, "log-in-buffer").kind.clone())
            .collect();
        for kind in &errors {
            assert!(
                matches!(kind, PolicyErrorKind::InvalidDecision(m) if m.starts_with("omits")),
                "{path:?}: {kind}"
            );
        }
        answers.push(errors);
        accounted(&sched, JOBS as usize + 1);
    }
    assert_eq!(answers[0], answers[1]);
}

/// A host on the direct path checks the twin against the slot's function
/// on its first real call, finds they disagree, declines the twins and
/// goes on through the function: every round decides as the component
/// runtime does, without an error (through the twin every round would fail
/// for leaving out the pending jobs).
#[test]
fn twins_that_disagree_with_their_function_are_declined() {
    let bytes = guests::disagreeing_twins();
    let mut starts = Vec::new();
    for path in guests::PATHS {
        let module = guests::engine_on(path).load("twins", &bytes).unwrap();
        let (sched, reports, _) = beside_default(&module, JOBS, ROUNDS);
        assert!(
            reports.iter().all(|r| r.policy_errors.is_empty()),
            "{path:?}: {:?}",
            reports.iter().map(|r| &r.policy_errors).collect::<Vec<_>>()
        );
        starts.push(reports.iter().map(|r| r.starts.clone()).collect::<Vec<_>>());
        accounted(&sched, JOBS as usize + 1);
    }
    assert_eq!(starts[0], starts[1]);
}

/// A host compares the twin's answers with the function's, not their log
/// messages (the kit does both): twins that answer alike but log otherwise
/// are kept, and both paths answer alike.
#[test]
fn a_host_keeps_twins_that_only_log_otherwise() {
    let bytes = guests::twin_that_logs();
    let mut answers = Vec::new();
    for path in guests::PATHS {
        let module = guests::engine_on(path).load("twin-logs", &bytes).unwrap();
        let (_, reports, _) = beside_default(&module, JOBS, ROUNDS);
        let errors: Vec<PolicyErrorKind> = reports
            .iter()
            .map(|r| the_fairness_error(r, "twin-logs").kind.clone())
            .collect();
        answers.push(errors);
    }
    assert!(
        answers[0]
            .iter()
            .all(|k| matches!(k, PolicyErrorKind::InvalidDecision(_))),
        "{answers:?}"
    );
    assert_eq!(answers[0], answers[1]);
}
