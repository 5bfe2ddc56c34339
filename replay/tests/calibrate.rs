//! `replay calibrate`: a small calibration is deterministic, its best fit is
//! no worse than its start on the training window, and it reports the
//! held-out window; `--fit` adds a fit that could fail to every run.
#![allow(clippy::unwrap_used)]

use gangway_replay::calibrate::command::{self, CalibrateCli};
use gangway_replay::calibrate::search::{Plan, Spec, calibrate, local_evaluator};

fn out(tag: &str) -> String {
    std::env::temp_dir()
        .join(format!(
            "gangway-calibrate-test-{tag}-{}",
            std::process::id()
        ))
        .display()
        .to_string()
}

const SMALL: &str = "candidates = 5\nrefine_share = 0.4\nseed = 3\n\
    [knobs]\ntime_scale = [0.5, 1.0]\nfirst_widen_s = [60, 1800]\ndeadline_spread = [0.0, 1.0]\n\
    lend = [true, false]\n[start]\ntime_scale = 0.8\n";

#[test]
fn a_small_calibration_is_deterministic_and_never_worse_than_its_start() {
    let spec = Spec::parse(SMALL, "test").unwrap();
    let plan = Plan::new(
        ["--jobs", "1200", "--cluster", "4x8x8", "--seed", "5"]
            .map(String::from)
            .to_vec(),
        "philly",
        true,
    )
    .unwrap();
    assert_eq!(plan.train, ["--jobs", "1200", "--seed", "5"]);
    assert_eq!(
        plan.holdout.as_deref().unwrap(),
        ["--jobs", "1200", "--seed", "6"]
    );
    let mut evaluate = local_evaluator(2);
    let a = calibrate(&spec, &plan, &mut evaluate, &mut |_| {}).unwrap();
    let b = calibrate(&spec, &plan, &mut evaluate, &mut |_| {}).unwrap();
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap(),
        "the same calibration twice gives the same record"
    );
    assert_eq!(a.candidates.len(), 5);
    assert_eq!(a.candidates[0].stage, 0);
    assert!(
        a.candidates.iter().all(|c| c.error.is_none()),
        "{:?}",
        a.candidates
    );
    let start = a.candidates[0].score.unwrap();
    assert!(
        a.best.train.score <= start,
        "best {} vs start {start}",
        a.best.train.score
    );
    assert_eq!(
        a.start.train.score, start,
        "the start replayed again scores the same"
    );
    // The candidates differ (the search moved) and the best is reported on
    // the held-out window, with the same items as on the training one.
    let scores: std::collections::BTreeSet<String> = a
        .candidates
        .iter()
        .map(|c| format!("{:?}", c.score))
        .collect();
    assert!(scores.len() > 1, "{scores:?}");
    let held = a.best.holdout.as_ref().unwrap();
    assert_eq!(held.items, a.best.train.items);
    assert!(a.table().contains("best held-out"));
}

#[test]
fn calibrate_refuses_knob_flags_and_a_trace_without_a_window() {
    let e = Plan::new(
        ["--time-scale", "0.5"].map(String::from).to_vec(),
        "philly",
        true,
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("calibrate sets --time-scale itself"),
        "{e}"
    );
    let e = Plan::new(
        ["--trace", "t.csv"].map(String::from).to_vec(),
        "philly",
        true,
    )
    .unwrap_err();
    assert!(e.to_string().contains("--jobs N"), "{e}");
    let cli =
        CalibrateCli::from_args(["--targets", "/nonexistent.toml", "--", "--jobs", "100"]).unwrap();
    let e = command::run_local(&cli).unwrap_err();
    assert!(e.to_string().contains("/nonexistent.toml"), "{e}");
}

#[test]
fn fit_is_in_the_report_and_can_fail() {
    let dir = out("fit");
    let json = gangway_replay::json::replay_json([
        "--jobs",
        "1500",
        "--cluster",
        "4x8x8",
        "--native",
        "--no-plots",
        "--quiet",
        "--fit",
        "philly",
        "--out",
        &dir,
    ])
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let fit = &v["runs"][0]["fit"];
    assert_eq!(fit["targets"], "philly");
    let items = fit["detail"].as_array().unwrap();
    // 3 groups x (4 quantiles + the single-bin share), 3 Table 2 shares,
    // 2 one-server shares, and GPU time by 3 statuses (the generator has them).
    assert_eq!(items.len(), 23, "{items:?}");
    assert_eq!(fit["items"], 23);
    let met = items.iter().filter(|i| i["met"] == true).count();
    assert_eq!(fit["met"], met);
    assert!(
        met < items.len(),
        "a small cluster does not match Philly everywhere"
    );
    for i in items {
        let e = i["error"].as_f64().unwrap();
        assert_eq!(i["met"] == true, e <= 1.0, "{i}");
    }
    // What reproduces it: the arguments that shape results, not --out.
    let args: Vec<&str> = v["reproduce"]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args, ["--cluster=4x8x8", "--jobs=1500", "--fit=philly"]);
    assert_eq!(v["reproduce"]["time_scale"], 0.65);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_study_window_calibrates_with_the_real_trace() {
    let Some(dir) = std::env::var_os("GANGWAY_DATA") else {
        eprintln!("SKIPPED calibration on the RFold trace: GANGWAY_DATA is not set");
        return;
    };
    let philly = std::path::Path::new(&dir).join("philly");
    let trace = philly.join("rfold_philly_trace.csv").display().to_string();
    let vcs = philly.join("adaptdl_philly.csv").display().to_string();
    let dir = out("study");
    let cli = CalibrateCli::from_args([
        "--candidates",
        "4",
        "--quiet",
        "--out",
        &dir,
        "--",
        "--trace",
        &trace,
        "--format",
        "rfold",
        "--vcs",
        &vcs,
        "--skip",
        "10071",
        "--jobs",
        "8000",
    ])
    .unwrap();
    let json = command::run_local(&cli).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["plan"]["train"][3], "4000");
    assert_eq!(v["plan"]["holdout"][1], "14071");
    let start = v["start"]["train"]["score"].as_f64().unwrap();
    let best = v["best"]["train"]["score"].as_f64().unwrap();
    assert!(best <= start, "{best} vs {start}");
    assert!(v["best"]["holdout"]["score"].as_f64().is_some());
    assert_eq!(
        std::fs::read_to_string(format!("{dir}/calibrate.json")).unwrap(),
        json
    );
    let _ = std::fs::remove_dir_all(&dir);
}
