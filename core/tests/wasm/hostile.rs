//! Hostile guests inside a running scheduler: each failure is the exact typed
//! error, the round falls back to the built-in policy (so its decisions are
//! exactly a default scheduler's), invariants hold and no job is lost; a
//! guest that failed in any way (trap, budget, ABI, refusal, bad reply,
//! invalid decision) gets a fresh instance, never the old one.

use gangway_plugin_sdk::Fairness;
use std::time::Duration;

use gangway_core::Slot;
use gangway_core::policy::PolicyErrorKind;
use gangway_core::wasm::{Budget, CallPath, PolicyEngine, SandboxConfig, WasmErrorKind};

use crate::guests;
use crate::support::{accounted, beside_default, empty_view, run, scheduler, the_fairness_error};

const JOBS: u64 = 60;
const ROUNDS: u64 = 4;

/// Runs `name` as the fairness policy next to a default scheduler, on each
/// call path of an engine with `config`, and checks every round failed with
/// `expect`, fell back, and matched the default.
fn check(
    config: SandboxConfig,
    name: &str,
    expect: impl Fn(&PolicyErrorKind) -> bool,
    fresh: bool,
) {
    for path in guests::PATHS {
        let engine = PolicyEngine::new(SandboxConfig {
            call_path: path,
            ..config.clone()
        })
        .unwrap();
        check_on(&engine, path, name, &expect, fresh);
    }
}

fn check_on(
    engine: &PolicyEngine,
    path: CallPath,
    name: &str,
    expect: &impl Fn(&PolicyErrorKind) -> bool,
    fresh: bool,
) {
    let module = engine.load(name, &guests::hostile(name)).unwrap();
    assert_eq!(module.call_path(), path, "{name}");
    let made = module.instantiations();
    let (sched, reports, expected) = beside_default(&module, JOBS, ROUNDS);
    for (got, want) in reports.iter().zip(&expected) {
        let err = the_fairness_error(got, name);
        assert_eq!(err.module, name);
        assert!(expect(&err.kind), "{name} ({path:?}): unexpected {err}");
        assert_eq!(
            got.starts, want.starts,
            "{name}: fallback differs from the default"
        );
        assert_eq!(got.waiting, want.waiting);
        assert_eq!(got.reservations, want.reservations);
    }
    assert_eq!(sched.slot_health(Slot::Fairness).failures, ROUNDS);
    assert_eq!(sched.slot_health(Slot::Fairness).consecutive, ROUNDS as u32);
    accounted(&sched, JOBS as usize + 1);
    assert!(reports.iter().map(|r| r.starts.len()).sum::<usize>() > 0);
    // One instance for `backend()`, used by the first round; a failed one
    // is replaced on each later call, whatever the failure.
    assert!(fresh, "every failure discards the instance");
    assert_eq!(module.instantiations(), made + ROUNDS, "{name}");
}

#[test]
fn infinite_loop_runs_out_of_fuel() {
    check(
        guests::sandbox(),
        "infinite-loop",
        |k| *k == PolicyErrorKind::OutOfFuel(20_000_000),
        true,
    );
}

