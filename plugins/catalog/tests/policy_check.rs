//! `policy-check` end to end: the real plugins pass; hostile and malformed
//! modules fail with one clear line (and, for a rule broken on a view, the
//! smallest failing view as a regression test after it) and a non-zero
//! exit, quickly, without a panic.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The hostile guest builders of the core's Wasm tests.
#[allow(dead_code)]
#[path = "../../../core/tests/wasm/guests.rs"]
mod guests;

fn policy_check(args: &[&str]) -> (Output, Duration) {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_policy-check"))
        .args(args)
        .output()
        .unwrap();
    (out, started.elapsed())
}

fn temp(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gangway-policy-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs policy-check on `bytes` saved as `name` and expects a failure whose
/// first line starts with `FAIL: ` and contains `reason`; any further lines
/// are the regression test of the smallest failing view.
fn expect_failure(name: &str, bytes: &[u8], extra: &[&str], reason: &str) {
    let path = temp(name, bytes);
    let mut args = vec![path.to_str().unwrap()];
    args.extend_from_slice(extra);
    let (out, took) = policy_check(&args);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{name}: {text}");
    let first = text.lines().next().unwrap_or_default();
    assert!(first.starts_with("FAIL: "), "{name}: {text}");
    assert!(first.contains(reason), "{name}: {text:?} lacks {reason:?}");
    if text.lines().count() > 1 {
        assert!(
            text.contains("#[test]") && text.contains("check_view"),
            "{name}: {text}"
        );
    }
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{name}: {err}");
    assert!(took < Duration::from_secs(20), "{name} took {took:?}");
}

#[test]
fn every_plugin_passes() {
    for name in gangway_plugin_artifacts::names() {
        let path = gangway_plugin_artifacts::path(name).unwrap();
        let (out, _) = policy_check(&[path.to_str().unwrap(), "--views", "60"]);
        let text = stdout(&out);
        assert_eq!(out.status.code(), Some(0), "{name}: {text}");
        assert!(
            text.starts_with(&format!("module {name}.wasm: slots ")),
            "{text}"
        );
        assert!(text.contains("contract gangway:policy@2.1.0"), "{text}");
        assert!(text.contains("entered directly, once per call"), "{text}");
        assert!(text.contains("ok: 60 views per slot"), "{text}");
    }
}

#[test]
fn a_configuration_file_is_passed_to_init() {
    let builtin = gangway_plugin_artifacts::path("fallbacks").unwrap();
    let config = temp("fallbacks.toml", b"tuned = true\n");
    let (out, _) = policy_check(&[
        builtin.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
    ]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text.trim(),
        "FAIL: retry policy fallbacks.wasm: cannot be made: module fallbacks.wasm: refused its retry \
         configuration: invalid policy configuration: fixed: takes no options, but line 1 is \
         `tuned = true`"
    );
    let empty = temp("empty.toml", b"");
    let (out, _) = policy_check(&[
        builtin.to_str().unwrap(),
        "--config",
        empty.to_str().unwrap(),
        "--views",
        "10",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

#[test]
fn hostile_modules_fail_with_one_line() {
    let cases = [
        ("infinite-loop", "used more than its work budget"),
        ("memory-bomb", "hit its memory cap of 67108864 bytes"),
        ("trap", "trapped: wasm `unreachable` instruction executed"),
        ("lift-out-of-bounds", "broke the component ABI"),
        ("garbage-reply", "reply does not decode"),
        ("unknown-job", "invalid decision: names unknown job 999999"),
        ("refuse", "refused: no opinion today"),
    ];
    for (name, reason) in cases {
        expect_failure(&format!("{name}.wasm"), &guests::hostile(name), &[], reason);
    }
}

#[test]
fn a_hostile_module_that_fails_at_load_is_named() {
    let (body, data) = guests::behaviour("infinite-loop");
    expect_failure(
        "spin.wasm",
        &guests::fairness(0, body, data),
        &["--fuel", "1000000"],
        "module spin.wasm: failed its warm-up call: fairness policy \"spin.wasm\": ran out of fuel (CPU budget of 1000000 units)",
    );
}

/// A module slow on every call (176 million fuel units, within a call's
/// budget: a check took 78-86 s with it against a 30 s limit) fails
/// `policy-check` at once by default, for its work budget.
#[test]
fn a_module_slow_within_each_call_fails_for_its_work_budget() {
    expect_failure(
        "slow.wasm",
        &guests::slow_reclaim(0),
        &[],
        "used more than its work budget",
    );
}

/// The check's time limit holds inside calls: without a work budget, with
/// a per-call budget of 100 billion units (over a minute of guest CPU),
/// the slow module's check stops at its 2 s limit, every call after it
/// cut short, and says so.
#[test]
fn the_time_limit_holds_within_calls() {
    use gangway_catalog::policy_check::{CheckError, CheckOptions, check_module};
    use gangway_core::wasm::{Budget, SandboxConfig};
    let options = CheckOptions {
        sandbox: SandboxConfig {
            budget: Budget::Fuel(100_000_000_000),
            work_budget: None,
            module_cache: None,
            ..SandboxConfig::default()
        },
        time_limit: Duration::from_secs(2),
        ..CheckOptions::default()
    };
    let started = Instant::now();
    let result = check_module("slow.wasm", &guests::slow_reclaim(0), b"", &options);
    let took = started.elapsed();
    assert!(
        matches!(result, Err(CheckError::TooSlow { .. })),
        "{result:?}"
    );
    // The limit plus a margin for the calls in flight and the machine.
    assert!(took < Duration::from_secs(12), "took {took:?}");
}

#[test]
fn malformed_modules_fail_with_one_line() {
    expect_failure(
        "notes.wasm",
        b"just text",
        &[],
        "module notes.wasm: not WebAssembly",
    );
    let core = wat::parse_str("(module)").unwrap();
    expect_failure(
        "core.wasm",
        &core,
        &[],
        "module core.wasm: a core Wasm module that cannot be made a component (it carries no \
         component type)",
    );
    let wasi =
        "package wasi:cli@0.2.0;\ninterface environment { get-arguments: func() -> list<string>; }";
    let world = "package test:sneaky;\nworld sneaky {\n  import wasi:cli/environment@0.2.0;\n  export gangway:policy/fairness@2.0.0;\n}";
    let core = guests::fairness_wat("2.0.0", 100, "(unreachable)", "").replacen(
        "(module",
        "(module\n  (import \"wasi:cli/environment@0.2.0\" \"get-arguments\" (func (param i32)))",
        1,
    );
    expect_failure(
        "sneaky.wasm",
        &guests::componentize(&core, &[wasi], world, "sneaky"),
        &[],
        "module sneaky.wasm: imports wasi:cli/environment@0.2.0; only gangway:policy/log is allowed",
    );
}

#[test]
fn a_missing_file_is_a_usage_error() {
    let (out, _) = policy_check(&[Path::new("/nonexistent/policy.wasm").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read /nonexistent/policy.wasm"));
}

/// The kit checks both halves of a 2.1 module: a `-buffered` twin that
/// answers otherwise than the slot's function (which the component runtime
/// calls) is a finding, with the view as a regression test.
#[test]
fn twins_that_disagree_with_their_function_fail() {
    expect_failure(
        "twins.wasm",
        &guests::disagreeing_twins(),
        &[],
        "its -buffered twin and the slot's function disagree",
    );
}

/// Twins that answer alike but log differently are a finding too.
#[test]
fn twins_that_log_otherwise_than_their_function_fail() {
    expect_failure(
        "twin-logs.wasm",
        &guests::twin_that_logs(),
        &[],
        "the twin logged [\"info: hello\"], the function []",
    );
}

/// A twin that counts its calls and, after 1,500, answers otherwise on
/// every call a host checking the 1st and every 64th would not check
/// passed before (the kit gave its twin about 620 calls, on fresh
/// instances for the function): the kit now asks one instance thousands
/// of calls, the function on a live instance of its own beside it.
#[test]
fn a_twin_diverging_after_1500_calls_fails() {
    expect_failure(
        "counting.wasm",
        &guests::counting_twin(1_500),
        &[],
        "its -buffered twin and the slot's function disagree",
    );
}

/// A function whose answer depends on its instance's history (valid
/// answers, but none eligible after its 1,000th call) passed before: the
/// kit's history asks the same instance views it answered before.
#[test]
fn a_function_whose_answer_depends_on_its_history_fails() {
    expect_failure(
        "history.wasm",
        &guests::history_dependent(1_000),
        &[],
        "otherwise than the first time",
    );
}

/// A module logging 16 messages of 1 KiB on every call (134 MB of
/// `policy-check` output before): it passes (its answers are valid), its
/// log stays within the limits, and the output says how many messages
/// were dropped.
#[test]
fn a_module_logging_16_kib_per_call_keeps_a_bounded_log() {
    let path = temp("chatty.wasm", &guests::chatty_fairness());
    let (out, _) = policy_check(&[path.to_str().unwrap(), "--views", "60"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("log messages"), "{text}");
    assert!(text.contains("were dropped past the log limits"), "{text}");
    assert!(
        out.stderr.len() < 1 << 20,
        "{} bytes of log",
        out.stderr.len()
    );
}
