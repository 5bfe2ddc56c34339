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
