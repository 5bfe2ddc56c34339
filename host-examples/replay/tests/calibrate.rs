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

/// A Philly-format job log of `n` jobs: sizes 1 to 16 GPUs, a job every
/// 90 s, first attempts that waited from seconds to hours (seeded), placed
/// on one server or spread, a few killed or failed.
fn philly_log(n: usize) -> String {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        state >> 33
    };
    let at = |s: u64| {
        let (d, s) = (s / 86_400, s % 86_400);
        format!(
            "2017-10-{:02} {:02}:{:02}:{:02}",
            7 + d,
            s / 3600,
            s / 60 % 60,
            s % 60
        )
    };
    let mut jobs = Vec::new();
    for i in 0..n {
        let r = next();
        let gpus = [1, 1, 1, 1, 2, 4, 4, 8, 8, 16][(r % 10) as usize];
        let servers = if gpus > 8 || (gpus > 1 && next() % 4 == 0) {
            2
        } else {
            1
        };
        let submit = i as u64 * 90;
        // Waits spread over decades: 1 s to about 3 hours.
        let wait = 1 + (next() % 1000).pow(3) / 100_000;
        let run = 300 + next() % 7200;
        let status = ["Pass", "Pass", "Pass", "Pass", "Killed", "Failed"][(next() % 6) as usize];
        let per = gpus / servers;
        let detail: Vec<String> = (0..servers)
            .map(|m| {
                let g: Vec<String> = (0..per).map(|g| format!("\"gpu{g}\"")).collect();
                format!(
                    r#"{{"ip": "m{}", "gpus": [{}]}}"#,
                    (i + m) % 16,
                    g.join(",")
                )
            })
            .collect();
        jobs.push(format!(
            r#"{{"status": "{status}", "vc": "vc{}", "jobid": "application_1_{i}", "user": "u",
              "submitted_time": "{}", "attempts": [{{"start_time": "{}", "end_time": "{}",
              "detail": [{}]}}]}}"#,
            i % 3,
            at(submit),
            at(submit + wait),
            at(submit + wait + run),
            detail.join(",")
        ));
    }
    format!("[{}]", jobs.join(",\n"))
}

/// A user's journey with their own cluster's log: `replay targets` measures
/// it, `replay --fit` compares a replay of the same log with it, and
/// `replay calibrate` fits the model to it.
#[test]
fn targets_measured_in_a_log_are_what_a_replay_of_it_is_fitted_to() {
    use gangway_replay::calibrate::targets::Targets;
    use gangway_replay::calibrate::targets_command::{self, TargetsCli};
    use std::path::PathBuf;

    let dir = PathBuf::from(out("own-log"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("log.json");
    std::fs::write(&log, philly_log(600)).unwrap();
    let file = dir.join("targets.toml");
    let cli = TargetsCli {
        log: log.clone(),
        min_run_s: 0,
        name: "mine".into(),
        out: file.clone(),
    };
    let text = targets_command::run(&cli).unwrap();
    let targets = Targets::named_or_file(file.to_str().unwrap()).unwrap();
    assert_eq!(Targets::parse(&text, "same").unwrap(), targets);
    let buckets: Vec<&str> = targets.first_wait.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(
        buckets,
        ["1", "2-4", "5-8", ">8"],
        "600 jobs fill every bucket"
    );
    assert!(targets.first_wait[0].p99.is_some(), "about 240 1-GPU jobs");
    assert!(targets.first_wait[3].p99.is_none(), "about 60 16-GPU jobs");
    assert_eq!(targets.one_server.len(), 2);
    assert!(targets.gpu_time_by_status.is_some());

    let (log_s, file_s) = (log.to_str().unwrap(), file.to_str().unwrap());
    let report = dir.join("replay");
    let json = gangway_replay::json::replay_json([
        "--trace",
        log_s,
        "--format",
        "philly",
        "--cluster",
        "2x8x8",
        "--native",
        "--no-plots",
        "--quiet",
        "--fit",
        file_s,
        "--out",
        report.to_str().unwrap(),
    ])
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let fit = &v["runs"][0]["fit"];
    assert_eq!(fit["targets"], "mine");
    // 4 buckets x (their quantiles + the single-bin share), 2 one-server
    // shares, GPU time by 3 statuses.
    let quantiles: usize = targets
        .first_wait
        .iter()
        .map(|w| w.quantiles().len() + 1)
        .sum();
    assert_eq!(fit["items"], quantiles + 2 + 3);

    let cal = dir.join("cal");
    let cli = CalibrateCli::from_args([
        "--targets",
        file_s,
        "--candidates",
        "3",
        "--threads",
        "2",
        "--quiet",
        "--out",
        cal.to_str().unwrap(),
        "--",
        "--trace",
        log_s,
        "--format",
        "philly",
        "--jobs",
        "600",
        "--cluster",
        "2x8x8",
        "--native",
    ])
    .unwrap();
    let json = command::run_local(&cli).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["best"]["train"]["targets"], "mine");
    let score = |w: &str| v[w]["train"]["score"].as_f64().unwrap();
    assert!(score("best") <= score("start"));
    assert!(v["best"]["holdout"]["items"].as_u64().unwrap() > 0);
    let _ = std::fs::remove_dir_all(&dir);
}
