//! Hostile policy modules of every kind the sandbox review found, run the
//! way a user meets them: `replay --fairness MODULE` refuses the module with
//! a typed load error or replays with a report that records the quarantine
//! and the fallback, within the bounds of the shared `hostile` module.
#![allow(clippy::unwrap_used)]

#[path = "../../../plugins/catalog/tests/hostile/mod.rs"]
mod hostile;

use std::path::Path;

use hostile::{Fails, hostile_modules, measured, save, temp_dir, within_bounds};

#[test]
fn replay_quarantines_or_refuses_every_hostile_module() {
    let out = temp_dir().join("replay");
    for (name, bytes, fails, verdict) in hostile_modules() {
        let path = save(name, &bytes);
        let dir = out.join(name);
        let args = [
            "--fairness",
            &path,
            "--jobs",
            "2000",
            "--no-plots",
            "--out",
            dir.to_str().unwrap(),
        ];
        let m = measured(env!("CARGO_BIN_EXE_replay"), &args);
        within_bounds(&format!("replay --fairness {name}"), &m);
        match fails {
            Fails::AtLoad => {
                assert!(!m.status.success(), "{name}: {}", m.stdout);
                assert!(m.stderr.contains(name), "{name}: {}", m.stderr);
                assert!(m.stderr.contains(verdict), "{name}: {}", m.stderr);
            }
            Fails::InRounds => {
                assert!(m.status.success(), "{name}: {}", m.stderr);
                quarantined(&dir, name, verdict);
                assert!(
                    m.stdout.contains(&format!("fairness policy {path}@")),
                    "{name}: {}",
                    m.stdout
                );
            }
        }
    }
}

/// A fairness module that answers validly after burning just under each
/// call's fuel (176 of 200 million units on every real call; such modules
/// held a 2,000-job replay for 95-102 s before work budgets):
/// by default its work budget fails its first slow call, three failures
/// quarantine it, and the replay ends within the hostile bounds with every
/// job accounted for.
#[test]
fn a_module_just_under_each_calls_fuel_is_quarantined_by_default() {
    let path = save("slow.wasm", &hostile::guests::slow_fairness(0));
    let dir = temp_dir().join("replay-slow");
    let args = [
        "--fairness",
        &path,
        "--jobs",
        "2000",
        "--no-plots",
        "--out",
        dir.to_str().unwrap(),
    ];
    let m = measured(env!("CARGO_BIN_EXE_replay"), &args);
    within_bounds("replay --fairness slow.wasm", &m);
    assert!(m.status.success(), "{}", m.stderr);
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap();
    let run = &report["runs"][0];
    let q = run["quarantines"].as_array().unwrap();
    assert_eq!(q.len(), 1, "{q:?}");
    assert_eq!(q[0]["slot"], "fairness");
    assert!(
        q[0]["error"].as_str().unwrap().contains("work budget"),
        "{q:?}"
    );
    assert_eq!(run["policy_errors"], 3);
    assert_eq!(run["jobs"]["never_started"], 0);
}

/// The report names the quarantine, the error and the policy restored.
fn quarantined(dir: &Path, name: &str, verdict: &str) {
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap();
    let run = &report["runs"][0];
    let q = run["quarantines"].as_array().unwrap();
    assert_eq!(q.len(), 1, "{name}: {q:?}");
    assert_eq!(q[0]["slot"], "fairness");
    // By identity: the path, and the start of the module's hash.
    let module = q[0]["module"].as_str().unwrap();
    assert!(module.contains(&format!("{name}@")), "{q:?}");
    assert!(
        q[0]["error"]
            .as_str()
            .unwrap()
            .contains(verdict.trim_start_matches("refused: "))
    );
    assert!(
        q[0]["restored"]
            .as_str()
            .is_some_and(|r| !r.is_empty() && r != name)
    );
    // Three failures in a row quarantine it; nothing fails after that.
    assert_eq!(run["policy_errors"], 3, "{name}");
    assert_eq!(run["jobs"]["never_started"], 0, "{name}");
}

/// `replay --<flag> MODULE --jobs 2000 --no-plots`, measured and held to
/// the hostile bounds (30 s among them); the run's report.
fn replay_with(flag: &str, name: &str, bytes: &[u8]) -> (hostile::Measured, serde_json::Value) {
    let path = save(name, bytes);
    let dir = temp_dir().join(format!("replay-{name}"));
    let args = [
        flag,
        &path,
        "--jobs",
        "2000",
        "--no-plots",
        "--out",
        dir.to_str().unwrap(),
    ];
    let m = measured(env!("CARGO_BIN_EXE_replay"), &args);
    within_bounds(&format!("replay {flag} {name}"), &m);
    assert!(m.status.success(), "{name}: {}", m.stderr);
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap();
    let run = report["runs"][0].clone();
    assert_eq!(run["jobs"]["never_started"], 0, "{name}");
    (m, run)
}

/// Reclaim and defragment modules that burn (just under) the whole
/// per-call fuel on every call, answering validly, stayed within their
/// work budget (twenty times their per-job charge passed the per-call cap
/// on views of a few hundred jobs or servers) and held a 2,000-job replay
/// for 342-347 s; their per-call charge is capped and a window of rounds
/// bounds them too: quarantined, with a message naming the budget, and
/// the replay ends within the hostile bounds (30 s).
#[test]
fn reclaim_and_defragment_modules_burning_each_calls_fuel_are_quarantined() {
    let cases = [
        ("--reclaim", "reclaim", hostile::guests::slow_reclaim(0)),
        (
            "--defragment",
            "defragment",
            hostile::guests::slow_defragment(0),
        ),
    ];
    for (flag, slot, bytes) in cases {
        let name = format!("slow-{slot}.wasm");
        let (_, run) = replay_with(flag, &name, &bytes);
        let q = run["quarantines"].as_array().unwrap();
        assert_eq!(q.len(), 1, "{slot}: {q:?}");
        assert_eq!(q[0]["slot"], slot);
        assert!(q[0]["error"].as_str().unwrap().contains("budget"), "{q:?}");
    }
}

/// A module logging 16 messages of 1 KiB on every call (73.6 MB of
/// replay output before): the output stays within the hostile bounds
/// (1 MB), and the report and the output say how many messages were
/// dropped.
#[test]
fn a_module_logging_16_kib_per_call_leaves_a_bounded_output() {
    let (m, run) = replay_with(
        "--fairness",
        "chatty.wasm",
        &hostile::guests::chatty_fairness(),
    );
    let dropped = &run["policy_logs_dropped"];
    assert!(dropped["messages"].as_u64().unwrap() > 1_000, "{dropped}");
    assert_eq!(dropped["kept"], 64, "{dropped}");
    assert!(
        m.stdout.contains("dropped past the log limits"),
        "{}",
        m.stdout
    );
    assert_eq!(run["policy_errors"], 0);
}

/// A module failing every fifth call (four in every twenty: never three
/// in a row, never five in twenty) ran a whole replay unquarantined; the
/// share of failures over its last 64 calls (eight) quarantines it now.
#[test]
fn a_module_failing_every_fifth_call_ends_quarantined() {
    let (_, run) = replay_with(
        "--fairness",
        "every-fifth.wasm",
        &hostile::guests::every_fifth_fails(),
    );
    let q = run["quarantines"].as_array().unwrap();
    assert_eq!(q.len(), 1, "{q:?}");
    assert!(q[0]["error"].as_str().unwrap().contains("trapped"), "{q:?}");
    assert_eq!(run["policy_errors"], 8);
}