#[test]
fn infinite_loop_misses_its_deadline() {
    let config = SandboxConfig {
        budget: Budget::Deadline(Duration::from_millis(30)),
        ..SandboxConfig::default()
    };
    let started = std::time::Instant::now();
    check(
        config,
        "infinite-loop",
        |k| *k == PolicyErrorKind::DeadlineExceeded(30),
        true,
    );
    // Four runaway rounds per call path, each stopped near its 30 ms deadline.
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn memory_bomb_hits_the_cap() {
    check(
        guests::sandbox(),
        "memory-bomb",
        |k| *k == PolicyErrorKind::MemoryLimit(16 << 20),
        true,
    );
}

#[test]
fn trap_is_a_trap() {
    check(
        guests::sandbox(),
        "trap",
        |k| *k == PolicyErrorKind::Trap("wasm `unreachable` instruction executed".into()),
        true,
    );
}

#[test]
fn runaway_recursion_exhausts_the_stack() {
    check(
        guests::sandbox(),
        "stack-overflow",
        |k| *k == PolicyErrorKind::Trap("call stack exhausted".into()),
        true,
    );
}

#[test]
fn reply_out_of_bounds_breaks_the_abi() {
    check(
        guests::sandbox(),
        "lift-out-of-bounds",
        |k| matches!(k, PolicyErrorKind::Abi(m) if m.contains("out of bounds")),
        true,
    );
}

/// What the component runtime checks when it lifts a reply or lowers a
/// `log` call, the direct path checks too: every breach fails the call as
/// an ABI error and discards the instance.
#[test]
fn broken_abi_fails_the_call_on_either_path() {
    for name in [
        "bad-discriminant",
        "misaligned-return",
        "refuse-not-utf8",
        "log-bad-level",
        "log-not-utf8",
        "log-out-of-bounds",
    ] {
        check(
            guests::sandbox(),
            name,
            |k| matches!(k, PolicyErrorKind::Abi(_)),
            true,
        );
    }
}

#[test]
fn garbage_reply_does_not_decode() {
    check(
        guests::sandbox(),
        "garbage-reply",
        |k| matches!(k, PolicyErrorKind::Decode(m) if m.contains("FairnessDecision")),
        true,
    );
}

#[test]
fn unknown_job_is_an_invalid_decision() {
    check(
        guests::sandbox(),
        "unknown-job",
        |k| *k == PolicyErrorKind::InvalidDecision("names unknown job 999999".into()),
        true,
    );
}

#[test]
fn duplicate_job_is_an_invalid_decision() {
    check(
        guests::sandbox(),
        "duplicate-job",
        |k| *k == PolicyErrorKind::InvalidDecision("lists job 0 twice".into()),
        true,
    );
}

#[test]
fn refusal_is_reported() {
    check(
        guests::sandbox(),
        "refuse",
        |k| *k == PolicyErrorKind::Refused("no opinion today".into()),
        true,
    );
}

/// Guests that misbehave on every call fail their warm-up: they never reach
/// a scheduler, and the engine keeps working for the next module.
#[test]
fn unconditional_hostiles_fail_the_warm_up() {
    for path in guests::PATHS {
        unconditional_hostiles_fail_the_warm_up_on(&guests::engine_on(path));
    }
}

fn unconditional_hostiles_fail_the_warm_up_on(engine: &PolicyEngine) {
    type Expect = fn(&PolicyErrorKind) -> bool;
    let cases: [(&str, Expect); 4] = [
        ("infinite-loop", |k| {
            matches!(k, PolicyErrorKind::OutOfFuel(_))
        }),
        ("memory-bomb", |k| {
            matches!(k, PolicyErrorKind::MemoryLimit(_))
        }),
        ("trap", |k| matches!(k, PolicyErrorKind::Trap(_))),
        ("garbage-reply", |k| matches!(k, PolicyErrorKind::Decode(_))),
    ];
    for (name, expect) in cases {
        let (body, data) = guests::behaviour(name);
        let err = engine
            .load(name, &guests::fairness(0, body, data))
            .unwrap_err();
        assert_eq!(err.module.as_deref(), Some(name));
        match &err.kind {
            WasmErrorKind::WarmUp(source) => {
                assert_eq!(source.slot, Slot::Fairness);
                assert!(expect(&source.kind), "{name}: {err}");
            }
            other => panic!("{name}: expected a warm-up failure, got {other}"),
        }
        assert!(
            err.to_string()
                .starts_with(&format!("module {name}: failed its warm-up call"))
        );
    }
    assert_eq!(engine.cached_modules(), 0, "refused modules are not cached");
    let fifo = engine
        .load("fifo", gangway_plugin_artifacts::module("fifo").unwrap())
        .unwrap();
    let mut sched = scheduler(JOBS);
    sched.swap::<Fairness>(fifo.backend::<Fairness>(b"").unwrap());
    let reports = run(&mut sched, 100, ROUNDS);
    assert!(reports.iter().all(|r| r.policy_errors.is_empty()));
    accounted(&sched, JOBS as usize + 1);
}

/// The host is unharmed by a runaway guest: the next module on the same
/// engine works, and the failed one recovers when it behaves.
#[test]
fn a_failed_instance_is_replaced_and_recovers() {
    for path in guests::PATHS {
        a_failed_instance_is_replaced_and_recovers_on(&guests::engine_on(path));
    }
}

fn a_failed_instance_is_replaced_and_recovers_on(engine: &PolicyEngine) {
    // Traps only on views longer than 2,000 bytes (many jobs).
    let (body, data) = guests::behaviour("trap");
    let module = engine
        .load("picky", &guests::fairness(2_000, body, data))
        .unwrap();
    let backend = module.backend::<Fairness>(b"").unwrap();
    let before = module.instantiations();
    let mut big = scheduler(200);
    big.swap::<Fairness>(backend);
    let r = big.round(1000).unwrap();
    assert_eq!(r.policy_errors.len(), 1);
    assert_eq!(module.instantiations(), before, "dropped, not yet replaced");
    // The next round makes a fresh instance (which traps again on this view).
    let r = big.round(1100).unwrap();
    assert_eq!(r.policy_errors.len(), 1);
    assert_eq!(module.instantiations(), before + 1);
    big.check_invariants().unwrap();
    // A backend of the same module answers small views.
    let mut small = module.backend::<Fairness>(b"").unwrap();
    assert!(small.decide(&empty_view()).unwrap().order.is_empty());
}

/// `cabi_realloc` and post-return functions may not call imports: a guest
/// whose allocator or post-return logs traps, on either call path, and so
/// never loads.
#[test]
fn log_from_realloc_or_post_return_is_a_trap() {
    let log = "(call $log (i32.const 2) (i32.const 64) (i32.const 1))";
    let plain = guests::fairness_wat("2.0.0", 100, "(unreachable)", "");
    let in_realloc = plain.replacen("(local.set $p", &format!("{log} (local.set $p"), 1);
    let post = format!(
        r#"(func (export "cabi_post_gangway:policy/fairness@2.0.0#init") (param i32) {log})"#
    );
    let in_post_return = guests::fairness_wat("2.0.0", 100, "(unreachable)", &post);
    assert_ne!(in_realloc, plain);
    for (name, core) in [
        ("log-in-realloc", in_realloc),
        ("log-in-post-return", in_post_return),
    ] {
        let bytes = guests::componentize(
            &guests::with_log(&core),
            &[],
            guests::WIT,
            "fairness-policy",
        );
        for path in guests::PATHS {
            let err = guests::engine_on(path).load(name, &bytes).unwrap_err();
            assert!(
                matches!(&err.kind, WasmErrorKind::Instantiate { source, .. }
                    if source.kind == PolicyErrorKind::Trap("cannot leave component instance".into())),
                "{name} ({path:?}): {err}"
            );
        }
    }
}
